/**
 * Inbound EIPs (egress-crds.yaml): FloatingIP (an EIP mapped one-to-one to a pod, both ways) and
 * PortForward (an EIP's port forwarded to a pod's port), namespaced, in the egress API group.
 * Pure: parsing the objects, the conflict rules, the pseudo-policies that placement.ts places
 * beside the egress policies (so an EIP keeps one node and moves with all its users on
 * failover), and the EgressEndpoints a gateway node and the pod's node take their part from.
 *
 * DESIGN NOTES
 * - An EIP is either one floating IP's alone, or shared by port forwards and egress policies:
 *   placement enforces it (a floating IP's policy is `exclusive`), so a conflict is a reason in
 *   the loser's status and changes nothing.
 * - A protocol and port of an EIP is forwarded once ({@link forwardConflicts}): the forward that
 *   had it (placed last pass) keeps it, else the oldest (then the first by id) gets it.
 * - A floating IP or forward keeps its EIP while its pod is missing (not Ready, reason
 *   PodNotFound), so a re-created pod is reachable again at the same address.
 */
import { isJson } from '../json.ts';
import type { Policy } from './api.ts';
import { FORWARD_PROTOCOLS, parseEip } from './eip.ts';
import type { EipAsked, ForwardProtocol } from './eip.ts';
import type { EgressPod, EndpointsSpec, InboundTarget } from './endpoints.ts';
import type { Placement, PolicyStatus } from './placement.ts';

interface InboundBase {
  /** `FloatingIP <namespace>/<name>` or `PortForward <namespace>/<name>`: its id in placement. */
  id: string;
  namespace: string;
  name: string;
  gateway: string;
  /** The pod's name, in `namespace`. */
  pod: string;
  eip: EipAsked;
  /** metadata.creationTimestamp ('' when absent): the older of two forwards of a port wins. */
  created: string;
}

export interface FloatingIp extends InboundBase {
  kind: 'FloatingIP';
}

export interface PortForward extends InboundBase {
  kind: 'PortForward';
  protocol: ForwardProtocol;
  port: number;
  podPort: number;
}

export type Inbound = FloatingIp | PortForward;

export interface InvalidInbound {
  kind: Inbound['kind'];
  id: string;
  namespace: string;
  name: string;
  invalid: string;
}

const port = (v: unknown, field: string): number | string =>
  Number.isInteger(v) && (v as number) >= 1 && (v as number) <= 65535
    ? (v as number)
    : `${field}: must be an integer 1-65535, not ${JSON.stringify(v)}`;

/** Parses a FloatingIP or PortForward object; a malformed one becomes an invalid value naming the field. */
export function parseInbound(kind: Inbound['kind'], o: unknown): Inbound | InvalidInbound {
  const meta = isJson(o) && isJson(o.metadata) ? o.metadata : {};
  const namespace = typeof meta.namespace === 'string' ? meta.namespace : '';
  const name = typeof meta.name === 'string' ? meta.name : '';
  const id = `${kind} ${namespace}/${name}`;
  const invalid = (why: string): InvalidInbound => ({ kind, id, namespace, name, invalid: why });
  const spec = isJson(o) ? o.spec : undefined;
  if (!isJson(spec)) return invalid('spec: required');
  for (const key of ['gateway', 'pod'] as const) {
    if (typeof spec[key] !== 'string' || spec[key] === '') return invalid(`spec.${key}: required`);
  }
  const eip = parseEip(spec.eip);
  if (typeof eip === 'string') return invalid(eip);
  const base = {
    id,
    namespace,
    name,
    gateway: spec.gateway as string,
    pod: spec.pod as string,
    eip,
    created: typeof meta.creationTimestamp === 'string' ? meta.creationTimestamp : '',
  };
  if (kind === 'FloatingIP') return { kind, ...base };
  if (eip.ipv4 === undefined && eip.ipv6 === undefined) return invalid('spec.eip: a port forward needs its EIP (ipv4, ipv6 or both)');
  const protocol = spec.protocol ?? 'TCP';
  if (!FORWARD_PROTOCOLS.includes(protocol as ForwardProtocol)) {
    return invalid(`spec.protocol: must be one of ${FORWARD_PROTOCOLS.join(', ')}, not ${JSON.stringify(protocol)}`);
  }
  const p = port(spec.port, 'spec.port');
  const podPort = spec.podPort === undefined ? p : port(spec.podPort, 'spec.podPort');
  if (typeof p === 'string') return invalid(p);
  if (typeof podPort === 'string') return invalid(podPort);
  return { kind, ...base, protocol: protocol as ForwardProtocol, port: p, podPort };
}

/** A forward refused because another one holds its EIP's port. */
export interface ForwardConflict {
  id: string;
  message: string;
}

/**
 * The forwards that lose a port to another one: per gateway, EIP address, protocol and port, the
 * forward placed in `previous` keeps it, else the oldest, then the first by id.
 */
