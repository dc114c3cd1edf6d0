/**
 * One Service's part of the Service proxy's rules (see render.ts): the verdict map keys it claims
 * with the endpoint elements that come with them, the shared chains it goes to, and its own chains
 * and sets (ClientIP affinity, loadBalancerSourceRanges). Pure.
 *
 * DESIGN NOTES
 *
 * - The chains a Service's keys go to are shared: an endpoint is chosen by `numgen random mod N` looked up, together
 *   with the packet's own `address . protocol . port` (or `protocol . port`), in a map of
 *   endpoints (`<address> . <port>`), so the chain depends on N and the policies only and every
 *   Service with N endpoints goes to the same one. The maps are per N too: the kernel checks each
 *   element of a map against each rule looking it up when either is added, and a map of one N is
 *   looked up by a rule or two. A Service costs map elements, not chains: 10,000 Services of 10
 *   endpoints load in a second, where a chain each took seconds more (measured with nft 1.0.6).
 * - ClientIP affinity, as kube-proxy does it: a chain per endpoint that records the client in a
 *   set of its own (timeout = the Service's) and a chain per Service port checking those sets
 *   before choosing at random. Only Services asking for affinity pay for chains of their own.
 * - Endpoints used: the ready ones; when none is ready, the serving terminating ones (kube-proxy's
 *   rule, per set: all endpoints, and this node's for the Local policies). Cluster-wide traffic of
 *   a Service asking for topology hints uses the ready endpoints hinted for this node's zone, when
 *   every ready endpoint has hints and one names the zone (kube-proxy v1.28's CategorizeEndpoints).
 * - Masquerade where kube-proxy masquerades (mark 0x4000, masqueraded in postrouting): traffic to
 *   a cluster IP from outside the cluster network (the node itself included); every external
 *   connection (node port, externalIP, load balancer IP) of an externalTrafficPolicy Cluster
 *   Service; and hairpin, a pod (an endpoint in the cluster network) reaching itself through its
 *   Service. externalTrafficPolicy Local keeps the client's address and uses this node's
 *   endpoints only, dropping when it has none; pods and the node itself still reach every
 *   endpoint, as with kube-proxy.
 *   internalTrafficPolicy Local uses this node's endpoints for cluster IP traffic, dropping when
 *   there are none.
 * - A Service port without endpoints rejects new connections (TCP reset, ICMP port unreachable)
 *   in filter chains at input, forward and output.
 * - loadBalancerSourceRanges, as kube-proxy's nftables mode does them: per family, new connections
 *   to the load balancer IPs from other sources are dropped before DNAT, arriving or made by the
 *   node itself; a family without ranges is not filtered; when a range holds the node's address,
 *   the load balancer IPs are allowed sources too (a node holding the VIP connects from it).
 */
import { contains, formatCIDR, formatIP } from '../ip/ip.ts';
import type { Family, IP } from '../ip/ip.ts';
import type { NftSet } from '../nft/ruleset.ts';
import {
  addrType, clusterTargets, endpointElement, endpointMap, endpointName, flat, hostPort, l3, pick, targetsOf, usable,
} from './endpoints.ts';
import type { Target, Via } from './endpoints.ts';
import type { EndpointSlice, Service, ServicePort } from './model.ts';
import type { HealthCheck, RenderOptions } from './render-types.ts';

/** The verdict maps Services add elements to (per family). */
export const CLAIM_MAPS = ['services', 'nodeports', 'no-endpoints', 'no-endpoint-nodeports', 'firewall'] as const;
type ClaimMap = (typeof CLAIM_MAPS)[number];

/** A key of a verdict map a Service claims, and the endpoint elements that come with it. */
export interface Claim {
  /** The claiming Service (`namespace/name`). */
  owner: string;
  /** `<map> <key>`. */
  id: string;
  /** The verdict map's name, e.g. `services4`. */
  map: string;
  /** `<key> : <verdict>`. */
  element: string;
  /** [endpoint map, its elements `<key> . <slot> : <address> . <port>`]. */
  endpoints: [string, string[]][];
}

/** A chain several Services go to, named after what it does. */
export interface SharedChain {
  name: string;
  rules: string[];
  /** The endpoint maps its rules look up. */
  maps: string[];
}

/** One Service's part of the rules, kept from one render to the next. */
export interface Part {
  service: Service;
  slices: readonly EndpointSlice[];
  /** Chains and sets of its own (affinity, loadBalancerSourceRanges). */
  chains: [string, string[]][];
  sets: NftSet[];
  shared: SharedChain[];
  claims: Claim[];
  /** Elements of the counted sets: this node's endpoints (hairpin4/6), the cluster IPs (cluster-ips4/6). */
  counted: [string, string[]][];
  health?: HealthCheck;
}

/** Gives the shared chain `name`, made by `make` unless the renderer already has it. */
export type SharedChains = (name: string, make: () => Omit<SharedChain, 'name'>) => SharedChain;

/** The chain names of one Service port in one family (affinity). */
function unitName(s: Service, p: ServicePort, f: Family): string {
  return `${s.namespace}/${s.name}/${p.name || p.port}/${p.protocol.toLowerCase()}/v${f}`;
}

