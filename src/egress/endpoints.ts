/**
 * EgressEndpoints (egress-crds.yaml): what the controller publishes for each placed policy so
 * that nodes need not watch pods: the gateway node, the EIP (absent: the gateway node's own
 * address), the destinations and the selected pods' addresses grouped by node. One object per
 * policy, cluster-scoped, named {@link endpointsName}. Pure: building them from the controller's
 * view, and parsing them on a node, where they are peer data and checked as such.
 */
import { formatCIDR, formatIP, parseCIDR, tryParseIP } from '../ip/ip.ts';
import type { CIDR } from '../ip/ip.ts';
import { isJson } from '../json.ts';
import { matchesLabels } from '../k8s/label-selector.ts';
import type { Policy } from './api.ts';
import { FORWARD_PROTOCOLS, parseEip } from './eip.ts';
import type { ForwardProtocol } from './eip.ts';
import type { PolicyStatus } from './placement.ts';

/** A pod as the controller sees it. */
export interface EgressPod {
  namespace: string;
  labels: Readonly<Record<string, string>>;
  node: string;
  ips: readonly string[];
}

export interface EgressNamespace {
  name: string;
  labels: Readonly<Record<string, string>>;
}

/** Where the gateway sends one of the EIP's connections, and the node of that pod. */
export interface InboundTarget {
  node: string;
  /** The pod's address (of the EIP address's family). */
  ip: string;
  /** A forward's; absent for a floating IP (every port and protocol). */
  protocol?: ForwardProtocol;
  port?: number;
  podPort?: number;
}

/** The spec of an EgressEndpoints object. */
export interface EndpointsSpec {
  /** The policy's id: `namespace/name` or `name`. */
  policy: string;
  gateway: string;
  eip?: { ipv4?: string; ipv6?: string };
  destinations: string[];
  /** By node name, sorted; each node's addresses sorted. */
  sources: { node: string; ips: string[] }[];
  /** A floating IP's or port forward's (inbound.ts): where the gateway sends what arrives at the EIP. */
  inbound?: InboundTarget[];
}

/** The object name of a policy's endpoints: `ns-<namespace>.<name>` or `c.<name>` (never equal). */
export function endpointsName(policyId: string): string {
  const slash = policyId.indexOf('/');
  return slash < 0 ? `c.${policyId}` : `ns-${policyId.slice(0, slash)}.${policyId.slice(slash + 1)}`;
}

/** A running, scheduled pod with addresses, or undefined (host-network pods are never steered). */
export function parseEgressPod(o: unknown): EgressPod | undefined {
  if (!isJson(o) || !isJson(o.metadata) || !isJson(o.spec) || !isJson(o.status)) return undefined;
  const { metadata: m, spec, status } = o;
  if (typeof m.namespace !== 'string' || typeof spec.nodeName !== 'string' || spec.hostNetwork === true) return undefined;
  if (status.phase === 'Succeeded' || status.phase === 'Failed') return undefined;
  const listed = Array.isArray(status.podIPs) ? status.podIPs.map((p) => (isJson(p) ? p.ip : undefined)) : [status.podIP];
  const ips = listed.filter((ip): ip is string => typeof ip === 'string' && tryParseIP(ip) !== undefined);
  if (ips.length === 0) return undefined;
  return { namespace: m.namespace, labels: isJson(m.labels) ? (m.labels as Record<string, string>) : {}, node: spec.nodeName, ips };
}

export function parseEgressNamespace(o: unknown): EgressNamespace | undefined {
  if (!isJson(o) || !isJson(o.metadata) || typeof o.metadata.name !== 'string') return undefined;
  return { name: o.metadata.name, labels: isJson(o.metadata.labels) ? (o.metadata.labels as Record<string, string>) : {} };
}

/** Whether `policy` selects `pod`. */
export function selects(policy: Policy, pod: EgressPod, namespaces: ReadonlyMap<string, EgressNamespace>): boolean {
  if ('name' in policy.namespaces) {
    if (pod.namespace !== policy.namespaces.name) return false;
  } else {
    const ns = namespaces.get(pod.namespace);
    if (!ns || !matchesLabels(policy.namespaces.selector, ns.labels)) return false;
  }
  return matchesLabels(policy.podSelector, pod.labels);
}

