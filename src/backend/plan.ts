/**
 * DESIGN NOTES — backend planning.
 *
 * A backend turns the whole lease table into the kernel state it wants; it never applies an
 * event by itself (see reconcile/state.ts). plan() is pure: the devices it programs and the
 * reachability facts it needs (DirectRouting) are passed in, so it is tested without root.
 *
 * vxlan (reference §5.1), per remote lease, for each family the remote has:
 *   route  <subnet> via <subnet network address> dev flannel.<VNI> onlink
 *   neigh  <subnet network address> lladdr <VtepMAC> permanent
 *   fdb    <VtepMAC> dst <PublicIP> self permanent
 * With DirectRouting and the remote's PublicIP on our own L2 segment: `<subnet> via <PublicIP>`
 * on the external interface and no neighbour or FDB entry.
 *
 * host-gw (reference §5.2): `<subnet> via <PublicIP> dev <external interface>`.
 *
 * Peer data is never trusted: a lease of another backend type, without a usable address or
 * VTEP MAC, or overlapping our own subnet is skipped with a warning naming the peer.
 */
import type { NetConfig } from '../config/netconf.ts';
import { formatCIDR, formatIP, overlaps } from '../ip/ip.ts';
import type { CIDR, Family, IP } from '../ip/ip.ts';
import type { Lease } from '../lease/lease.ts';
import { NTF_SELF, NUD_PERMANENT, RT_TABLE_MAIN, RTN_BLACKHOLE, RTN_UNICAST, RT_SCOPE_UNIVERSE } from '../netlink/records.ts';
import type { Route } from '../netlink/records.ts';
import { WEFT_RTPROT } from '../reconcile/state.ts';
import type { KernelState } from '../reconcile/state.ts';
import type { ExtensionSubnet } from './extension/subnet.ts';
import type { WgPeer } from './wireguard/peers.ts';

/** A device of ours: its index and, for vxlan, its VTEP MAC. */
export interface PlanDevice {
  index: number;
  mac: string;
}

export interface PlanInput {
  own: Lease;
  remotes: readonly Lease[];
  /** The families this node runs; a remote's other family is left alone. */
  enabled: readonly Family[];
  /** The external interface's index (host-gw routes, DirectRouting routes). */
  extIndex: number;
  /** vxlan devices per family; absent for host-gw or a disabled family. */
  vxlan?: { 4?: PlanDevice; 6?: PlanDevice };
  /** vxlan DirectRouting: whether a remote public address is on our own L2 segment. */
  directlyReachable?: (ip: IP) => boolean;
}

/** One entry of state outside rtnetlink; each backend sees only its own kind. */
export type SideEntry = WgPeer | ExtensionSubnet;

export interface Plan {
  state: KernelState;
  /** What this lease wants outside rtnetlink (reconcile/side.ts): wireguard peers, extension commands. */
  side?: SideEntry[];
  /** One line per skipped peer, for the log. */
  warnings: string[];
}

/** The families a network configuration enables. */
export function enabledFamilies(cfg: Pick<NetConfig, 'enableIPv4' | 'enableIPv6'>): Family[] {
  return [...(cfg.enableIPv4 ? [4 as const] : []), ...(cfg.enableIPv6 ? [6 as const] : [])];
}

const MAC = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/;

/** The VtepMAC of flannel's vxlan backend data, lower-cased, or undefined when unusable. */
export function vtepMac(data: unknown): string | undefined {
  if (typeof data !== 'object' || data === null) return undefined;
  for (const [k, v] of Object.entries(data)) {
    if (k.toLowerCase() === 'vtepmac' && typeof v === 'string' && MAC.test(v.toLowerCase())) return v.toLowerCase();
  }
  return undefined;
}

function route(dst: CIDR, gateway: string, linkIndex: number, onlink: boolean): Route {
  return {
    family: dst.ip.family,
    dst: formatCIDR(dst),
    gateway,
    linkIndex,
    table: RT_TABLE_MAIN,
    protocol: WEFT_RTPROT,
    scope: RT_SCOPE_UNIVERSE,
    type: RTN_UNICAST,
    metric: family6Metric(dst.ip.family),
    onlink,
  };
}

/**
 * --ip-blackhole-route's metric: the largest, so the bridge's own prefix route (metric 0, IPv6
 * 256) always wins while it exists and the blackhole only catches what it would have caught.
 */
export const BLACKHOLE_METRIC = 0xffffffff;

/**
 * --ip-blackhole-route: `blackhole <own subnet>` for each family of our lease, so traffic to
 * addresses of our subnet is dropped rather than sent along the default route when cni0 has no
 * address (no pod yet) or is down. flanneld adds it at metric 0, where it collides with cni0's
 * prefix route: added first, it shadows every local pod; added after, the kernel refuses it.
 */