/** One Service's part of the rules, from its object and slices (see {@link Part}). */
export function renderService(s: Service, slices: readonly EndpointSlice[], options: RenderOptions, sharedChain: SharedChains): Part {
  const part: Part = { service: s, slices, chains: [], sets: [], shared: [], claims: [], counted: [] };
  const owner = `${s.namespace}/${s.name}`;
  const clusterCIDR = (f: Family) => options.clusterCIDRs.find((c) => c.ip.family === f);
  // kube-proxy's count: this node's ready endpoints (address and port), terminating ones not;
  // only a health check node port answers it.
  const healthPort = s.type === 'LoadBalancer' && s.externalLocal ? s.healthCheckNodePort : undefined;
  const readyHere = healthPort !== undefined ? new Set<string>() : undefined;
  for (const clusterIP of s.clusterIPs) {
    const f = clusterIP.family;
    part.counted.push([`cluster-ips${f}`, [formatIP(clusterIP)]]);
    const ext = [...s.externalIPs, ...s.loadBalancerIPs].filter((ip) => ip.family === f);
    for (const p of s.ports) {
      const proto = p.protocol.toLowerCase();
      const targets = targetsOf(p, f, slices, options.node);
      const all = clusterTargets(targets, s.topologyAware ? options.zone : undefined);
      const local = usable(targets.filter((t) => t.local));
      if (readyHere) for (const t of targets) if (t.local && t.endpoint.ready) readyHere.add(hostPort(t));
      // Hairpin: only endpoints on this node's bridge, in the cluster network, can reach
      // themselves through it (a host-network endpoint's own connection stays on the node).
      const cidr = clusterCIDR(f);
      const bridged = cidr ? local.filter((t) => contains(cidr, t.ip)) : local;
      if (bridged.length > 0) {
        part.counted.push([`hairpin${f}`, bridged.map((t) => {
          const ip = formatIP(t.ip);
          return flat(ip, ' . ', ip);
        })]);
      }
      const addrKey = (ip: IP) => `${formatIP(ip)} . ${proto} . ${p.port}`;
      const claim = (map: ClaimMap, key: string, verdict: string, endpoints: [string, string[]][] = []) =>
        part.claims.push({ owner, id: flat(map, f, ' ', key), map: `${map}${f}`, element: flat(key, ' : ', verdict), endpoints });
      const hasNodePort = p.nodePort !== undefined && (s.type === 'NodePort' || s.type === 'LoadBalancer');
      const nodePortKey = `${proto} . ${p.nodePort}`;
      const lbIPs = s.loadBalancerIPs.filter((ip) => ip.family === f);
      const ranges = s.loadBalancerSourceRanges.filter((c) => c.ip.family === f);
      if (ranges.length > 0 && lbIPs.length > 0) {
        // kube-proxy's allowance: where the load balancer IP is a local address of the node, the
        // node's own connections come from it.
        const nodeIP = options.nodeIPs?.find((ip) => ip.family === f);
        const fromNode = nodeIP && ranges.some((c) => contains(c, nodeIP)) ? lbIPs.map(formatIP) : [];
        const unit = unitName(s, p, f);
        part.chains.push([`fw-${unit}`, [`${l3(f)} saddr != { ${[...ranges.map(formatCIDR), ...fromNode].join(', ')} } drop`]]);
        for (const ip of lbIPs) claim('firewall', addrKey(ip), `goto fw-${unit}`);
      }
      if (all.length === 0) {
        claim('no-endpoints', addrKey(clusterIP), 'goto reject-chain');
        for (const ip of ext) claim('no-endpoints', addrKey(ip), 'goto reject-chain');
        if (p.nodePort !== undefined) claim('no-endpoint-nodeports', nodePortKey, 'goto reject-chain');
        continue;
      }
      const masqueradeOffCluster = cidr ? [`${l3(f)} saddr != ${formatCIDR(cidr)} jump mark-for-masquerade`] : [];
      const externalRules = (toAll: string, toLocal: string) => (s.externalLocal
        ? [
          ...(cidr ? [`${l3(f)} saddr ${formatCIDR(cidr)} ${toAll}`] : []),
          'fib saddr type local jump mark-for-masquerade',
          `fib saddr type local ${toAll}`,
          toLocal,
        ]
        : ['jump mark-for-masquerade', toAll]);
      if (s.internalLocal && local.length === 0) claim('no-endpoints', addrKey(clusterIP), 'drop');
      if (s.affinitySeconds !== undefined) {
        // Chains of its own: the clients it saw are its own.
        const unit = unitName(s, p, f);
        const choose = affinity(unit, f, proto, s.affinitySeconds, part);
        const toAll = choose(all, 'all');
        const toLocal = local.length === 0 ? 'drop' : choose(local, 'local');
        if (!(s.internalLocal && local.length === 0)) {
          part.chains.push([`svc-${unit}`, [...masqueradeOffCluster, s.internalLocal ? toLocal : toAll]]);
          claim('services', addrKey(clusterIP), `goto svc-${unit}`);
        }
        if (!hasNodePort && ext.length === 0) continue;
        part.chains.push([`ext-${unit}`, externalRules(toAll, toLocal)]);
        for (const ip of ext) claim('services', addrKey(ip), `goto ext-${unit}`);
        if (hasNodePort) claim('nodeports', nodePortKey, `goto ext-${unit}`);
        continue;
      }
      // Shared chains, named after the counts and policies that make their rules; the endpoints
      // under the Service's own keys in the maps they look up.
      type Uses = { all: boolean; local: boolean };
      // Under one key, this node's endpoints are numbered after all endpoints (0 to N-1): both groups
      // may share a map (as many of each), and a slot given twice would fail the whole transaction.
      const localSlots = (uses: Uses) => (uses.all ? all.length : 0);
      const endpoints = (via: Via, uses: Uses, ip?: IP): [string, string[]][] => {
        const key = via === 'addr' ? `${formatIP(ip!)} . ${p.port}` : `${p.nodePort}`;
        const group = (targets: Target[], from: number): [string, string[]] =>
          [endpointMap(via, f, proto, targets.length), targets.map((t, j) => endpointElement(key, from + j, t))];
        return [...(uses.all ? [group(all, 0)] : []), ...(uses.local && local.length > 0 ? [group(local, localSlots(uses))] : [])];
      };
      /** A shared chain choosing among all endpoints, this node's, or both, by `via`'s key. */
      const share = (name: string, via: Via, uses: Uses, rules: (toAll: string, toLocal: string | undefined) => string[]) => {
        part.shared.push(sharedChain(name, () => {
          const toAll = pick(via, f, proto, all.length, 0);
          const toLocal = uses.local && local.length > 0 ? pick(via, f, proto, local.length, localSlots(uses)) : undefined;
          return { rules: rules(toAll.rule, toLocal?.rule), maps: [...(uses.all ? [toAll.map] : []), ...(toLocal ? [toLocal.map] : [])] };
        }));
        return `goto ${name}`;
      };
      if (!(s.internalLocal && local.length === 0)) {
        const uses = { all: !s.internalLocal, local: s.internalLocal };
        const verdict = s.internalLocal
          ? share(`cluster-local${f}-${proto}-${local.length}`, 'addr', uses, (_, toLocal) => [...masqueradeOffCluster, toLocal!])
          : share(`cluster${f}-${proto}-${all.length}`, 'addr', uses, (toAll) => [...masqueradeOffCluster, toAll]);
        claim('services', addrKey(clusterIP), verdict, endpoints('addr', uses, clusterIP));
      }
      const uses = { all: true, local: s.externalLocal };
      for (const via of ['addr', 'nodeport'] as const) {
        if (via === 'addr' ? ext.length === 0 : !hasNodePort) continue;
        const prefix = via === 'addr' ? 'ext' : 'nodeport';
        const verdict = s.externalLocal
          ? share(`${prefix}-local${f}-${proto}-${all.length}-${local.length}`, via, uses,
            (toAll, toLocal) => externalRules(toAll, toLocal ?? 'drop'))
          : share(`${prefix}${f}-${proto}-${all.length}`, via, uses, (toAll) => externalRules(toAll, ''));
        if (via === 'nodeport') claim('nodeports', nodePortKey, verdict, endpoints(via, uses));
        for (const ip of via === 'addr' ? ext : []) claim('services', addrKey(ip), verdict, endpoints(via, uses, ip));
      }
    }
  }
  if (healthPort !== undefined && readyHere) {
    part.health = { port: healthPort, namespace: s.namespace, name: s.name, localEndpoints: readyHere.size };
  }
  return part;
}

