/**
 * What tells the keepers of Weft's nftables rules (the masquerade rules, network policy, the
 * Service proxy) that the ruleset changed, so they check it then instead of every few seconds: the
 * ruleset's generation (NetlinkHandle.nftGeneration), which the kernel advances with every
 * transaction committed in the namespace by any program, read every second by one reader per
 * namespace that all its keepers share.
 *
 * DESIGN NOTES
 *
 * - Read, not subscribed. While any socket on the host, in any namespace, is a member of
 *   NFNLGRP_NFTABLES, the kernel builds a notice for every object of every transaction in every
 *   namespace: it keeps one mask of members per netlink protocol, not one per namespace. For a
 *   table of 10,000 Services that is 100,000 notices, about 0.3 s of kernel time added to the load
 *   on an idle machine (measured with a member in another namespace) and more under load, paid by
 *   every namespace's nft. `nft monitor` (one per keeper at first) and then a subscription of
 *   weftd's own both had that cost; the subscription could leave the group for its own loads, not
 *   for anyone else's. Reading the generation is one small request a second.
 * - quiet(work) tells a keeper's own transaction apart: the generation is read before and after
 *   it. One step, with nothing unreported before it, is the keeper's own, which touched its own
 *   table only, so no keeper is told; anything more (another program's commit before or during
 *   the work) is reported to every keeper. A policy apply thus no longer has the Service proxy
 *   list its table (seconds of nft at 10,000 Services).
 */
import { NetlinkHandle } from '../netlink/index.ts';
import type { RulesetWatch, RulesetWatcher } from '../masq/runner.ts';

/** How often the generation is read while a keeper watches. */
const READ_EVERY_MS = 1000;

/** A keeper's watcher: told of each change, and able to make its own without any keeper being told of it. */
export type NftChangesWatcher = RulesetWatcher & {
  /**
   * Runs `work` (the keeper's own `nft -f`: `commits` transactions, default one, on its own table,
   * rejecting when nft refused any) so that no keeper is told of it; when another program committed
   * before it (not yet reported) or during it, every keeper is told once it ends.
   */
  quiet<T>(work: () => Promise<T>, commits?: number): Promise<T>;
};

interface Subscriber {
  onChange: () => void;
  end: () => void;
}

/** One namespace's reader, running from the first watch to the end of the last. */
class SharedChanges {
  readonly #netnsPath: string;
  readonly #subscribers = new Set<Subscriber>();
  #handle: NetlinkHandle | undefined;
  #timer: NodeJS.Timeout | undefined;
  #reading = false;
  /** The generation last reported or accounted for; undefined until the first read. */
  #seen: number | undefined;
  /** quiet() calls under way: the periodic read reports nothing meanwhile. */
  #mutes = 0;
  /** Advanced by every quiet() start and end: a periodic read that spans one is dropped. */
  #epoch = 0;

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

  async quiet<T>(work: () => Promise<T>, commits = 1): Promise<T> {
    const handle = this.#handle;
    this.#mutes++;
    this.#epoch++;
    const known = this.#seen;
    const before = handle && (await this.#read(handle));
    let committed = true;
    try {
      return await work();
    } catch (e) {
      committed = false;
      throw e;
    } finally {
      const after = handle && before !== undefined ? await this.#read(handle) : undefined;
      this.#mutes--;
      this.#epoch++;
      // Unknown before the first read: nothing was reported yet that could have been missed. Refused
      // work is counted as committing nothing (of two side by side, the other may have: every keeper is then told).
      const ownOnly = before !== undefined && after !== undefined && (known === undefined || before === known)
        && ((after - before) >>> 0) === (committed ? commits : 0);
      if (after !== undefined && this.#handle === handle) this.#seen = after;
      // The keeper's transaction touched its own table only: none of the others' has news.
      if (!ownOnly) for (const s of this.#subscribers) s.onChange();
    }
  }

  #open(): void {
    let handle: NetlinkHandle;
    try {
      handle = NetlinkHandle.open(this.#netnsPath);
    } catch {
      this.#fail();
      return;
    }
    this.#handle = handle;
    this.#seen = undefined;
    const poll = async () => {
      if (this.#mutes > 0 || this.#reading) return;
      this.#reading = true;
      const epoch = this.#epoch;
      const generation = await this.#read(handle);
      if (this.#handle !== handle) return;
      this.#reading = false;
      if (generation === undefined || this.#epoch !== epoch) return;
      const changed = this.#seen !== undefined && generation !== this.#seen;
      this.#seen = generation;
      if (changed) for (const s of this.#subscribers) s.onChange();
    };
    void poll();
    this.#timer = setInterval(() => void poll(), READ_EVERY_MS);
  }

  /** The generation; undefined when it cannot be read, every watch then ended (the keepers start others). */
  async #read(handle: NetlinkHandle): Promise<number | undefined> {
    try {
      return await handle.nftGeneration();
    } catch {
      if (this.#handle === handle) this.#fail();
      return undefined;
    }
  }

  #fail(): void {
    const subscribers = [...this.#subscribers];
    this.#subscribers.clear();
    this.#close();
    for (const s of subscribers) s.end();
  }

  #close(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
    this.#handle?.close();
    this.#handle = undefined;
    this.#reading = false;
  }
}

const shared = new Map<string, SharedChanges>();

/**
 * A keeper's watcher of the nftables ruleset of the namespace at `netnsPath` (default: this
 * process's): every change, any program's, is reported within a second but the keepers' own made
 * through {@link NftChangesWatcher.quiet}; a watch ends only when stopped or when the generation
 * cannot be read. Each keeper calls this once; the keepers of a namespace share one reader.
 */
export function nftChanges(netnsPath = ''): NftChangesWatcher {
  let changes = shared.get(netnsPath);
  if (!changes) {
    changes = new SharedChanges(netnsPath);
    shared.set(netnsPath, changes);
  }
  const namespace = changes;
  return Object.assign((onChange: () => void) => namespace.watch(onChange), {
    quiet: <T>(work: () => Promise<T>, commits?: number) => namespace.quiet(work, commits),
  });
}
