/**
 * The cluster of Kubernetes' network policy e2e suite, as API objects: namespaces x, y, z
 * (labelled `ns=<name>`), pods a, b, c in each (labelled `pod=<name>`) serving ports 80 and 81 over
 * TCP, UDP and SCTP under the names `serve-<port>-<protocol>`, spread over two nodes.
 */
import assert from 'node:assert/strict';
import { isInvalid, parseNamespace, parseNetworkPolicy, parsePod } from '../../src/policy/model.ts';
import type { Invalid, NetworkPolicy, Namespace, Pod, PolicyModel } from '../../src/policy/model.ts';

export const NAMESPACES = ['x', 'y', 'z'] as const;
export const POD_NAMES = ['a', 'b', 'c'] as const;
/** `x/a` … `z/c`, the order of matrix rows and columns. */
export const PODS = NAMESPACES.flatMap((ns) => POD_NAMES.map((p) => `${ns}/${p}`));

/** x/a on node-1 at 10.244.1.11, x/b on node-2 at 10.244.2.12, …: the node alternates. */
export function podIP(id: string, family: 4 | 6 = 4): string {
  const i = PODS.indexOf(id);
  const subnet = (i % 2) + 1;
  const host = (Math.floor(i / 3) + 1) * 10 + (i % 3) + 1;
  return family === 4 ? `10.244.${subnet}.${host}` : `fd00:10:244:${subnet}::${host}`;
}

export function nodeOf(id: string): string {
  return `node-${(PODS.indexOf(id) % 2) + 1}`;
}

export function namespaceObject(name: string, labels: Record<string, string> = { ns: name }): unknown {
  return { apiVersion: 'v1', kind: 'Namespace', metadata: { name, labels: { 'kubernetes.io/metadata.name': name, ...labels } } };
}

export function podObject(id: string, labels?: Record<string, string>, opts: { dualStack?: boolean; ports?: unknown[] } = {}): unknown {
  const [namespace, name] = id.split('/') as [string, string];
  const ports = opts.ports ?? [80, 81].flatMap((port) => ['TCP', 'UDP', 'SCTP'].map((protocol) => ({ name: `serve-${port}-${protocol.toLowerCase()}`, containerPort: port, protocol })));
  const podIPs = [{ ip: podIP(id) }, ...(opts.dualStack ? [{ ip: podIP(id, 6) }] : [])];
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { namespace, name, labels: labels ?? { pod: name } },
    spec: { nodeName: nodeOf(id), containers: [{ name: 'c', image: 'agnhost', ports }] },
    status: { phase: 'Running', podIP: podIPs[0]!.ip, podIPs },
  };
}

function parsed<T extends object>(v: T | Invalid): T {
  if (isInvalid(v)) assert.fail(`${v.id}: ${v.invalid}`);
  return v;
}

/** A NetworkPolicy object in `namespace` with `spec`. */
export function policyObject(namespace: string, name: string, spec: Record<string, unknown>): unknown {
  return { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { namespace, name }, spec };
}

/** The e2e cluster with these policy objects; pods and namespaces overridable by object. */
export function clusterModel(policies: unknown[], over: { pods?: Record<string, unknown>; namespaces?: Record<string, unknown>; dualStack?: boolean } = {}): PolicyModel {
  return {
    policies: policies.map((o) => parsed<NetworkPolicy>(parseNetworkPolicy(o))),
    pods: PODS.map((id) => parsed<Pod>(parsePod(over.pods?.[id] ?? podObject(id, undefined, { dualStack: over.dualStack ?? false })))),
    namespaces: NAMESPACES.map((n) => parsed<Namespace>(parseNamespace(over.namespaces?.[n] ?? namespaceObject(n)))),
  };
}
