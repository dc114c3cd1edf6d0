/**
 * networking.k8s.io/v1 NetworkPolicy, Pods and Namespaces as weftd receives them from the API
 * server (plain JSON), parsed into the values the pure evaluator and renderer work on (issue #22).
 * A malformed object becomes an invalid value carrying the reason, never an exception, so one bad
 * object cannot stop the agent; an invalid policy selects nothing and allows nothing (the API
 * server would have refused it, so it can only come from a broken or hostile source).
 *
 * Normalisation follows the API's documentation and its server-side defaulting:
 * - `policyTypes` absent: `Ingress` always, `Egress` when `egress` holds at least one rule (the
 *   API server's defaulting tests `len(spec.egress) > 0`, so `egress: []` alone adds nothing).
 *   When present, the rules of a direction it does not name are ignored.
 * - `podSelector` absent: the empty selector, every pod of the namespace (as the API server
 *   decodes it).
 * - `ingress`/`egress` absent or empty: the direction (if named by policyTypes) allows nothing.
 * - A rule's `from`/`to` absent or empty: every peer; `ports` absent or empty: every port and
 *   protocol.
 * - A peer's `podSelector` absent and `namespaceSelector` present: every pod of the selected
 *   namespaces; `namespaceSelector` absent: the policy's own namespace; both present: pods
 *   matching the first in namespaces matching the second (AND), where two peers are an OR.
 *   An empty selector `{}` matches everything; absent and empty therefore differ for
 *   `namespaceSelector` (own namespace against every namespace).
 * - A port's `protocol` defaults to TCP; `port` absent means every port of the protocol; a port
 *   is a number 1–65535 or an IANA service name (resolved per destination pod from its container
 *   ports); `endPort` needs a numeric `port` and is at least it.
 * - `ipBlock.except` entries lie inside `cidr`, of the same family.
 */
import { containsCIDR, tryParseIP } from '../ip/ip.ts';
import { ACL_LOGGING_ANNOTATION, parseAclLogging } from './acl-logging.ts';
import type { AclLogging } from './acl-logging.ts';
import type { CIDR, IP } from '../ip/ip.ts';
import type { Json } from '../json.ts';
import { Bad, cidr, isInvalid, labels, list, metadata, object, parsing, portNumber, protocol } from '../k8s/fields.ts';
import type { Invalid, Protocol } from '../k8s/fields.ts';
import { parseLabelSelector } from '../k8s/label-selector.ts';
import type { LabelSelector } from '../k8s/label-selector.ts';

export { isInvalid };
export type { Invalid, Protocol };



/** A peer of a rule: pods chosen by selectors, or addresses. */
export type Peer =
  | {
      kind: 'pods';
      /** Absent: every pod of the chosen namespaces. */
      podSelector?: LabelSelector;
      /** Absent: the policy's own namespace only. */
      namespaceSelector?: LabelSelector;
    }
  | { kind: 'ipBlock'; cidr: CIDR; except: readonly CIDR[] };

export interface PolicyPort {
  protocol: Protocol;
  /** Absent: every port of the protocol; a string is a named container port. */
  port?: number | string;
  /** Last port of the range starting at the numeric `port`. */
  endPort?: number;
}

export interface PolicyRule {
  /** Empty: every peer. */
  peers: readonly Peer[];
  /** Empty: every port of every protocol. */
  ports: readonly PolicyPort[];
}

export interface NetworkPolicy {
  namespace: string;
  name: string;
  podSelector: LabelSelector;
  /** Present when the policy applies to ingress (policyTypes after defaulting); may be empty. */
  ingress?: readonly PolicyRule[];
  /** Present when the policy applies to egress; may be empty. */
  egress?: readonly PolicyRule[];
}

export interface ContainerPort {
  name?: string;
  port: number;
  protocol: Protocol;
}

export interface Pod {
  namespace: string;
  name: string;
  labels: Readonly<Record<string, string>>;
  /** status.podIPs (or status.podIP); empty until assigned, and for pods that have finished. */
  ips: readonly IP[];
  /** spec.nodeName; empty until scheduled. */
  node: string;
  /** spec.hostNetwork: such a pod is not selected by policies and its addresses are the node's. */
  hostNetwork: boolean;
  ports: readonly ContainerPort[];
}

