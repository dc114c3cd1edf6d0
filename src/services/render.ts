/**
 * The Service proxy's rules: Services and EndpointSlices rendered into table `inet weft-services`
 * for one node. Pure but for what a {@link ServiceRenderer} keeps from one render to the next.
 *
 * DESIGN NOTES
 *
 * - Dispatch is one lookup whatever the number of Services: verdict maps keyed by
 *   `address . protocol . port` (cluster IPs, externalIPs, load balancer IPs) and by
 *   `protocol . port` for node ports (addresses the node owns, `fib daddr type local`, or those in
 *   --nodeport-addresses) send a new connection to a chain choosing its endpoint.
 * - Those chains are shared: an endpoint is chosen by `numgen random mod N` looked up, together
 *   with the packet's own `address . protocol . port` (or `protocol . port`), in a map of
 *   endpoints (`<address> . <port>`), so the chain depends on N and the policies only and every
 *   Service with N endpoints goes to the same one. The maps are per N too: the kernel checks each
 *   element of a map against each rule looking it up when either is added, and a map of one N is
 *   looked up by a rule or two. A Service costs map elements, not chains: 10,000 Services of 10
 *   endpoints load in a second, where a chain each took seconds more (measured with nft 1.0.6).
 * - A change costs what it touches: the renderer keeps each Service's part from one render to
 *   the next and is told which Services changed; the elements a part claims are counted in and
 *   out, and each ruleset names what changed since the one before (nft/ruleset.ts's delta), with
 *   exactly the elements that came and went.
 * - Two Services claiming one key of a verdict map (an address and port given twice): the first
 *   by name keeps it, with the endpoint elements that come with it; nothing fails.
 * - ClientIP affinity, as kube-proxy does it: a chain per endpoint that records the client in a
 *   set of its own (timeout = the Service's) and a chain per Service port checking those sets
 *   before choosing at random. Only Services asking for affinity pay for chains of their own.
 * - Endpoints used: the ready ones; when none is ready, the serving terminating ones (kube-proxy's
 *   rule, per set: all endpoints, and this node's for the Local policies).
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
 *   in filter chains at input, forward and output; loadBalancerSourceRanges drop other sources
 *   to the load balancer IPs before NAT.
 * - A cluster IP on a port no Service defines rejects new connections as well, and the addresses
 *   of --service-cluster-ip-range no Service has drop them, as kube-proxy's nftables mode does
 *   (chain cluster-ips-check, after DNAT at forward and output): else they follow the default
 *   route off the node. Without the flag unallocated addresses are left alone.
 */
import { contains, formatCIDR, formatIP } from '../ip/ip.ts';
import type { CIDR, Family, IP } from '../ip/ip.ts';
import type { NftRuleset, NftSet } from '../nft/ruleset.ts';
import {
  addrType, endpointKey, endpointMap, endpointName, ENDPOINT_MAP, flat, hostPort, l3, pick, targetsOf, usable,
} from './endpoints.ts';
import type { Target, Via } from './endpoints.ts';
import type { EndpointSlice, Service, ServicePort } from './model.ts';

/** The Service proxy's table (family `inet`). */
export const NFT_SERVICES_TABLE = 'weft-services';

/** kube-proxy's masquerade mark, which weftd's --ip-masq rules already leave to it. */
export const MASQUERADE_MARK = 0x4000;

/** This node's endpoints of a key are numbered from here, all endpoints from 0. */
const LOCAL_SLOTS = 0x8000;

export interface RenderOptions {
  /** This node's name: endpoints on it are the Local policies' and hairpin's. */
  node: string;
  /** The cluster (pod) networks, at most one per family: sources outside are masqueraded. */
  clusterCIDRs: readonly CIDR[];
  /** --nodeport-addresses; undefined or empty: every address of the node. */
  nodePortCIDRs?: readonly CIDR[];
  /** --service-cluster-ip-range: new connections to its addresses no Service has are dropped. */
  serviceCIDRs?: readonly CIDR[];
}

