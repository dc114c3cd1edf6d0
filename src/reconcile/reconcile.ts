/**
 * One reconcile pass: observe what of Weft's the kernel holds, diff against the desired state,
 * apply the difference in one batch. See state.ts for the design notes.
 */
import type { NetlinkError } from '../errors.ts';
import type { NetlinkHandle, Operation } from '../netlink/handle.ts';
import type { Nexthop } from '../netlink/records.ts';
import { diffFdb, diffNeighs, diffNexthops, diffRoutes, isOurFdb, isOurNeigh, ordered, ours } from './state.ts';
import type { KindDiff } from './state.ts';
import type { KernelState, Ownership } from './state.ts';

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
}

function entries(s: KernelState): number {
  return s.routes.length + s.neighs.length + s.fdb.length + (s.nexthops?.length ?? 0);
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
 * observe → diff → apply, one kind of entry at a time: each kind's dump is diffed and dropped
 * before the next is read, so a pass at 50,000 leases never holds its 200,000 records at once.
 */
export async function reconcileOnce(h: NetlinkHandle, desired: KernelState, own: Ownership): Promise<PassReport> {
  const devices = new Set(own.devices);
  let observed = 0;
  const kind = async <T>(list: () => Promise<T[]>, keep: (e: T) => boolean, diffKind: (held: T[]) => KindDiff): Promise<KindDiff> => {
    const held = (await list()).filter(keep);
    observed += held.length;
    return diffKind(held);
  };
  const perDevice = async <T>(list: (linkIndex: number) => Promise<T[]>) => (await Promise.all(own.devices.map(list))).flat();
  const routes = await kind(() => h.routeList({ protocol: own.protocol }), (r) => r.protocol === own.protocol, (held) => diffRoutes(desired.routes, held));
  const nexthops = await kind(() => h.nexthopList().catch((): Nexthop[] => []), (n) => n.protocol === own.protocol, (held) => diffNexthops(desired.nexthops ?? [], held));
  const neighs = await kind(() => perDevice((linkIndex) => h.neighList({ linkIndex })), (n) => isOurNeigh(n, devices), (held) => diffNeighs(desired.neighs, held));
  const fdb = await kind(() => perDevice((linkIndex) => h.fdbList({ linkIndex })), (f) => isOurFdb(f, devices), (held) => diffFdb(desired.fdb, held));
  const ops = ordered({ routes, nexthops, neighs, fdb });
  return { ops, failures: await apply(h, ops), desired: entries(desired), observed };
}
