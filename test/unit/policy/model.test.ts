import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseCIDR } from '../../../src/ip/ip.ts';
import { isInvalid, isPortName, parseNamespace, parseNetworkPolicy, parsePod } from '../../../src/policy/model.ts';
import { policyObject } from '../../support/netpol-cluster.ts';

const parsed = (spec: Record<string, unknown>) => {
  const p = parseNetworkPolicy(policyObject('x', 'p', spec));
  if (isInvalid(p)) assert.fail(p.invalid);
  return p;
};

test('policyTypes default: Ingress always, Egress only when egress holds a rule', () => {
  assert.deepEqual([parsed({ podSelector: {} }).ingress, parsed({ podSelector: {} }).egress], [[], undefined]);
  assert.equal(parsed({ podSelector: {}, egress: [] }).egress, undefined);
  assert.deepEqual(parsed({ podSelector: {}, egress: [{}] }).egress, [{ peers: [], ports: [] }]);
  assert.deepEqual(parsed({ podSelector: {}, egress: [{}] }).ingress, []);
  const egressOnly = parsed({ podSelector: {}, policyTypes: ['Egress'], ingress: [{}] });
  assert.equal(egressOnly.ingress, undefined, 'rules of a direction policyTypes does not name are ignored');
  assert.deepEqual(egressOnly.egress, []);
});

test('an absent podSelector (or spec) is the empty one, selecting every pod, as the API server decodes it', () => {
  const every = { matchLabels: {}, matchExpressions: [] };
  assert.deepEqual(parsed({}), { namespace: 'x', name: 'p', podSelector: every, ingress: [] });
  const noSpec = parseNetworkPolicy({ metadata: { namespace: 'x', name: 'p' } });
  assert.deepEqual(noSpec, { namespace: 'x', name: 'p', podSelector: every, ingress: [] });
});

test('peers: absent and empty selectors differ; ipBlock with except; ports with defaults', () => {
  const p = parsed({
    podSelector: { matchLabels: { app: 'db' } },
    ingress: [{
      from: [{ podSelector: {} }, { namespaceSelector: {} }, { namespaceSelector: { matchLabels: { ns: 'y' } }, podSelector: { matchLabels: { pod: 'b' } } }, { ipBlock: { cidr: '10.0.0.0/8', except: ['10.1.0.0/16'] } }],
      ports: [{ port: 80 }, { protocol: 'UDP' }, { protocol: 'SCTP', port: 'serve-81-sctp' }, { port: 1000, endPort: 2000 }],
    }],
  });
  const rule = p.ingress![0]!;
  assert.deepEqual(rule.peers[0], { kind: 'pods', podSelector: { matchLabels: {}, matchExpressions: [] } });
  assert.deepEqual(rule.peers[1], { kind: 'pods', namespaceSelector: { matchLabels: {}, matchExpressions: [] } });
  assert.deepEqual(rule.peers[2], { kind: 'pods', podSelector: { matchLabels: { pod: 'b' }, matchExpressions: [] }, namespaceSelector: { matchLabels: { ns: 'y' }, matchExpressions: [] } });
  assert.deepEqual(rule.peers[3], { kind: 'ipBlock', cidr: parseCIDR('10.0.0.0/8', 'c'), except: [parseCIDR('10.1.0.0/16', 'c')] });
  assert.deepEqual(rule.ports, [{ protocol: 'TCP', port: 80 }, { protocol: 'UDP' }, { protocol: 'SCTP', port: 'serve-81-sctp' }, { protocol: 'TCP', port: 1000, endPort: 2000 }]);
});

