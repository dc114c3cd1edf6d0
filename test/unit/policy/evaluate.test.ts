import assert from 'node:assert/strict';
import { test } from 'node:test';
import { allowed } from '../../../src/policy/evaluate.ts';
import { isInvalid, parsePod } from '../../../src/policy/model.ts';
import type { Protocol } from '../../../src/policy/model.ts';
import { CASES, PROBES, expected, matrixOf } from '../../support/netpol-cases.ts';
import { clusterModel, podIP, policyObject } from '../../support/netpol-cluster.ts';

for (const c of CASES) {
  test(`truth table: ${c.name}`, () => {
    for (const state of c.states) {
      const model = clusterModel(state.policies, state);
      for (const probe of PROBES) {
        const [proto, port] = probe.split('/') as [Protocol, string];
        const got = matrixOf((from, to) => allowed(model, { pod: from }, { pod: to }, proto, Number(port)));
        assert.deepEqual(got, expected(state, probe), `${state.what}, ${probe}`);
      }
      for (const s of state.singles ?? []) {
        assert.equal(allowed(model, s.from, s.to, s.proto, s.port), s.allowed, `${state.what}: ${JSON.stringify(s)}`);
      }
    }
  });
}

test('SCTP is judged like TCP and UDP', () => {
  const model = clusterModel([policyObject('x', 'sctp', { podSelector: {}, ingress: [{ ports: [{ protocol: 'SCTP', port: 81 }] }] })]);
  assert.equal(allowed(model, { pod: 'y/a' }, { pod: 'x/a' }, 'SCTP', 81), true);
  assert.equal(allowed(model, { pod: 'y/a' }, { pod: 'x/a' }, 'SCTP', 80), false);
  assert.equal(allowed(model, { pod: 'y/a' }, { pod: 'x/a' }, 'TCP', 81), false);
});

test('dual stack: pod selectors hold for both families, an ipBlock for its own only', () => {
  const model = clusterModel([
    policyObject('x', 'v4-block', { podSelector: { matchLabels: { pod: 'a' } }, ingress: [{ from: [{ ipBlock: { cidr: '10.244.0.0/16' } }] }] }),
    policyObject('x', 'from-z', { podSelector: { matchLabels: { pod: 'b' } }, ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: 'z' } } }] }] }),
  ], { dualStack: true });
  assert.equal(allowed(model, { pod: 'y/a', ip: podIP('y/a') }, { pod: 'x/a' }, 'TCP', 80), true);
  assert.equal(allowed(model, { pod: 'y/a', ip: podIP('y/a', 6) }, { pod: 'x/a' }, 'TCP', 80), false);
  assert.equal(allowed(model, { pod: 'z/a', ip: podIP('z/a', 6) }, { pod: 'x/b' }, 'TCP', 80), true);
  assert.equal(allowed(model, { pod: 'y/a', ip: podIP('y/a', 6) }, { pod: 'x/b' }, 'TCP', 80), false);
});

test('an address held by a pod is that pod; a hostNetwork pod is neither selected nor a pod peer', () => {
  const model = clusterModel([policyObject('y', 'from-b', { podSelector: {}, ingress: [{ from: [{ podSelector: { matchLabels: { pod: 'b' } } }] }] })]);
  const host = parsePod({ metadata: { namespace: 'y', name: 'h', labels: { pod: 'b' } }, spec: { nodeName: 'node-2', hostNetwork: true }, status: { podIPs: [{ ip: '198.51.100.2' }] } });
  assert.ok(!isInvalid(host));
  const withHost = { ...model, pods: [...model.pods, host] };
  assert.equal(allowed(withHost, { ip: podIP('y/b') }, { pod: 'y/a' }, 'TCP', 80), true);
  assert.equal(allowed(withHost, { ip: podIP('x/b') }, { pod: 'y/a' }, 'TCP', 80), false);
  assert.equal(allowed(withHost, { pod: 'y/h' }, { pod: 'y/b' }, 'TCP', 80), false, 'a hostNetwork pod is no pod peer');
  assert.equal(allowed(withHost, { pod: 'x/a' }, { pod: 'y/h' }, 'TCP', 80), true, 'a hostNetwork pod is never isolated');
});

test('a pod the model lacks is a caller error, not an answer', () => {
  assert.throws(() => allowed(clusterModel([]), { pod: 'x/q' }, { pod: 'x/a' }, 'TCP', 80), /failed to evaluate a connection: no pod x\/q in the model/);
});
