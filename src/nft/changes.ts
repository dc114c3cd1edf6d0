/**
 * What tells the keepers of Weft's nftables rules (the masquerade rules, network policy, the
 * Service proxy) that the ruleset changed, so they check it then instead of every few seconds:
 * the kernel's announcement of each committed transaction, any program's
 * (NetlinkHandle.nftChanges), one subscription per namespace shared by all of them.
 *
 * `nft monitor ruleset` did this before, one process per keeper, each decoding and printing every
 * object of every transaction: loading 10,000 Services (100,000 set elements) cost each of them
 * more CPU than the load itself, taken from the load on a small node. The kernel's end-of-
 * transaction notice is all a keeper needs; the per-element notices before it are skipped unread
 * (or dropped by the kernel once the socket is full, which says the same: something changed).
 */
import { NetlinkHandle } from '../netlink/index.ts';
import type { NftChanges } from '../netlink/index.ts';
import type { RulesetWatch, RulesetWatcher } from '../masq/runner.ts';

interface Subscriber {
  onChange: () => void;
  end: () => void;
}

/** One namespace's subscription, opened for the first watcher and closed after the last. */
class SharedChanges {
  readonly #netnsPath: string;
  readonly #subscribers = new Set<Subscriber>();
  #handle: NetlinkHandle | undefined;
  #changes: Promise<NftChanges> | undefined;

  constructor(netnsPath: string) {
    this.#netnsPath = netnsPath;
  }

  watch(onChange: () => void): RulesetWatch {
    let end!: () => void;
    const ended = new Promise<void>((resolve) => (end = resolve));
    const subscriber = { onChange, end };
    this.#subscribers.add(subscriber);
    if (!this.#handle) this.#open();
    return {
      ended,
      stop: () => {
        if (!this.#subscribers.delete(subscriber)) return;
        end();
        if (this.#subscribers.size === 0) this.#close();
      },
    };
  }

  #open(): void {
    try {
      this.#handle = NetlinkHandle.open(this.#netnsPath);
    } catch {
      this.#fail();
      return;
    }
    const changes = this.#handle.nftChanges(() => {
      for (const s of this.#subscribers) s.onChange();
    });
    this.#changes = changes;
    // The subscription failed: every watcher's watch ends, and each starts again after its backoff.
    changes.catch(() => {
      if (this.#changes === changes) this.#fail();
    });
  }

  #fail(): void {
    const subscribers = [...this.#subscribers];
    this.#subscribers.clear();
    this.#close();
    for (const s of subscribers) s.end();
  }

  /** Closing the handle ends the subscription with it (one still being made is dropped). */
  #close(): void {
    this.#handle?.close();
    this.#handle = undefined;
    this.#changes = undefined;
  }
}

const shared = new Map<string, SharedChanges>();

/**
 * Reports every change to the nftables ruleset of the namespace at `netnsPath` (default: this
 * process's), any program's, Weft's own included; the watch ends only when stopped or when the
 * kernel refuses the subscription.
 */
export function nftChanges(netnsPath = ''): RulesetWatcher {
  let changes = shared.get(netnsPath);
  if (!changes) {
    changes = new SharedChanges(netnsPath);
    shared.set(netnsPath, changes);
  }
  const watcher = changes;
  return (onChange) => watcher.watch(onChange);
}