test('a malformed policy is a reason naming the field, never an exception', () => {
  const cases: [unknown, string][] = [
    [42, 'object: must be an object'],
    [{ metadata: { name: 'p' }, spec: { podSelector: {} } }, 'metadata.namespace: required'],
    [policyObject('x', 'p', { podSelector: { matchLabels: { a: 1 } } }), 'spec.podSelector.matchLabels: must map label keys to strings'],
    [policyObject('x', 'p', { podSelector: {}, policyTypes: ['Ingress', 'Ingress'] }), 'spec.policyTypes[1]: Ingress given twice'],
    [policyObject('x', 'p', { podSelector: {}, policyTypes: ['Sideways'] }), 'spec.policyTypes[0]: must be Ingress or Egress, not "Sideways"'],
    [policyObject('x', 'p', { podSelector: {}, ingress: {} }), 'spec.ingress: must be a list'],
    [policyObject('x', 'p', { podSelector: {}, ingress: [{ from: [{}] }] }), 'spec.ingress[0].from[0]: must have podSelector, namespaceSelector or ipBlock'],
    [policyObject('x', 'p', { podSelector: {}, ingress: [{ from: [{ ipBlock: { cidr: '10.0.0.0/8' }, podSelector: {} }] }] }), 'spec.ingress[0].from[0]: ipBlock cannot be combined with podSelector or namespaceSelector'],
    [policyObject('x', 'p', { podSelector: {}, ingress: [{ from: [{ ipBlock: { cidr: '10.0.0.0/33' } }] }] }), 'spec.ingress[0].from[0].ipBlock.cidr: not a CIDR: "10.0.0.0/33"'],
    [policyObject('x', 'p', { podSelector: {}, egress: [{ to: [{ ipBlock: { cidr: '10.0.0.0/8', except: ['11.0.0.0/16'] } }] }] }), 'spec.egress[0].to[0].ipBlock.except[0]: must be strictly within 10.0.0.0/8'],
    [policyObject('x', 'p', { podSelector: {}, egress: [{ to: [{ ipBlock: { cidr: '10.0.0.0/8', except: ['10.0.0.0/8'] } }] }] }), 'spec.egress[0].to[0].ipBlock.except[0]: must be strictly within 10.0.0.0/8'],
    [policyObject('x', 'p', { podSelector: {}, ingress: [{ ports: [{ protocol: 'ICMP' }] }] }), 'spec.ingress[0].ports[0].protocol: must be one of TCP, UDP, SCTP, not "ICMP"'],
    [policyObject('x', 'p', { podSelector: {}, ingress: [{ ports: [{ port: 0 }] }] }), 'spec.ingress[0].ports[0].port: must be a port number 1-65535, not 0'],
    [policyObject('x', 'p', { podSelector: {}, ingress: [{ ports: [{ port: 'Web_1' }] }] }), 'spec.ingress[0].ports[0].port: "Web_1" is neither a port number nor a port name'],
    [policyObject('x', 'p', { podSelector: {}, ingress: [{ ports: [{ port: 'web', endPort: 90 }] }] }), 'spec.ingress[0].ports[0].endPort: needs a numeric port'],
    [policyObject('x', 'p', { podSelector: {}, ingress: [{ ports: [{ endPort: 90 }] }] }), 'spec.ingress[0].ports[0].endPort: needs a numeric port'],
    [policyObject('x', 'p', { podSelector: {}, ingress: [{ ports: [{ port: 90, endPort: 80 }] }] }), 'spec.ingress[0].ports[0].endPort: must be at least port 90'],
  ];
  for (const [o, reason] of cases) {
    const p = parseNetworkPolicy(o);
    assert.ok(isInvalid(p), JSON.stringify(o));
    assert.equal(p.invalid, reason);
  }
  const bad = parseNetworkPolicy(policyObject('x', 'p', { podSelector: [] }));
  assert.ok(isInvalid(bad) && bad.id === 'x/p');
});

test('port names as Kubernetes validates them (IANA_SVC_NAME)', () => {
  for (const ok of ['http', 'serve-80-tcp', 'a', 'h2c', 'abcdefghijklmno']) assert.equal(isPortName(ok), true, ok);
  for (const bad of ['', '80', 'Http', '-web', 'web-', 'we--b', 'abcdefghijklmnop', 'web_1']) assert.equal(isPortName(bad), false, bad);
});

test('a pod: IPs from podIPs (else podIP), none once finished; node, hostNetwork, named container ports', () => {
  const pod = (status: unknown, spec: unknown = {}) => parsePod({ metadata: { namespace: 'x', name: 'a', labels: { pod: 'a' } }, spec, status });
  const dual = pod({ podIP: '10.244.1.5', podIPs: [{ ip: '10.244.1.5' }, { ip: 'fd00::5' }] }, {
    nodeName: 'node-1',
    containers: [{ ports: [{ containerPort: 80, name: 'web' }] }, { ports: [{ containerPort: 53, protocol: 'UDP', name: 'dns' }, { containerPort: 9000 }] }],
  });
  assert.ok(!isInvalid(dual));
  assert.deepEqual(dual.ips.map((i) => i.family), [4, 6]);
  assert.equal(dual.node, 'node-1');
  assert.equal(dual.hostNetwork, false);
  assert.deepEqual(dual.ports, [{ port: 80, protocol: 'TCP', name: 'web' }, { port: 53, protocol: 'UDP', name: 'dns' }, { port: 9000, protocol: 'TCP' }]);
  const legacy = pod({ podIP: '10.244.1.6' });
  assert.ok(!isInvalid(legacy) && legacy.ips.length === 1 && legacy.node === '');
  const pending = pod({});
  assert.ok(!isInvalid(pending) && pending.ips.length === 0);
  const done = pod({ phase: 'Succeeded', podIPs: [{ ip: '10.244.1.7' }] });
  assert.ok(!isInvalid(done) && done.ips.length === 0);
  const host = pod({ podIPs: [{ ip: '198.51.100.1' }] }, { hostNetwork: true });
  assert.ok(!isInvalid(host) && host.hostNetwork);
  const badIP = pod({ podIPs: [{ ip: '10.244.1.300' }] });
  assert.ok(isInvalid(badIP) && badIP.invalid === 'status.podIPs[0].ip: not an IP address: "10.244.1.300"' && badIP.id === 'x/a');
  const badPort = pod({}, { containers: [{ ports: [{ containerPort: 70000 }] }] });
  assert.ok(isInvalid(badPort) && badPort.invalid === 'spec.containers[0].ports[0].containerPort: must be a port number 1-65535, not 70000');
});

test('a namespace: name and labels', () => {
  assert.deepEqual(parseNamespace({ metadata: { name: 'x', labels: { ns: 'x' } } }), { name: 'x', labels: { ns: 'x' } });
  assert.deepEqual(parseNamespace({ metadata: { name: 'x' } }), { name: 'x', labels: {} });
  assert.deepEqual(parseNamespace({ metadata: { labels: {} } }), { id: '?', invalid: 'metadata.name: required' });
  assert.deepEqual(parseNamespace({ metadata: { name: 'x', labels: { a: true } } }), { id: 'x', invalid: 'metadata.labels: must map label keys to strings' });
});
