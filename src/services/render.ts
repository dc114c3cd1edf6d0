/**
 * The Service proxy's rules: Services and EndpointSlices rendered into table `inet weft-services`
 * for one node. Pure but for the slots a {@link ServiceRenderer} keeps from one render to the next.
 *
 * DESIGN NOTES
 *
 * - Dispatch is one lookup whatever the number of Services: verdict maps keyed by
 *   `address . protocol . port` (cluster IPs, externalIPs, load balancer IPs) and by
 *   `protocol . port` for node ports (addresses the node owns, `fib daddr type local`, or those in
 *   --nodeport-addresses) send a new connection to its Service port's chain.
 * - Endpoints are chosen by `numgen random mod N offset K` looked up in a map of endpoint
 *   addresses by slot, the target port in the rule. Each Service port and family keeps a slot range (K) across renders,
 *   so an endpoint change rewrites a few map elements, and the chain only when N changes. The
 *   maps are split into {@link BUCKETS} by slot: the kernel checks every element of a map against
 *   every rule looking it up when either is added (measured here: one map for 10,000 Services of
 *   10 endpoints took 22 s to load, 64 maps 2 s), and a map or an anonymous set per Service costs
 *   a search through all of them by name or number (8 to 26 s).
 * - ClientIP affinity, as kube-proxy does it: a chain per endpoint that records the client in a
 *   set of its own (timeout = the Service's) and a chain per Service port checking those sets
 *   before choosing at random. Only Services asking for affinity pay for these chains.
 * - Endpoints used: the ready ones; when none is ready, the serving terminating ones (kube-proxy's
 *   rule, per set: all endpoints, and this node's for the Local policies).
 * - Masquerade where kube-proxy masquerades (mark 0x4000, masqueraded in postrouting): traffic to
 *   a cluster IP from outside the cluster network (the node itself included); every external
 *   connection (node port, externalIP, load balancer IP) of an externalTrafficPolicy Cluster
 *   Service; and hairpin, a pod reaching itself through its Service. externalTrafficPolicy Local
 *   keeps the client's address and uses this node's endpoints only, dropping when it has none;
 *   pods and the node itself still reach every endpoint, as with kube-proxy.
 *   internalTrafficPolicy Local uses this node's endpoints for cluster IP traffic, dropping when
 *   there are none.
 * - A Service port without endpoints rejects new connections (TCP reset, ICMP port unreachable)
 *   in filter chains at input, forward and output; loadBalancerSourceRanges drop other sources
 *   to the load balancer IPs before NAT.
 */
import { formatCIDR, formatIP } from '../ip/ip.ts';
import type { CIDR, Family, IP } from '../ip/ip.ts';
import type { NftRuleset, NftSet } from '../nft/ruleset.ts';
import type { Endpoint, EndpointSlice, Service, ServiceModel, ServicePort } from './model.ts';

/** The Service proxy's table (family `inet`). */
export const NFT_SERVICES_TABLE = 'weft-services';

/** Endpoint maps per family; see the design notes. */
export const BUCKETS = 64;

/** kube-proxy's masquerade mark, which weftd's --ip-masq rules already leave to it. */
export const MASQUERADE_MARK = 0x4000;

/** Slots of a Service port: all endpoints from its base, this node's from base + LOCAL_SLOTS. */
const LOCAL_SLOTS = 0x8000;
const SLOTS_PER_RANGE = 0x10000;

export interface RenderOptions {
  /** This node's name: endpoints on it are the Local policies' and hairpin's. */
  node: string;
  /** The cluster (pod) networks, at most one per family: sources outside are masqueraded. */
  clusterCIDRs: readonly CIDR[];
  /** --nodeport-addresses; undefined or empty: every address of the node. */
  nodePortCIDRs?: readonly CIDR[];
}

/** An eTP Local load balancer's health check node port and what it answers. */
export interface HealthCheck {
  port: number;
  namespace: string;
  name: string;
  /** This node's endpoints in use (200 when more than 0, 503 otherwise). */
  localEndpoints: number;
}

