/**
 * One reconcile pass: observe what of Weft's the kernel holds, diff against the desired state,
 * apply the difference in one batch. See state.ts for the design notes.
 */
import type { NetlinkError } from '../errors.ts';
import type { NetlinkHandle } from '../netlink/handle.ts';
import type { Operation } from '../netlink/specs.ts';
import type { Nexthop } from '../netlink/records.ts';
import { isOurFdb, isOurNeigh, ordered, ours, scanFdb, scanNeighs, scanNexthops, scanRoutes } from './state.ts';
import type { SideReport } from './side.ts';
import type { KernelState, KindDiff, KindScan, Ownership, WantedState } from './state.ts';

/**
 * Reads Weft's own routes, nexthop objects, neighbours and FDB entries (raw dumps, filtered in
 * native code). A route through a nexthop object reads the object's next hop, whatever the
 * kernel's nexthop_compat_mode. A kernel without nexthop objects has none of ours.
 */
export async function observe(h: NetlinkHandle, own: Ownership): Promise<KernelState> {
  const [routes, nexthops, perDevice] = await Promise.all([
    h.routeList({ protocol: own.protocol }),
    h.nexthopList().catch((): Nexthop[] => []),
    Promise.all(own.devices.map(async (linkIndex) => ({
      neighs: await h.neighList({ linkIndex }),
      fdb: await h.fdbList({ linkIndex }),
    }))),
  ]);
  if (nexthops.length > 0) {
    const byId = new Map(nexthops.map((n) => [n.id, n]));
    for (const r of routes) {
      const n = r.nhid === undefined ? undefined : byId.get(r.nhid);
      if (n) Object.assign(r, { gateway: n.gateway, linkIndex: n.linkIndex, onlink: n.onlink });
    }
  }
  return ours({ routes, neighs: perDevice.flatMap((d) => d.neighs), fdb: perDevice.flatMap((d) => d.fdb), nexthops }, own);
}

export interface PassReport {
  /** The operations the diff produced. */
  ops: Operation[];
  /** Operations the kernel refused; the next pass tries them again. */
  failures: NetlinkError[];
  /** Full passes: how many entries are desired, and how many of Weft's the kernel held before applying. */
  desired?: number;
  observed?: number;
  /** Full passes: what the state outside rtnetlink (side.ts) needed. */
  side?: SideReport;
}

function entries(s: WantedState): number {
  return s.routes.size + s.neighs.size + s.fdb.size + (s.nexthops?.size ?? 0);
}

function isDelete(o: Operation): boolean {
  return o.op === 'routeDel' || o.op === 'neighDel' || o.op === 'fdbDel' || o.op === 'nexthopDel';
}

/** Applies `ops` in one batch; deleting what is already gone counts as done. */
export async function apply(h: NetlinkHandle, ops: readonly Operation[]): Promise<NetlinkError[]> {
  if (ops.length === 0) return [];
  const results = await h.batch(ops);
  const failures: NetlinkError[] = [];
  results.forEach((r, i) => {
    if (r && !(r.notFound && isDelete(ops[i]!))) failures.push(r);
  });
  return failures;
}

/** The failures of a pass counted by operation and errno, for one log line: `replace neighbour ENODEV ×5000, …`. */
export function failureCounts(failures: readonly NetlinkError[]): string {
  const counts = new Map<string, number>();
  for (const f of failures) counts.set(`${f.op} ${f.errno}`, (counts.get(`${f.op} ${f.errno}`) ?? 0) + 1);
  return [...counts].map(([k, n]) => `${k} ×${n}`).join(', ');
}

/**
 * observe → diff → apply, one kind of entry at a time, each dump streamed against the wanted
 * entries as it is read: a pass at 50,000 leases never holds its 200,000 records, nor a map of
 * them, and what it reads dies young.
 */
export async function reconcileOnce(h: NetlinkHandle, desired: WantedState, own: Ownership): Promise<PassReport> {
  const devices = new Set(own.devices);
  let observed = 0;
  const kind = async <T>(each: (sink: (e: T) => void) => Promise<void>, keep: (e: T) => boolean, scan: KindScan<T>): Promise<KindDiff> => {
    await each((e) => {
      if (!keep(e)) return;
      observed++;
      scan.see(e);
    });
    return scan.done();
  };
  const perDevice = <T>(each: (linkIndex: number, sink: (e: T) => void) => Promise<void>) => async (sink: (e: T) => void) => {
    for (const linkIndex of own.devices) await each(linkIndex, sink);
  };
  const routes = await kind(
    (sink) => h.routeEach({ protocol: own.protocol }, sink),
    (r) => r.protocol === own.protocol,
    scanRoutes(desired.routes),
  );
  // A kernel without nexthop objects (before Linux 5.3) refuses the dump: it holds none of ours.
  const nexthops = await kind(
    (sink) => h.nexthopEach(sink).catch(() => {}),
    (n) => n.protocol === own.protocol,
    scanNexthops(desired.nexthops ?? new Map<string, Nexthop>()),
  );
  const neighs = await kind(
    perDevice((linkIndex, sink) => h.neighEach({ linkIndex }, sink)),
    (n) => isOurNeigh(n, devices),
    scanNeighs(desired.neighs),
  );
  const fdb = await kind(perDevice((linkIndex, sink) => h.fdbEach({ linkIndex }, sink)), (f) => isOurFdb(f, devices), scanFdb(desired.fdb));
  const ops = ordered({ routes, nexthops, neighs, fdb });
  return { ops, failures: await apply(h, ops), desired: entries(desired), observed };
}
