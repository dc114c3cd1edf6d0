/**
 * What the admin endpoint and weftctl say about a node's kernel entries, computed purely from
 * what Weft wants per peer (a backend's plan, as the reconciler holds it) and what the kernel
 * holds of Weft's (reconcile/reconcile.ts observe). The same code serves weftd's answer and
 * weftctl's own reading of the kernel while weftd is down, so both tell the same story.
 */
import { formatCIDR, formatIP } from '../ip/ip.ts';
import type { Lease } from '../lease/lease.ts';
import { vtepMac } from '../backend/plan.ts';
import type { FdbSpec, NeighSpec, RouteSpec } from '../netlink/specs.ts';
import { fdbKey, neighKey, routeEqual, routeKey, RTN_BLACKHOLE } from '../netlink/records.ts';
import { classicForm, diff } from '../reconcile/state.ts';
import type { KernelState } from '../reconcile/state.ts';

/** One peer as `weftctl peers` shows it. */
export interface PeerRow {
  peer: string;
  subnet?: string;
  ipv6Subnet?: string;
  publicIP?: string;
  vtepMac?: string;
  /** `ok`, or what the kernel lacks or holds differently for this peer. */
  kernel: string[];
  /** Milliseconds since weftd saw this lease added or changed; absent when unknown. */
  ageMs?: number;
}

/** A lease Weft does not program, and why. */
export interface Skipped {
  peer: string;
  reason: string;
}

/** The kernel against the desired state: what is missing (or different) and what is extra. */
export interface KernelDiff {
  desired: number;
  present: number;
  /** Entries Weft wants that the kernel lacks or holds with other values, as iproute2 would print them. */
  missing: string[];
  /** Entries of Weft's the kernel holds beyond the desired state. */
  extra: string[];
}

/** `ip route` style text of a route; `dev` names a link by its index. */
function routeText(r: RouteSpec, dev: (index: number) => string): string {
  if (r.type === RTN_BLACKHOLE) return `route blackhole ${r.dst}`;
  const via = r.gateway ? ` via ${r.gateway}` : '';
  return `route ${r.dst}${via}${r.linkIndex ? ` dev ${dev(r.linkIndex)}` : ''}${r.onlink ? ' onlink' : ''}`;
}

/** `ip neigh` style text of a neighbour entry. */
function neighText(n: NeighSpec, dev: (index: number) => string): string {
  return `neigh ${n.ip}${n.mac ? ` lladdr ${n.mac}` : ''} dev ${dev(n.linkIndex)}`;
}

/** `bridge fdb` style text of an FDB entry. */
function fdbText(f: FdbSpec, dev: (index: number) => string): string {
  return `fdb ${f.mac} dst ${f.dst} dev ${dev(f.linkIndex)}`;
}

function count(s: KernelState): number {
  return s.routes.length + s.neighs.length + s.fdb.length;
}

/** The difference between `desired` and `observed` (Weft's own entries only), as text lines. */
export function kernelDiff(desired: KernelState, observed: KernelState, dev: (index: number) => string = (i) => `#${i}`): KernelDiff {
  const missing: string[] = [];
  const extra: string[] = [];
  // Compared in classic form, so each line names the next hop (a nexthop object's drift shows
  // on the routes through it).
  for (const op of diff(classicForm(desired), classicForm(observed))) {
    switch (op.op) {
      case 'routeReplace': missing.push(routeText(op.route, dev)); break;
      case 'neighReplace': missing.push(neighText(op.neigh, dev)); break;
      case 'fdbReplace': missing.push(fdbText(op.fdb, dev)); break;
      case 'routeDel': extra.push(routeText(op.route, dev)); break;
      case 'neighDel': {
        // The delete names only the address; the entry held says which MAC it had.
        const held = observed.neighs.find((n) => neighKey(n) === neighKey(op.neigh));
        extra.push(neighText(held ?? op.neigh, dev));
        break;
      }
      case 'fdbDel': extra.push(fdbText(op.fdb, dev)); break;
      default: break;
    }
  }
  return { desired: count(desired), present: count(observed), missing, extra };
}

/**
 * What the kernel lacks or holds differently of one peer's `wanted` entries: `missing route`,
 * `stale route` (same destination, other next hop), `missing FDB`, `missing neighbour`,
 * `stale neighbour` (other MAC); `ok` when it holds them all.
 */
export function peerKernelState(wanted: KernelState | undefined, observed: KernelState): string[] {
  if (!wanted) return ['not programmed'];
  const problems: string[] = [];
  for (const r of wanted.routes) {
    const held = observed.routes.filter((h) => routeKey(h) === routeKey(r));
    if (held.length === 0) problems.push('missing route');
    else if (!held.some((h) => routeEqual(h, r))) problems.push('stale route');
  }
  const fdb = new Set(observed.fdb.map(fdbKey));
  for (const f of wanted.fdb) if (!fdb.has(fdbKey(f))) problems.push('missing FDB');
  const neighs = new Map(observed.neighs.map((n) => [neighKey(n), n]));
  for (const n of wanted.neighs) {
    const held = neighs.get(neighKey(n));
    if (!held) problems.push('missing neighbour');
    else if (held.mac !== n.mac) problems.push('stale neighbour');
  }
  return problems.length === 0 ? ['ok'] : [...new Set(problems)];
}

/** One row per lease, in the order given. `wanted` is keyed by the lease's peer. */
export function peerRows(
  leases: readonly Lease[],
  wanted: ReadonlyMap<string, KernelState>,
  observed: KernelState,
  seen?: ReadonlyMap<string, number>,
  now = Date.now(),
): PeerRow[] {
  return leases.map((l) => {
    const since = seen?.get(l.peer);
    const mac = vtepMac(l.attrs.backendData);
    return {
      peer: l.peer,
      ...(l.subnet ? { subnet: formatCIDR(l.subnet) } : {}),
      ...(l.ipv6Subnet ? { ipv6Subnet: formatCIDR(l.ipv6Subnet) } : {}),
      ...(l.attrs.publicIP ? { publicIP: formatIP(l.attrs.publicIP) } : {}),
      ...(mac ? { vtepMac: mac } : {}),
      kernel: peerKernelState(wanted.get(l.peer), observed),
      ...(since !== undefined ? { ageMs: now - since } : {}),
    };
  });
}