/** The endpoints of every placed policy, by object name. */
export function buildEndpoints(
  policies: readonly Policy[],
  statuses: readonly PolicyStatus[],
  pods: readonly EgressPod[],
  namespaces: ReadonlyMap<string, EgressNamespace>,
): Map<string, EndpointsSpec> {
  const byId = new Map(policies.map((p) => [p.id, p]));
  const out = new Map<string, EndpointsSpec>();
  for (const s of statuses) {
    const p = byId.get(s.id);
    if (!p || !s.placement) continue;
    const byNode = new Map<string, Set<string>>();
    for (const pod of pods) {
      if (!selects(p, pod, namespaces)) continue;
      const set = byNode.get(pod.node) ?? new Set<string>();
      for (const ip of pod.ips) set.add(ip);
      byNode.set(pod.node, set);
    }
    const { node, ...eip } = s.placement;
    out.set(endpointsName(p.id), {
      policy: p.id,
      gateway: node,
      ...(eip.ipv4 !== undefined || eip.ipv6 !== undefined ? { eip } : {}),
      destinations: p.destinations.map(formatCIDR),
      sources: [...byNode].sort(([a], [b]) => (a < b ? -1 : 1)).map(([n, ips]) => ({ node: n, ips: [...ips].sort() })),
    });
  }
  return out;
}

/** An EgressEndpoints spec as a node uses it, addresses parsed. */
export interface NodeEndpoints {
  policy: string;
  gateway: string;
  eip: { ipv4?: string; ipv6?: string };
  destinations: CIDR[];
  sources: { node: string; ips: string[] }[];
  inbound?: InboundTarget[];
}

/** Parses an EgressEndpoints object (peer data); a message naming the field when it is bad. */
export function parseEndpoints(o: unknown): NodeEndpoints | string {
  const name = isJson(o) && isJson(o.metadata) ? String(o.metadata.name) : '?';
  const bad = (why: string) => `EgressEndpoints ${name}: ${why}`;
  const spec = isJson(o) ? o.spec : undefined;
  if (!isJson(spec)) return bad('spec: required');
  if (typeof spec.policy !== 'string' || typeof spec.gateway !== 'string' || spec.gateway === '') {
    return bad('spec.policy and spec.gateway: required');
  }
  const eip = parseEip(spec.eip);
  if (typeof eip === 'string') return bad(eip);
  const destinations: CIDR[] = [];
  for (const [i, d] of (Array.isArray(spec.destinations) ? spec.destinations : []).entries()) {
    try {
      destinations.push(parseCIDR(String(d), `spec.destinations[${i}]`));
    } catch (e) {
      return bad((e as Error).message);
    }
  }
  const sources: { node: string; ips: string[] }[] = [];
  for (const [i, s] of (Array.isArray(spec.sources) ? spec.sources : []).entries()) {
    if (!isJson(s) || typeof s.node !== 'string' || !Array.isArray(s.ips)) return bad(`spec.sources[${i}]: needs node and ips`);
    const ips: string[] = [];
    for (const ip of s.ips) {
      const parsed = typeof ip === 'string' ? tryParseIP(ip) : undefined;
      if (!parsed) return bad(`spec.sources[${i}].ips: ${JSON.stringify(ip)} is not an address`);
      ips.push(formatIP(parsed));
    }
    sources.push({ node: s.node, ips });
  }
  if (spec.inbound === undefined) return { policy: spec.policy, gateway: spec.gateway, eip, destinations, sources };
  const inbound: InboundTarget[] = [];
  for (const [i, t] of (Array.isArray(spec.inbound) ? spec.inbound : []).entries()) {
    const field = `spec.inbound[${i}]`;
    const ip = isJson(t) && typeof t.ip === 'string' ? tryParseIP(t.ip) : undefined;
    if (!isJson(t) || typeof t.node !== 'string' || !ip) return bad(`${field}: needs node and ip (an address)`);
    if (t.protocol === undefined) {
      inbound.push({ node: t.node, ip: formatIP(ip) });
      continue;
    }
    const ports = [t.port, t.podPort];
    if (
      !FORWARD_PROTOCOLS.includes(t.protocol as ForwardProtocol) ||
      ports.some((p) => !Number.isInteger(p) || (p as number) < 1 || (p as number) > 65535)
    ) {
      return bad(`${field}: a forward needs protocol (${FORWARD_PROTOCOLS.join(', ')}), port and podPort (1-65535)`);
    }
    inbound.push({
      node: t.node,
      ip: formatIP(ip),
      protocol: t.protocol as ForwardProtocol,
      port: t.port as number,
      podPort: t.podPort as number,
    });
  }
  return { policy: spec.policy, gateway: spec.gateway, eip, destinations, sources, inbound };
}
