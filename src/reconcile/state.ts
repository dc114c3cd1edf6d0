/**
 * DESIGN NOTES — the level-triggered core.
 *
 * flannel applies each lease event straight to the kernel and never looks again, so entries that
 * anyone deletes stay gone (#1070, #1434, #1759) and entries of nodes that left while it was down
 * stay forever (#2554). Weft instead states the whole kernel state it wants (DesiredState, built
 * by a backend's pure plan()), reads back what the kernel holds of its own (observe), and applies
 * only the difference (diff). Start-up, lease events, kernel events and the periodic resync all
 * run this same path, so repairs and stale-entry removal need no code of their own.
 *
 * Ownership: routes and nexthop objects are Weft's when they carry its protocol tag; permanent
 * neighbours and FDB entries are Weft's when they sit on one of its devices. Nothing else is ever
 * read as ours, so nothing else is ever deleted.
 *
 * Nexthop objects: a route with a gateway of its own costs the kernel a search of every other
 * route's next hop when it is added (measured: 20,000 such routes in 5.9 s, 4× the time per
 * doubling), a route through a nexthop object does not (0.47 s). Where the kernel has them (Linux
 * 5.3+), each gatewayed route is written as `nexthop replace id N via <gateway> dev <device>` plus
 * `route replace <prefix> nhid N` (see desired.ts for the ids); elsewhere in its classic form. The
 * diff treats the objects as a fourth kind of entry, and a route in the other form under the same
 * key (flanneld's, or Weft's before) is replaced in place like any stale route.
 *
 * Order: every replace comes before every delete, so a changed entry is overwritten in place and
 * traffic never sees a gap; deleting something already gone counts as done. Within replaces,
 * neighbours and FDB entries go before nexthops, nexthops before routes (a route is only usable
 * once both exist, as in flannel); within deletes, routes go first, then nexthops.
 */
import { fdbKey, neighKey, nexthopEqual, NUD_PERMANENT, routeEqual, routeKey } from '../netlink/records.ts';
import type { Fdb, Neigh, Nexthop, Route } from '../netlink/records.ts';
import type { Operation } from '../netlink/specs.ts';

/** The rtm_protocol Weft tags its routes with (iproute2's rt_protos leaves 200-250 unassigned). */
export const WEFT_RTPROT = 201;

export interface KernelState {
  routes: Route[];
  neighs: Neigh[];
  fdb: Fdb[];
  /** The nexthop objects routes go through; absent where none are used. */
  nexthops?: Nexthop[];
}

/** What is Weft's in the kernel: the protocol tag of its routes and the devices it owns. */
export interface Ownership {
  protocol: number;
  /** Link indexes of Weft's devices: their permanent neighbours and FDB entries are Weft's. */
  devices: readonly number[];
}

/** A permanent neighbour on one of our devices. */
export function isOurNeigh(n: Neigh, devices: ReadonlySet<number>): boolean {
  return devices.has(n.linkIndex) && (n.state & NUD_PERMANENT) !== 0;
}

/** A permanent FDB entry with a remote on one of our devices. */
export function isOurFdb(f: Fdb, devices: ReadonlySet<number>): boolean {
  return devices.has(f.linkIndex) && f.dst !== '' && (f.state & NUD_PERMANENT) !== 0;
}

/** Keeps only what `own` says is Weft's. */
export function ours(state: KernelState, own: Ownership): KernelState {
  const devices = new Set(own.devices);
  return {
    routes: state.routes.filter((r) => r.protocol === own.protocol),
    neighs: state.neighs.filter((n) => isOurNeigh(n, devices)),
    fdb: state.fdb.filter((f) => isOurFdb(f, devices)),
    ...(state.nexthops ? { nexthops: state.nexthops.filter((n) => n.protocol === own.protocol) } : {}),
  };
}

/**
 * `state` with every route in its classic form (its next hop its own, no nexthop objects): what
 * a reader compares when it cares where traffic goes, not how the kernel holds it (weftctl; the
 * routes of an observed state carry their nexthop's gateway and device, see observe()).
 */