/** What a render reads: the Services and each Service's slices, by the Service's `namespace/name`. */
export interface ServiceIndex {
  services: ReadonlyMap<string, Service>;
  /** Slices of a Service (absent or not), in a stable order: the same array while they do not change. */
  slices: ReadonlyMap<string, readonly EndpointSlice[]>;
}

/** An eTP Local load balancer's health check node port and what it answers. */
export interface HealthCheck {
  port: number;
  namespace: string;
  name: string;
  /**
   * This node's ready endpoints, each address and target port once, as kube-proxy counts them (200
   * when more than 0, 503 otherwise): serving terminating ones still take traffic but do not count,
   * so a load balancer drains the node during a rollout.
   */
  localEndpoints: number;
}

export interface RenderedServices {
  ruleset: NftRuleset;
  healthChecks: HealthCheck[];
}

/** The verdict maps Services add elements to (per family). */
const CLAIM_MAPS = ['services', 'nodeports', 'no-endpoints', 'no-endpoint-nodeports', 'firewall'] as const;
type ClaimMap = (typeof CLAIM_MAPS)[number];

/** A key of a verdict map a Service claims, and the endpoint elements that come with it. */
interface Claim {
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
interface SharedChain {
  name: string;
  rules: string[];
  /** The endpoint maps its rules look up. */
  maps: string[];
}

/** One Service's part of the rules, kept from one render to the next. */
interface Part {
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

/**
 * The elements of a set or map as they are now, and what came and went in this render. One
 * holder per key (see {@link Claim}), so an element leaves as it came, whole.
 */
interface Contents {
  elements: Set<string>;
  gone: Set<string>;
  added: Set<string>;
}

const hex = (n: number) => `0x${n.toString(16)}`;

/** The chain names of one Service port in one family (affinity). */
function unitName(s: Service, p: ServicePort, f: Family): string {
  return `${s.namespace}/${s.name}/${p.name || p.port}/${p.protocol.toLowerCase()}/v${f}`;
}

/**
 * Renders Services for a node, keeping each Service's part and the elements they claim from
 * one render to the next (see the design notes): construct once, call {@link render} with each
 * new index and the Services that changed.
 */
export class ServiceRenderer {
  /** Each Service's part of the last render, by `namespace/name`. */
  readonly #parts = new Map<string, Part>();
  /** The node and cluster networks the parts were made for. */
  #context: string | undefined;
  /** Claims of each key of each verdict map (`<map> <key>`): the first Service by name holds it. */
  readonly #claims = new Map<string, Claim[]>();
  /** Elements of the verdict maps, the endpoint maps and the hairpin sets, by name. */
  readonly #contents = new Map<string, Contents>();
  /** Shared chains as made for the current context, by name: every part going to one holds the same object. */
  readonly #chainCache = new Map<string, SharedChain>();
  /** Shared chains, with how many parts go to each. */
  readonly #shared = new Map<string, { chain: SharedChain; refs: number }>();
  /** The sets and maps of the last render by name: the same objects while nothing touches them. */
  readonly #sets = new Map<string, NftSet>();
  /** Every chain of the last render, in script order, and the Services' own sets (affinity). */
  readonly #chains = new Map<string, string[]>();
  readonly #partSets = new Map<string, NftSet>();
  readonly #health = new Map<string, HealthCheck>();
  #healthChecks: HealthCheck[] = [];
  /** Renders made, and the names of the chains and sets this one touches (none kept for the first). */
  #serial = 0;
  #touched: { chains: Set<string>; sets: Set<string> } | undefined;
  /** The counted sets' elements by set, with how many entries of the parts name each. */
  readonly #counted = new Map<string, Map<string, number>>();

