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
 * - A change costs what it touches: the renderer keeps each Service's part from one render to
 *   the next and is told which Services changed; the elements a part claims are counted in and
 *   out, and each ruleset names what changed since the one before (nft/ruleset.ts's delta), with
 *   exactly the elements that came and went.
 * - Two Services claiming one key of a verdict map (an address and port given twice): the first
 *   by name keeps it, with the endpoint elements that come with it; nothing fails.
 * - What goes where: each Service's part (the keys it claims, their endpoint elements, its
 *   chains) is made by service-part.ts, the base chains by base-chains.ts, from what
 *   render-types.ts describes; this file keeps them from one render to the next and declares the
 *   sets and maps.
 */
import { formatCIDR, formatIP } from '../ip/ip.ts';
import type { NftRuleset, NftSet } from '../nft/ruleset.ts';
import { baseChains, helperChains } from './base-chains.ts';
import { addrType, endpointKey, ENDPOINT_MAP, l3 } from './endpoints.ts';
import type { Via } from './endpoints.ts';
import type { EndpointSlice, Service } from './model.ts';
import type { HealthCheck, RenderOptions } from './render-types.ts';
import { CLAIM_MAPS, renderService } from './service-part.ts';
import type { Claim, Part, SharedChain } from './service-part.ts';

/** The Service proxy's table (family `inet`). */
export const NFT_SERVICES_TABLE = 'weft-services';

/** What a render reads: the Services and each Service's slices, by the Service's `namespace/name`. */
export interface ServiceIndex {
  services: ReadonlyMap<string, Service>;
  /** Slices of a Service (absent or not), in a stable order: the same array while they do not change. */
  slices: ReadonlyMap<string, readonly EndpointSlice[]>;
}

export interface RenderedServices {
  ruleset: NftRuleset;
  healthChecks: HealthCheck[];
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

/**
 * Renders Services for a node, keeping each Service's part and the elements they claim from
 * one render to the next (see the design notes): construct once, call {@link render} with each
 * new index and the Services that changed.
 */
export class ServiceRenderer {
  /** Each Service's part of the last render, by `namespace/name`. */
  readonly #parts = new Map<string, Part>();
  /** The node, its zone and addresses, and the cluster networks the parts were made for. */
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
    const context = [
      options.node, options.clusterCIDRs.map(formatCIDR).join(), options.zone ?? '', options.nodeIPs?.map(formatIP).join() ?? '',
    ].join(' ');
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
    for (const [name, rules] of helperChains()) this.#putChain(name, rules);
    const keys = changed === undefined || newContext ? new Set([...this.#parts.keys(), ...index.services.keys()]) : new Set(changed);
    for (const key of keys) {
      const svc = index.services.get(key);
      const slices = index.slices.get(key) ?? [];
      const part = this.#parts.get(key);
      if (!newContext && part && part.service === svc && part.slices.length === slices.length
        && part.slices.every((x, i) => x === slices[i])) continue;
      const next = svc ? renderService(svc, slices, options, (name, make) => this.#sharedChain(name, make)) : undefined;
      health ||= part?.health !== undefined || next?.health !== undefined;
      this.#swap(key, part, next);
    }
    if (health) {
      this.#healthChecks = [...this.#health].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, h]) => h);
    }
    // The lookups sit in the base chains, which come after the verdict maps they name.
    for (const [name, rules] of baseChains(options)) this.#putChain(name, rules);
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

  /** Adds an element (the first render, which sends everything, keeps no account of what came). */
  #addElement(c: Contents, element: string): void {
    c.elements.add(element);
    if (this.#touched && !c.gone.delete(element)) c.added.add(element);
  }

  #removeElement(c: Contents, element: string): void {
    c.elements.delete(element);
    if (this.#touched && !c.added.delete(element)) c.gone.add(element);
  }

  /**
   * A claim's elements (its key's, its endpoints') added to their sets or removed. Indexed loops,
   * as in the rest of a first render's path: under weftd's baseline compiler each step of an
   * iterator (for-of, spread, array destructuring) allocates, and a first render of 10,000
   * Services takes 100,000 such steps here.
   */
  #claimElements(claim: Claim, put: (c: Contents, element: string) => void): void {
    put(this.#contentsOf(claim.map), claim.element);
    for (let k = 0; k < claim.endpoints.length; k++) {
      const c = this.#contentsOf(claim.endpoints[k]![0]);
      const elements = claim.endpoints[k]![1];
      for (let j = 0; j < elements.length; j++) put(c, elements[j]!);
    }
  }

  /** Service `owner`'s claims go from `old` to `next`; the map elements follow the claims that hold their keys. */
  #putClaims(owner: string, old: readonly Claim[], next: readonly Claim[]): void {
    const holder = (claims: readonly Claim[] | undefined) => claims?.reduce((a, b) => (b.owner < a.owner ? b : a));
    const before = new Map<string, Claim | undefined>();
    const note = (c: Claim) => {
      if (!before.has(c.id)) before.set(c.id, holder(this.#claims.get(c.id)));
    };
    for (let k = 0; k < old.length; k++) note(old[k]!);
    for (let k = 0; k < next.length; k++) note(next[k]!);
    for (let k = 0; k < old.length; k++) {
      const id = old[k]!.id;
      // Gone already when the Service gave this key twice.
      const claims = this.#claims.get(id);
      if (!claims) continue;
      const left = claims.filter((c) => c.owner !== owner);
      if (left.length > 0) this.#claims.set(id, left);
      else this.#claims.delete(id);
    }
    for (let k = 0; k < next.length; k++) {
      const c = next[k]!;
      const claims = this.#claims.get(c.id);
      // A Service claiming a key twice (an address given twice): its first claim stands.
      if (!claims) this.#claims.set(c.id, [c]);
      else if (!claims.some((x) => x.owner === owner)) claims.push(c);
    }
    before.forEach((was, id) => {
      const now = holder(this.#claims.get(id));
      if (was === now) return;
      if (was) this.#claimElements(was, (c, element) => this.#removeElement(c, element));
      if (now) this.#claimElements(now, (c, element) => this.#addElement(c, element));
    });
  }

  /** Counts a part's entries of the counted sets in (1) or out (-1): an element while any part names it. */
  #count(part: Part, by: 1 | -1): void {
    for (let k = 0; k < part.counted.length; k++) {
      // Indexed, not destructured: destructuring an array takes an iterator's steps too.
      const set = part.counted[k]![0];
      const elements = part.counted[k]![1];
      let counts = this.#counted.get(set);
      if (!counts) this.#counted.set(set, (counts = new Map()));
      const c = this.#contentsOf(set);
      for (let j = 0; j < elements.length; j++) {
        const element = elements[j]!;
        const n = (counts.get(element) ?? 0) + by;
        if (n === 0) {
          counts.delete(element);
          this.#removeElement(c, element);
        } else {
          counts.set(element, n);
          if (n === 1 && by === 1) this.#addElement(c, element);
        }
      }
    }
  }

  /**
   * Puts a Service's own chains (in its order, after the helpers they jump to) and sets in place
   * of those of its last render, noting the names of those that differ.
   */
  #replace(old: Part | undefined, next: Part | undefined): void {
    // Most parts have none (only affinity and source ranges make them).
    if (!old?.chains.length && !next?.chains.length && !old?.sets.length && !next?.sets.length) return;
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
}
