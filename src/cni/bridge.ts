/**
 * What weftd's CNI server does in place of the bridge + host-local delegates, decided from the
 * same delegate config the TypeScript plugin saves and runs (reference §9). Pure.
 *
 * The server serves the configs flannel's manifest renders (a bridge, host-local ranges from
 * subnet.env, routes with a destination and optionally a gateway, hairpin, default gateway,
 * ipMasq off because weftd masquerades). Anything else (another delegate type or IPAM, ipMasq
 * on, options the bridge plugin has and Weft does not) is answered "not here", and the plugin
 * runs the TypeScript fallback with the real delegates, so no config is ever half-honoured.
 */
import { formatIP, gatewayOf, lastIP, nextIP, parseCIDR, tryParseIP } from '../ip/ip.ts';
import type { CIDR, IP } from '../ip/ip.ts';
import { isJson } from '../json.ts';
import type { Json } from '../json.ts';

/** host-local's default store: one directory per network. */
export const HOST_LOCAL_STORE = '/var/lib/cni/networks';

/** The bridge plugin's default bridge name. */
export const DEFAULT_BRIDGE = 'cni0';

/** A route of the ipam config: a destination and, when given, a gateway. */
export interface PlanRoute {
  dst: string;
  gw?: string;
}

/** What to wire for one container; see {@link planBridge}. */
export interface BridgePlan {
  /** The network's name: host-local's directory under `storeDir`. */
  network: string;
  storeDir: string;
  bridge: string;
  mtu: number | undefined;
  hairpin: boolean;
  isGateway: boolean;
  isDefaultGateway: boolean;
  /** One subnet per range set, in order (range set i is host-local's `last_reserved_ip.i`). */
  ranges: CIDR[];
  routes: PlanRoute[];
}

const DELEGATE_KEYS = new Set([
  'cniVersion', 'name', 'type', 'bridge', 'isGateway', 'isDefaultGateway', 'hairpinMode', 'ipMasq', 'mtu', 'ipam', 'runtimeConfig',
]);
const IPAM_KEYS = new Set(['type', 'ranges', 'routes', 'dataDir']);

function optionalBool(d: Json, key: string): boolean | string {
  const v = d[key];
  if (v === undefined || v === null) return false;
  return typeof v === 'boolean' ? v : `${key} is not a boolean`;
}

/**
 * The plan for a delegate config, or the reason the server leaves it to the real delegates.
 * `delegate` is the parsed config the TypeScript plugin would run (and saves in dataDir).
 */
export function planBridge(delegate: unknown): BridgePlan | string {
  if (!isJson(delegate)) return 'the delegate config is not an object';
  if (delegate['type'] !== 'bridge') return `delegate type ${JSON.stringify(delegate['type'])} is not bridge`;
  const extra = Object.keys(delegate).filter((k) => !DELEGATE_KEYS.has(k));
  if (extra.length > 0) return `bridge options ${extra.join(', ')} are left to the bridge plugin`;
  if (delegate['ipMasq'] === true) return 'ipMasq is on (weftd masquerades with --ip-masq; the bridge plugin does it otherwise)';
  const name = delegate['name'];
  if (typeof name !== 'string' || name === '' || name.includes('/') || name === '.' || name === '..') {
    return 'the network name is not a directory name';
  }
  const bridge = delegate['bridge'] ?? DEFAULT_BRIDGE;
  if (typeof bridge !== 'string' || bridge === '' || bridge.length > 15 || /[/:\s]/.test(bridge)) return 'bridge is not an interface name';
  const mtu = delegate['mtu'];
  if (mtu !== undefined && mtu !== null && (typeof mtu !== 'number' || !Number.isInteger(mtu) || mtu < 68 || mtu > 65535)) {
    return 'mtu is not an MTU';
  }
  const flags = ['hairpinMode', 'isGateway', 'isDefaultGateway'].map((k) => optionalBool(delegate, k));
  const bad = flags.find((f) => typeof f === 'string');
  if (typeof bad === 'string') return bad;
  const [hairpin = false, isGateway = false, isDefaultGateway = false] = flags as boolean[];
  const ipam = delegate['ipam'];
  if (!isJson(ipam) || ipam['type'] !== 'host-local') return 'ipam is not host-local';
  const ipamExtra = Object.keys(ipam).filter((k) => !IPAM_KEYS.has(k));
  if (ipamExtra.length > 0) return `ipam options ${ipamExtra.join(', ')} are left to host-local`;
  const storeDir = ipam['dataDir'] ?? HOST_LOCAL_STORE;
  if (typeof storeDir !== 'string' || !storeDir.startsWith('/')) return 'ipam.dataDir is not an absolute path';
  const ranges: CIDR[] = [];
  const sets = ipam['ranges'];
  if (!Array.isArray(sets) || sets.length === 0) return 'ipam.ranges is not a list of range sets';
  for (const set of sets) {
    if (
      !Array.isArray(set) ||
      set.length !== 1 ||
      !isJson(set[0]) ||
      Object.keys(set[0]).join() !== 'subnet' ||
      typeof set[0]['subnet'] !== 'string'
    ) {
      return 'each ipam range set must be one range with only a subnet';
    }
    let subnet: CIDR;
    try {
      subnet = parseCIDR(set[0]['subnet'], 'ipam.ranges');
    } catch {
      return `ipam subnet ${JSON.stringify(set[0]['subnet'])} is not a CIDR`;
    }
    if (subnet.prefix > (subnet.ip.family === 4 ? 30 : 126)) return `ipam subnet ${set[0]['subnet']} is too small`;
    ranges.push(subnet);
  }
  if (new Set(ranges.map((r) => r.ip.family)).size !== ranges.length) return 'two range sets of one family';
  const routes: PlanRoute[] = [];
  const given = ipam['routes'] ?? [];
  if (!Array.isArray(given)) return 'ipam.routes is not a list';
  for (const r of given) {
    if (!isJson(r) || typeof r['dst'] !== 'string' || Object.keys(r).some((k) => k !== 'dst' && k !== 'gw')) {
      return 'ipam routes other than {dst, gw} are left to host-local';
    }
    if (r['gw'] !== undefined && (typeof r['gw'] !== 'string' || tryParseIP(r['gw']) === undefined)) {
      return 'an ipam route gateway is not an address';
    }
    routes.push(r['gw'] === undefined ? { dst: r['dst'] } : { dst: r['dst'], gw: r['gw'] as string });
  }
  return {
    network: name, storeDir, bridge, mtu: typeof mtu === 'number' ? mtu : undefined,
    hairpin, isGateway: isGateway || isDefaultGateway, isDefaultGateway, ranges, routes,
  };
}

