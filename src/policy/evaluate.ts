/**
 * The reference evaluator of NetworkPolicy (issue #22): whether a new connection is allowed, by
 * the API's documented semantics, straight from the model. It is the oracle the rendered rules and
 * the end-to-end truth tables are compared against, so it favours obviousness over speed.
 *
 * Semantics:
 * - A pod selected by no policy of a direction (policies of its namespace whose podSelector
 *   matches it and whose types name the direction) is unrestricted in that direction; otherwise a
 *   connection passes when at least one rule of at least one of those policies allows it
 *   (policies add up). Pod to pod, the source's egress and the destination's ingress must both
 *   allow it.
 * - Pod peers (podSelector / namespaceSelector) match pods only, never hostNetwork pods or other
 *   addresses; ipBlock matches the address, whoever holds it (a pod included, as Kubernetes' e2e
 *   suite expects), unless it falls in one of its excepts.
 * - A named port resolves on the destination pod (its container port of that name and
 *   protocol); a destination that is not a pod, or has no such port, never matches it.
 * - A pod cannot block itself, and traffic between a pod and the node it runs on is always
 *   allowed, both ways (kubelet probes).
 * - Only new connections are judged: replies of an allowed connection always pass.
 */
import { WeftError } from '../errors.ts';
import { contains, equalIP } from '../ip/ip.ts';
import type { Family, IP } from '../ip/ip.ts';
import { tryParseIP } from '../ip/ip.ts';
import { matchesLabels } from '../k8s/label-selector.ts';
import type { Namespace, NetworkPolicy, Peer, Pod, PolicyModel, PolicyPort, PolicyRule, Protocol } from './model.ts';

/** One end of a connection. */
export type Endpoint =
  /** A pod, `namespace/name`; `ip` picks one of its addresses (default: its first of the family in use). */
  | { pod: string; ip?: string }
  /** The host network stack of a node, at `ip`. */
  | { node: string; ip: string }
  /** Anything else: an address outside the pods and nodes. */
  | { ip: string };

export type Direction = 'ingress' | 'egress';

const grouped = new WeakMap<readonly { namespace: string }[], Map<string, { namespace: string }[]>>();

/**
 * `list` grouped by namespace, built once per list (a render asks pods × policies questions of
 * the same lists; the groups make them pods × policies of one namespace).
 */
export function byNamespace<T extends { namespace: string }>(list: readonly T[]): Map<string, T[]> {
  let groups = grouped.get(list) as Map<string, T[]> | undefined;
  if (!groups) {
    groups = new Map();
    for (const x of list) {
      const g = groups.get(x.namespace);
      if (g) g.push(x);
      else groups.set(x.namespace, [x]);
    }
    grouped.set(list, groups);
  }
  return groups;
}

/** The policies of a direction that select `pod` (none: it is not isolated in that direction). */
export function policiesSelecting(model: PolicyModel, pod: Pod, dir: Direction): NetworkPolicy[] {
  if (pod.hostNetwork) return [];
  return (byNamespace(model.policies).get(pod.namespace) ?? []).filter(
    (p) => p[dir] !== undefined && matchesLabels(p.podSelector, pod.labels),
  );
}

/** Namespace labels by name, built once per namespace list: peers are matched pods × rules times. */
const labelsByName = new WeakMap<readonly Namespace[], Map<string, Readonly<Record<string, string>>>>();

function namespaceLabels(model: PolicyModel, name: string): Readonly<Record<string, string>> {
  let byName = labelsByName.get(model.namespaces);
  if (!byName) {
    byName = new Map(model.namespaces.map((n) => [n.name, n.labels]));
    labelsByName.set(model.namespaces, byName);
  }
  return byName.get(name) ?? {};
}

/** Whether `peer` of a policy in `policyNs` matches the other end: `pod` when it is one, at `ip`. */
export function peerMatches(model: PolicyModel, peer: Peer, policyNs: string, pod: Pod | undefined, ip: IP): boolean {
  if (peer.kind === 'ipBlock') return contains(peer.cidr, ip) && !peer.except.some((e) => contains(e, ip));
  if (!pod || pod.hostNetwork) return false;
  if (peer.namespaceSelector ? !matchesLabels(peer.namespaceSelector, namespaceLabels(model, pod.namespace)) : pod.namespace !== policyNs) {
    return false;
  }
  return !peer.podSelector || matchesLabels(peer.podSelector, pod.labels);
}

/**
 * The pods a pod peer (podSelector / namespaceSelector) of a policy in `policyNs` matches: as {@link peerMatches},
 * namespace by namespace.
 */
export function podsMatching(model: PolicyModel, peer: Peer & { kind: 'pods' }, policyNs: string): Pod[] {
  const out: Pod[] = [];
  for (const [ns, pods] of byNamespace(model.pods)) {
    if (peer.namespaceSelector ? !matchesLabels(peer.namespaceSelector, namespaceLabels(model, ns)) : ns !== policyNs) continue;
    for (const pod of pods) if (!pod.hostNetwork && (!peer.podSelector || matchesLabels(peer.podSelector, pod.labels))) out.push(pod);
  }
  return out;
}