export function ownBlackhole(own: Lease): KernelState {
  const routes: Route[] = [];
  for (const subnet of [own.subnet, own.ipv6Subnet]) {
    if (!subnet) continue;
    routes.push({
      family: subnet.ip.family, dst: formatCIDR(subnet), table: RT_TABLE_MAIN, protocol: WEFT_RTPROT,
      scope: RT_SCOPE_UNIVERSE, type: RTN_BLACKHOLE, metric: BLACKHOLE_METRIC, onlink: false,
    });
  }
  return { routes, neighs: [], fdb: [] };
}

/** The kernel gives IPv6 routes metric 1024 when none is set; say so, so the diff sees a match. */
function family6Metric(family: Family): number {
  return family === 6 ? 1024 : 0;
}

interface PerFamily {
  family: Family;
  subnet?: CIDR;
  publicIP?: IP;
  data?: unknown;
}

function families(l: Lease, enabled: readonly Family[]): PerFamily[] {
  const all: PerFamily[] = [
    { family: 4, subnet: l.subnet, publicIP: l.attrs.publicIP, data: l.attrs.backendData },
    { family: 6, subnet: l.ipv6Subnet, publicIP: l.attrs.publicIPv6, data: l.attrs.backendV6Data },
  ];
  return all.filter((f) => enabled.includes(f.family));
}

function overlapsOwn(own: Lease, f: PerFamily): boolean {
  const mine = f.family === 4 ? own.subnet : own.ipv6Subnet;
  return mine !== undefined && f.subnet !== undefined && overlaps(mine, f.subnet);
}

export function planVxlan(input: PlanInput): Plan {
  const state: KernelState = { routes: [], neighs: [], fdb: [] };
  const warnings: string[] = [];
  for (const lease of input.remotes) {
    const type = lease.attrs.backendType.toLowerCase();
    if (type !== 'vxlan') {
      warnings.push(`ignoring peer ${lease.peer}: backend type ${JSON.stringify(lease.attrs.backendType)}, this node runs vxlan`);
      continue;
    }
    for (const f of families(lease, input.enabled)) {
      const dev = input.vxlan?.[f.family];
      if (!dev || !f.subnet) continue;
      const what = `peer ${lease.peer} IPv${f.family}`;
      if (overlapsOwn(input.own, f)) {
        warnings.push(`ignoring ${what}: subnet ${formatCIDR(f.subnet)} overlaps this node's own`);
        continue;
      }
      if (!f.publicIP) {
        warnings.push(`ignoring ${what}: no public IPv${f.family} address`);
        continue;
      }
      if (input.directlyReachable?.(f.publicIP)) {
        state.routes.push(route(f.subnet, formatIP(f.publicIP), input.extIndex, false));
        continue;
      }
      const mac = vtepMac(f.data);
      if (!mac) {
        warnings.push(`ignoring ${what}: no usable VtepMAC in its backend data`);
        continue;
      }
      // One string for the route's gateway and the neighbour's address.
      const gateway = formatIP(f.subnet.ip);
      state.routes.push(route(f.subnet, gateway, dev.index, true));
      state.neighs.push({ family: f.family, linkIndex: dev.index, ip: gateway, mac, state: NUD_PERMANENT });
      state.fdb.push({ linkIndex: dev.index, mac, dst: formatIP(f.publicIP), state: NUD_PERMANENT, flags: NTF_SELF });
    }
  }
  return { state, warnings };
}

export function planHostGw(input: PlanInput): Plan {
  const state: KernelState = { routes: [], neighs: [], fdb: [] };
  const warnings: string[] = [];
  for (const lease of input.remotes) {
    if (lease.attrs.backendType.toLowerCase() !== 'host-gw') {
      warnings.push(`ignoring peer ${lease.peer}: backend type ${JSON.stringify(lease.attrs.backendType)}, this node runs host-gw`);
      continue;
    }
    for (const f of families(lease, input.enabled)) {
      if (!f.subnet) continue;
      if (overlapsOwn(input.own, f)) {
        warnings.push(`ignoring peer ${lease.peer} IPv${f.family}: subnet ${formatCIDR(f.subnet)} overlaps this node's own`);
        continue;
      }
      if (!f.publicIP) {
        warnings.push(`ignoring peer ${lease.peer} IPv${f.family}: no public IPv${f.family} address`);
        continue;
      }
      state.routes.push(route(f.subnet, formatIP(f.publicIP), input.extIndex, false));
    }
  }
  return { state, warnings };
}