/** host-local's range of a subnet: first usable (network + 1) to last (IPv4: before broadcast). */
export function rangeOf(subnet: CIDR): { start: IP; end: IP } {
  const last = lastIP(subnet);
  return { start: nextIP(subnet.ip)!, end: subnet.ip.family === 4 ? { family: 4, value: last.value - 1n } : last };
}

/**
 * The addresses host-local tries for `subnet`, in its order: after `lastReserved` (when in the
 * range) round to it, else from the range's start; the gateway (network + 1) skipped.
 */
export function* hostLocalOrder(subnet: CIDR, lastReserved: IP | undefined): Generator<IP> {
  const { start, end } = rangeOf(subnet);
  const gateway = gatewayOf(subnet);
  const inRange =
    lastReserved !== undefined &&
    lastReserved.family === start.family &&
    lastReserved.value >= start.value &&
    lastReserved.value <= end.value;
  const count = end.value - start.value + 1n;
  const first = inRange ? lastReserved.value + 1n : start.value;
  for (let i = 0n; i < count; i++) {
    let v = first + i;
    if (v > end.value) v -= count;
    if (v !== gateway.value) yield { family: start.family, value: v };
  }
}

/** One address handed to a container. */
export interface Allocation {
  address: IP;
  subnet: CIDR;
}

/** The interfaces the server made, for the result. */
export interface Wired {
  bridgeMac: string;
  hostVeth: string;
  hostVethMac: string;
  podMac: string;
  /** Resolves once the pod's addresses are announced, with why they could not be when they could not. */
  announced?: Promise<Error | undefined>;
}

/** The routes installed in the pod: the ipam routes, then a default per family when asked. */
export function podRoutes(
  plan: BridgePlan,
  allocations: readonly Allocation[],
): { dst: string; gw: string | undefined; resultGw: string | undefined }[] {
  const gatewayFor = (family: 4 | 6): string | undefined => {
    const a = allocations.find((x) => x.address.family === family);
    return a ? formatIP(gatewayOf(a.subnet)) : undefined;
  };
  const out = plan.routes.map((r) => ({ dst: r.dst, gw: r.gw ?? gatewayFor(r.dst.includes(':') ? 6 : 4), resultGw: r.gw }));
  if (plan.isDefaultGateway) {
    for (const a of allocations) {
      const gw = formatIP(gatewayOf(a.subnet));
      out.push({ dst: a.address.family === 4 ? '0.0.0.0/0' : '::/0', gw, resultGw: gw });
    }
  }
  return out;
}

/**
 * The ADD result in the 1.x shape, as the bridge plugin prints it: bridge, host veth and the
 * pod's interface (with its sandbox), every address on the pod's interface (index 2) with its
 * gateway, the routes, an empty dns.
 */
export function bridgeResult(plan: BridgePlan, allocations: readonly Allocation[], wired: Wired, ifname: string, netns: string): Json {
  return {
    cniVersion: '1.0.0',
    interfaces: [
      { name: plan.bridge, mac: wired.bridgeMac },
      { name: wired.hostVeth, mac: wired.hostVethMac },
      { name: ifname, mac: wired.podMac, sandbox: netns },
    ],
    ips: allocations.map((a) => ({
      interface: 2,
      address: `${formatIP(a.address)}/${a.subnet.prefix}`,
      gateway: formatIP(gatewayOf(a.subnet)),
    })),
    routes: podRoutes(plan, allocations).map((r) => (r.resultGw === undefined ? { dst: r.dst } : { dst: r.dst, gw: r.resultGw })),
    dns: {},
  };
}