/** The port number a policy port stands for on `dst` (a named one resolved there), or undefined. */
export function resolvePort(p: PolicyPort, dst: Pod | undefined): number | undefined {
  if (typeof p.port !== 'string') return p.port;
  return dst?.ports.find((c) => c.name === p.port && c.protocol === p.protocol)?.port;
}

/** Whether `ports` of a rule admit `proto`/`port` towards `dst`. */
function portsMatch(ports: readonly PolicyPort[], dst: Pod | undefined, proto: Protocol, port: number): boolean {
  if (ports.length === 0) return true;
  return ports.some((p) => {
    if (p.protocol !== proto) return false;
    if (p.port === undefined) return true;
    const first = resolvePort(p, dst);
    if (first === undefined) return false;
    return port >= first && port <= (p.endPort ?? first);
  });
}

function ruleAllows(
  model: PolicyModel,
  policy: NetworkPolicy,
  rule: PolicyRule,
  peer: Pod | undefined,
  peerIP: IP,
  dst: Pod | undefined,
  proto: Protocol,
  port: number,
): boolean {
  return (
    portsMatch(rule.ports, dst, proto, port) &&
    (rule.peers.length === 0 || rule.peers.some((p) => peerMatches(model, p, policy.namespace, peer, peerIP)))
  );
}

interface Resolved {
  pod?: Pod;
  node?: string;
  ip: IP;
}

/** A question the evaluator cannot answer: the caller's mistake, not a verdict. */
function misuse(why: string): WeftError {
  return new WeftError('EINVAL', `failed to evaluate a connection: ${why}`);
}

function findPod(model: PolicyModel, id: string): Pod {
  const pod = model.pods.find((p) => `${p.namespace}/${p.name}` === id);
  if (!pod) throw misuse(`no pod ${id} in the model`);
  return pod;
}

function parse(text: string): IP {
  const ip = tryParseIP(text);
  if (!ip) throw misuse(`not an IP address: ${text}`);
  return ip;
}

function resolve(model: PolicyModel, e: Endpoint, family: Family | undefined): Resolved {
  if ('pod' in e) {
    const pod = findPod(model, e.pod);
    const ip = e.ip !== undefined ? parse(e.ip) : pod.ips.find((a) => family === undefined || a.family === family);
    if (!ip) throw misuse(`pod ${e.pod} has no IPv${family ?? ''} address`);
    return { pod, ip };
  }
  const ip = parse(e.ip);
  // An address held by a pod is that pod, as the data plane sees it.
  const pod = model.pods.find((p) => !p.hostNetwork && p.ips.some((a) => equalIP(a, ip)));
  return 'node' in e ? { node: e.node, ip } : pod ? { pod, ip } : { ip };
}

function familyOf(e: Endpoint): Family | undefined {
  return e.ip === undefined ? undefined : parse(e.ip).family;
}

/**
 * Whether a new `proto` connection from `src` to `dst`:`port` is allowed. Pods are named
 * `namespace/name` and must be in the model; the address family is that of an explicit `ip`
 * (either end), else of the source pod's first address.
 */
export function allowed(model: PolicyModel, src: Endpoint, dst: Endpoint, proto: Protocol, port: number): boolean {
  const family = familyOf(src) ?? familyOf(dst) ?? ('pod' in src ? findPod(model, src.pod).ips[0]?.family : undefined);
  const s = resolve(model, src, family);
  const d = resolve(model, dst, family);
  if (s.ip.family !== d.ip.family) throw misuse('the two ends are of different address families');
  if (s.pod && d.pod && s.pod === d.pod) return true;
  if (s.node !== undefined && d.pod && !d.pod.hostNetwork && d.pod.node === s.node) return true;
  if (d.node !== undefined && s.pod && !s.pod.hostNetwork && s.pod.node === d.node) return true;
  // Named ports resolve on pods of the pod network only.
  const dstPod = d.pod && !d.pod.hostNetwork ? d.pod : undefined;
  return direction(model, s.pod, d, 'egress', dstPod, proto, port) && direction(model, d.pod, s, 'ingress', dstPod, proto, port);
}

/** Whether `self` (when a pod) lets the connection through in `dir`, the other end being `other`. */
function direction(
  model: PolicyModel,
  self: Pod | undefined,
  other: Resolved,
  dir: Direction,
  dst: Pod | undefined,
  proto: Protocol,
  port: number,
): boolean {
  if (!self) return true;
  const policies = policiesSelecting(model, self, dir);
  if (policies.length === 0) return true;
  return policies.some((p) => p[dir]!.some((r) => ruleAllows(model, p, r, other.pod, other.ip, dst, proto, port)));
}

/**
 * Which of `policies` (the ones selecting a pod in `dir`) have a rule admitting a new `proto`
 * connection to `port`, the remote end being `remote` (its pod, when a pod holds the address)
 * and the destination pod `dst` (named ports resolve there): what decided an allowed verdict.
 */
export function policiesAllowing(
  model: PolicyModel,
  policies: readonly NetworkPolicy[],
  dir: Direction,
  remote: { pod?: Pod; ip: IP },
  dst: Pod | undefined,
  proto: Protocol,
  port: number,
): NetworkPolicy[] {
  return policies.filter((p) => p[dir]!.some((r) => ruleAllows(model, p, r, remote.pod, remote.ip, dst, proto, port)));
}
