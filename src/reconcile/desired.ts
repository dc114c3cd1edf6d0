/**
 * The desired kernel state, held per owner (a remote node's lease, in practice) so that one lease
 * event changes only that owner's entries. {@link DesiredState.set} returns the operations that
 * take the kernel from the old to the new desired state, assuming it held the old one: the new
 * entries replaced (idempotent, so a kernel that drifted is put right too), the old entries no
 * owner wants any more deleted. That is the reconciler's fast path; full passes diff
 * {@link DesiredState.all} against a dump of the kernel and catch anything the fast path assumed.
 *
 * Two owners may want the same key (two leases claiming one subnet, a misconfiguration): the one
 * set last wins, and when it goes the other's entry is written back.
 */
import type { Operation } from '../netlink/handle.ts';
import { fdbKey, neighKey, NUD_PERMANENT, routeKey } from '../netlink/records.ts';
import type { Fdb, Neigh, Route } from '../netlink/records.ts';
import { routeSpec } from './state.ts';
import type { KernelState } from './state.ts';

const EMPTY: KernelState = { routes: [], neighs: [], fdb: [] };

/** The owner of one entry, or the owners of an entry several want (in the order they set it). */
type Owned<T> = { owner: string; entry: T } | Map<string, T>;

/**
 * Entries of one kind by key, each key with the owners that want it (the last one wins). A key
 * almost always has one owner, which is held without a Map of its own: at 50,000 leases that is
 * 150,000 Maps fewer.
 */
class Index<T> {
  readonly #byKey = new Map<string, Owned<T>>();
  readonly #key: (e: T) => string;

  constructor(key: (e: T) => string) {
    this.#key = key;
  }

  get(key: string): T | undefined {
    const owned = this.#byKey.get(key);
    if (!owned || !(owned instanceof Map)) return owned?.entry;
    let last: T | undefined;
    for (const e of owned.values()) last = e;
    return last;
  }

  /**
   * Drops `owner`'s `entries`; those no owner wants any more go to `gone`, the winners of the
   * others to `rewrite` (when the caller wants them).
   */
  remove(owner: string, entries: readonly T[], gone?: T[], rewrite?: T[]): void {
    for (const e of entries) {
      const k = this.#key(e);
      const owned = this.#byKey.get(k);
      if (!owned) continue;
      if (!(owned instanceof Map)) {
        if (owned.owner !== owner) continue;
        this.#byKey.delete(k);
        gone?.push(e);
        continue;
      }
      if (!owned.delete(owner)) continue;
      if (owned.size === 1) {
        const [o, entry] = owned.entries().next().value!;
        this.#byKey.set(k, { owner: o, entry });
      }
      rewrite?.push(this.get(k)!);
    }
  }

  add(owner: string, entries: readonly T[]): void {
    for (const e of entries) {
      const k = this.#key(e);
      const owned = this.#byKey.get(k);
      if (!owned || (!(owned instanceof Map) && owned.owner === owner)) {
        this.#byKey.set(k, { owner, entry: e });
      } else if (owned instanceof Map) {
        owned.delete(owner);
        owned.set(owner, e);
      } else {
        this.#byKey.set(k, new Map([[owned.owner, owned.entry], [owner, e]]));
      }
    }
  }

  has(key: string): boolean {
    return this.#byKey.has(key);
  }