export function classicForm(state: KernelState): KernelState {
  return { routes: state.routes.map(({ nhid: _, ...r }) => r), neighs: state.neighs, fdb: state.fdb };
}

/** The replace operation that writes `r` (only the fields a route is created from). */
export function routeSpec(r: Route): Operation & { op: 'routeReplace' } {
  if (r.nhid !== undefined) {
    return {
      op: 'routeReplace',
      route: {
        dst: r.dst,
        nhid: r.nhid,
        table: r.table,
        protocol: r.protocol,
        scope: r.scope,
        type: r.type,
        metric: r.metric,
        prefsrc: r.prefsrc,
      },
    };
  }
  return {
    op: 'routeReplace',
    route: {
      dst: r.dst,
      gateway: r.gateway,
      linkIndex: r.linkIndex,
      table: r.table,
      protocol: r.protocol,
      scope: r.scope,
      type: r.type,
      metric: r.metric,
      onlink: r.onlink,
      prefsrc: r.prefsrc,
    },
  };
}

/** The replace operation that writes nexthop object `n`. */
export function nexthopSpec(n: Nexthop): Operation & { op: 'nexthopReplace' } {
  return {
    op: 'nexthopReplace',
    nexthop: { id: n.id, gateway: n.gateway, linkIndex: n.linkIndex, onlink: n.onlink, protocol: n.protocol },
  };
}

/** The replace operation that writes neighbour `n`, permanent. */
export function neighReplace(n: Neigh): Operation {
  return { op: 'neighReplace', neigh: { linkIndex: n.linkIndex, ip: n.ip, mac: n.mac, state: NUD_PERMANENT } };
}

/** The replace operation that writes FDB entry `f`. */
export function fdbReplace(f: Fdb): Operation {
  return { op: 'fdbReplace', fdb: { linkIndex: f.linkIndex, mac: f.mac, dst: f.dst } };
}

/** One kind's difference: what to write and what to delete. */
export interface KindDiff {
  replaces: Operation[];
  deletes: Operation[];
}

/** Wanted entries of one kind by key, one per key: {@link DesiredState}'s indexes, or a Map. */
export interface Wanted<T> {
  get(key: string): T | undefined;
  /** Every entry, without building a list of them. */
  forEach(fn: (e: T) => void): void;
  readonly size: number;
}

/** The wanted state a full pass diffs against, kind by kind. */
export interface WantedState {
  routes: Wanted<Route>;
  neighs: Wanted<Neigh>;
  fdb: Wanted<Fdb>;
  nexthops?: Wanted<Nexthop>;
}

/** How a nexthop object of the wanted state is looked up: by its id. */
export const nexthopIdKey = (n: Pick<Nexthop, 'id'>): string => String(n.id);

/**
 * One kind's diff, fed the kernel's entries of ours one at a time as a dump is read, so that a
 * full pass never holds a whole dump (at 50,000 leases, four of 50,000 records) nor a map of it.
 */
export interface KindScan<T> {
  see(held: T): void;
  /** The difference, once every held entry was seen. */
  done(): KindDiff;
}

/**
 * Routes: a wanted route the kernel lacks (or holds otherwise) is replaced; of Weft's routes, those
 * under a key nobody wants and extra ones under a wanted key are deleted. A single route otherwise
 * under a wanted key is left to the replace, which overwrites it in place.
 */
export function scanRoutes(want: Wanted<Route>): KindScan<Route> {
  const out: KindDiff = { replaces: [], deletes: [] };
  const del = (h: Route) => out.deletes.push({ op: 'routeDel', route: routeSpec(h).route });
  const matched = new Set<Route>();
  const otherwise = new Map<string, Route[]>();
  return {
    see(h) {
      const k = routeKey(h);
      const w = want.get(k);
      if (!w) del(h);
      else if (routeEqual(h, w)) matched.add(w);
      else otherwise.set(k, [...(otherwise.get(k) ?? []), h]);
    },
    done() {
      want.forEach((w) => {
        if (!matched.has(w)) out.replaces.push(routeSpec(w));
      });
      for (const [k, list] of otherwise) if (list.length > 1 || matched.has(want.get(k)!)) list.forEach(del);
      return out;
    },
  };
}