  /**
   * The rules for `index`. `changed` names the Services (`namespace/name`) whose object or
   * slices may differ from the last render's; undefined: any may.
   */
  render(index: ServiceIndex, options: RenderOptions, changed?: Iterable<string>): RenderedServices {
    const context = `${options.node} ${options.clusterCIDRs.map(formatCIDR).join()}`;
    const first = this.#serial === 0;
    const newContext = context !== this.#context;
    this.#context = context;
    if (newContext) this.#chainCache.clear();
    this.#touched = first ? undefined : { chains: new Set(), sets: new Set() };
    for (const c of this.#contents.values()) {
      c.gone.clear();
      c.added.clear();
    }
    let health = first;
    // Helpers first (in the first render's order, which the table keeps): the chains after them jump there.
    this.#putChain('mark-for-masquerade', [`meta mark set meta mark | ${hex(MASQUERADE_MARK)}`]);
    this.#putChain('reject-chain', ['meta l4proto tcp reject with tcp reset', 'reject']);
    const keys = changed === undefined || newContext ? new Set([...this.#parts.keys(), ...index.services.keys()]) : new Set(changed);
    for (const key of keys) {
      const svc = index.services.get(key);
      const slices = index.slices.get(key) ?? [];
      const part = this.#parts.get(key);
      if (!newContext && part && part.service === svc && part.slices.length === slices.length
        && part.slices.every((x, i) => x === slices[i])) continue;
      const next = svc ? this.#renderService(svc, slices, options) : undefined;
      health ||= part?.health !== undefined || next?.health !== undefined;
      this.#swap(key, part, next);
    }
    if (health) {
      this.#healthChecks = [...this.#health].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, h]) => h);
    }
    this.#putBaseChains(options);
    return { ruleset: this.#ruleset(first), healthChecks: this.#healthChecks };
  }

  /** Puts `next` (undefined: none) in place of Service `key`'s `old` part. */
  #swap(key: string, old: Part | undefined, next: Part | undefined): void {
    if (next) this.#parts.set(key, next);
    else this.#parts.delete(key);
    for (const chain of next?.shared ?? []) this.#refShared(chain, 1);
    for (const chain of old?.shared ?? []) this.#refShared(chain, -1);
    this.#putClaims(key, old?.claims ?? [], next?.claims ?? []);
    if (next) this.#count(next, 1);
    if (old) this.#count(old, -1);
    if (next?.health) this.#health.set(key, next.health);
    else this.#health.delete(key);
    this.#replace(old, next);
  }

  /** Sets a chain of the table unless it already holds these rules. */
  #putChain(name: string, rules: string[]): void {
    const had = this.#chains.get(name);
    if (had && had.length === rules.length && had.every((l, i) => l === rules[i])) return;
    this.#chains.set(name, rules);
    this.#touched?.chains.add(name);
  }

  #dropChain(name: string): void {
    if (this.#chains.delete(name)) this.#touched?.chains.add(name);
  }

  /** The shared chain `name`, made by `make` unless the current context already has it. */
  #sharedChain(name: string, make: () => Omit<SharedChain, 'name'>): SharedChain {
    let chain = this.#chainCache.get(name);
    if (!chain) this.#chainCache.set(name, (chain = { name, ...make() }));
    return chain;
  }

  /** Counts a part going to (1) or leaving (-1) a shared chain, which exists while any goes there. */
  #refShared(chain: SharedChain, by: 1 | -1): void {
    const entry = this.#shared.get(chain.name);
    const refs = (entry?.refs ?? 0) + by;
    if (refs === 0) {
      this.#shared.delete(chain.name);
      this.#dropChain(chain.name);
    } else if (entry) {
      entry.refs = refs;
      // Rules made for another context (cluster networks) under the same name.
      if (by === 1 && entry.chain !== chain) {
        entry.chain = chain;
        this.#putChain(chain.name, chain.rules);
      }
    } else {
      this.#shared.set(chain.name, { chain, refs });
      this.#putChain(chain.name, chain.rules);
    }
  }

  /** The elements of set `name`, with what came and went in this render. */
  #contentsOf(name: string): Contents {
    let c = this.#contents.get(name);
    if (!c) {
      c = { elements: new Set(), gone: new Set(), added: new Set() };
      this.#contents.set(name, c);
    }
    return c;
  }

