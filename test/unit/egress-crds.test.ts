/**
 * egress-crds.yaml against the code it serves: names, group, scopes, status subresources, a
 * structural schema, enumerations and defaults equal to src/egress/api.ts's, and sample objects
 * through the schema the way kube-apiserver applies it (the test API server's implementation).
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { parseAllDocuments } from 'yaml';
import {
  DEFAULT_LIMIT, EGRESS_GROUP, EGRESS_SOURCES, EGRESS_VERSION, EIP_ALLOCATION_MODES, NODE_SELECTION_MODES, parseGateway, parsePolicy,
} from '../../src/egress/api.ts';
import { FORWARD_PROTOCOLS } from '../../src/egress/eip.ts';
import { parseInbound } from '../../src/egress/inbound.ts';
import { pruneAndDefault, validateSchema } from '../support/kube-api/schema.ts';
import type { Obj } from '../support/kube-api/status.ts';

const crds = parseAllDocuments(readFileSync(new URL('../../egress-crds.yaml', import.meta.url), 'utf8')).map((d) => d.toJS() as Obj).filter(Boolean);
const spec = (o: Obj) => o.spec as Obj;
const version = (o: Obj) => (spec(o).versions as Obj[])[0]!;
const schemaOf = (kind: string): Obj => {
  const crd = crds.find((c) => (spec(c).names as Obj).kind === kind);
  assert.ok(crd, `a CRD of ${kind}`);
  return (version(crd).schema as Obj).openAPIV3Schema as Obj;
};

/** An object as kube-apiserver would store it: pruned and defaulted, and the fields it rejects, sorted. */
function admit(kind: string, o: Obj): { stored: Obj; errors: string[] } {
  const stored = structuredClone(o);
  pruneAndDefault(schemaOf(kind), stored);
  return { stored, errors: validateSchema(schemaOf(kind), stored).map((e) => e.field).sort() };
}

test('six CRDs of egress.weft.dev/v1alpha1, scoped as the API says; the five users write with a status subresource', () => {
  assert.equal(EGRESS_GROUP, 'egress.weft.dev');
  assert.deepEqual(crds.map((c) => [c.kind, c.apiVersion, (c.metadata as Obj).name, spec(c).scope, (spec(c).names as Obj).kind]), [
    ['CustomResourceDefinition', 'apiextensions.k8s.io/v1', 'egressgateways.egress.weft.dev', 'Cluster', 'EgressGateway'],
    ['CustomResourceDefinition', 'apiextensions.k8s.io/v1', 'egresspolicies.egress.weft.dev', 'Namespaced', 'EgressPolicy'],
    ['CustomResourceDefinition', 'apiextensions.k8s.io/v1', 'egressclusterpolicies.egress.weft.dev', 'Cluster', 'EgressClusterPolicy'],
    ['CustomResourceDefinition', 'apiextensions.k8s.io/v1', 'egressendpoints.egress.weft.dev', 'Cluster', 'EgressEndpoints'],
    ['CustomResourceDefinition', 'apiextensions.k8s.io/v1', 'floatingips.egress.weft.dev', 'Namespaced', 'FloatingIP'],
    ['CustomResourceDefinition', 'apiextensions.k8s.io/v1', 'portforwards.egress.weft.dev', 'Namespaced', 'PortForward'],
  ]);
  for (const c of crds) {
    assert.equal(spec(c).group, EGRESS_GROUP);
    assert.equal((c.metadata as Obj).name, `${(spec(c).names as Obj).plural}.${EGRESS_GROUP}`);
    assert.deepEqual((spec(c).versions as Obj[]).map((v) => [v.name, v.served, v.storage]), [[EGRESS_VERSION, true, true]]);
    // EgressEndpoints is the controller's output, all spec: no status to write.
    assert.deepEqual((version(c).subresources as Obj | undefined)?.status, (spec(c).names as Obj).kind === 'EgressEndpoints' ? undefined : {});
  }
});

test('the schemas are structural: every node typed, every object\'s fields listed', () => {
  const walk = (s: Obj, path: string) => {
    assert.equal(typeof s.type, 'string', `${path} has a type`);
    if (s.type === 'object') {
      assert.ok(s.properties || s.additionalProperties, `${path} lists its fields`);
      for (const [k, v] of Object.entries((s.properties ?? {}) as Obj)) walk(v as Obj, `${path}.${k}`);
      if (typeof s.additionalProperties === 'object') walk(s.additionalProperties as Obj, `${path}[*]`);
    }
    if (s.type === 'array') walk(s.items as Obj, `${path}[]`);
  };
  for (const kind of ['EgressGateway', 'EgressPolicy', 'EgressClusterPolicy', 'EgressEndpoints', 'FloatingIP', 'PortForward']) walk(schemaOf(kind), kind);
  const gw = (schemaOf('EgressGateway').properties as Obj).spec as Obj;
  const props = (path: string[]) => path.reduce((s, k) => (s.properties as Obj)[k] as Obj, gw);
  assert.deepEqual(props(['nodeSelection', 'mode']).enum, [...NODE_SELECTION_MODES]);
  assert.deepEqual(props(['eipAllocation', 'mode']).enum, [...EIP_ALLOCATION_MODES]);
  assert.equal(props(['nodeSelection', 'limit']).default, DEFAULT_LIMIT);
  assert.equal(props(['eipAllocation', 'limit']).default, DEFAULT_LIMIT);
  const forward = ((schemaOf('PortForward').properties as Obj).spec as Obj).properties as Obj;
  assert.deepEqual((forward.protocol as Obj).enum, [...FORWARD_PROTOCOLS]);
  const target = (((((schemaOf('EgressEndpoints').properties as Obj).spec as Obj).properties as Obj).inbound as Obj).items as Obj).properties as Obj;
  assert.deepEqual((target.protocol as Obj).enum, [...FORWARD_PROTOCOLS]);
  for (const kind of ['EgressPolicy', 'EgressClusterPolicy']) {
    const source = ((((schemaOf(kind).properties as Obj).spec as Obj).properties as Obj).egressAddress as Obj).properties as Obj;
    assert.deepEqual((source.source as Obj).enum, [...EGRESS_SOURCES]);
  }
});

