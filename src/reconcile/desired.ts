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
 *
 * With nexthop objects ({@link DesiredState.useNexthops}), every route with a gateway is held in
 * its nexthop form (state.ts): a nexthop object per distinct next hop (gateway, device, onlink),
 * owned like any entry, and the route naming it by id. Ids are handed out here, counting up from
 * the largest of ours the kernel held at start-up (so a restart adopts every object as it is) and
 * skipping any id the kernel held for someone else; an id is not handed out again before the
 * count wraps, so a delete of an old object can never hit a new one of the same batch.
 */
import type { Operation } from '../netlink/specs.ts';
import { fdbKey, neighKey, nexthopKey, routeKey, RTN_UNICAST } from '../netlink/records.ts';
import type { Fdb, Neigh, Nexthop, Route } from '../netlink/records.ts';
import { fdbReplace, neighReplace, nexthopIdKey, nexthopSpec, routeSpec } from './state.ts';
import type { KernelState, Wanted, WantedState } from './state.ts';

const EMPTY: KernelState = { routes: [], neighs: [], fdb: [] };

/** The owners of an entry several want, in the order they set it. */
class Shared<T> {
  readonly byOwner: Map<string, T>;

  constructor(byOwner: Map<string, T>) {
    this.byOwner = byOwner;
  }
}

/**
 * Entries of one kind by key, each key with the owners that want it (the last one wins). A key
 * almost always has one owner, whose entry is held as it is: at 50,000 leases that is 200,000
 * Maps and wrappers fewer. Who owns such an entry is told by identity (each owner's entries are
 * objects of its own); only when a second owner wants the key is the first one looked up
 * (`ownerOf`, a walk over the owners: two leases claiming one subnet are a misconfiguration).
 */
class Index<T extends object> implements Wanted<T> {
  readonly #byKey = new Map<string, T | Shared<T>>();
  readonly #key: (e: T) => string;
  readonly #ownerOf: (held: T) => string | undefined;

  constructor(key: (e: T) => string, ownerOf: (held: T) => string | undefined) {
    this.#key = key;
    this.#ownerOf = ownerOf;
  }

  get(key: string): T | undefined {
    const held = this.#byKey.get(key);
    return held instanceof Shared ? Index.#last(held) : held;
  }

  /** The winner of a key several owners want: the last to set it. */
  static #last<T>(held: Shared<T>): T {
    let last: T | undefined;
    for (const e of held.byOwner.values()) last = e;
    return last!;
  }

  /**
   * Drops `owner`'s `entries`; those no owner wants any more go to `gone`, the winners of the
   * others to `rewrite` (when the caller wants them).
   */
  remove(owner: string, entries: readonly T[], gone?: T[], rewrite?: T[]): void {
    for (const e of entries) {
      const k = this.#key(e);
      const held = this.#byKey.get(k);
      if (held === e) {
        this.#byKey.delete(k);
        gone?.push(e);
        continue;
      }
      if (!(held instanceof Shared) || !held.byOwner.delete(owner)) continue;
      if (held.byOwner.size === 1) this.#byKey.set(k, held.byOwner.values().next().value!);
      rewrite?.push(this.get(k)!);
    }
  }

  add(owner: string, entries: readonly T[]): void {
    for (const e of entries) {
      const k = this.#key(e);
      const held = this.#byKey.get(k);
      if (held instanceof Shared) {
        held.byOwner.delete(owner);
        held.byOwner.set(owner, e);
        continue;
      }
      const other = held && this.#ownerOf(held);
      this.#byKey.set(k, held && other !== undefined && other !== owner ? new Shared(new Map([[other, held], [owner, e]])) : e);
    }
  }

  has(key: string): boolean {
    return this.#byKey.has(key);
  }

  values(): T[] {
    const out: T[] = [];
    this.forEach((e) => out.push(e));
    return out;
  }

  forEach(fn: (e: T) => void): void {
    this.#byKey.forEach((held) => fn(held instanceof Shared ? Index.#last(held) : held));
  }

  some(pred: (e: T) => boolean): boolean {
    for (const k of this.#byKey.keys()) if (pred(this.get(k)!)) return true;
    return false;
  }

  get size(): number {
    return this.#byKey.size;
  }
}

/** The operations that (re)write `state`: L2 entries and nexthops before the routes that need them. */
export function replaceOps(state: KernelState): Operation[] {
  return [
    ...state.neighs.map(neighReplace),
    ...state.fdb.map(fdbReplace),
    ...(state.nexthops ?? []).map(nexthopSpec),
    ...state.routes.map(routeSpec),
  ];
}

/**
 * One owner's entries as held: a single array, `[routes, neighbours, FDB entries (counts),
 * ...routes, ...neighbours, ...FDB entries, ...nexthops]`, where a KernelState of four lists cost
 * ~180 bytes more per owner (9 MB at 50,000 leases).
 */
type Held = readonly (number | Route | Neigh | Fdb | Nexthop)[];

const HEADER = 3;

