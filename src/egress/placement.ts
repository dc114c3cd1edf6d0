/**
 * Where each egress policy leaves the cluster: its gateway node and its EIP. Pure: the
 * controller gives the gateways, policies, nodes, each policy's last placement (from its
 * status), the time and a random source, and writes back what this returns.
 *
 * DESIGN NOTES
 * - An EIP lives on one node's interface, so every policy sharing an EIP shares its node: the
 *   unit moved between nodes is the EIP with all its policies. A policy with source NodeIP
 *   needs only a node.
 * - A gateway node serves while it matches the gateway's nodeSelector, its Node is Ready and its
 *   weftd renewed its liveness within `livenessTimeoutMs`; when it stops, its EIPs move to
 *   other nodes (failover) and keep their addresses, so outside firewalls need no change.
 * - Placements are sticky: a policy keeps its node and EIP while they stay valid, so a new policy,
 *   a changed mode or another node joining never moves working traffic. The modes decide new
 *   placements and failovers only.
 * - Node selection (counting policies per node): Spread takes the node with the fewest, Pack
 *   the one with the most (the same node while it serves), Limit at most `limit` per node and
 *   the fewest among those below it. Ties go to the node whose name sorts first.
 * - EIP allocation: PreferUnused takes the first free EIP of the pool, and when none is free,
 *   shares the least used; Random takes any EIP that can take the policy, uniformly (from the
 *   injected random source); Limit allows at most `limit` policies per EIP and fills the most
 *   used one below it before opening the next, so few EIPs serve many policies.
 * - An EIP no policy uses is free: it appears nowhere in the result (reclaim).
 * - Policies asking for given EIPs are placed before those that let the pool choose, so an
 *   allocation never takes an EIP a policy asked for when another would do.
 * - A floating IP's policy (`exclusive`, inbound.ts) takes an EIP no one else uses and keeps it
 *   alone; whoever else asks for it fails with EIPTaken, and allocation passes it over.
 * - Nothing here throws on bad input: a problem is a policy's or gateway's reason and message.
 * - When most gateway heartbeats go quiet at once, the API server or etcd stalled rather than the
 *   nodes: disruption.ts keeps a gateway's placement instead of withdrawing it.
 */
import type { Gateway, InvalidGateway, InvalidPolicy, Policy } from './api.ts';
import { matchesLabels } from '../k8s/label-selector.ts';
import { parsePool } from './pool.ts';
import type { EipPool } from './pool.ts';

/** A Node as placement sees it. */
export interface GatewayNode {
  name: string;
  labels: Readonly<Record<string, string>>;
  /** The Node's Ready condition is True. */
  ready: boolean;
  /** When the node's weftd last renewed its liveness, on the clock of `now`; undefined: never. */
  renewedAt: number | undefined;
}

/** Where a policy was placed: its node, and its EIP's addresses with source EIP. */
export interface Placement {
  node: string;
  ipv4?: string;
  ipv6?: string;
}

export interface PlacementInput {
  gateways: readonly (Gateway | InvalidGateway)[];
  policies: readonly (Policy | InvalidPolicy)[];
  nodes: readonly GatewayNode[];
  /** Each policy's placement as its status last recorded it, by policy id. */
  previous: ReadonlyMap<string, Placement>;
  /** The time, in ms, on the clock of GatewayNode.renewedAt. */
  now: number;
  /** A node whose weftd has not renewed for longer than this is no gateway. */
  livenessTimeoutMs: number;
  /** Uniform in [0, 1), for EIP allocation mode Random. */
  random: () => number;
}

/** Why a policy is or is not placed (its status condition Ready's reason). */
export type PolicyReason = 'Placed' | 'InvalidPolicy' | 'GatewayNotFound' | 'GatewayInvalid' | 'NoReadyGatewayNode' | 'GatewayFull'
  | 'EIPNotInPool' | 'EIPUnavailable' | 'EIPTaken' | 'EIPPoolExhausted';

