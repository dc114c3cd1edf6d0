/**
 * What tells the keepers of Weft's nftables rules (the masquerade rules, network policy, the
 * Service proxy) that the ruleset changed, so they check it then instead of every few seconds:
 * the kernel's announcement of each committed transaction, any program's
 * (NetlinkHandle.nftChanges), one subscription per namespace shared by all of them.
 *
 * `nft monitor ruleset` did this before, one process per keeper, each decoding and printing every
 * object of every transaction: loading 10,000 Services (100,000 set elements) cost each of them
 * more CPU than the load itself, taken from the load on a small node. The kernel's end-of-
 * transaction notice is all a keeper needs; the per-element notices before it are not decoded
 * (or are dropped by the kernel once the socket is full, which says the same: something changed).
 */
import { NetlinkHandle } from '../netlink/index.ts';
import type { NftChanges } from '../netlink/index.ts';
import type { RulesetWatch, RulesetWatcher } from '../masq/runner.ts';

/** A keeper's watcher: told of each change, and able to make its own without being told of it. */
export type NftChangesWatcher = RulesetWatcher & {
  /**
   * Runs `work` (the keeper's own `nft -f`) with the namespace's notices muted: the keeper is not
   * woken by its own transaction, and with no other listener the kernel builds no notice (100,000
   * for a large table). The other keepers are told of a change afterwards: one of theirs may have
   * come meanwhile.
   */
  quiet<T>(work: () => Promise<T>): Promise<T>;
};

interface Subscriber {
  keeper: object;
  onChange: () => void;
  end: () => void;
}

/** One namespace's subscription, opened for the first watch and closed after the last. */
class SharedChanges {
  readonly #netnsPath: string;
  readonly #subscribers = new Set<Subscriber>();
  #handle: NetlinkHandle | undefined;
  #changes: Promise<NftChanges> | undefined;
  /** The subscription once the kernel joined it to the group. */
  #joined: NftChanges | undefined;
  /** quiet() calls under way: the group is left while any runs, by every subscription. */
  #mutes = 0;

  constructor(netnsPath: string) {
    this.#netnsPath = netnsPath;
  }

  watch(keeper: object, onChange: () => void): RulesetWatch {
    let end!: () => void;
    const ended = new Promise<void>((resolve) => (end = resolve));
    const subscriber = { keeper, onChange, end };
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

  /**
   * A subscription opened while quiet() runs (weftd's first keeper subscribing during the Service
   * proxy's first load) joins the group only once it ends: it would otherwise have the kernel build
   * a notice for every element of the rest of the load, and be woken by them.
   */
  async quiet<T>(keeper: object, work: () => Promise<T>): Promise<T> {
    if (this.#mutes++ === 0) this.#joined?.listen(false);
    try {
      return await work();
    } finally {
      // A subscription the kernel will not join again ends (the keepers start another).
      if (--this.#mutes === 0 && this.#joined && !this.#joined.listen(true)) this.#fail();
      for (const s of this.#subscribers) if (s.keeper !== keeper) s.onChange();
    }
  }

  #open(): void {
    try {
      this.#handle = NetlinkHandle.open(this.#netnsPath);
    } catch {
      this.#fail();
      return;
    }
    const join = this.#mutes === 0;
    const changes = this.#handle.nftChanges(() => {
      for (const s of this.#subscribers) s.onChange();
    }, { join });
    this.#changes = changes;
    // The subscription failed: every watch ends, and each keeper starts again after its backoff.
    changes.then((joined) => {
      if (this.#changes !== changes) return;
      this.#joined = joined;
      // As quiet() wants it now; one the kernel will not join ends (the keepers start another).
      const want = this.#mutes === 0;
      if (want !== join && !joined.listen(want) && want) this.#fail();
    }, () => {
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
    this.#joined = undefined;
  }
}

const shared = new Map<string, SharedChanges>();

/**
 * A keeper's watcher of the nftables ruleset of the namespace at `netnsPath` (default: this
 * process's): every change, any program's, is reported but the keeper's own made through
 * {@link NftChangesWatcher.quiet}; a watch ends only when stopped or when the kernel refuses the
 * subscription. Each keeper calls this once; the keepers of a namespace share one subscription.
 */
export function nftChanges(netnsPath = ''): NftChangesWatcher {
  let changes = shared.get(netnsPath);
  if (!changes) {
    changes = new SharedChanges(netnsPath);
    shared.set(netnsPath, changes);
  }
  const namespace = changes;
  const keeper = {};
  return Object.assign((onChange: () => void) => namespace.watch(keeper, onChange), {
    quiet: <T>(work: () => Promise<T>) => namespace.quiet(keeper, work),
  });
}
