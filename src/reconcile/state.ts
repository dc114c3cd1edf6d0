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
 * Ownership: routes are Weft's when they carry its rtm_protocol tag; permanent neighbours and FDB
 * entries are Weft's when they sit on one of its devices. Nothing else is ever read as ours, so
 * nothing else is ever deleted.
 *
 * Order: every replace comes before every delete, so a changed entry is overwritten in place and
 * traffic never sees a gap; deleting something already gone counts as done. Within replaces,
 * neighbours and FDB entries go before routes (a route is only usable once both exist, as in
 * flannel); within deletes, routes go first.
 */
import { fdbKey, neighKey, NUD_PERMANENT, routeEqual, routeKey } from '../netlink/records.ts';
import type { Fdb, Neigh, Route } from '../netlink/records.ts';
import type { Operation } from '../netlink/handle.ts';

/** The rtm_protocol Weft tags its routes with (iproute2's rt_protos leaves 200-250 unassigned). */
export const WEFT_RTPROT = 201;

export interface KernelState {
  routes: Route[];
  neighs: Neigh[];
  fdb: Fdb[];
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
  };
}

/** The replace operation that writes `r` (only the fields a route is created from). */
export function routeSpec(r: Route): Operation & { op: 'routeReplace' } {
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

/**
 * The operations that turn `observed` (already filtered to Weft's own entries) into `desired`:
 * replaces first, then deletes. Pure; an empty result means the kernel is in line.
 */
export function diff(desired: KernelState, observed: KernelState): Operation[] {
  const routeReplaces: Operation[] = [];
  const routeDeletes: Operation[] = [];
  const l2Replaces: Operation[] = [];
  const l2Deletes: Operation[] = [];

  const haveRoutes = new Map<string, Route[]>();
  for (const r of observed.routes) {
    const k = routeKey(r);
    haveRoutes.set(k, [...(haveRoutes.get(k) ?? []), r]);
  }
  const wantRoutes = new Set<string>();
  for (const r of desired.routes) {
    const k = routeKey(r);
    wantRoutes.add(k);
    const have = haveRoutes.get(k) ?? [];
    if (!have.some((h) => routeEqual(h, r))) routeReplaces.push(routeSpec(r));
    // Extra routes under the same key (appended by someone, or a next hop we no longer want).
    for (const h of have) if (!routeEqual(h, r) && have.length > 1) routeDeletes.push({ op: 'routeDel', route: routeSpec(h).route });
  }
  for (const [k, have] of haveRoutes) {
    if (!wantRoutes.has(k)) for (const h of have) routeDeletes.push({ op: 'routeDel', route: routeSpec(h).route });
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

  return [...l2Replaces, ...routeReplaces, ...routeDeletes, ...l2Deletes];
}