function pack(s: KernelState): Held {
  const lists = [s.routes, s.neighs, s.fdb, s.nexthops ?? []];
  // Allocated at its length: a literal with spreads grows as it fills and keeps the spare room.
  const held = new Array<Held[number]>(HEADER + lists.reduce((n, l) => n + l.length, 0));
  let i = 0;
  for (const n of [s.routes.length, s.neighs.length, s.fdb.length]) held[i++] = n;
  for (const list of lists) for (const e of list) held[i++] = e;
  return held;
}

/** The first id handed out when the kernel holds none of ours ("WEFT" in ASCII, far from small ids other tools count from). */
export const NEXTHOP_ID_BASE = 0x57454654;
const NEXTHOP_ID_MAX = 0xffffffff;

/** Nexthop ids by next hop, for {@link DesiredState}. */
class NexthopIds {
  readonly #byKey = new Map<string, number>();
  /** Ids in use: ours, and those the kernel held for others at start-up. */
  readonly #taken = new Set<number>();
  #next = NEXTHOP_ID_BASE;

  constructor(existing: readonly Nexthop[], protocol: number) {
    let last = 0;
    for (const n of existing) {
      this.#taken.add(n.id);
      if (n.protocol !== protocol) continue;
      this.#byKey.set(nexthopKey(n), n.id);
      if (n.id >= NEXTHOP_ID_BASE) last = Math.max(last, n.id);
    }
    if (last > 0 && last < NEXTHOP_ID_MAX) this.#next = last + 1;
  }

  id(key: string): number {
    const had = this.#byKey.get(key);
    if (had !== undefined) return had;
    while (this.#taken.has(this.#next)) this.#advance();
    const id = this.#next;
    this.#advance();
    this.#byKey.set(key, id);
    this.#taken.add(id);
    return id;
  }

  release(n: Nexthop): void {
    if (this.#byKey.get(nexthopKey(n)) === n.id) this.#byKey.delete(nexthopKey(n));
    this.#taken.delete(n.id);
  }

  #advance(): void {
    this.#next = this.#next >= NEXTHOP_ID_MAX ? NEXTHOP_ID_BASE : this.#next + 1;
  }
}

export class DesiredState {
  readonly #owners = new Map<string, Held>();
  readonly #routes = new Index<Route>(routeKey, (e) => this.#ownerOf(e));
  readonly #neighs = new Index<Neigh>(neighKey, (e) => this.#ownerOf(e));
  readonly #fdb = new Index<Fdb>(fdbKey, (e) => this.#ownerOf(e));
  readonly #nexthops = new Index<Nexthop>(nexthopIdKey, (e) => this.#ownerOf(e));
  #ids: NexthopIds | undefined;

  /**
   * From now on, routes with a gateway go through nexthop objects tagged `protocol`. `existing`
   * is every nexthop object the kernel holds (anyone's): ours are adopted by their next hop, the
   * others' ids never handed out. Call before anything is set.
   */
  useNexthops(existing: readonly Nexthop[], protocol: number): void {
    if (this.#owners.size > 0) throw new Error('useNexthops() must come before the first put() or set()');
    this.#ids = new NexthopIds(existing, protocol);
  }

  /** Who set `entry` (a walk over the owners: only for a key two of them want). */
  #ownerOf(entry: object): string | undefined {
    for (const [owner, held] of this.#owners) if (held.includes(entry as Route)) return owner;
    return undefined;
  }

  /** What `owner` holds, as lists (EMPTY for nothing). */
  #state(owner: string): KernelState {
    const held = this.#owners.get(owner);
    if (!held) return EMPTY;
    const [routes, neighs, fdb] = held as [number, number, number];
    const at = (from: number, n: number) => held.slice(from, from + n);
    const state: KernelState = {
      routes: at(HEADER, routes) as Route[],
      neighs: at(HEADER + routes, neighs) as Neigh[],
      fdb: at(HEADER + routes + neighs, fdb) as Fdb[],
    };
    if (this.#ids) state.nexthops = held.slice(HEADER + routes + neighs + fdb) as Nexthop[];
    return state;
  }

  /** Whether routes are held in their nexthop form. */
  get usesNexthops(): boolean {
    return this.#ids !== undefined;
  }

  /** `state` as held: each gatewayed unicast route in its nexthop form when nexthops are used. */
  #form(state: KernelState): KernelState {
    const ids = this.#ids;
    const nexthops: Nexthop[] = [];
    // Written out rather than spread: a spread copy keeps its extra property out of line (~40
    // bytes more per held route or nexthop, 4 MB at 50,000 leases).
    const routes = state.routes.map((r) => {
      if (!ids || r.gateway === undefined || r.linkIndex === undefined || r.type !== RTN_UNICAST) return r;
      const id = ids.id(nexthopKey({ gateway: r.gateway, linkIndex: r.linkIndex, onlink: r.onlink }));
      nexthops.push({ id, family: r.family, gateway: r.gateway, linkIndex: r.linkIndex, onlink: r.onlink, protocol: r.protocol });
      const held: Route = {
        family: r.family, dst: r.dst, gateway: r.gateway, linkIndex: r.linkIndex, table: r.table, protocol: r.protocol,
        scope: r.scope, type: r.type, metric: r.metric, onlink: r.onlink, nhid: id,
      };
      if (r.prefsrc !== undefined) held.prefsrc = r.prefsrc;
      return held;
    });
    return { routes, neighs: state.neighs, fdb: state.fdb, ...(ids ? { nexthops } : {}) };
  }

