/**
 * DESIGN NOTES
 *
 * The LeaseTable is the one place remote leases live between a lease source (etcd or kube) and
 * the data plane. A source writes into it — a whole snapshot after a (re)list, or a batch of
 * upserts/removals from its watch — and the table turns every write into the batch of changes it
 * actually made, keyed by peer (an etcd key or a Node name). A snapshot that repeats what the
 * table holds yields no events, so a relist after compaction, 410 Gone or a reconnect is free for
 * the data plane; a lease that changed subnet (a kube podCIDR update) is one `added` event whose
 * `previous` says what it replaced, and a removal carries the last attributes the table knew
 * (flannel's watcher does the same so backends can delete FDB and neighbour entries).
 *
 * Listeners are called synchronously with each non-empty batch and must not block: the table has
 * no queue that can fill (flannel's fixed-depth event channel hung kube-subnet-mgr near 5k nodes,
 * flannel-io/flannel#719, #2251). The data plane's reaction is level-triggered anyway: it reads
 * the whole table and uses the batch only to know which peers to re-plan.
 */
import { equalCIDR, equalIP } from '../ip/ip.ts';
import type { CIDR, IP } from '../ip/ip.ts';
import type { Lease } from './lease.ts';

export interface LeaseEvent {
  type: 'added' | 'removed';
  /** For `added` the new lease; for `removed` the last one known. */
  lease: Lease;
  /** For an `added` that replaced a different lease of the same peer: what it replaced. */
  previous?: Lease;
}

export type LeaseListener = (batch: readonly LeaseEvent[]) => void;

function sameOptional<T>(a: T | undefined, b: T | undefined, eq: (x: T, y: T) => boolean): boolean {
  return a === undefined || b === undefined ? a === b : eq(a, b);
}

/** Backend data compared by its canonical JSON (it came from JSON, so this is exact). */
function sameData(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/** Whether two leases would program the same kernel state. */
export function leaseEqual(a: Lease, b: Lease): boolean {
  return a.peer === b.peer
    && sameOptional<CIDR>(a.subnet, b.subnet, equalCIDR)
    && sameOptional<CIDR>(a.ipv6Subnet, b.ipv6Subnet, equalCIDR)
    && sameOptional<IP>(a.attrs.publicIP, b.attrs.publicIP, equalIP)
    && sameOptional<IP>(a.attrs.publicIPv6, b.attrs.publicIPv6, equalIP)
    && a.attrs.backendType.toLowerCase() === b.attrs.backendType.toLowerCase()
    && sameData(a.attrs.backendData, b.attrs.backendData)
    && sameData(a.attrs.backendV6Data, b.attrs.backendV6Data);
}

export class LeaseTable {
  readonly #leases = new Map<string, Lease>();
  readonly #listeners = new Set<LeaseListener>();
  #synced = false;

  /** Number of remote leases held. */
  get size(): number {
    return this.#leases.size;
  }

  /** True once a source has delivered its first snapshot. */
  get synced(): boolean {
    return this.#synced;
  }

  /** The remote leases, in no particular order. */
  leases(): Lease[] {
    return [...this.#leases.values()];
  }

  get(peer: string): Lease | undefined {
    return this.#leases.get(peer);
  }

  /**
   * `lease`, or the equal one the table already holds for its peer. A source building a relist
   * with it holds each unchanged lease once, not a second copy next to the table's (at 50,000
   * peers, ~25 MB for the length of the list).
   */
  held(lease: Lease): Lease {
    const had = this.#leases.get(lease.peer);
    return had && leaseEqual(had, lease) ? had : lease;
  }

  /**
   * Calls `listener` with every non-empty batch of changes, and with the batch of the first
   * listing even when it is empty (a node alone in its cluster still learns it is synced).
   * Returns the unsubscribe function.
   */
  subscribe(listener: LeaseListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /**
   * Replaces the whole content with a fresh listing (start-up, relist after compaction or 410):
   * peers not listed are removed, new or changed ones added, unchanged ones left alone.
   */
  replaceAll(leases: Iterable<Lease>): LeaseEvent[] {
    const listed = new Map<string, Lease>();
    for (const l of leases) listed.set(l.peer, l);
    const batch: LeaseEvent[] = [];
    for (const [peer, old] of this.#leases) {
      if (!listed.has(peer)) batch.push(this.#remove(peer, old));
    }
    for (const l of listed.values()) this.#upsert(l, batch);
    const first = !this.#synced;
    this.#synced = true;
    return this.#emit(batch, first);
  }

  /** Applies watch changes: `upserts` are added or replace their peer's lease; `removals` are peer names. */
  apply(upserts: Iterable<Lease>, removals: Iterable<string> = []): LeaseEvent[] {
    const batch: LeaseEvent[] = [];
    for (const peer of removals) {
      const old = this.#leases.get(peer);
      if (old) batch.push(this.#remove(peer, old));
    }
    for (const l of upserts) this.#upsert(l, batch);
    return this.#emit(batch);
  }

  #remove(peer: string, old: Lease): LeaseEvent {
    this.#leases.delete(peer);
    return { type: 'removed', lease: old };
  }

  #upsert(lease: Lease, batch: LeaseEvent[]): void {
    const old = this.#leases.get(lease.peer);
    if (old && leaseEqual(old, lease)) return;
    this.#leases.set(lease.peer, lease);
    batch.push(old ? { type: 'added', lease, previous: old } : { type: 'added', lease });
  }

  #emit(batch: LeaseEvent[], always = false): LeaseEvent[] {
    if (batch.length > 0 || always) for (const l of this.#listeners) l(batch);
    return batch;
  }
}
