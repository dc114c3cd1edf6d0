/**
 * The egress controller, run by the weftd that holds the controller Lease (leases.ts): watches
 * EgressGateways, EgressPolicies, EgressClusterPolicies, FloatingIPs, PortForwards, Nodes, Pods,
 * Namespaces and the heartbeat Leases; places the policies, floating IPs and forwards together
 * (placement.ts and inbound.ts, pure) and writes the result: each one's and each gateway's status
 * subresource, and one EgressEndpoints object per placed one (endpoints.ts) from which every node
 * takes its part. Writes only what changed.
 *
 * A pass runs after any change (coalesced) and every `passMs`, since a heartbeat going quiet is
 * a change of time, not of any object. Placements are remembered between passes and, at start,
 * read back from the policies' statuses, so a new leader keeps every policy where it is; a
 * policy that cannot be placed keeps its last placement in memory, so it gets its EIP back.
 * A failed write is logged and retried by the next pass.
 *
 * Disruption mode (disruption.ts): when most gateway heartbeats this controller saw renewing went
 * quiet together, the API server or etcd stalled, not the nodes: the quiet nodes' lapsed EIPs still
 * move to gateway nodes that serve, but a gateway with none keeps its placement instead of
 * withdrawing it; when that ends, every heartbeat counts as renewed then, so the ones not yet back
 * get a full liveness timeout. A quiet gateway that runs
 * the liveness over the underlay is judged by its peers' word instead (vouch.ts's `judgeQuiet`):
 * one they may still vouch for keeps its EIPs, one they provably do not is failed, even in
 * disruption mode; such a gateway is not failed for its Node's Ready condition.
 *
 * Writes are fenced by the leadership (leases.ts): none starts after the renew deadline, each
 * must end by it, and each carries the resourceVersion it was computed from. A pass's writes run
 * {@link WRITES_IN_FLIGHT} at a time (the EgressEndpoints first, then the statuses): a failover of
 * 40 EIPs costs a few API round trips, not 40 of them one after another.
 */
import { isDeepStrictEqual } from 'node:util';
import { isJson } from '../json.ts';
import type { Json } from '../json.ts';
import type { KubeHttp } from '../lease/kube/http.ts';
import type { Logger } from '../log.ts';
import { Informer } from '../k8s/informer.ts';
import type { KubeObject } from '../k8s/informer.ts';
import { EGRESS_GROUP, EGRESS_VERSION, parseGateway, parsePolicy } from './api.ts';
import type { Policy } from './api.ts';
import { buildEndpoints, parseEgressNamespace, parseEgressPod } from './endpoints.ts';
import type { EgressNamespace, EgressPod, EndpointsSpec } from './endpoints.ts';
import { buildInbound, forwardConflicts, inboundPolicy, parseInbound } from './inbound.ts';
import type { Inbound, InboundStatus, PortForward } from './inbound.ts';
import { HEARTBEAT_LABEL } from './leases.ts';
import type { Leadership } from './leases.ts';
import { PassLoop } from './pass-loop.ts';
import { disruption, placeDisrupted } from './disruption.ts';
import { place, unplacedByReason } from './placement.ts';
import type { GatewayNode, GatewayStatus, Placement, PolicyStatus } from './placement.ts';
import { SEES_ANNOTATION, judgeQuiet, parseSees } from './vouch.ts';
import type { MemberReport } from './vouch.ts';

export interface ControllerOptions {
  http: KubeHttp;
  /** weftd's namespace, where the heartbeat Leases are. */
  namespace: string;
  livenessTimeoutMs: number;
  /** Period of the passes that notice quiet heartbeats; default 500 ms. */
  passMs?: number;
  /**
   * After each placement: the policies and inbound EIPs placed nowhere, by reason (weftd's
   * metrics); undefined once this controller stops, when it no longer knows.
   */
  onPlaced?: (unplaced: ReadonlyMap<string, number> | undefined) => void;
  log: Logger;
}

const GROUP_PATH = `/apis/${EGRESS_GROUP}/${EGRESS_VERSION}`;

/**
 * How many of a pass's writes are in flight at once: enough that a gateway's 40 EIPs move in a few
 * round trips, few enough not to crowd the API server (kube-controller-manager's clients default to
 * 20 requests a second, bursts of 30).
 */
export const WRITES_IN_FLIGHT = 10;