export interface RenderedServices {
  ruleset: NftRuleset;
  healthChecks: HealthCheck[];
}

/** An endpoint as a destination: its address, conditions and target port. */
interface Target extends Endpoint {
  port: number;
  local: boolean;
}

const l3 = (f: Family) => (f === 4 ? 'ip' : 'ip6');
const addrType = (f: Family) => (f === 4 ? 'ipv4_addr' : 'ipv6_addr');
const hostPort = (t: Target) => (t.ip.family === 4 ? `${formatIP(t.ip)}:${t.port}` : `[${formatIP(t.ip)}]:${t.port}`);
const hex = (n: number) => `0x${n.toString(16)}`;

/** The endpoints a set of candidates uses: the ready ones, else the serving terminating ones. */
export function usable<T extends Pick<Endpoint, 'ready' | 'serving' | 'terminating'>>(candidates: readonly T[]): T[] {
  const ready = candidates.filter((e) => e.ready);
  return ready.length > 0 ? ready : candidates.filter((e) => e.serving && e.terminating);
}

/** The targets of one Service port in one family, from the Service's slices, sorted and unique. */
function targetsOf(port: ServicePort, family: Family, slices: readonly EndpointSlice[], node: string): Target[] {
  const candidates = new Map<string, Endpoint & { port: number }>();
  for (const slice of slices) {
    if (slice.family !== family) continue;
    const p = slice.ports.find((sp) => sp.name === port.name && sp.protocol === port.protocol);
    if (!p) continue;
    for (const e of slice.endpoints) {
      const key = `${e.ip.value}.${p.port}`;
      const had = candidates.get(key);
      // During churn two slices can hold one endpoint: the readier entry wins.
      if (!had || (e.ready && !had.ready)) candidates.set(key, { ...e, port: p.port });
    }
  }
  const all = [...candidates.values()].sort((a, b) => (a.ip.value < b.ip.value ? -1 : a.ip.value > b.ip.value ? 1 : a.port - b.port));
  return all.map((e): Target => ({ ...e, local: e.nodeName === node }));
}

/** The chain names of one Service port in one family. */
function unitName(s: Service, p: ServicePort, f: Family): string {
  return `${s.namespace}/${s.name}/${p.name || p.port}/${p.protocol.toLowerCase()}/v${f}`;
}

/** A name fragment for an endpoint (nft names allow letters, digits, `_ - . /`). */
const endpointName = (t: Target) => `${formatIP(t.ip).replaceAll(':', '_')}_${t.port}`;

/**
 * Renders Services for a node, keeping each Service port's slot range from one render to the
 * next (see the design notes): construct once, call {@link render} with each new model.
 */
export class ServiceRenderer {
  /** Unit name → slot range index. */
  readonly #ranges = new Map<string, number>();
  readonly #freeRanges: number[] = [];
  #nextRange = 0;