export type GatewayReason = 'Ready' | 'InvalidGateway' | 'NoReadyNodes' | 'PoolShrunk';

export interface PolicyStatus {
  id: string;
  gateway: string;
  ready: boolean;
  reason: PolicyReason;
  message: string;
  /** Set when placed. */
  placement?: Placement;
}

export interface GatewayNodeStatus {
  name: string;
  /** Serving as a gateway; `reason` says why not. */
  ready: boolean;
  reason?: string;
  /** Policies placed on the node, by id. */
  policies: string[];
  /** EIPs on the node and the policies using each. */
  eips: { ipv4?: string; ipv6?: string; policies: string[] }[];
}

export interface GatewayStatus {
  name: string;
  ready: boolean;
  reason: GatewayReason;
  message: string;
  /** Every node the selector matches, by name. */
  nodes: GatewayNodeStatus[];
}

export interface PlacementResult {
  /** By name. */
  gateways: GatewayStatus[];
  /** By id. */
  policies: PolicyStatus[];
}

const byKey = <T>(key: (t: T) => string) => (a: T, b: T) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0);

const failed = (id: string, gateway: string, reason: PolicyReason, message: string): PolicyStatus => ({
  id,
  gateway,
  ready: false,
  reason,
  message,
});

/** How many of `statuses` are not placed, by reason (none for a reason none has). */
export function unplacedByReason(statuses: readonly PolicyStatus[]): Map<PolicyReason, number> {
  const out = new Map<PolicyReason, number>();
  for (const s of statuses) if (!s.ready) out.set(s.reason, (out.get(s.reason) ?? 0) + 1);
  return out;
}

/** Places every policy on its gateway; see the design notes above. */
export function place(input: PlacementInput): PlacementResult {
  const gateways = new Map(input.gateways.map((g) => [g.name, g]));
  const statuses: PolicyStatus[] = [];
  const perGateway = new Map<string, Policy[]>();
  for (const p of input.policies) {
    if ('invalid' in p) {
      statuses.push(failed(p.id, '', 'InvalidPolicy', p.invalid));
      continue;
    }
    const g = gateways.get(p.gateway);
    if (!g) statuses.push(failed(p.id, p.gateway, 'GatewayNotFound', `EgressGateway "${p.gateway}" not found`));
    else if ('invalid' in g)
      statuses.push(failed(p.id, p.gateway, 'GatewayInvalid', `EgressGateway "${p.gateway}" is invalid: ${g.invalid}`));
    else perGateway.set(p.gateway, [...(perGateway.get(p.gateway) ?? []), p]);
  }
  const out: GatewayStatus[] = [];
  for (const g of [...input.gateways].sort(byKey((x) => x.name))) {
    if ('invalid' in g) {
      out.push({ name: g.name, ready: false, reason: 'InvalidGateway', message: g.invalid, nodes: [] });
      continue;
    }
    const policies = perGateway.get(g.name) ?? [];
    const pool = parsePool(g.eipPool);
    if (typeof pool === 'string') {
      out.push({ name: g.name, ready: false, reason: 'InvalidGateway', message: pool, nodes: [] });
      for (const p of policies) statuses.push(failed(p.id, g.name, 'GatewayInvalid', `EgressGateway "${g.name}" is invalid: ${pool}`));
      continue;
    }
    const round = new GatewayRound(g, pool, input);
    out.push(round.run(policies));
    statuses.push(...round.statuses);
  }
  return { gateways: out, policies: statuses.sort(byKey((s) => s.id)) };
}

/** One gateway's placement: its nodes' load, its EIPs' nodes and users. */
class GatewayRound {
  readonly statuses: PolicyStatus[] = [];
  readonly #g: Gateway;
  readonly #pool: EipPool;
  readonly #in: PlacementInput;
  /** Nodes the selector matches, by name, with why each does not serve. */
  readonly #nodes: { name: string; why: string | undefined }[];
  /** Serving nodes, by name, and how many policies each has. */
  readonly #load = new Map<string, number>();
  readonly #nodePolicies = new Map<string, string[]>();
  readonly #eipNode = new Map<bigint, string>();
  readonly #eipUsers = new Map<bigint, string[]>();
  /** EIPs of floating IPs (exclusive policies), with the floating IP's id. */
  readonly #exclusive = new Map<bigint, string>();
  readonly #nodeLimit: number;
  readonly #eipLimit: number;
  /** EIPs in use that left the pool, as `address (policy)`. */
  readonly #shrunk: string[] = [];