export function forwardConflicts(forwards: readonly PortForward[], previous: ReadonlyMap<string, Placement>): ForwardConflict[] {
  const rank = (f: PortForward) => [previous.has(f.id) ? 0 : 1, f.created, f.id] as const;
  const before = (a: PortForward, b: PortForward) => {
    const [x, y] = [rank(a), rank(b)];
    for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return x[i]! < y[i]! ? -1 : 1;
    return 0;
  };
  const holder = new Map<string, PortForward>();
  const out: ForwardConflict[] = [];
  for (const f of [...forwards].sort(before)) {
    const keys = [f.eip.ipv4, f.eip.ipv6]
      .filter((a): a is string => a !== undefined)
      .map((a) => `${f.gateway} ${a} ${f.protocol} ${f.port}`);
    const taken = keys.map((k) => holder.get(k)).find((h) => h !== undefined);
    if (taken) {
      const addr = [f.eip.ipv4, f.eip.ipv6].filter(Boolean).join('/');
      out.push({
        id: f.id,
        message: `${f.protocol} port ${f.port} of EIP ${addr} is already forwarded by PortForward ${taken.namespace}/${taken.name}`,
      });
      continue;
    }
    for (const k of keys) holder.set(k, f);
  }
  return out;
}

/** The policy placement.ts places for a floating IP or forward: its EIP on a gateway node. */
export function inboundPolicy(x: Inbound): Policy {
  return {
    id: x.id, gateway: x.gateway, namespaces: { name: x.namespace }, podSelector: { matchLabels: {}, matchExpressions: [] },
    destinations: [], source: 'EIP', ...x.eip, ...(x.kind === 'FloatingIP' ? { exclusive: true } : {}),
  };
}

/** The object name of an inbound resource's EgressEndpoints: `fip-<ns>.<name>` or `pf-<ns>.<name>` (never an egress policy's). */
export function inboundEndpointsName(x: Pick<Inbound, 'kind' | 'namespace' | 'name'>): string {
  return `${x.kind === 'FloatingIP' ? 'fip' : 'pf'}-${x.namespace}.${x.name}`;
}

/** The status of a floating IP or forward: placement's, or PodNotFound when placed without its pod. */
export interface InboundStatus {
  ready: boolean;
  reason: string;
  message: string;
  placement?: Placement;
  podIPs: string[];
}

/**
 * Each inbound resource's status and, for the placed ones, its EgressEndpoints spec: a floating
 * IP's pod is also a source leaving from the EIP (one egress-like rule); a forward's is not.
 * `statuses` are placement's, by id; `pods` by `namespace/name`.
 */
export function buildInbound(
  items: readonly Inbound[],
  statuses: ReadonlyMap<string, PolicyStatus>,
  pods: ReadonlyMap<string, Pick<EgressPod, 'node' | 'ips'>>,
): {
  statuses: Map<string, InboundStatus>;
  endpoints: Map<string, EndpointsSpec>;
} {
  const out = new Map<string, InboundStatus>();
  const endpoints = new Map<string, EndpointsSpec>();
  for (const x of items) {
    const s = statuses.get(x.id);
    if (!s) continue;
    const pod = pods.get(`${x.namespace}/${x.pod}`);
    const podIPs = pod ? [...pod.ips].sort() : [];
    if (!s.placement) {
      out.set(x.id, { ready: false, reason: s.reason, message: s.message, podIPs });
      continue;
    }
    const { node, ...eip } = s.placement;
    const what = x.kind === 'FloatingIP' ? 'every port' : `${x.protocol} port ${x.port}`;
    const addrs = [eip.ipv4, eip.ipv6].filter(Boolean).join('/');
    const targets: InboundTarget[] = [];
    for (const a of [eip.ipv4, eip.ipv6]) {
      const ip = a === undefined ? undefined : pod?.ips.find((p) => p.includes(':') === a.includes(':'));
      if (ip === undefined) continue;
      targets.push({
        node: pod!.node,
        ip,
        ...(x.kind === 'PortForward' ? { protocol: x.protocol, port: x.port, podPort: x.podPort } : {}),
      });
    }
    if (!pod) {
      out.set(x.id, {
        ready: false,
        reason: 'PodNotFound',
        message: `pod ${x.namespace}/${x.pod} not found (or without an address); EIP ${addrs} stays on node ${node} for it`,
        placement: s.placement,
        podIPs,
      });
    } else if (targets.length === 0) {
      out.set(x.id, {
        ready: false,
        reason: 'PodNotFound',
        message: `pod ${x.namespace}/${x.pod} has no address of EIP ${addrs}'s family`,
        placement: s.placement,
        podIPs,
      });
    } else {
      out.set(x.id, {
        ready: true,
        reason: 'Forwarding',
        message: `${what} of EIP ${addrs} on node ${node} reaches pod ${x.pod} on node ${pod.node}`,
        placement: s.placement,
        podIPs,
      });
    }
    endpoints.set(inboundEndpointsName(x), {
      policy: x.id,
      gateway: node,
      eip,
      destinations: [],
      sources: x.kind === 'FloatingIP' && pod ? [{ node: pod.node, ips: targets.map((t) => t.ip).sort() }] : [],
      inbound: targets,
    });
  }
  return { statuses: out, endpoints };
}