  render(model: ServiceModel, options: RenderOptions): RenderedServices {
    const sets: NftSet[] = [];
    // Helpers first: the chains after them jump there.
    const chains = new Map<string, string[]>([
      ['mark-for-masquerade', [`meta mark set meta mark | ${hex(MASQUERADE_MARK)}`]],
      ['reject-chain', ['meta l4proto tcp reject with tcp reset', 'reject']],
    ]);
    // Verdict map elements by key: the first Service (in name order) claiming a destination keeps
    // it, so two claiming one (which the API server prevents) cannot fail the whole transaction.
    const perFamily = () => ({ 4: new Map<string, string>(), 6: new Map<string, string>() });
    const dispatch = perFamily();
    const nodePorts = perFamily();
    const noEndpoints = perFamily();
    const noEndpointNodePorts = perFamily();
    const firewall = perFamily();
    const claim = (m: Map<string, string>, key: string, verdict: string) => {
      if (!m.has(key)) m.set(key, `${key} : ${verdict}`);
    };
    const hairpin: Record<Family, Set<string>> = { 4: new Set(), 6: new Set() };
    const buckets: Record<Family, Map<number, string[]>> = { 4: new Map(), 6: new Map() };
    const healthChecks: HealthCheck[] = [];
    const clusterCIDR = (f: Family) => options.clusterCIDRs.find((c) => c.ip.family === f);
    const slicesOf = new Map<string, EndpointSlice[]>();
    for (const slice of model.slices) {
      const key = `${slice.namespace}/${slice.service}`;
      const list = slicesOf.get(key);
      if (list) list.push(slice);
      else slicesOf.set(key, [slice]);
    }
    const seen = new Set<string>();
    const services = [...model.services].sort((a, b) =>
      a.namespace < b.namespace ? -1 : a.namespace > b.namespace ? 1 : a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
    for (const s of services) {
      const slices = slicesOf.get(`${s.namespace}/${s.name}`) ?? [];
      let localForHealth = 0;
      for (const clusterIP of s.clusterIPs) {
        const f = clusterIP.family;
        const ext = [...s.externalIPs, ...s.loadBalancerIPs].filter((ip) => ip.family === f);
        for (const p of s.ports) {
          const unit = unitName(s, p, f);
          seen.add(unit);
          const proto = p.protocol.toLowerCase();
          const targets = targetsOf(p, f, slices, options.node);
          const all = usable(targets);
          const local = usable(targets.filter((t) => t.local));
          localForHealth = Math.max(localForHealth, local.length);
          for (const t of local) hairpin[f].add(`${formatIP(t.ip)} . ${formatIP(t.ip)}`);
          const key = (ip: IP) => `${formatIP(ip)} . ${proto} . ${p.port}`;
          if (all.length === 0) {
            claim(noEndpoints[f], key(clusterIP), 'goto reject-chain');
            for (const ip of ext) claim(noEndpoints[f], key(ip), 'goto reject-chain');
            if (p.nodePort !== undefined) claim(noEndpointNodePorts[f], `${proto} . ${p.nodePort}`, 'goto reject-chain');
            continue;
          }
          const range = this.#range(unit);
          const base = Math.floor(range / BUCKETS) * SLOTS_PER_RANGE;
          const bucket = range % BUCKETS;
          const elements = buckets[f].get(bucket) ?? [];
          buckets[f].set(bucket, elements);
          const pick = this.#picker(unit, f, proto, bucket, elements, s.affinitySeconds, chains, sets);
          const toAll = pick(all, base, 'all');
          const toLocal = local.length > 0 ? pick(local, base + LOCAL_SLOTS, 'local') : 'drop';
          const cidr = clusterCIDR(f);
          // Cluster IP traffic.
          if (s.internalLocal && local.length === 0) claim(noEndpoints[f], key(clusterIP), 'drop');
          else {
            const internal: string[] = [];
            if (!s.internalLocal && cidr) internal.push(`${l3(f)} saddr != ${formatCIDR(cidr)} jump mark-for-masquerade`);
            internal.push(s.internalLocal ? toLocal : toAll);
            chains.set(`svc-${unit}`, internal);
            claim(dispatch[f], key(clusterIP), `goto svc-${unit}`);
          }
          // External traffic: node ports, externalIPs, load balancer IPs.
          const hasNodePort = p.nodePort !== undefined && (s.type === 'NodePort' || s.type === 'LoadBalancer');
          if (!hasNodePort && ext.length === 0) continue;
          const external = s.externalLocal
            ? [
              ...(cidr ? [`${l3(f)} saddr ${formatCIDR(cidr)} ${toAll}`] : []),
              'fib saddr type local jump mark-for-masquerade',
              `fib saddr type local ${toAll}`,
              toLocal,
            ]
            : ['jump mark-for-masquerade', toAll];
          chains.set(`ext-${unit}`, external);
          for (const ip of ext) claim(dispatch[f], key(ip), `goto ext-${unit}`);
          if (hasNodePort) claim(nodePorts[f], `${proto} . ${p.nodePort}`, `goto ext-${unit}`);
          const lbIPs = s.loadBalancerIPs.filter((ip) => ip.family === f);
          if (s.loadBalancerSourceRanges.length > 0 && lbIPs.length > 0) {
            const ranges = s.loadBalancerSourceRanges.filter((c) => c.ip.family === f).map(formatCIDR);
            chains.set(`fw-${unit}`, [ranges.length > 0 ? `${l3(f)} saddr != { ${ranges.join(', ')} } drop` : 'drop']);
            for (const ip of lbIPs) claim(firewall[f], key(ip), `goto fw-${unit}`);
          }
        }
      }
      if (s.type === 'LoadBalancer' && s.externalLocal && s.healthCheckNodePort !== undefined) {
        healthChecks.push({ port: s.healthCheckNodePort, namespace: s.namespace, name: s.name, localEndpoints: localForHealth });
      }
    }
    for (const unit of [...this.#ranges.keys()]) if (!seen.has(unit)) this.#release(unit);
    for (const f of [4, 6] as const) {
      for (const [bucket, elements] of [...buckets[f]].filter(([, e]) => e.length > 0).sort((a, b) => a[0] - b[0])) {
        // typeof, as numgen's value has no type of its own. The port is the rule's, not the map's:
        // nft 1.0.6 refuses elements added later to a map of `ip daddr . th dport` ("conflicting
        // protocols specified: tcp vs. th"), and a `tcp dport` one cannot serve UDP rules.
        sets.push({ kind: 'map', name: `endpoints${f}-${bucket}`, type: `numgen random mod 2 : ${l3(f)} daddr`, typeOf: true,
          interval: false, elements });
      }
      sets.push(
        { kind: 'set', name: `hairpin${f}`, type: `${addrType(f)} . ${addrType(f)}`, interval: false,
          elements: [...hairpin[f]].sort() },
        { kind: 'map', name: `services${f}`, type: `${addrType(f)} . inet_proto . inet_service : verdict`, interval: false,
          elements: [...dispatch[f].values()] },
        { kind: 'map', name: `nodeports${f}`, type: 'inet_proto . inet_service : verdict', interval: false,
          elements: [...nodePorts[f].values()] },
        { kind: 'map', name: `no-endpoints${f}`, type: `${addrType(f)} . inet_proto . inet_service : verdict`, interval: false,
          elements: [...noEndpoints[f].values()] },
        { kind: 'map', name: `no-endpoint-nodeports${f}`, type: 'inet_proto . inet_service : verdict', interval: false,
          elements: [...noEndpointNodePorts[f].values()] },
        { kind: 'map', name: `firewall${f}`, type: `${addrType(f)} . inet_proto . inet_service : verdict`, interval: false,
          elements: [...firewall[f].values()] },
      );
    }
    const restrict = options.nodePortCIDRs && options.nodePortCIDRs.length > 0 ? options.nodePortCIDRs : undefined;
    const nodePortMatch = (f: Family): string | undefined => {
      const loopback = f === 4 ? 'ip daddr != 127.0.0.0/8' : 'ip6 daddr != ::1';
      if (!restrict) return `${loopback} fib daddr type local`;
      const cidrs = restrict.filter((c) => c.ip.family === f).map(formatCIDR);
      return cidrs.length > 0 ? `${l3(f)} daddr { ${cidrs.join(', ')} } fib daddr type local` : undefined;
    };
    const lookups = (maps: string, nodePortMaps: string) => (['ip', 'ip6'] as const).flatMap((l, i) => {
      const f: Family = i === 0 ? 4 : 6;
      const np = nodePortMatch(f);
      return [
        `${l} daddr . meta l4proto . th dport vmap @${maps}${f}`,
        ...(np ? [`${np} meta l4proto . th dport vmap @${nodePortMaps}${f}`] : []),
      ];
    });
    // The lookups sit in the base chains, which come after the verdict maps they name.
    const dispatchRules = lookups('services', 'nodeports');
    chains.set('filter-prerouting', [
      'type filter hook prerouting priority dstnat - 10; policy accept;',
      'ct state new ip daddr . meta l4proto . th dport vmap @firewall4',
      'ct state new ip6 daddr . meta l4proto . th dport vmap @firewall6',
    ]);
    chains.set('nat-prerouting', ['type nat hook prerouting priority dstnat; policy accept;', ...dispatchRules]);
    chains.set('nat-output', ['type nat hook output priority -100; policy accept;', ...dispatchRules]);
    chains.set('nat-postrouting', [
      'type nat hook postrouting priority srcnat; policy accept;',
      'ct status dnat ip saddr . ip daddr @hairpin4 masquerade',
      'ct status dnat ip6 saddr . ip6 daddr @hairpin6 masquerade',
      `meta mark & ${hex(MASQUERADE_MARK)} == ${hex(MASQUERADE_MARK)} meta mark set meta mark & ${hex(~MASQUERADE_MARK >>> 0)} `
        + 'masquerade fully-random',
    ]);
    const rejectRules = lookups('no-endpoints', 'no-endpoint-nodeports').map((r) => `ct state new ${r}`);
    for (const hook of ['input', 'forward', 'output']) {
      chains.set(`filter-${hook}`, [`type filter hook ${hook} priority filter - 10; policy accept;`, ...rejectRules]);
    }
    return { ruleset: { sets, chains }, healthChecks };
  }

  /** The slot range of a unit, kept while it exists. */
  #range(unit: string): number {
    let range = this.#ranges.get(unit);
    if (range === undefined) {
      range = this.#freeRanges.pop() ?? this.#nextRange++;
      this.#ranges.set(unit, range);
    }
    return range;
  }

  #release(unit: string): void {
    const range = this.#ranges.get(unit);
    if (range === undefined) return;
    this.#ranges.delete(unit);
    this.#freeRanges.push(range);
  }

  /**
   * How a unit's chains send a connection to one of `targets` (slots from `base`): a DNAT
   * statement, through the slot map when there are several (the slots it looks up added to
   * `elements`); with affinity, or targets of several ports (a named target port resolving to
   * different numbers), a `goto` to a chain choosing among a chain per endpoint (added, with
   * affinity's sets, to `chains` and `sets`).
   */
  #picker(unit: string, f: Family, proto: string, bucket: number, elements: string[], affinitySeconds: number | undefined,
    chains: Map<string, string[]>, sets: NftSet[]): (targets: Target[], base: number, which: string) => string {
    return (targets, base, which) => {
      const port = targets[0]!.port;
      if (affinitySeconds === undefined && targets.every((t) => t.port === port)) {
        if (targets.length === 1) return `meta l4proto ${proto} dnat ${l3(f)} to ${hostPort(targets[0]!)}`;
        targets.forEach((t, j) => elements.push(`${base + j} : ${formatIP(t.ip)}`));
        const slot = `numgen random mod ${targets.length} offset ${base}`;
        return `meta l4proto ${proto} dnat ${l3(f)} to ${slot} map @endpoints${f}-${bucket} : ${port}`;
      }
      const chainOf = (t: Target) => `ep-${unit}/${endpointName(t)}`;
      const setOf = (t: Target) => `affinity-${unit}/${endpointName(t)}`;
      for (const t of targets) {
        if (chains.has(chainOf(t))) continue;
        const dnat = `meta l4proto ${proto} dnat ${l3(f)} to ${hostPort(t)}`;
        if (affinitySeconds === undefined) {
          chains.set(chainOf(t), [dnat]);
          continue;
        }
        sets.push({ kind: 'set', name: setOf(t), type: addrType(f), interval: false, flags: ['dynamic', 'timeout'],
          timeoutSeconds: affinitySeconds, elements: [] });
        chains.set(chainOf(t), [`update @${setOf(t)} { ${l3(f)} saddr }`, dnat]);
      }
      const choose = `${affinitySeconds === undefined ? 'pick' : 'aff'}-${which}-${unit}`;
      chains.set(choose, [
        ...(affinitySeconds === undefined ? [] : targets.map((t) => `${l3(f)} saddr @${setOf(t)} goto ${chainOf(t)}`)),
        `numgen random mod ${targets.length} vmap { ${targets.map((t, j) => `${j} : goto ${chainOf(t)}`).join(', ')} }`,
      ]);
      return `goto ${choose}`;
    };
  }
}