  constructor(g: Gateway, pool: EipPool, input: PlacementInput) {
    this.#g = g;
    this.#pool = pool;
    this.#in = input;
    this.#nodeLimit = g.nodeSelection.mode === 'Limit' ? g.nodeSelection.limit : Infinity;
    this.#eipLimit = g.eipAllocation.mode === 'Limit' ? g.eipAllocation.limit : Infinity;
    this.#nodes = input.nodes.filter((n) => matchesLabels(g.nodeSelector, n.labels)).sort(byKey((n) => n.name))
      .map((n) => ({ name: n.name, why: this.#notServing(n) }));
    for (const n of this.#nodes) if (!n.why) this.#load.set(n.name, 0);
  }

  #notServing(n: GatewayNode): string | undefined {
    if (!n.ready) return 'NotReady';
    if (n.renewedAt === undefined) return 'weftd has not renewed its liveness';
    const age = this.#in.now - n.renewedAt;
    return age > this.#in.livenessTimeoutMs ? `weftd last renewed its liveness ${Math.round(age / 1000)} s ago` : undefined;
  }

  run(policies: readonly Policy[]): GatewayStatus {
    const previousEip = new Map<string, bigint>();
    for (const p of policies) {
      const prev = this.#in.previous.get(p.id);
      if (p.source !== 'EIP' || !prev || (prev.ipv4 === undefined && prev.ipv6 === undefined)) continue;
      const i = this.#pool.find(prev.ipv4, prev.ipv6);
      if (typeof i === 'string') this.#shrunk.push(`${[prev.ipv4, prev.ipv6].filter(Boolean).join('/')} (${p.id})`);
      else previousEip.set(p.id, i);
    }
    const pending: Policy[] = [];
    for (const p of [...policies].sort(byKey((x) => x.id))) {
      if (!this.#keep(p, previousEip.get(p.id))) pending.push(p);
    }
    // Asked-for EIPs first, then policies coming back to their previous EIP: a new policy placed
    // before them would take that EIP while it looks free, and the two would share it.
    const asks = (p: Policy) => p.ipv4 !== undefined || p.ipv6 !== undefined;
    const returning = (p: Policy) => !asks(p) && previousEip.has(p.id);
    const order = [...pending.filter(asks), ...pending.filter(returning), ...pending.filter((x) => !asks(x) && !returning(x))];
    for (const p of order) this.#placeNew(p, previousEip.get(p.id));
    return this.#status();
  }

  /** Keeps a policy's previous placement if it is still valid; says whether it did. */
  #keep(p: Policy, eip: bigint | undefined): boolean {
    const prev = this.#in.previous.get(p.id);
    if (!prev || !this.#hasRoom(prev.node)) return false;
    if (p.source === 'NodeIP') {
      if (prev.ipv4 !== undefined || prev.ipv6 !== undefined) return false;
      this.#assign(p, prev.node, undefined);
      return true;
    }
    if (eip === undefined || (this.#asked(p) !== undefined && this.#asked(p) !== eip)) return false;
    const on = this.#eipNode.get(eip);
    if ((on !== undefined && on !== prev.node) || this.#users(eip) >= this.#eipLimit || this.#taken(eip, p)) return false;
    this.#assign(p, prev.node, eip);
    return true;
  }

  /** The EIP a policy asks for, a message if the pool has none such, undefined if it asks for none. */
  #asked(p: Policy): bigint | string | undefined {
    return p.ipv4 === undefined && p.ipv6 === undefined ? undefined : this.#pool.find(p.ipv4, p.ipv6);
  }

  #placeNew(p: Policy, previous: bigint | undefined): void {
    const gw = `EgressGateway "${this.#g.name}"`;
    const fail = (reason: PolicyReason, message: string) => this.statuses.push(failed(p.id, this.#g.name, reason, message));
    if (this.#load.size === 0) {
      const why = this.#nodes.length === 0 ? 'its nodeSelector matches no node' : this.#nodes.map((n) => `${n.name} (${n.why})`).join(', ');
      fail('NoReadyGatewayNode', `no node of ${gw} serves: ${why}`);
      return;
    }
    const full = `every serving node of ${gw} has ${this.#nodeLimit} policies (nodeSelection.limit)`;
    if (p.source === 'NodeIP') {
      const node = this.#chooseNode();
      if (node === undefined) fail('GatewayFull', full);
      else this.#assign(p, node, undefined);
      return;
    }
    if (this.#pool.size === 0n) {
      fail('EIPPoolExhausted', `the EIP pool of ${gw} is empty`);
      return;
    }
    const asked = this.#asked(p);
    let eip: bigint | undefined;
    if (typeof asked === 'string') {
      fail('EIPNotInPool', `${asked} of ${gw}`);
      return;
    } else if (asked !== undefined) {
      const taken = this.#taken(asked, p);
      if (taken) {
        fail('EIPTaken', taken);
        return;
      }
      const why = this.#unusable(asked);
      if (why) {
        fail('EIPUnavailable', why);
        return;
      }
      eip = asked;
    } else {
      eip = previous !== undefined && !this.#unusable(previous) && !this.#taken(previous, p) ? previous : this.#chooseEip(p);
      if (eip === undefined) {
        if (this.#chooseNode() === undefined) fail('GatewayFull', full);
        else if (p.exclusive) fail('EIPPoolExhausted', `no EIP of ${gw} is free, and a floating IP's EIP has no other user`);
        else fail('EIPPoolExhausted', `every EIP of ${gw} has ${this.#eipLimit} policies (eipAllocation.limit)`);
        return;
      }
    }
    this.#assign(p, this.#eipNode.get(eip) ?? this.#chooseNode()!, eip);
  }

  #hasRoom(node: string): boolean {
    const load = this.#load.get(node);
    return load !== undefined && load < this.#nodeLimit;
  }

  #users(eip: bigint): number {
    return this.#eipUsers.get(eip)?.length ?? 0;
  }

  /** Why one more policy cannot use `eip`, or undefined if it can. */
  #unusable(eip: bigint): string | undefined {
    const e = this.#pool.eip(eip);
    const name = [e.ipv4, e.ipv6].filter(Boolean).join('/');
    if (this.#users(eip) >= this.#eipLimit) return `EIP ${name} has ${this.#eipLimit} policies (eipAllocation.limit)`;
    const on = this.#eipNode.get(eip);
    if (on !== undefined ? !this.#hasRoom(on) : this.#chooseNode() === undefined) {
      return `EIP ${name} would be on ${on ?? 'a node'} with ${this.#nodeLimit} policies already (nodeSelection.limit)`;
    }
    return undefined;
  }

  /**
   * Why `p` cannot share `eip` (an EIP is either one floating IP's alone, or shared by forwards
   * and egress policies), or undefined if it can.
   */
  #taken(eip: bigint, p: Policy): string | undefined {
    const e = this.#pool.eip(eip);
    const name = [e.ipv4, e.ipv6].filter(Boolean).join('/');
    const fip = this.#exclusive.get(eip);
    if (fip !== undefined) return `EIP ${name} is taken by ${fip}`;
    if (p.exclusive && this.#users(eip) > 0) {
      return `EIP ${name} is used by ${this.#eipUsers.get(eip)!.join(', ')}, and a floating IP's EIP has no other user`;
    }
    return undefined;
  }

  /** The serving node with room that the node-selection mode picks. */
  #chooseNode(): string | undefined {
    let best: string | undefined;
    const pack = this.#g.nodeSelection.mode === 'Pack';
    for (const [node, load] of this.#load) {
      if (load >= this.#nodeLimit) continue;
      if (best === undefined || (pack ? load > this.#load.get(best)! : load < this.#load.get(best)!)) best = node;
    }
    return best;
  }

  /** The EIP the allocation mode picks for a policy asking for none. */
  #chooseEip(p: Policy): bigint | undefined {
    const used = [...this.#eipUsers.keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    const usable = used.filter((i) => !this.#unusable(i) && !this.#taken(i, p));
    const unused = this.#chooseNode() === undefined ? 0n : this.#pool.size - BigInt(used.length);
    /** The k-th (from 0) EIP no policy uses. */
    const freeAt = (k: bigint): bigint => {
      let i = k;
      for (const u of used) if (u <= i) i++;
      return i;
    };
    const pick = (better: (a: number, b: number) => boolean) =>
      usable.reduce<bigint | undefined>(
        (best, i) => (best === undefined || better(this.#users(i), this.#users(best)) ? i : best),
        undefined,
      );
    switch (this.#g.eipAllocation.mode) {
      case 'PreferUnused':
        return unused > 0n ? freeAt(0n) : pick((a, b) => a < b);
      case 'Limit':
        return pick((a, b) => a > b) ?? (unused > 0n ? freeAt(0n) : undefined);
      default: {
        const total = BigInt(usable.length) + unused;
        if (total === 0n) return undefined;
        let r = BigInt(Math.floor(this.#in.random() * Number(total)));
        if (r >= total) r = total - 1n;
        return r < BigInt(usable.length) ? usable[Number(r)] : freeAt(r - BigInt(usable.length));
      }
    }
  }

  #assign(p: Policy, node: string, eip: bigint | undefined): void {
    this.#load.set(node, this.#load.get(node)! + 1);
    this.#nodePolicies.set(node, [...(this.#nodePolicies.get(node) ?? []), p.id]);
    const placement: Placement = { node };
    if (eip !== undefined) {
      this.#eipNode.set(eip, node);
      this.#eipUsers.set(eip, [...(this.#eipUsers.get(eip) ?? []), p.id]);
      if (p.exclusive) this.#exclusive.set(eip, p.id);
      const { index: _, ...addrs } = this.#pool.eip(eip);
      Object.assign(placement, addrs);
    }
    const via = eip === undefined ? 'its own address' : `EIP ${[placement.ipv4, placement.ipv6].filter(Boolean).join('/')}`;
    this.statuses.push({
      id: p.id,
      gateway: this.#g.name,
      ready: true,
      reason: 'Placed',
      message: `leaves through node ${node} with ${via}`,
      placement,
    });
  }

  #status(): GatewayStatus {
    const serving = this.#load.size;
    const nodes: GatewayNodeStatus[] = this.#nodes.map((n) => ({
      name: n.name, ready: !n.why, ...(n.why ? { reason: n.why } : {}),
      policies: [...(this.#nodePolicies.get(n.name) ?? [])].sort(),
      eips: [...this.#eipNode].filter(([, on]) => on === n.name).sort(([a], [b]) => (a < b ? -1 : 1)).map(([i]) => {
        const { index: _, ...addrs } = this.#pool.eip(i);
        return { ...addrs, policies: [...this.#eipUsers.get(i)!].sort() };
      }),
    }));
    const base = { name: this.#g.name, nodes };
    if (serving === 0) {
      const why = this.#nodes.length === 0 ? 'its nodeSelector matches no node' : this.#nodes.map((n) => `${n.name} (${n.why})`).join(', ');
      return { ...base, ready: false, reason: 'NoReadyNodes', message: `no node serves: ${why}` };
    }
    if (this.#shrunk.length > 0) {
      return { ...base, ready: true, reason: 'PoolShrunk', message: `EIPs in use were removed from the pool: ${this.#shrunk.join(', ')}` };
    }
    return { ...base, ready: true, reason: 'Ready', message: `${serving} of ${this.#nodes.length} nodes serve` };
  }
}
