/**
 * One reconcile pass: observe what of Weft's the kernel holds, diff against the desired state,
 * apply the difference in one batch. See state.ts for the design notes.
 */
import type { NetlinkError } from '../errors.ts';
import type { NetlinkHandle, Operation } from '../netlink/handle.ts';
import type { Nexthop } from '../netlink/records.ts';
import { diff, ours } from './state.ts';
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

/** observe → diff → apply. */
export async function reconcileOnce(h: NetlinkHandle, desired: KernelState, own: Ownership): Promise<PassReport> {
  const observed = await observe(h, own);
  const ops = diff(desired, observed);
  return { ops, failures: await apply(h, ops), desired: entries(desired), observed: entries(observed) };
}