test('sample objects: defaults filled as parseGateway and parsePolicy assume, unknown fields pruned, bad ones rejected by field', () => {
  const gw = admit('EgressGateway', {
    apiVersion: `${EGRESS_GROUP}/${EGRESS_VERSION}`, kind: 'EgressGateway', metadata: { name: 'gw' },
    spec: { nodeSelector: { matchLabels: { 'egress.weft.dev/gateway': 'true' } }, eipPool: { ipv4: ['198.51.100.10-198.51.100.20'] }, extra: 1 },
  });
  assert.deepEqual(gw.errors, []);
  assert.deepEqual(spec(gw.stored), {
    nodeSelector: { matchLabels: { 'egress.weft.dev/gateway': 'true' } }, eipPool: { ipv4: ['198.51.100.10-198.51.100.20'] },
    nodeSelection: { mode: 'Spread', limit: 5 }, eipAllocation: { mode: 'PreferUnused', limit: 5 },
  });
  assert.ok(!('invalid' in parseGateway(gw.stored)));
  assert.deepEqual(admit('EgressGateway', { spec: { nodeSelector: {}, nodeSelection: { mode: 'spread', limit: 0 }, eipPool: { ipv4: 'x' } } }).errors,
    ['spec.eipPool.ipv4', 'spec.nodeSelection.limit', 'spec.nodeSelection.mode']);
  assert.deepEqual(admit('EgressGateway', { spec: {} }).errors, ['spec.nodeSelector']);

  const pol = admit('EgressPolicy', { metadata: { name: 'p', namespace: 'shop' }, spec: { gateway: 'gw', podSelector: { matchLabels: { app: 'pay' } } } });
  assert.deepEqual(pol.errors, []);
  assert.deepEqual((spec(pol.stored).egressAddress as Obj), { source: 'EIP' });
  assert.ok(!('invalid' in parsePolicy(pol.stored)));
  assert.deepEqual(admit('EgressPolicy', {
    spec: { gateway: '', podSelector: { matchExpressions: [{ key: 'a', operator: 'Is' }] }, destinations: ['10.0.0.0/40'], egressAddress: { source: 'EIP', ipv4: '198.51.100.300' } },
  }).errors, ['spec.destinations[0]', 'spec.egressAddress.ipv4', 'spec.gateway', 'spec.podSelector.matchExpressions[0].operator']);
  assert.deepEqual(admit('EgressClusterPolicy', { spec: { gateway: 'gw', podSelector: {} } }).errors, ['spec.namespaceSelector']);
  const cluster = admit('EgressClusterPolicy', { metadata: { name: 'c' }, spec: { gateway: 'gw', podSelector: {}, namespaceSelector: {}, egressAddress: { source: 'NodeIP' } } });
  assert.deepEqual(cluster.errors, []);
  assert.ok(!('invalid' in parsePolicy(cluster.stored)));
  const status = admit('EgressPolicy', { spec: { gateway: 'gw', podSelector: {} }, status: { node: 'n1', eip: { ipv4: '198.51.100.10' }, conditions: [{ type: 'Ready', status: 'Maybe' }] } });
  assert.deepEqual(status.errors, ['status.conditions[0].status']);
});

test('sample floating IPs and port forwards: defaults filled as parseInbound assumes, bad fields rejected by field', () => {
  const meta = { name: 'web', namespace: 'shop' };
  const fip = admit('FloatingIP', { metadata: meta, spec: { gateway: 'gw', pod: 'web', extra: 1 } });
  assert.deepEqual([fip.errors, spec(fip.stored)], [[], { gateway: 'gw', pod: 'web' }]);
  assert.ok(!('invalid' in parseInbound('FloatingIP', fip.stored)));
  assert.deepEqual(admit('FloatingIP', { spec: { gateway: '', eip: { ipv4: '2001:db8::1' } } }).errors, ['spec.eip.ipv4', 'spec.gateway', 'spec.pod']);
  const pf = admit('PortForward', { metadata: meta, spec: { gateway: 'gw', pod: 'web', eip: { ipv4: '198.51.100.10' }, port: 80 } });
  assert.deepEqual([pf.errors, spec(pf.stored).protocol], [[], 'TCP']);
  const parsed = parseInbound('PortForward', pf.stored);
  assert.ok(parsed.kind === 'PortForward' && !('invalid' in parsed), JSON.stringify(parsed));
  assert.deepEqual([parsed.protocol, parsed.port, parsed.podPort], ['TCP', 80, 80]);
  assert.deepEqual(admit('PortForward', { spec: { gateway: 'gw', pod: 'web', eip: {}, protocol: 'ICMP', port: 0, podPort: 65536 } }).errors,
    ['spec.eip', 'spec.podPort', 'spec.port', 'spec.protocol']);
  assert.deepEqual(admit('PortForward', { spec: { gateway: 'gw', pod: 'web' } }).errors, ['spec.eip', 'spec.port']);
  const status = admit('FloatingIP', { spec: { gateway: 'gw', pod: 'web' }, status: { node: 'n1', eip: { ipv4: '198.51.100.10' }, podIPs: ['10.244.1.5'], conditions: [{ type: 'Ready', status: 'False', reason: 'PodNotFound' }] } });
  assert.deepEqual([status.errors, (status.stored.status as Obj).podIPs], [[], ['10.244.1.5']]);
});