export interface Namespace {
  name: string;
  labels: Readonly<Record<string, string>>;
  /** The verdicts its pods' connections are logged for (acl-logging.ts); absent: none. */
  aclLogging?: AclLogging;
  /** What of its acl-logging annotation was ignored, and why. */
  aclLoggingProblem?: string;
}

/** Everything policy decisions derive from. Invalid policies are left out by whoever builds it. */
export interface PolicyModel {
  policies: readonly NetworkPolicy[];
  pods: readonly Pod[];
  namespaces: readonly Namespace[];
}

function selector(v: unknown, field: string): LabelSelector {
  const s = parseLabelSelector(v, field);
  if (typeof s === 'string') throw new Bad(s);
  return s;
}

/** IANA_SVC_NAME as Kubernetes validates it: 1–15 of [a-z0-9-], a letter, no edge or double hyphen. */
export function isPortName(s: string): boolean {
  return /^[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?$/.test(s) && /[a-z]/.test(s) && !s.includes('--');
}

function peer(v: unknown, field: string): Peer {
  const p = object(v, field);
  const { podSelector, namespaceSelector, ipBlock } = p;
  if (ipBlock !== undefined && ipBlock !== null) {
    if (podSelector !== undefined || namespaceSelector !== undefined) {
      throw new Bad(`${field}: ipBlock cannot be combined with podSelector or namespaceSelector`);
    }
    const b = object(ipBlock, `${field}.ipBlock`);
    const c = cidr(b.cidr, `${field}.ipBlock.cidr`);
    const except = list(b.except, `${field}.ipBlock.except`).map((e, i) => {
      const x = cidr(e, `${field}.ipBlock.except[${i}]`);
      if (x.ip.family !== c.ip.family || !containsCIDR(c, x) || x.prefix === c.prefix) {
        throw new Bad(`${field}.ipBlock.except[${i}]: must be strictly within ${String(b.cidr)}`);
      }
      return x;
    });
    return { kind: 'ipBlock', cidr: c, except };
  }
  if (podSelector === undefined && namespaceSelector === undefined) {
    throw new Bad(`${field}: must have podSelector, namespaceSelector or ipBlock`);
  }
  const out: Peer = { kind: 'pods' };
  if (podSelector !== undefined) out.podSelector = selector(podSelector, `${field}.podSelector`);
  if (namespaceSelector !== undefined) out.namespaceSelector = selector(namespaceSelector, `${field}.namespaceSelector`);
  return out;
}

function policyPort(v: unknown, field: string): PolicyPort {
  const p = object(v, field);
  const out: PolicyPort = { protocol: protocol(p.protocol, `${field}.protocol`) };
  if (p.port !== undefined && p.port !== null) {
    if (typeof p.port === 'string') {
      if (!isPortName(p.port)) throw new Bad(`${field}.port: ${JSON.stringify(p.port)} is neither a port number nor a port name`);
      out.port = p.port;
    } else {
      out.port = portNumber(p.port, `${field}.port`);
    }
  }
  if (p.endPort !== undefined && p.endPort !== null) {
    if (typeof out.port !== 'number') throw new Bad(`${field}.endPort: needs a numeric port`);
    const end = portNumber(p.endPort, `${field}.endPort`);
    if (end < out.port) throw new Bad(`${field}.endPort: must be at least port ${out.port}`);
    out.endPort = end;
  }
  return out;
}

function rules(v: unknown, field: string, peersKey: 'from' | 'to'): PolicyRule[] {
  return list(v, field).map((r, i) => {
    const rule = object(r, `${field}[${i}]`);
    return {
      peers: list(rule[peersKey], `${field}[${i}].${peersKey}`).map((p, j) => peer(p, `${field}[${i}].${peersKey}[${j}]`)),
      ports: list(rule.ports, `${field}[${i}].ports`).map((p, j) => policyPort(p, `${field}[${i}].ports[${j}]`)),
    };
  });
}

/** Parses a NetworkPolicy object; defaults and checks as described in the module comment. */
export function parseNetworkPolicy(o: unknown): NetworkPolicy | Invalid {
  return parsing(o, () => {
    const { namespace, name } = metadata(o, true);
    const spec = object((o as Json).spec, 'spec');
    // The API server decodes an absent podSelector (a struct in Go) as the empty one: every pod.
    const podSelector = selector(spec.podSelector ?? {}, 'spec.podSelector');
    const ingress = rules(spec.ingress, 'spec.ingress', 'from');
    const egress = rules(spec.egress, 'spec.egress', 'to');
    let types: string[];
    if (spec.policyTypes === undefined || spec.policyTypes === null) {
      types = egress.length > 0 ? ['Ingress', 'Egress'] : ['Ingress'];
    } else {
      types = list(spec.policyTypes, 'spec.policyTypes') as string[];
      for (const [i, t] of types.entries()) {
        if (t !== 'Ingress' && t !== 'Egress') throw new Bad(`spec.policyTypes[${i}]: must be Ingress or Egress, not ${JSON.stringify(t)}`);
        if (types.indexOf(t) !== i) throw new Bad(`spec.policyTypes[${i}]: ${t} given twice`);
      }
    }
    const out: NetworkPolicy = { namespace, name, podSelector };
    if (types.includes('Ingress')) out.ingress = ingress;
    if (types.includes('Egress')) out.egress = egress;
    return out;
  });
}

const TERMINAL_PHASES = new Set(['Succeeded', 'Failed']);

/**
 * Parses a Pod: labels, IPs (status.podIPs, else status.podIP; none once the pod has finished,
 * as its addresses may already belong to another pod), node, hostNetwork, and the container
 * ports named ports resolve against.
 */
export function parsePod(o: unknown): Pod | Invalid {
  return parsing(o, () => {
    const { namespace, name, meta } = metadata(o, true);
    const spec = object((o as Json).spec, 'spec');
    const status = object((o as Json).status, 'status');
    const texts = status.podIPs !== undefined && status.podIPs !== null
      ? list(status.podIPs, 'status.podIPs').map((p, i) => object(p, `status.podIPs[${i}]`).ip)
      : status.podIP !== undefined && status.podIP !== null && status.podIP !== '' ? [status.podIP] : [];
    const ips = texts.map((t, i) => {
      const ip = typeof t === 'string' ? tryParseIP(t) : undefined;
      if (!ip) throw new Bad(`status.podIPs[${i}].ip: not an IP address: ${JSON.stringify(t)}`);
      return ip;
    });
    const ports: ContainerPort[] = [];
    for (const [i, c] of list(spec.containers, 'spec.containers').entries()) {
      for (const [j, p] of list(object(c, `spec.containers[${i}]`).ports, `spec.containers[${i}].ports`).entries()) {
        const at = `spec.containers[${i}].ports[${j}]`;
        const cp = object(p, at);
        const port: ContainerPort = {
          port: portNumber(cp.containerPort, `${at}.containerPort`),
          protocol: protocol(cp.protocol, `${at}.protocol`),
        };
        if (cp.name !== undefined && cp.name !== null && cp.name !== '') {
          if (typeof cp.name !== 'string' || !isPortName(cp.name)) throw new Bad(`${at}.name: not a port name: ${JSON.stringify(cp.name)}`);
          port.name = cp.name;
        }
        ports.push(port);
      }
    }
    const node = spec.nodeName ?? '';
    if (typeof node !== 'string') throw new Bad('spec.nodeName: must be a string');
    return {
      namespace,
      name,
      labels: labels(meta.labels, 'metadata.labels'),
      ips: TERMINAL_PHASES.has(status.phase as string) ? [] : ips,
      node,
      hostNetwork: spec.hostNetwork === true,
      ports,
    };
  });
}

/**
 * Parses a Namespace: its name, labels and the verdicts it asks to log (a bad annotation logs
 * nothing and is reported in `aclLoggingProblem`; the namespace stays valid, its labels select).
 */
export function parseNamespace(o: unknown): Namespace | Invalid {
  return parsing(o, () => {
    const { name, meta } = metadata(o, false);
    const out: Namespace = { name, labels: labels(meta.labels, 'metadata.labels') };
    const annotation = (meta.annotations as Json | undefined)?.[ACL_LOGGING_ANNOTATION];
    if (typeof annotation === 'string') {
      const { logging, problem } = parseAclLogging(annotation);
      if (logging.deny || logging.allow) out.aclLogging = logging;
      if (problem) out.aclLoggingProblem = problem;
    }
    return out;
  });
}