/**
 * How a unit's chains with ClientIP affinity send a connection to one of `targets`: a `goto`
 * to a chain checking the clients each endpoint saw, else choosing at random among a chain
 * per endpoint (added, with affinity's sets, to the part's chains and sets).
 */
function affinity(unit: string, f: Family, proto: string, seconds: number, part: Part): (targets: Target[], which: string) => string {
  const made = new Set<string>();
  return (targets, which) => {
    const chainOf = (t: Target) => `ep-${unit}/${endpointName(t)}`;
    const setOf = (t: Target) => `affinity-${unit}/${endpointName(t)}`;
    for (const t of targets) {
      if (made.has(chainOf(t))) continue;
      made.add(chainOf(t));
      part.sets.push({ kind: 'set', name: setOf(t), type: addrType(f), interval: false, flags: ['dynamic', 'timeout'],
        timeoutSeconds: seconds, elements: [] });
      part.chains.push([chainOf(t), [`update @${setOf(t)} { ${l3(f)} saddr }`, `meta l4proto ${proto} dnat ${l3(f)} to ${hostPort(t)}`]]);
    }
    const choose = `aff-${which}-${unit}`;
    part.chains.push([choose, [
      ...targets.map((t) => `${l3(f)} saddr @${setOf(t)} goto ${chainOf(t)}`),
      `numgen random mod ${targets.length} vmap { ${targets.map((t, j) => `${j} : goto ${chainOf(t)}`).join(', ')} }`,
    ]]);
    return `goto ${choose}`;
  };
}
