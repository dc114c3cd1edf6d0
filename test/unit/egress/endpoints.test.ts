import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parsePolicy } from '../../../src/egress/api.ts';
import type { Policy } from '../../../src/egress/api.ts';
import { buildEndpoints, endpointsName, parseEgressPod, parseEndpoints } from '../../../src/egress/endpoints.ts';
import type { EgressNamespace, EgressPod } from '../../../src/egress/endpoints.ts';
import type { PolicyStatus } from '../../../src/egress/placement.ts';

const policy = (o: object) => parsePolicy(o) as Policy;
const ns = (name: string, labels: Record<string, string> = {}): [string, EgressNamespace] => [name, { name, labels }];
const pod = (namespace: string, node: string, labels: Record<string, string>, ...ips: string[]): EgressPod => ({ namespace, node, labels, ips });

test('endpoints names of namespaced and cluster policies never collide', () => {
  assert.equal(endpointsName('default/a'), 'ns-default.a');
  assert.equal(endpointsName('a'), 'c.a');
  assert.notEqual(endpointsName('ns-default.a'), endpointsName('default/a'));
});

test('pods: running, scheduled, with addresses, not on the host network', () => {
  const base = { metadata: { namespace: 'default', name: 'p', labels: { app: 'a' } }, spec: { nodeName: 'node-1' }, status: { phase: 'Running', podIPs: [{ ip: '10.244.1.5' }, { ip: 'fd00::5' }] } };
  assert.deepEqual(parseEgressPod(base), { namespace: 'default', labels: { app: 'a' }, node: 'node-1', ips: ['10.244.1.5', 'fd00::5'] });
  assert.equal(parseEgressPod({ ...base, spec: { nodeName: 'node-1', hostNetwork: true } }), undefined);
  assert.equal(parseEgressPod({ ...base, status: { phase: 'Succeeded', podIPs: [{ ip: '10.244.1.5' }] } }), undefined);
  assert.equal(parseEgressPod({ ...base, status: { phase: 'Pending' } }), undefined);
  assert.equal(parseEgressPod({ ...base, spec: {} }), undefined);
});

test('a placed policy publishes its gateway, EIP, destinations and selected pods grouped by node; an unplaced one nothing', () => {
  const a = policy({ metadata: { namespace: 'default', name: 'a' }, spec: { gateway: 'gw', podSelector: { matchLabels: { app: 'a' } }, destinations: ['203.0.113.0/24'] } });
  const c = policy({ metadata: { name: 'c' }, spec: { gateway: 'gw', namespaceSelector: { matchLabels: { team: 'x' } }, podSelector: {}, egressAddress: { source: 'NodeIP' } } });
  const unplaced = policy({ metadata: { namespace: 'default', name: 'u' }, spec: { gateway: 'missing', podSelector: {} } });
  const statuses: PolicyStatus[] = [
    { id: 'default/a', gateway: 'gw', ready: true, reason: 'Placed', message: '', placement: { node: 'node-3', ipv4: '198.51.100.100' } },
    { id: 'c', gateway: 'gw', ready: true, reason: 'Placed', message: '', placement: { node: 'node-2' } },
    { id: 'default/u', gateway: 'missing', ready: false, reason: 'GatewayNotFound', message: '' },
  ];
  const pods = [
    pod('default', 'node-2', { app: 'a' }, '10.244.2.9'),
    pod('default', 'node-1', { app: 'a' }, '10.244.1.6', 'fd00::6'),
    pod('default', 'node-1', { app: 'a' }, '10.244.1.5'),
    pod('default', 'node-1', { app: 'b' }, '10.244.1.7'),
    pod('other', 'node-1', { app: 'a' }, '10.244.1.8'),
  ];
  const namespaces = new Map([ns('default'), ns('other', { team: 'x' })]);
  const out = buildEndpoints([a, c, unplaced], statuses, pods, namespaces);
  assert.deepEqual([...out.keys()], ['ns-default.a', 'c.c']);
  assert.deepEqual(out.get('ns-default.a'), {
    policy: 'default/a', gateway: 'node-3', eip: { ipv4: '198.51.100.100' }, destinations: ['203.0.113.0/24'],
    sources: [{ node: 'node-1', ips: ['10.244.1.5', '10.244.1.6', 'fd00::6'] }, { node: 'node-2', ips: ['10.244.2.9'] }],
  });
  assert.deepEqual(out.get('c.c'), { policy: 'c', gateway: 'node-2', destinations: [], sources: [{ node: 'node-1', ips: ['10.244.1.8'] }] });
});

test('endpoints are peer data on a node: parsed, and refused naming the field', () => {
  const ok = { metadata: { name: 'ns-default.a' }, spec: { policy: 'default/a', gateway: 'node-3', eip: { ipv4: '198.51.100.100' }, destinations: ['203.0.113.0/24'], sources: [{ node: 'node-1', ips: ['10.244.1.5'] }] } };
  const parsed = parseEndpoints(ok);
  assert.ok(typeof parsed !== 'string');
  assert.deepEqual([parsed.gateway, parsed.eip, parsed.destinations.length, parsed.sources], ['node-3', { ipv4: '198.51.100.100' }, 1, [{ node: 'node-1', ips: ['10.244.1.5'] }]]);
  assert.match(String(parseEndpoints({ ...ok, spec: { ...ok.spec, eip: { ipv4: '2001:db8::1' } } })), /ns-default\.a: spec\.eip\.ipv4: not an IPv4 address/);
  assert.match(String(parseEndpoints({ ...ok, spec: { ...ok.spec, destinations: ['nope'] } })), /spec\.destinations\[0\]/);
  assert.match(String(parseEndpoints({ ...ok, spec: { ...ok.spec, sources: [{ node: 'node-1', ips: ['x'] }] } })), /spec\.sources\[0\]\.ips: "x" is not an address/);
  assert.match(String(parseEndpoints({ metadata: { name: 'e' } })), /e: spec: required/);
});