  /** Adds elements (the first render, which sends everything, keeps no account of what came). */
  #addElements(set: string, elements: Iterable<string>): void {
    const c = this.#contentsOf(set);
    for (const element of elements) {
      c.elements.add(element);
      if (this.#touched && !c.gone.delete(element)) c.added.add(element);
    }
  }

  #removeElements(set: string, elements: Iterable<string>): void {
    const c = this.#contentsOf(set);
    for (const element of elements) {
      c.elements.delete(element);
      if (this.#touched && !c.added.delete(element)) c.gone.add(element);
    }
  }

  /** Service `owner`'s claims go from `old` to `next`; the map elements follow the claims that hold their keys. */
  #putClaims(owner: string, old: readonly Claim[], next: readonly Claim[]): void {
    const holder = (claims: readonly Claim[] | undefined) => claims?.reduce((a, b) => (b.owner < a.owner ? b : a));
    const before = new Map<string, Claim | undefined>();
    for (const c of [...old, ...next]) if (!before.has(c.id)) before.set(c.id, holder(this.#claims.get(c.id)));
    for (const id of new Set(old.map((c) => c.id))) {
      const left = this.#claims.get(id)!.filter((c) => c.owner !== owner);
      if (left.length > 0) this.#claims.set(id, left);
      else this.#claims.delete(id);
    }
    for (const c of next) {
      const claims = this.#claims.get(c.id);
      // A Service claiming a key twice (an address given twice): its first claim stands.
      if (!claims) this.#claims.set(c.id, [c]);
      else if (!claims.some((x) => x.owner === owner)) claims.push(c);
    }
    for (const [id, was] of before) {
      const now = holder(this.#claims.get(id));
      if (was === now) continue;
      if (was) {
        this.#removeElements(was.map, [was.element]);
        for (const [map, elements] of was.endpoints) this.#removeElements(map, elements);
      }
      if (now) {
        this.#addElements(now.map, [now.element]);
        for (const [map, elements] of now.endpoints) this.#addElements(map, elements);
      }
    }
  }

  /** Counts a part's entries of the counted sets in (1) or out (-1): an element while any part names it. */
  #count(part: Part, by: 1 | -1): void {
    for (const [set, elements] of part.counted) for (const element of elements) {
      let counts = this.#counted.get(set);
      if (!counts) this.#counted.set(set, (counts = new Map()));
      const n = (counts.get(element) ?? 0) + by;
      if (n === 0) {
        counts.delete(element);
        this.#removeElements(set, [element]);
      } else {
        counts.set(element, n);
        if (n === 1 && by === 1) this.#addElements(set, [element]);
      }
    }
  }

  /**
   * Puts a Service's own chains (in its order, after the helpers they jump to) and sets in place
   * of those of its last render, noting the names of those that differ.
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

  /** The base chains: the verdict map lookups and the masquerade. */
  #putBaseChains(options: RenderOptions): void {
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
    // After DNAT: what still goes to a cluster IP is for a port no Service defines.
    this.#putChain('cluster-ips-check', [
      'ip daddr @cluster-ips4 goto reject-chain',
      'ip6 daddr @cluster-ips6 goto reject-chain',
      ...(options.serviceCIDRs ?? []).map((c) => `${l3(c.ip.family)} daddr ${formatCIDR(c)} drop`),
    ]);
    for (const hook of ['input', 'forward', 'output']) {
      this.#putChain(`filter-${hook}`, [`type filter hook ${hook} priority filter - 10; policy accept;`, ...rejectRules,
        ...(hook === 'input' ? [] : ['ct state new jump cluster-ips-check'])]);
    }
  }

  /** The set of `name` for this render: the last one's object unless its elements changed. */
  #set(name: string, declare: (elements: string[]) => NftSet): NftSet {
    const c = this.#contentsOf(name);
    const had = this.#sets.get(name);
    if (had && c.gone.size === 0 && c.added.size === 0) return had;
    const set = declare([...c.elements]);
    this.#sets.set(name, set);
    return set;
  }

  /** The ruleset of this render, with what it changed since the last one. */
  #ruleset(first: boolean): NftRuleset {
    const touched = this.#touched;
    const elements = new Map<string, { gone: string[]; added: string[] }>();
    const sets: NftSet[] = [...this.#partSets.values()];
    const note = (set: NftSet, existed: boolean) => {
      const c = this.#contents.get(set.name)!;
      if (first || (c.gone.size === 0 && c.added.size === 0)) return;
      touched?.sets.add(set.name);
      if (existed) elements.set(set.name, { gone: [...c.gone], added: [...c.added] });
    };
    // The endpoint maps the shared chains look up, in name order.
    const maps = new Set<string>();
    for (const { chain } of this.#shared.values()) for (const m of chain.maps) maps.add(m);
    for (const name of [...this.#sets.keys()]) {
      if (!ENDPOINT_MAP.test(name) || maps.has(name)) continue;
      this.#sets.delete(name);
      this.#contents.delete(name);
      touched?.sets.add(name);
    }
    for (const f of [4, 6] as const) {
      for (const name of [...maps].filter((m) => m.includes(`endpoints${f}-`)).sort()) {
        const existed = this.#sets.has(name);
        const via: Via = name.startsWith('nodeport-') ? 'nodeport' : 'addr';
        const proto = name.split('-').at(-2)!;
        // typeof, as numgen's value has no type of its own; mod 2 only says it is a number. One
        // protocol per map, named in key and value: nft 1.0.6 reads a map whose value holds
        // `th dport` back from the kernel with "conflicting protocols specified" (failing every
        // later rule looking it up, and its listing), and a value's `udp dport` makes the rules
        // looking it up match UDP only.
        const type = `${endpointKey(via, f, proto)} . numgen random mod 2 : ${l3(f)} daddr . ${proto} dport`;
        const set = this.#set(name, (e) => ({ kind: 'map', name, type,
          typeOf: true, interval: false, elements: e }));
        if (!existed) touched?.sets.add(name);
        note(set, existed);
        sets.push(set);
      }
      for (const [name, type] of [[`hairpin${f}`, `${addrType(f)} . ${addrType(f)}`], [`cluster-ips${f}`, addrType(f)]] as const) {
        const set = this.#set(name, (e) => ({ kind: 'set', name, type, interval: false, elements: e }));
        note(set, true);
        sets.push(set);
      }
      for (const m of CLAIM_MAPS) {
        const name = `${m}${f}`;
        const type = m === 'nodeports' || m === 'no-endpoint-nodeports'
          ? 'inet_proto . inet_service : verdict'
          : `${addrType(f)} . inet_proto . inet_service : verdict`;
        const map = this.#set(name, (e) => ({ kind: 'map', name, type, interval: false, elements: e }));
        note(map, true);
        sets.push(map);
      }
    }
    this.#touched = undefined;
    const delta = { source: this, serial: ++this.#serial, chains: touched?.chains ?? new Set<string>(), sets: touched?.sets ?? new Set(),
      ...(touched ? { elements } : {}) };
    return { sets, chains: new Map(this.#chains), delta };
  }

  /** One Service's part of the rules, from its object and slices (see {@link Part}). */
  #renderService(s: Service, slices: readonly EndpointSlice[], options: RenderOptions): Part {
    const part: Part = { service: s, slices, chains: [], sets: [], shared: [], claims: [], counted: [] };
    const owner = `${s.namespace}/${s.name}`;
    const clusterCIDR = (f: Family) => options.clusterCIDRs.find((c) => c.ip.family === f);
    // kube-proxy's count: this node's ready endpoints (address and port), terminating ones not.
    const readyHere = new Set<string>();
    for (const clusterIP of s.clusterIPs) {
      const f = clusterIP.family;
      part.counted.push([`cluster-ips${f}`, [formatIP(clusterIP)]]);
      const ext = [...s.externalIPs, ...s.loadBalancerIPs].filter((ip) => ip.family === f);
      for (const p of s.ports) {
        const proto = p.protocol.toLowerCase();
        const targets = targetsOf(p, f, slices, options.node);
        const all = usable(targets);
        const local = usable(targets.filter((t) => t.local));
        for (const t of targets) if (t.local && t.endpoint.ready) readyHere.add(hostPort(t));
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
        const lbIPs = s.loadBalancerIPs.filter((ip) => ip.family === f);
        if (s.loadBalancerSourceRanges.length > 0 && lbIPs.length > 0) {
          const unit = unitName(s, p, f);
          const ranges = s.loadBalancerSourceRanges.filter((c) => c.ip.family === f).map(formatCIDR);
          part.chains.push([`fw-${unit}`, [ranges.length > 0 ? `${l3(f)} saddr != { ${ranges.join(', ')} } drop` : 'drop']]);
          for (const ip of lbIPs) claim('firewall', addrKey(ip), `goto fw-${unit}`);
        }
        if (s.internalLocal && local.length === 0) claim('no-endpoints', addrKey(clusterIP), 'drop');
        if (s.affinitySeconds !== undefined) {
          // Chains of its own: the clients it saw are its own.
          const unit = unitName(s, p, f);
          const choose = this.#affinity(unit, f, proto, s.affinitySeconds, part);
          const toAll = choose(all, 'all');
          const toLocal = local.length === 0 ? 'drop' : choose(local, 'local');
          if (!(s.internalLocal && local.length === 0)) {
            part.chains.push([`svc-${unit}`, [...(s.internalLocal ? [] : masqueradeOffCluster), s.internalLocal ? toLocal : toAll]]);
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
        const destination = (t: Target) => [formatIP(t.ip), t.port].join(' . ');
        const allTo = all.map(destination);
        const localTo = local.map(destination);
        type Uses = { all: boolean; local: boolean };
        const endpoints = (via: Via, uses: Uses, ip?: IP): [string, string[]][] => {
          const key = via === 'addr' ? `${formatIP(ip!)} . ${p.port}` : `${p.nodePort}`;
          const group = (targets: string[], from: number): [string, string[]] =>
            [endpointMap(via, f, proto, targets.length), targets.map((to, j) => flat(key, ' . ', from + j, ' : ', to))];
          return [...(uses.all ? [group(allTo, 0)] : []), ...(uses.local && local.length > 0 ? [group(localTo, LOCAL_SLOTS)] : [])];
        };
        /** A shared chain choosing among all endpoints, this node's, or both, by `via`'s key. */
        const share = (name: string, via: Via, uses: Uses, rules: (toAll: string, toLocal: string | undefined) => string[]) => {
          part.shared.push(this.#sharedChain(name, () => {
            const toAll = pick(via, f, proto, all.length, 0);
            const toLocal = uses.local && local.length > 0 ? pick(via, f, proto, local.length, LOCAL_SLOTS) : undefined;
            return { rules: rules(toAll.rule, toLocal?.rule), maps: [...(uses.all ? [toAll.map] : []), ...(toLocal ? [toLocal.map] : [])] };
          }));
          return `goto ${name}`;
        };
        if (!(s.internalLocal && local.length === 0)) {
          const uses = { all: !s.internalLocal, local: s.internalLocal };
          const verdict = s.internalLocal
            ? share(`cluster-local${f}-${proto}-${local.length}`, 'addr', uses, (_, toLocal) => [toLocal!])
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
    if (s.type === 'LoadBalancer' && s.externalLocal && s.healthCheckNodePort !== undefined) {
      part.health = { port: s.healthCheckNodePort, namespace: s.namespace, name: s.name, localEndpoints: readyHere.size };
    }
    return part;
  }

  /**
   * How a unit's chains with ClientIP affinity send a connection to one of `targets`: a `goto`
   * to a chain checking the clients each endpoint saw, else choosing at random among a chain
   * per endpoint (added, with affinity's sets, to the part's chains and sets).
   */
  #affinity(unit: string, f: Family, proto: string, seconds: number, part: Part): (targets: Target[], which: string) => string {
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
}
