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
 * - A change costs what it touches: the renderer keeps each Service's part, the table's chains
 *   and this node's endpoints (the hairpin sets, counted per element) from one render to the
 *   next, and each ruleset names what changed since the one before (nft/ruleset.ts's delta), so
 *   the update from it compares those chains and sets, and sends the hairpin elements that moved.
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

/** The verdict maps Services add elements to (per family). */
const CLAIM_MAPS = ['services', 'nodeports', 'no-endpoints', 'no-endpoint-nodeports', 'firewall'] as const;
type ClaimMap = (typeof CLAIM_MAPS)[number];

/** What a render must build again: slot maps by `<family>-<bucket>`, the verdict maps; the hairpin elements gone and added. */
interface Dirty {
  buckets: Set<string>;
  claims: boolean;
  hairpin: Map<Family, { gone: Set<string>; added: Set<string> }>;
}

/**
 * One Service's part of the rules, kept from one render to the next and made again only when
 * its object, its slices (the reflectors hand over new objects for changed ones only) or the
 * node's context change: a render of 10,000 Services then formats only the changed ones.
 */
interface Part {
  service: Service;
  slices: readonly EndpointSlice[];
  /** The node and cluster networks it was made for. */
  context: string;
  /** The units (Service port and family) holding slot ranges. */
  units: string[];
  chains: [string, string[]][];
  sets: NftSet[];
  /** [map, family, key, element]: added unless an earlier Service claimed the key. */
  claims: [ClaimMap, Family, string, string][];
  hairpin: [Family, string][];
  /** [family, bucket, `slot : address`]. */
  slots: [Family, number, string][];
  health?: HealthCheck;
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
  /** Each Service's part of the last render, by `namespace/name`. */
  readonly #parts = new Map<string, Part>();
  /** The Services' keys in name order (sorted again only when Services come or go). */
  #order: string[] = [];
  /** The slot maps by `<family>-<bucket>`, and the Services with slots in each. */
  readonly #buckets = new Map<string, NftSet>();
  readonly #bucketMembers = new Map<string, Set<string>>();
  /**
   * The hairpin sets and the verdict maps of the last render by name: the same objects while no
   * change touches them, so that what is sent is worked out only for what changed.
   */
  readonly #shared = new Map<string, NftSet>();
  /** Every chain of the last render, in script order, and the Services' own sets (affinity). */
  readonly #chains = new Map<string, string[]>();
  readonly #partSets = new Map<string, NftSet>();
  #healthChecks: HealthCheck[] = [];
  /** Renders made, and the names of the chains and sets this one touches (none kept for the first). */
  #serial = 0;
  #touched: { chains: Set<string>; sets: Set<string> } | undefined;
  /** This node's endpoints by family (the hairpin sets' elements), with how many entries of the parts name each. */
  readonly #hairpins = new Map<Family, Map<string, number>>([[4, new Map()], [6, new Map()]]);

  render(model: ServiceModel, options: RenderOptions): RenderedServices {
    const slicesOf = new Map<string, EndpointSlice[]>();
    for (const slice of model.slices) {
      const key = `${slice.namespace}/${slice.service}`;
      const list = slicesOf.get(key);
      if (list) list.push(slice);
      else slicesOf.set(key, [slice]);
    }
    const context = `${options.node} ${options.clusterCIDRs.map(formatCIDR).join()}`;
    const services = new Map<string, Service>();
    for (const svc of model.services) services.set(`${svc.namespace}/${svc.name}`, svc);
    const first = this.#shared.size === 0;
    const hairpin = new Map(([4, 6] as const).map((f) => [f, { gone: new Set<string>(), added: new Set<string>() }]));
    const dirty: Dirty = { buckets: new Set(), claims: first, hairpin };
    const touched = first
      ? undefined
      : { chains: new Set<string>(), sets: new Set<string>(), elements: new Map<string, { gone: string[]; added: string[] }>() };
    this.#touched = touched;
    let reorder = first;
    let health = first;
    // Helpers first (in the first render's order, which the table keeps): the chains after them jump there.
    this.#putChain('mark-for-masquerade', [`meta mark set meta mark | ${hex(MASQUERADE_MARK)}`]);
    this.#putChain('reject-chain', ['meta l4proto tcp reject with tcp reset', 'reject']);
    for (const [key, part] of this.#parts) {
      if (services.has(key)) continue;
      this.#forget(key, part, dirty);
      this.#replace(part, undefined);
      this.#parts.delete(key);
      reorder = true;
      health ||= part.health !== undefined;
    }
    for (const [key, svc] of services) {
      const slices = slicesOf.get(key) ?? [];
      const part = this.#parts.get(key);
      if (part && part.service === svc && part.context === context && part.slices.length === slices.length
        && part.slices.every((x, i) => x === slices[i])) continue;
      const next = this.#renderService(svc, slices, options, context);
      health ||= part?.health !== undefined || next.health !== undefined;
      if (part) {
        for (const unit of part.units) if (!next.units.includes(unit)) this.#release(unit);
        this.#forget(key, part, dirty, next);
      } else {
        reorder = true;
        dirty.claims ||= next.claims.length > 0;
      }
      this.#countHairpin(next, 1, dirty);
      for (const [f, bucket] of next.slots) {
        const id = `${f}-${bucket}`;
        dirty.buckets.add(id);
        const members = this.#bucketMembers.get(id);
        if (members) members.add(key);
        else this.#bucketMembers.set(id, new Set([key]));
      }
      this.#replace(part, next);
      this.#parts.set(key, next);
    }
    if (reorder) this.#order = [...services.keys()].sort();
    let inOrder: Part[] | undefined;
    const parts = () => (inOrder ??= this.#order.map((key) => this.#parts.get(key)!));
    if (health) this.#healthChecks = parts().flatMap((p) => (p.health ? [p.health] : []));
    const sets: NftSet[] = [...this.#partSets.values()];
    for (const id of dirty.buckets) this.#rebuildBucket(id);
    if (dirty.claims) this.#rebuildClaims(parts());
    for (const [f, { gone, added }] of dirty.hairpin) {
      if (!first && gone.size === 0 && added.size === 0) continue;
      const name = `hairpin${f}`;
      this.#shared.set(name, { kind: 'set', name, type: `${addrType(f)} . ${addrType(f)}`, interval: false,
        elements: [...this.#hairpins.get(f)!.keys()] });
      touched?.sets.add(name);
      touched?.elements.set(name, { gone: [...gone], added: [...added] });
    }
    const bucketSets = [...this.#buckets.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const f of [4, 6] as const) {
      sets.push(...bucketSets.filter((b) => b.name.startsWith(`endpoints${f}-`)));
      for (const name of [`hairpin${f}`, ...CLAIM_MAPS.map((m) => `${m}${f}`)]) sets.push(this.#shared.get(name)!);
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
    this.#putChain('filter-prerouting', [
      'type filter hook prerouting priority dstnat - 10; policy accept;',
      'ct state new ip daddr . meta l4proto . th dport vmap @firewall4',
      'ct state new ip6 daddr . meta l4proto . th dport vmap @firewall6',
    ]);
    this.#putChain('nat-prerouting', ['type nat hook prerouting priority dstnat; policy accept;', ...dispatchRules]);
    this.#putChain('nat-output', ['type nat hook output priority -100; policy accept;', ...dispatchRules]);
    this.#putChain('nat-postrouting', [
      'type nat hook postrouting priority srcnat; policy accept;',
      'ct status dnat ip saddr . ip daddr @hairpin4 masquerade',
      'ct status dnat ip6 saddr . ip6 daddr @hairpin6 masquerade',
      `meta mark & ${hex(MASQUERADE_MARK)} == ${hex(MASQUERADE_MARK)} meta mark set meta mark & ${hex(~MASQUERADE_MARK >>> 0)} `
        + 'masquerade fully-random',
    ]);
    const rejectRules = lookups('no-endpoints', 'no-endpoint-nodeports').map((r) => `ct state new ${r}`);
    for (const hook of ['input', 'forward', 'output']) {
      this.#putChain(`filter-${hook}`, [`type filter hook ${hook} priority filter - 10; policy accept;`, ...rejectRules]);
    }
    this.#touched = undefined;
    const delta = { source: this, serial: ++this.#serial, chains: touched?.chains ?? new Set(), sets: touched?.sets ?? new Set(),
      ...(touched ? { elements: touched.elements } : {}) };
    return { ruleset: { sets, chains: new Map(this.#chains), delta }, healthChecks: this.#healthChecks };
  }

  /** Sets a chain of the table unless it already holds these rules. */
  #putChain(name: string, rules: string[]): void {
    const had = this.#chains.get(name);
    if (had && had.length === rules.length && had.every((l, i) => l === rules[i])) return;
    this.#chains.set(name, rules);
    this.#touched?.chains.add(name);
  }

  /**
   * Puts a Service's chains (in its order, after the helpers they jump to) and sets in place of
   * those of its last render, noting the names of those that differ.
   */
  #replace(old: Part | undefined, next: Part | undefined): void {
    const had = new Map(old?.chains);
    for (const [name] of had) this.#chains.delete(name);
    for (const [name, rules] of next?.chains ?? []) {
      const was = had.get(name);
      had.delete(name);
      this.#chains.set(name, rules);
      if (!was || was.length !== rules.length || !was.every((l, i) => l === rules[i])) this.#touched?.chains.add(name);
    }
    for (const [name] of had) this.#touched?.chains.add(name);
    for (const set of old?.sets ?? []) {
      this.#partSets.delete(set.name);
      this.#touched?.sets.add(set.name);
    }
    for (const set of next?.sets ?? []) {
      this.#partSets.set(set.name, set);
      this.#touched?.sets.add(set.name);
    }
  }

  /** Takes `part` (of Service `key`) out of the shared sets it fed, marking what to rebuild; `next` replaces it. */
  #forget(key: string, part: Part, dirty: Dirty, next?: Part): void {
    if (!next) for (const unit of part.units) this.#release(unit);
    for (const [f, bucket] of part.slots) {
      const id = `${f}-${bucket}`;
      dirty.buckets.add(id);
      this.#bucketMembers.get(id)?.delete(key);
    }
    const same = (a: readonly (readonly unknown[])[], b: readonly (readonly unknown[])[] | undefined) =>
      b !== undefined && a.length === b.length && a.every((x, i) => x.every((y, j) => y === b[i]![j]));
    dirty.claims ||= !same(part.claims, next?.claims);
    this.#countHairpin(part, -1, dirty);
  }

  /** Counts a part's hairpin entries in (1) or out (-1), noting the elements that come or go. */
  #countHairpin(part: Part, by: 1 | -1, dirty: Dirty): void {
    for (const [f, element] of part.hairpin) {
      const counts = this.#hairpins.get(f)!;
      const changes = dirty.hairpin.get(f)!;
      const n = (counts.get(element) ?? 0) + by;
      if (n === 0) {
        counts.delete(element);
        if (!changes.added.delete(element)) changes.gone.add(element);
      } else {
        counts.set(element, n);
        if (n === 1 && by === 1 && !changes.gone.delete(element)) changes.added.add(element);
      }
    }
  }

  /** The slot map `endpoints<f>-<bucket>` (id `<f>-<bucket>`) from its Services' parts, in name order. */
  #rebuildBucket(id: string): void {
    const [f, bucket] = id.split('-').map(Number) as [Family, number];
    const members = [...(this.#bucketMembers.get(id) ?? [])].sort();
    const elements: string[] = [];
    for (const key of members) {
      for (const [sf, sb, element] of this.#parts.get(key)!.slots) if (sf === f && sb === bucket) elements.push(element);
    }
    this.#touched?.sets.add(`endpoints${f}-${bucket}`);
    if (elements.length === 0) {
      this.#buckets.delete(id);
      this.#bucketMembers.delete(id);
      return;
    }
    // typeof, as numgen's value has no type of its own. The port is the rule's, not the map's:
    // nft 1.0.6 refuses elements added later to a map of `ip daddr . th dport` ("conflicting
    // protocols specified: tcp vs. th"), and a `tcp dport` one cannot serve UDP rules.
    this.#buckets.set(id, { kind: 'map', name: `endpoints${f}-${bucket}`, type: `numgen random mod 2 : ${l3(f)} daddr`, typeOf: true,
      interval: false, elements });
  }

  /** The verdict maps Services claim keys in: the first Service by name keeps a key (see {@link Part}). */
  #rebuildClaims(parts: readonly Part[]): void {
    for (const f of [4, 6] as const) {
      for (const map of CLAIM_MAPS) {
        const elements = new Map<string, string>();
        for (const part of parts) {
          for (const [m, cf, key, element] of part.claims) if (m === map && cf === f && !elements.has(key)) elements.set(key, element);
        }
        const type = map === 'nodeports' || map === 'no-endpoint-nodeports'
          ? 'inet_proto . inet_service : verdict'
          : `${addrType(f)} . inet_proto . inet_service : verdict`;
        this.#touched?.sets.add(`${map}${f}`);
        this.#shared.set(`${map}${f}`, { kind: 'map', name: `${map}${f}`, type, interval: false, elements: [...elements.values()] });
      }
    }
  }

  /** One Service's part of the rules, from its object and slices (see {@link Part}). */
  #renderService(s: Service, slices: readonly EndpointSlice[], options: RenderOptions, context: string): Part {
    const part: Part = { service: s, slices, context, units: [], chains: [], sets: [], claims: [], hairpin: [], slots: [] };
    const clusterCIDR = (f: Family) => options.clusterCIDRs.find((c) => c.ip.family === f);
    const claim = (map: ClaimMap, f: Family, key: string, verdict: string) => part.claims.push([map, f, key, `${key} : ${verdict}`]);
    let localForHealth = 0;
    for (const clusterIP of s.clusterIPs) {
      const f = clusterIP.family;
      const ext = [...s.externalIPs, ...s.loadBalancerIPs].filter((ip) => ip.family === f);
      for (const p of s.ports) {
        const unit = unitName(s, p, f);
        const proto = p.protocol.toLowerCase();
        const targets = targetsOf(p, f, slices, options.node);
        const all = usable(targets);
        const local = usable(targets.filter((t) => t.local));
        localForHealth = Math.max(localForHealth, local.length);
        for (const t of local) part.hairpin.push([f, `${formatIP(t.ip)} . ${formatIP(t.ip)}`]);
        const key = (ip: IP) => `${formatIP(ip)} . ${proto} . ${p.port}`;
        if (all.length === 0) {
          claim('no-endpoints', f, key(clusterIP), 'goto reject-chain');
          for (const ip of ext) claim('no-endpoints', f, key(ip), 'goto reject-chain');
          if (p.nodePort !== undefined) claim('no-endpoint-nodeports', f, `${proto} . ${p.nodePort}`, 'goto reject-chain');
          continue;
        }
        part.units.push(unit);
        const range = this.#range(unit);
        const base = Math.floor(range / BUCKETS) * SLOTS_PER_RANGE;
        const pick = this.#picker(unit, f, proto, range % BUCKETS, s.affinitySeconds, part);
        const toAll = pick(all, base, 'all');
        const toLocal = local.length === 0 ? 'drop' : s.internalLocal || s.externalLocal ? pick(local, base + LOCAL_SLOTS, 'local') : '';
        const cidr = clusterCIDR(f);
        // Cluster IP traffic.
        if (s.internalLocal && local.length === 0) claim('no-endpoints', f, key(clusterIP), 'drop');
        else {
          const internal: string[] = [];
          if (!s.internalLocal && cidr) internal.push(`${l3(f)} saddr != ${formatCIDR(cidr)} jump mark-for-masquerade`);
          internal.push(s.internalLocal ? toLocal : toAll);
          part.chains.push([`svc-${unit}`, internal]);
          claim('services', f, key(clusterIP), `goto svc-${unit}`);
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
        part.chains.push([`ext-${unit}`, external]);
        for (const ip of ext) claim('services', f, key(ip), `goto ext-${unit}`);
        if (hasNodePort) claim('nodeports', f, `${proto} . ${p.nodePort}`, `goto ext-${unit}`);
        const lbIPs = s.loadBalancerIPs.filter((ip) => ip.family === f);
        if (s.loadBalancerSourceRanges.length > 0 && lbIPs.length > 0) {
          const ranges = s.loadBalancerSourceRanges.filter((c) => c.ip.family === f).map(formatCIDR);
          part.chains.push([`fw-${unit}`, [ranges.length > 0 ? `${l3(f)} saddr != { ${ranges.join(', ')} } drop` : 'drop']]);
          for (const ip of lbIPs) claim('firewall', f, key(ip), `goto fw-${unit}`);
        }
      }
    }
    if (s.type === 'LoadBalancer' && s.externalLocal && s.healthCheckNodePort !== undefined) {
      part.health = { port: s.healthCheckNodePort, namespace: s.namespace, name: s.name, localEndpoints: localForHealth };
    }
    return part;
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
  #picker(unit: string, f: Family, proto: string, bucket: number, affinitySeconds: number | undefined,
    part: Part): (targets: Target[], base: number, which: string) => string {
    const made = new Set<string>();
    return (targets, base, which) => {
      const port = targets[0]!.port;
      if (affinitySeconds === undefined && targets.every((t) => t.port === port)) {
        if (targets.length === 1) return `meta l4proto ${proto} dnat ${l3(f)} to ${hostPort(targets[0]!)}`;
        targets.forEach((t, j) => part.slots.push([f, bucket, `${base + j} : ${formatIP(t.ip)}`]));
        const slot = `numgen random mod ${targets.length} offset ${base}`;
        return `meta l4proto ${proto} dnat ${l3(f)} to ${slot} map @endpoints${f}-${bucket} : ${port}`;
      }
      const chainOf = (t: Target) => `ep-${unit}/${endpointName(t)}`;
      const setOf = (t: Target) => `affinity-${unit}/${endpointName(t)}`;
      for (const t of targets) {
        if (made.has(chainOf(t))) continue;
        made.add(chainOf(t));
        const dnat = `meta l4proto ${proto} dnat ${l3(f)} to ${hostPort(t)}`;
        if (affinitySeconds === undefined) {
          part.chains.push([chainOf(t), [dnat]]);
          continue;
        }
        part.sets.push({ kind: 'set', name: setOf(t), type: addrType(f), interval: false, flags: ['dynamic', 'timeout'],
          timeoutSeconds: affinitySeconds, elements: [] });
        part.chains.push([chainOf(t), [`update @${setOf(t)} { ${l3(f)} saddr }`, dnat]]);
      }
      const choose = `${affinitySeconds === undefined ? 'pick' : 'aff'}-${which}-${unit}`;
      part.chains.push([choose, [
        ...(affinitySeconds === undefined ? [] : targets.map((t) => `${l3(f)} saddr @${setOf(t)} goto ${chainOf(t)}`)),
        `numgen random mod ${targets.length} vmap { ${targets.map((t, j) => `${j} : goto ${chainOf(t)}`).join(', ')} }`,
      ]]);
      return `goto ${choose}`;
    };
  }
}