/**
 * A kind with one entry per key: a held entry under no wanted key is deleted, and a wanted one the
 * kernel lacks or holds otherwise (`same` false) is replaced.
 */
function scanByKey<T>(
  want: Wanted<T>,
  key: (e: T) => string,
  same: (held: T, wanted: T) => boolean,
  replace: (w: T) => Operation,
  del: (h: T) => Operation,
): KindScan<T> {
  const out: KindDiff = { replaces: [], deletes: [] };
  const matched = new Set<T>();
  return {
    see(h) {
      const w = want.get(key(h));
      if (!w) out.deletes.push(del(h));
      else if (same(h, w)) matched.add(w);
    },
    done() {
      want.forEach((w) => {
        if (!matched.has(w)) out.replaces.push(replace(w));
      });
      return out;
    },
  };
}

/** Nexthop objects of ours, by id. */
export function scanNexthops(want: Wanted<Nexthop>): KindScan<Nexthop> {
  return scanByKey(want, nexthopIdKey, nexthopEqual, nexthopSpec, (h) => ({ op: 'nexthopDel', nexthop: { id: h.id } }));
}

/** Neighbours: a wanted one missing, with another MAC or not permanent is replaced. */
export function scanNeighs(want: Wanted<Neigh>): KindScan<Neigh> {
  const same = (h: Neigh, w: Neigh) => h.mac === w.mac && (h.state & NUD_PERMANENT) !== 0;
  return scanByKey(want, neighKey, same, neighReplace, (h) => ({ op: 'neighDel', neigh: { linkIndex: h.linkIndex, ip: h.ip } }));
}

/** FDB entries, by device, MAC and remote (the key is the whole entry). */
export function scanFdb(want: Wanted<Fdb>): KindScan<Fdb> {
  return scanByKey(
    want,
    fdbKey,
    () => true,
    fdbReplace,
    (h) => ({ op: 'fdbDel', fdb: { linkIndex: h.linkIndex, mac: h.mac, dst: h.dst } }),
  );
}

/** The kinds' differences in the order of the design notes: L2, nexthop and route replaces, then route, nexthop and L2 deletes. */
export function ordered(d: { routes: KindDiff; nexthops: KindDiff; neighs: KindDiff; fdb: KindDiff }): Operation[] {
  return [
    ...d.neighs.replaces, ...d.fdb.replaces, ...d.nexthops.replaces, ...d.routes.replaces,
    ...d.routes.deletes, ...d.nexthops.deletes, ...d.neighs.deletes, ...d.fdb.deletes,
  ];
}

/** `list` as {@link Wanted}, by `key` (one entry per key: the last wins). */
export function wantedOf<T>(list: readonly T[], key: (e: T) => string): Wanted<T> {
  return new Map(list.map((e) => [key(e), e]));
}

/** `state` (one entry per key) as {@link WantedState}. */
export function wantedState(state: KernelState): WantedState {
  return {
    routes: wantedOf(state.routes, routeKey),
    neighs: wantedOf(state.neighs, neighKey),
    fdb: wantedOf(state.fdb, fdbKey),
    ...(state.nexthops ? { nexthops: wantedOf(state.nexthops, nexthopIdKey) } : {}),
  };
}

/** Every entry of `held` through `scan`. */
function scanned<T>(scan: KindScan<T>, held: readonly T[]): KindDiff {
  for (const h of held) scan.see(h);
  return scan.done();
}

/**
 * The operations that turn `observed` (already filtered to Weft's own entries) into `desired`
 * (one entry per key): replaces first, then deletes. Pure; an empty result means the kernel is in
 * line.
 */
export function diff(desired: KernelState, observed: KernelState): Operation[] {
  const want = wantedState(desired);
  return ordered({
    routes: scanned(scanRoutes(want.routes), observed.routes),
    nexthops: scanned(scanNexthops(want.nexthops ?? new Map()), observed.nexthops ?? []),
    neighs: scanned(scanNeighs(want.neighs), observed.neighs),
    fdb: scanned(scanFdb(want.fdb), observed.fdb),
  });
}