  /** Hands the ids of nexthops no owner wants any more back. */
  #release(gone: readonly Nexthop[]): void {
    for (const n of gone) if (!this.#nexthops.has(nexthopIdKey(n))) this.#ids?.release(n);
  }

  /**
   * Sets what `owner` wants (undefined: nothing any more), computing no operations: for changes a
   * full pass applies anyway (start-up, a new own lease, a recreated device).
   */
  put(owner: string, planned: KernelState | undefined): void {
    const before = this.#state(owner);
    if (before === EMPTY && !planned) return;
    const state = planned ? this.#form(planned) : undefined;
    if (state) this.#owners.set(owner, pack(state));
    else this.#owners.delete(owner);
    const goneNexthops: Nexthop[] = [];
    this.#routes.remove(owner, before.routes);
    this.#neighs.remove(owner, before.neighs);
    this.#fdb.remove(owner, before.fdb);
    this.#nexthops.remove(owner, before.nexthops ?? [], goneNexthops);
    if (state) {
      this.#routes.add(owner, state.routes);
      this.#neighs.add(owner, state.neighs);
      this.#fdb.add(owner, state.fdb);
      this.#nexthops.add(owner, state.nexthops ?? []);
    }
    this.#release(goneNexthops);
  }

  /**
   * Sets what `owner` wants (undefined: nothing any more) and returns the operations from the
   * previous desired state to the new one: replaces first, then deletes (routes before L2).
   */
  set(owner: string, planned: KernelState | undefined): Operation[] {
    const before = this.#state(owner);
    const after = planned ? this.#form(planned) : EMPTY;
    if (planned) this.#owners.set(owner, pack(after));
    else this.#owners.delete(owner);
    const goneRoutes: Route[] = [];
    const goneNeighs: Neigh[] = [];
    const goneFdb: Fdb[] = [];
    const goneNexthops: Nexthop[] = [];
    const rewrite: KernelState = { routes: [], neighs: [], fdb: [], nexthops: [] };
    this.#routes.remove(owner, before.routes, goneRoutes, rewrite.routes);
    this.#neighs.remove(owner, before.neighs, goneNeighs, rewrite.neighs);
    this.#fdb.remove(owner, before.fdb, goneFdb, rewrite.fdb);
    this.#nexthops.remove(owner, before.nexthops ?? [], goneNexthops, rewrite.nexthops);
    this.#routes.add(owner, after.routes);
    this.#neighs.add(owner, after.neighs);
    this.#fdb.add(owner, after.fdb);
    this.#nexthops.add(owner, after.nexthops ?? []);
    // An entry the same owner still wants under the same key was re-added above: not gone.
    const stillGone = <T extends object>(gone: T[], index: Index<T>, key: (e: T) => string) => gone.filter((e) => !index.has(key(e)));
    const nexthopsGone = stillGone(goneNexthops, this.#nexthops, nexthopIdKey);
    this.#release(nexthopsGone);
    return [
      ...replaceOps(rewrite),
      ...replaceOps(after),
      ...stillGone(goneRoutes, this.#routes, routeKey).map((r): Operation => ({ op: 'routeDel', route: routeSpec(r).route })),
      ...nexthopsGone.map((n): Operation => ({ op: 'nexthopDel', nexthop: { id: n.id } })),
      ...stillGone(goneNeighs, this.#neighs, neighKey).map((n): Operation => ({
        op: 'neighDel',
        neigh: { linkIndex: n.linkIndex, ip: n.ip },
      })),
      ...stillGone(goneFdb, this.#fdb, fdbKey).map((f): Operation => ({
        op: 'fdbDel',
        fdb: { linkIndex: f.linkIndex, mac: f.mac, dst: f.dst },
      })),
    ];
  }

  /** The whole desired state, one entry per key. */
  all(): KernelState {
    return {
      routes: this.#routes.values(),
      neighs: this.#neighs.values(),
      fdb: this.#fdb.values(),
      ...(this.#ids ? { nexthops: this.#nexthops.values() } : {}),
    };
  }

  /** The whole desired state by key, for a full pass to stream a dump against (no copy of it is made). */
  wanted(): WantedState {
    return { routes: this.#routes, neighs: this.#neighs, fdb: this.#fdb, ...(this.#ids ? { nexthops: this.#nexthops } : {}) };
  }

  /** What `owner` wants, as last set. */
  of(owner: string): KernelState | undefined {
    return this.#owners.has(owner) ? this.#state(owner) : undefined;
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

  nexthop(id: number): Nexthop | undefined {
    return this.#nexthops.get(String(id));
  }

  /** Number of owners. */
  get size(): number {
    return this.#owners.size;
  }
}
