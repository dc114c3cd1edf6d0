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
import type { Operation } from '../netlink/handle.ts';

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

/** Keeps only what `own` says is Weft's. */
export function ours(state: KernelState, own: Ownership): KernelState {
  const devices = new Set(own.devices);
  return {
    routes: state.routes.filter((r) => r.protocol === own.protocol),
    neighs: state.neighs.filter((n) => devices.has(n.linkIndex) && (n.state & NUD_PERMANENT) !== 0),
    fdb: state.fdb.filter((f) => devices.has(f.linkIndex) && f.dst !== '' && (f.state & NUD_PERMANENT) !== 0),
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
      route: { dst: r.dst, nhid: r.nhid, table: r.table, protocol: r.protocol, scope: r.scope, type: r.type, metric: r.metric, prefsrc: r.prefsrc },
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
  return { op: 'nexthopReplace', nexthop: { id: n.id, gateway: n.gateway, linkIndex: n.linkIndex, onlink: n.onlink, protocol: n.protocol } };
}

/**
 * The operations that turn `observed` (already filtered to Weft's own entries) into `desired`:
 * replaces first, then deletes. Pure; an empty result means the kernel is in line.
 */
export function diff(desired: KernelState, observed: KernelState): Operation[] {
  const routeReplaces: Operation[] = [];
  const routeDeletes: Operation[] = [];
  const l2Replaces: Operation[] = [];
  const l2Deletes: Operation[] = [];

  const nexthopReplaces: Operation[] = [];
  const nexthopDeletes: Operation[] = [];

  const haveNexthops = new Map((observed.nexthops ?? []).map((n) => [n.id, n]));
  const wantNexthops = new Set<number>();
  for (const n of desired.nexthops ?? []) {
    wantNexthops.add(n.id);
    const h = haveNexthops.get(n.id);
    if (!h || !nexthopEqual(h, n)) nexthopReplaces.push(nexthopSpec(n));
  }
  for (const [id, h] of haveNexthops) if (!wantNexthops.has(id)) nexthopDeletes.push({ op: 'nexthopDel', nexthop: { id: h.id } });

  // A key almost always holds one route: an array only for the second one.
  const haveRoutes = new Map<string, Route | Route[]>();
  for (const r of observed.routes) {
    const k = routeKey(r);
    const had = haveRoutes.get(k);
    haveRoutes.set(k, had === undefined ? r : Array.isArray(had) ? [...had, r] : [had, r]);
  }
  const wantRoutes = new Set<string>();
  for (const r of desired.routes) {
    const k = routeKey(r);
    wantRoutes.add(k);
    const had = haveRoutes.get(k);
    const have = had === undefined ? [] : Array.isArray(had) ? had : [had];
    if (!have.some((h) => routeEqual(h, r))) routeReplaces.push(routeSpec(r));
    // Extra routes under the same key (appended by someone, or a next hop we no longer want).
    for (const h of have) if (!routeEqual(h, r) && have.length > 1) routeDeletes.push({ op: 'routeDel', route: routeSpec(h).route });
  }
  for (const [k, had] of haveRoutes) {
    if (!wantRoutes.has(k)) for (const h of Array.isArray(had) ? had : [had]) routeDeletes.push({ op: 'routeDel', route: routeSpec(h).route });
  }

  const haveNeighs = new Map(observed.neighs.map((n) => [neighKey(n), n]));
  const wantNeighs = new Set<string>();
  for (const n of desired.neighs) {
    const k = neighKey(n);
    wantNeighs.add(k);
    const h = haveNeighs.get(k);
    if (!h || h.mac !== n.mac || (h.state & NUD_PERMANENT) === 0) {
      l2Replaces.push({ op: 'neighReplace', neigh: { linkIndex: n.linkIndex, ip: n.ip, mac: n.mac, state: NUD_PERMANENT } });
    }
  }
  for (const [k, h] of haveNeighs) {
    if (!wantNeighs.has(k)) l2Deletes.push({ op: 'neighDel', neigh: { linkIndex: h.linkIndex, ip: h.ip } });
  }

  const haveFdb = new Set(observed.fdb.map(fdbKey));
  const wantFdb = new Set<string>();
  for (const f of desired.fdb) {
    const k = fdbKey(f);
    wantFdb.add(k);
    if (!haveFdb.has(k)) l2Replaces.push({ op: 'fdbReplace', fdb: { linkIndex: f.linkIndex, mac: f.mac, dst: f.dst } });
  }
  for (const f of observed.fdb) {
    if (!wantFdb.has(fdbKey(f))) l2Deletes.push({ op: 'fdbDel', fdb: { linkIndex: f.linkIndex, mac: f.mac, dst: f.dst } });
  }

  return [...l2Replaces, ...nexthopReplaces, ...routeReplaces, ...routeDeletes, ...nexthopDeletes, ...l2Deletes];
}