/** Runs `fn` on every item, at most `limit` at once; the first rejection rejects, and no item starts after it. */
async function eachBounded<T>(items: readonly T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  let failed = false;
  const worker = async () => {
    while (!failed && next < items.length) {
      await fn(items[next++]!).catch((e: unknown) => {
        failed = true;
        throw e;
      });
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}

function condition(ready: boolean, reason: string, message: string, previous: unknown): Json {
  const old = Array.isArray(previous) ? (previous as Json[]).find((c) => c.type === 'Ready') : undefined;
  const status = ready ? 'True' : 'False';
  const lastTransitionTime =
    old && old.status === status && typeof old.lastTransitionTime === 'string'
      ? old.lastTransitionTime
      : new Date().toISOString().replace(/\.\d+Z$/, 'Z');
  return { type: 'Ready', status, reason, message, lastTransitionTime };
}

/** A placement's EIP as the status writes it, or undefined when it has none. */
function eipOf(p: Placement | undefined): { ipv4?: string; ipv6?: string } | undefined {
  if (!p || (p.ipv4 === undefined && p.ipv6 === undefined)) return undefined;
  return { ...(p.ipv4 !== undefined ? { ipv4: p.ipv4 } : {}), ...(p.ipv6 !== undefined ? { ipv6: p.ipv6 } : {}) };
}

/** The precondition of a write computed from `o`: it is refused (409) if `o` changed since. */
function fence(o: KubeObject): { resourceVersion?: string } {
  const resourceVersion = o.metadata?.resourceVersion;
  return resourceVersion ? { resourceVersion } : {};
}

function nodeReady(n: KubeObject): boolean {
  const conditions = isJson(n.status) && Array.isArray(n.status.conditions) ? (n.status.conditions as Json[]) : [];
  return conditions.some((c) => c.type === 'Ready' && c.status === 'True');
}

export class EgressController {
  readonly #options: ControllerOptions;
  readonly #gateways: Informer;
  readonly #policies: Informer;
  readonly #clusterPolicies: Informer;
  readonly #endpoints: Informer;
  readonly #nodes: Informer;
  readonly #pods: Informer;
  readonly #namespaces: Informer;
  readonly #heartbeats: Informer;
  readonly #floatingIps: Informer;
  readonly #portForwards: Informer;
  /**
   * Heartbeats by node: the renewTime last seen, when (on this clock) it changed, and whether this
   * controller saw it change (a node dead before it started never did).
   */
  readonly #seen = new Map<string, { renewTime: unknown; at: number; renewing: boolean }>();
  #previous: Map<string, Placement> | undefined;
  readonly #loop = new PassLoop();
  #disrupted = false;
  /** The last verdict on each quiet gateway from its peers' word (for the logs). */
  #verdicts = new Map<string, 'down' | 'vouched'>();
  #leadership: Leadership | undefined;

  constructor(options: ControllerOptions) {
    this.#options = options;
    const informer = (path: string, query?: Record<string, string>) =>
      new Informer({ http: options.http, path, log: options.log, onChange: () => this.#loop.poke(), ...(query ? { query } : {}) });
    this.#gateways = informer(`${GROUP_PATH}/egressgateways`);
    this.#policies = informer(`${GROUP_PATH}/egresspolicies`);
    this.#clusterPolicies = informer(`${GROUP_PATH}/egressclusterpolicies`);
    this.#endpoints = informer(`${GROUP_PATH}/egressendpoints`);
    this.#nodes = informer('/api/v1/nodes');
    this.#pods = informer('/api/v1/pods');
    this.#namespaces = informer('/api/v1/namespaces');
    this.#floatingIps = informer(`${GROUP_PATH}/floatingips`);
    this.#portForwards = informer(`${GROUP_PATH}/portforwards`);
    this.#heartbeats = informer(`/apis/coordination.k8s.io/v1/namespaces/${options.namespace}/leases`, { labelSelector: HEARTBEAT_LABEL });
  }

  get #all(): Informer[] {
    return [
      this.#gateways, this.#policies, this.#clusterPolicies, this.#endpoints, this.#nodes,
      this.#pods, this.#namespaces, this.#heartbeats, this.#floatingIps, this.#portForwards,
    ];
  }

  /** Runs until the leadership ends. */
  async run(leadership: Leadership): Promise<void> {
    const { signal } = leadership;
    this.#leadership = leadership;
    const running = this.#all.map((i) => i.run(signal));
    try {
      await this.#loop.run(
        {
          signal,
          ready: Promise.all(this.#all.map((i) => i.synced)).then(() =>
            this.#options.log.info('egress controller synced; placing policies'),
          ),
          periodMs: this.#options.passMs ?? 500,
          retryMs: 500,
          log: this.#options.log,
          what: 'egress controller pass',
        },
        () => this.#pass(signal),
      );
    } finally {
      this.#options.onPlaced?.(undefined);
      await Promise.all(running);
    }
  }

  #liveness(now: number): Map<string, number> {
    const out = new Map<string, number>();
    for (const l of this.#heartbeats.objects.values()) {
      const node = (l.metadata as { labels?: Record<string, string> } | undefined)?.labels?.[HEARTBEAT_LABEL];
      if (!node) continue;
      const renewTime = isJson(l.spec) ? l.spec.renewTime : undefined;
      const seen = this.#seen.get(node);
      if (!seen || seen.renewTime !== renewTime) this.#seen.set(node, { renewTime, at: now, renewing: seen !== undefined });
      out.set(node, this.#seen.get(node)!.at);
    }
    return out;
  }

  /** The heartbeats as vouch.ts takes them: when each changed, and whom its node says it vouches for. */
  #members(renewed: ReadonlyMap<string, number>): Map<string, MemberReport> {
    const members = new Map<string, MemberReport>();
    for (const l of this.#heartbeats.objects.values()) {
      const metadata = l.metadata as { labels?: Record<string, string>; annotations?: Record<string, string> } | undefined;
      const node = metadata?.labels?.[HEARTBEAT_LABEL];
      const renewedAt = node ? renewed.get(node) : undefined;
      if (node && renewedAt !== undefined) members.set(node, { renewedAt, sees: parseSees(metadata?.annotations?.[SEES_ANNOTATION]) });
    }
    return members;
  }

  /** vouch.ts's verdicts on the quiet gateways; logs each change. */
  #judgeQuiet(members: ReadonlyMap<string, MemberReport>, now: number): Map<string, 'down' | 'vouched'> {
    const verdicts = judgeQuiet(members, now, this.#options.livenessTimeoutMs);
    for (const [node, verdict] of verdicts) {
      if (this.#verdicts.get(node) === verdict) continue;
      if (verdict === 'down') this.#options.log.warn('a quiet gateway\'s peers do not see it: its EIPs lapsed and move', { node });
      else this.#options.log.warn('a gateway\'s heartbeat is quiet but its peers may still see it: its EIPs stay', { node });
    }
    this.#verdicts = verdicts;
    return verdicts;
  }

  async #pass(signal: AbortSignal): Promise<void> {
    const now = performance.now();
    const policyObjects = [...this.#policies.objects.values(), ...this.#clusterPolicies.objects.values()];
    const policies = policyObjects.map(parsePolicy);
    const objectsById = new Map(policyObjects.map((o, i) => [policies[i]!.id, o]));
    const inboundObjects = [...this.#floatingIps.objects.values()].map((o) => [parseInbound('FloatingIP', o), o] as const)
      .concat([...this.#portForwards.objects.values()].map((o) => [parseInbound('PortForward', o), o] as const));
    for (const [x, o] of inboundObjects) objectsById.set(x.id, o);
    if (!this.#previous) {
      this.#previous = new Map();
      for (const [id, o] of objectsById) {
        const s = isJson(o.status) ? o.status : {};
        if (typeof s.node !== 'string') continue;
        const eip = isJson(s.eip) ? s.eip : {};
        this.#previous.set(id, {
          node: s.node,
          ...(typeof eip.ipv4 === 'string' ? { ipv4: eip.ipv4 } : {}),
          ...(typeof eip.ipv6 === 'string' ? { ipv6: eip.ipv6 } : {}),
        });
      }
    }
    const renewed = this.#liveness(now);
    const members = this.#members(renewed);
    const verdicts = this.#judgeQuiet(members, now);
    const nodes: GatewayNode[] = [...this.#nodes.objects.values()].map((n) => {
      const verdict = verdicts.get(n.metadata?.name ?? '');
      return {
        name: n.metadata?.name ?? '',
        labels: (n.metadata as { labels?: Record<string, string> } | undefined)?.labels ?? {},
        // A node cut from the API turns NotReady too, yet it may hold its EIPs on its peers' word, and
        // would not see them moved: with the underlay liveness, the heartbeat and the peers judge it.
        ready: members.get(n.metadata?.name ?? '')?.sees !== undefined || nodeReady(n),
        renewedAt: verdict === 'vouched' ? now : verdict === 'down' ? undefined : renewed.get(n.metadata?.name ?? ''),
      };
    });
    const gateways = [...this.#gateways.objects.values()].map(parseGateway);
    // Only heartbeats seen renewing can go quiet together: to a new controller, the nodes that were
    // dead before it started all look renewed at its start and quiet a liveness timeout later.
    const disrupted = disruption(gateways, nodes.filter((n) => this.#seen.get(n.name)?.renewing), now, this.#options.livenessTimeoutMs);
    if (disrupted !== this.#disrupted) {
      this.#disrupted = disrupted;
      if (disrupted) {
        this.#options.log.warn('most gateway heartbeats went quiet together: disruption mode, '
          + 'gateways without a serving node keep their placement');
      }
      else {
        this.#options.log.info('gateway heartbeats are back: disruption mode ends');
        for (const seen of this.#seen.values()) seen.at = now;
        for (const n of nodes) if (n.renewedAt !== undefined) n.renewedAt = now;
      }
    }
    const inbound = inboundObjects.map(([x]) => x).filter((x): x is Inbound => !('invalid' in x));
    const conflicts = forwardConflicts(inbound.filter((x): x is PortForward => x.kind === 'PortForward'), this.#previous);
    const refused = new Map<string, InboundStatus>(
      conflicts.map((c) => [c.id, { ready: false, reason: 'PortInUse', message: c.message, podIPs: [] }]),
    );
    for (const [x] of inboundObjects) {
      if ('invalid' in x) refused.set(x.id, { ready: false, reason: 'Invalid', message: x.invalid, podIPs: [] });
    }
    const placeable = inbound.filter((x) => !refused.has(x.id));
    const result = (disrupted ? placeDisrupted : place)({
      gateways,
      policies: [...policies, ...placeable.map(inboundPolicy)],
      nodes,
      previous: this.#previous,
      now,
      livenessTimeoutMs: this.#options.livenessTimeoutMs,
      random: Math.random,
    });
    this.#options.onPlaced?.(unplacedByReason(result.policies));
    const previous = this.#previous;
    this.#previous = new Map(result.policies.map((s) => [s.id, s.placement ?? previous.get(s.id)] as const)
      .filter((e): e is [string, Placement] => e[1] !== undefined));
    const named = new Map<string, EgressPod>();
    for (const [key, o] of this.#pods.objects) {
      const pod = parseEgressPod(o);
      if (pod) named.set(key, pod);
    }
    const pods = [...named.values()];
    const namespaces = new Map(
      [...this.#namespaces.objects.values()]
        .map(parseEgressNamespace)
        .filter((n): n is EgressNamespace => n !== undefined)
        .map((n) => [n.name, n]),
    );
    const valid = policies.filter((p): p is Policy => !('invalid' in p));
    const inboundIds = new Set(placeable.map((x) => x.id));
    const built = buildInbound(placeable, new Map(result.policies.filter((s) => inboundIds.has(s.id)).map((s) => [s.id, s])), named);
    // Endpoints first: a node moves its traffic when they change, and the status only reports it.
    await this.#publish(new Map([...buildEndpoints(valid, result.policies, pods, namespaces), ...built.endpoints]), signal);
    const statuses: (() => Promise<void>)[] = [
      ...result.policies.filter((s) => !inboundIds.has(s.id)).map((s) => () => this.#policyStatus(s, objectsById.get(s.id)!, signal)),
      ...[...built.statuses, ...refused].map(([id, s]) => () => this.#inboundStatus(id, s, objectsById.get(id)!, signal)),
      ...result.gateways.map((g) => () => this.#gatewayStatus(g, signal)),
    ];
    await eachBounded(statuses, WRITES_IN_FLIGHT, (write) => write());
  }

  /**
   * Runs one write, fenced: only while leading, given the time left until the renew deadline
   * (`fn` gets it as its timeout); a refusal is logged and left to the next pass.
   */
  async #write(what: string, fn: (timeoutMs: number) => Promise<unknown>): Promise<void> {
    const left = this.#leadership?.remainingMs() ?? 0;
    if (left <= 0) throw new Error(`not writing ${what}: no longer leading`);
    try {
      await fn(left);
    } catch (e) {
      const code = (e as { statusCode?: number }).statusCode;
      if (code === 404) return;
      // 409: the object changed since this pass read it (often our own write not yet seen); the next pass rewrites it.
      if (code === 409) this.#options.log.debug(`${what} changed meanwhile; rewriting it next pass`);
      else this.#options.log.warn(`failed to write ${what}`, { err: e });
    }
  }

  async #publish(wanted: ReadonlyMap<string, EndpointsSpec>, signal: AbortSignal): Promise<void> {
    const path = `${GROUP_PATH}/egressendpoints`;
    const changed = [...wanted].filter(([name, spec]) => !isDeepStrictEqual(this.#endpoints.objects.get(name)?.spec, spec));
    await eachBounded(changed, WRITES_IN_FLIGHT, ([name, spec]) => {
      const have = this.#endpoints.objects.get(name);
      const body = {
        apiVersion: `${EGRESS_GROUP}/${EGRESS_VERSION}`,
        kind: 'EgressEndpoints',
        metadata: { name, ...(have ? { resourceVersion: have.metadata?.resourceVersion } : {}) },
        spec,
      };
      return this.#write(`EgressEndpoints ${name}`, async (timeoutMs) => {
        const stored = await (have
          ? this.#options.http.update<KubeObject>(`${path}/${name}`, body, { signal, timeoutMs })
          : this.#options.http.create<KubeObject>(path, body, { signal, timeoutMs }));
        this.#endpoints.objects.set(name, stored);
      });
    });
    const unwanted = [...this.#endpoints.objects.keys()].filter((name) => !wanted.has(name));
    await eachBounded(unwanted, WRITES_IN_FLIGHT, (name) => {
      const resourceVersion = this.#endpoints.objects.get(name)?.metadata?.resourceVersion;
      return this.#write(`EgressEndpoints ${name}`, async (timeoutMs) => {
        const preconditions = resourceVersion ? { preconditions: { resourceVersion } } : {};
        await this.#options.http.delete(`${path}/${name}`, { signal, timeoutMs, ...preconditions });
        this.#endpoints.objects.delete(name);
      });
    });
  }

  async #policyStatus(s: PolicyStatus, o: KubeObject, signal: AbortSignal): Promise<void> {
    const old = isJson(o.status) ? o.status : {};
    const eip = eipOf(s.placement);
    const status = { node: s.placement?.node, eip, conditions: [condition(s.ready, s.reason, s.message, old.conditions)] };
    if (isDeepStrictEqual({ node: old.node, eip: old.eip, conditions: old.conditions }, status)) return;
    const { namespace, name } = o.metadata ?? {};
    const path = namespace
      ? `${GROUP_PATH}/namespaces/${namespace}/egresspolicies/${name}/status`
      : `${GROUP_PATH}/egressclusterpolicies/${name}/status`;
    if (old.node !== status.node || !isDeepStrictEqual(old.eip, eip)) {
      this.#options.log.info('egress policy placed', { policy: s.id, node: s.placement?.node, eip, reason: s.reason });
    }
    await this.#write(`the status of egress policy ${s.id}`, (timeoutMs) =>
      this.#options.http.mergePatch(
        path,
        { metadata: fence(o), status: { node: status.node ?? null, eip: eip ?? null, conditions: status.conditions } },
        { signal, timeoutMs },
      ),
    );
  }

  async #inboundStatus(id: string, s: InboundStatus, o: KubeObject, signal: AbortSignal): Promise<void> {
    const old = isJson(o.status) ? o.status : {};
    const eip = eipOf(s.placement);
    const status = {
      node: s.placement?.node,
      eip,
      podIPs: s.podIPs,
      conditions: [condition(s.ready, s.reason, s.message, old.conditions)],
    };
    if (isDeepStrictEqual({ node: old.node, eip: old.eip, podIPs: old.podIPs ?? [], conditions: old.conditions }, status)) return;
    const { namespace, name } = o.metadata ?? {};
    const path = `${GROUP_PATH}/namespaces/${namespace}/${id.startsWith('FloatingIP') ? 'floatingips' : 'portforwards'}/${name}/status`;
    if (old.node !== status.node || !isDeepStrictEqual(old.eip, eip) || old.conditions === undefined) {
      this.#options.log.info('inbound EIP placed', { id, node: status.node, eip, reason: s.reason });
    }
    await this.#write(`the status of ${id}`, (timeoutMs) =>
      this.#options.http.mergePatch(
        path,
        { metadata: fence(o), status: { node: status.node ?? null, eip: eip ?? null, podIPs: s.podIPs, conditions: status.conditions } },
        { signal, timeoutMs },
      ),
    );
  }

  async #gatewayStatus(g: GatewayStatus, signal: AbortSignal): Promise<void> {
    const o = this.#gateways.objects.get(g.name);
    if (!o) return;
    const old = isJson(o.status) ? o.status : {};
    const status = { nodes: g.nodes, conditions: [condition(g.ready, g.reason, g.message, old.conditions)] };
    if (isDeepStrictEqual({ nodes: old.nodes, conditions: old.conditions }, status)) return;
    await this.#write(`the status of EgressGateway ${g.name}`, (timeoutMs) =>
      this.#options.http.mergePatch(`${GROUP_PATH}/egressgateways/${g.name}/status`, { metadata: fence(o), status }, { signal, timeoutMs }),
    );
  }
}