  values(): T[] {
    const out: T[] = [];
    for (const k of this.#byKey.keys()) out.push(this.get(k)!);
    return out;
  }

  some(pred: (e: T) => boolean): boolean {
    for (const k of this.#byKey.keys()) if (pred(this.get(k)!)) return true;
    return false;
  }

  get size(): number {
    return this.#byKey.size;
  }
}

function neighReplace(n: Neigh): Operation {
  return { op: 'neighReplace', neigh: { linkIndex: n.linkIndex, ip: n.ip, mac: n.mac, state: NUD_PERMANENT } };
}

function fdbReplace(f: Fdb): Operation {
  return { op: 'fdbReplace', fdb: { linkIndex: f.linkIndex, mac: f.mac, dst: f.dst } };
}

/** The operations that (re)write `state`: L2 entries before the routes that need them. */
export function replaceOps(state: KernelState): Operation[] {
  return [...state.neighs.map(neighReplace), ...state.fdb.map(fdbReplace), ...state.routes.map(routeSpec)];
}

export class DesiredState {
  readonly #owners = new Map<string, KernelState>();
  readonly #routes = new Index<Route>(routeKey);
  readonly #neighs = new Index<Neigh>(neighKey);
  readonly #fdb = new Index<Fdb>(fdbKey);

  /**
   * Sets what `owner` wants (undefined: nothing any more), computing no operations: for changes a
   * full pass applies anyway (start-up, a new own lease, a recreated device).
   */
  put(owner: string, state: KernelState | undefined): void {
    const before = this.#owners.get(owner) ?? EMPTY;
    if (before === EMPTY && !state) return;
    if (state) this.#owners.set(owner, state);
    else this.#owners.delete(owner);
    this.#routes.remove(owner, before.routes);
    this.#neighs.remove(owner, before.neighs);
    this.#fdb.remove(owner, before.fdb);
    if (!state) return;
    this.#routes.add(owner, state.routes);
    this.#neighs.add(owner, state.neighs);
    this.#fdb.add(owner, state.fdb);
  }

  /**
   * Sets what `owner` wants (undefined: nothing any more) and returns the operations from the
   * previous desired state to the new one: replaces first, then deletes (routes before L2).
   */
  set(owner: string, state: KernelState | undefined): Operation[] {
    const before = this.#owners.get(owner) ?? EMPTY;
    const after = state ?? EMPTY;
    if (state) this.#owners.set(owner, state);
    else this.#owners.delete(owner);
    const goneRoutes: Route[] = [];
    const goneNeighs: Neigh[] = [];
    const goneFdb: Fdb[] = [];
    const rewrite: KernelState = { routes: [], neighs: [], fdb: [] };
    this.#routes.remove(owner, before.routes, goneRoutes, rewrite.routes);
    this.#neighs.remove(owner, before.neighs, goneNeighs, rewrite.neighs);
    this.#fdb.remove(owner, before.fdb, goneFdb, rewrite.fdb);
    this.#routes.add(owner, after.routes);
    this.#neighs.add(owner, after.neighs);
    this.#fdb.add(owner, after.fdb);
    // An entry the same owner still wants under the same key was re-added above: not gone.
    const stillGone = <T>(gone: T[], index: Index<T>, key: (e: T) => string) => gone.filter((e) => !index.has(key(e)));
    return [
      ...replaceOps(rewrite),
      ...replaceOps(after),
      ...stillGone(goneRoutes, this.#routes, routeKey).map((r): Operation => ({ op: 'routeDel', route: routeSpec(r).route })),
      ...stillGone(goneNeighs, this.#neighs, neighKey).map((n): Operation => ({ op: 'neighDel', neigh: { linkIndex: n.linkIndex, ip: n.ip } })),
      ...stillGone(goneFdb, this.#fdb, fdbKey).map((f): Operation => ({ op: 'fdbDel', fdb: { linkIndex: f.linkIndex, mac: f.mac, dst: f.dst } })),
    ];
  }

  /** The whole desired state, one entry per key. */
  all(): KernelState {
    return { routes: this.#routes.values(), neighs: this.#neighs.values(), fdb: this.#fdb.values() };
  }

  /** What `owner` wants, as last set. */
  of(owner: string): KernelState | undefined {
    return this.#owners.get(owner);
  }

  /** Whether a wanted route goes out through link `index`. */
  routesVia(index: number): boolean {
    return this.#routes.some((r) => r.linkIndex === index);
  }

  route(key: string): Route | undefined {
    return this.#routes.get(key);
  }

  neigh(key: string): Neigh | undefined {
    return this.#neighs.get(key);
  }

  wantsFdb(key: string): boolean {
    return this.#fdb.has(key);
  }

  /** Number of owners. */
  get size(): number {
    return this.#owners.size;
  }
}
