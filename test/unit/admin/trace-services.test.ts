/**
 * `weftctl trace` beyond pod to pod: nodes as sources (their own connections), node ports on a
 * node's address, external and load balancer IPs, and the Service proxy's masquerade decision
 * (services/service-part.ts and base-chains.ts: off-cluster sources to a cluster IP, hairpin,
 * external ways in of externalTrafficPolicy Cluster, the node's own connections under Local).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { trace } from '../../../src/admin/trace.ts';
import type { TraceInputs, TraceResult } from '../../../src/admin/trace.ts';
import { parseCIDR, parseIP } from '../../../src/ip/ip.ts';
import type { Lease } from '../../../src/lease/lease.ts';
import type { Protocol } from '../../../src/policy/model.ts';
import { CASES } from '../../support/netpol-cases.ts';
import { clusterModel, policyObject } from '../../support/netpol-cluster.ts';
import { endpoint, serviceModel, serviceObject, sliceObject } from '../../support/services.ts';

const lease = (peer: string, subnet: string, publicIP: string): Lease => ({
  peer, subnet: parseCIDR(subnet, 'subnet'), attrs: { backendType: 'vxlan', publicIP: parseIP(publicIP, 'publicIP') },
});
const LEASES = [lease('node-1', '10.244.1.0/24', '198.51.100.1'), lease('node-2', '10.244.2.0/24', '198.51.100.2')];

/**
 * Service `web`: cluster IP 10.96.0.10, node port 30080, externalIP 198.18.0.50, load balancer IP
 * 198.18.0.60; endpoints x/a (node-1) and x/b (node-2).
 */
function services(spec: Record<string, unknown> = {}) {
  return serviceModel(
    [serviceObject('x', 'web', {
      type: 'LoadBalancer', clusterIP: '10.96.0.10', externalIPs: ['198.18.0.50'], ports: [{ port: 80, targetPort: 8080, nodePort: 30080 }],
      ...spec,
    }, { loadBalancer: { ingress: [{ ip: '198.18.0.60' }] } })],
    [sliceObject('x', 'web-1', 'web', 'IPv4', [{ port: 8080 }], [endpoint('10.244.1.11', 'node-1'), endpoint('10.244.2.12', 'node-2')])],
  );
}

function inputs(over: Partial<TraceInputs> = {}): TraceInputs {
  return {
    node: 'node-1', own: LEASES[0]!, leases: LEASES.slice(1), wanted: () => undefined, policy: clusterModel([]), services: services(),
    clusterCIDRs: [parseCIDR('10.244.0.0/16', 'network')], ...over,
  };
}

const masq = (r: TraceResult) => r.choices.map((c) => [c.target, c.masquerade]);
const stageOf = (r: TraceResult, stage: string) => r.steps.find((s) => s.stage === stage)!;

test('a node as the source, by name or address: its own connection, no pod egress policy; the policy verdicts of the truth tables', () => {
  const byName = trace(inputs(), 'node-2', 'x/a', 'TCP', 80);
  assert.equal(stageOf(byName, 'source').decision, 'node node-2 198.51.100.2');
  assert.match(stageOf(byName, 'source').why, /node node-2's own connection: it starts in the output hook/);
  assert.match(byName.choices[0]!.steps.find((s) => s.stage === 'policy-egress')!.why,
    /node node-2's own connection: no pod's egress policy/);
  assert.equal(stageOf(trace(inputs(), '198.51.100.1', 'x/a', 'TCP', 80), 'source').decision, 'node node-1 198.51.100.1');
  let singles = 0;
  for (const c of CASES) {
    for (const state of c.states) {
      for (const s of state.singles ?? []) {
        if (!('node' in s.from) || !('pod' in s.to)) continue;
        singles++;
        const got = trace(inputs({ policy: clusterModel(state.policies, state) }), s.from.node, s.to.pod, s.proto as Protocol, s.port);
        assert.equal(got.verdict, s.allowed ? 'allowed' : 'denied', `${c.name}: ${s.from.node} → ${s.to.pod}`);
      }
    }
  }
  assert.ok(singles >= 3, `the tables' node sources: ${singles}`);
  assert.throws(() => trace(inputs(), 'node-9', 'x/a', 'TCP', 80), /src: neither an address, a node nor a pod/);
});

test('masquerade at a cluster IP: pods keep their source, the node and off-cluster sources are SNATed, '
  + 'a pod reaching itself is (hairpin)', () => {
  assert.deepEqual(masq(trace(inputs(), 'x/c', '10.96.0.10', 'TCP', 80)), [['10.244.1.11:8080', false], ['10.244.2.12:8080', false]]);
  const fromNode = trace(inputs(), 'node-1', '10.96.0.10', 'TCP', 80);
  assert.deepEqual(masq(fromNode), [['10.244.1.11:8080', true], ['10.244.2.12:8080', true]]);
  assert.match(fromNode.choices[0]!.steps[0]!.why, /198\.51\.100\.1 is outside the cluster network 10\.244\.0\.0\/16/);
  const hairpin = trace(inputs(), 'x/a', '10.96.0.10', 'TCP', 80);
  assert.deepEqual(masq(hairpin), [['10.244.1.11:8080', true], ['10.244.2.12:8080', false]]);
  assert.match(hairpin.choices[0]!.steps[0]!.why, /^hairpin/);
  assert.deepEqual(masq(trace(inputs({ clusterCIDRs: [] }), 'node-1', '10.96.0.10', 'TCP', 80)).map(([, m]) => m), [false, false],
    'no cluster network, no masquerade rule');
});

test('node ports on a node\'s address (by address or name), external and load balancer IPs: translated there, '
  + 'masqueraded (Cluster)', () => {
  for (const [dst, way] of [['198.51.100.1', 'node port'], ['198.51.100.2', 'node port'], ['198.18.0.50', 'external IP'],
    ['198.18.0.60', 'load balancer IP']] as const) {
    const port = way === 'node port' ? 30080 : 80;
    const got = trace(inputs(), '198.18.0.9', dst, 'TCP', port);
    assert.equal(stageOf(got, 'service').decision, 'DNAT to one of 10.244.1.11:8080, 10.244.2.12:8080', dst);
    assert.match(stageOf(got, 'service').why, new RegExp(`Service x/web's ${way}`), dst);
    assert.deepEqual(masq(got).map(([, m]) => m), [true, true], `${dst}: externalTrafficPolicy Cluster masquerades`);
  }
  assert.equal(stageOf(trace(inputs(), 'x/c', 'node-2', 'TCP', 30080), 'destination').decision, 'node node-2 198.51.100.2');
  assert.equal(trace(inputs(), '198.18.0.9', '198.51.100.1', 'TCP', 30081).steps.some((s) => s.stage === 'service'), false,
    'no Service has node port 30081');
  assert.equal(trace(inputs({ services: services({ type: 'ClusterIP', externalIPs: [] }) }), '198.18.0.9', '198.51.100.1', 'TCP', 30080)
    .steps.some((s) => s.stage === 'service'), false, 'a ClusterIP Service has no node port');
});

test('externalTrafficPolicy Local: a client from outside keeps its address and gets the node\'s endpoints, else a drop; '
  + 'the node itself is masqueraded to every endpoint', () => {
  const local = inputs({ services: services({ externalTrafficPolicy: 'Local', healthCheckNodePort: 32100 }) });
  const outside = trace(local, '198.18.0.9', '198.51.100.2', 'TCP', 30080);
  assert.equal(stageOf(outside, 'service').decision, 'DNAT to one of 10.244.2.12:8080');
  assert.match(stageOf(outside, 'service').why, /node node-2's only \(externalTrafficPolicy Local\)/);
  assert.match(stageOf(outside, 'service').why, /translated on node node-2, which the connection reaches first$/);
  assert.doesNotMatch(stageOf(trace(local, '198.18.0.9', '198.51.100.1', 'TCP', 30080), 'service').why, /translated on/);
  assert.deepEqual(masq(outside), [['10.244.2.12:8080', false]]);
  const fromNode = trace(local, 'node-2', '198.51.100.2', 'TCP', 30080);
  assert.deepEqual(masq(fromNode), [['10.244.1.11:8080', true], ['10.244.2.12:8080', true]]);
  assert.match(fromNode.choices[0]!.steps[0]!.why, /fib saddr type local/);
  assert.deepEqual(masq(trace(local, 'x/c', '198.51.100.2', 'TCP', 30080)), [['10.244.1.11:8080', false], ['10.244.2.12:8080', false]]);
  const none = inputs({ services: serviceModel(
    [serviceObject('x', 'web', {
      type: 'NodePort', clusterIP: '10.96.0.10', externalTrafficPolicy: 'Local', ports: [{ port: 80, nodePort: 30080 }],
    })],
    [sliceObject('x', 'web-1', 'web', 'IPv4', [{ port: 80 }], [endpoint('10.244.2.12', 'node-2')])],
  ) });
  const dropped = trace(none, '198.18.0.9', '198.51.100.1', 'TCP', 30080);
  assert.equal(dropped.verdict, 'dropped');
  assert.equal(stageOf(dropped, 'service').decision, 'drop');
});

test('internalTrafficPolicy Local without an endpoint on the node drops (the rules\' verdict), where no endpoint at all rejects', () => {
  const got = trace(inputs({ services: services({ internalTrafficPolicy: 'Local' }) }), 'x/b', '10.96.0.10', 'TCP', 80);
  assert.deepEqual(got.choices.map((c) => c.target), ['10.244.2.12:8080'], 'x/b runs on node-2: node-2\'s endpoint');
  const elsewhere = serviceModel(
    [serviceObject('x', 'web', { clusterIP: '10.96.0.10', internalTrafficPolicy: 'Local', ports: [{ port: 80 }] })],
    [sliceObject('x', 'web-1', 'web', 'IPv4', [{ port: 80 }], [endpoint('10.244.2.12', 'node-2')])]);
  assert.equal(trace(inputs({ services: elsewhere }), 'x/a', '10.96.0.10', 'TCP', 80).verdict, 'dropped');
});

test('masqueraded towards another node\'s pod, its ingress policy sees the translating node, not the client', () => {
  const policy = clusterModel([policyObject('x', 'from-x', {
    podSelector: { matchLabels: { pod: 'b' } }, ingress: [{ from: [{ podSelector: {} }] }],
  })]);
  const direct = trace(inputs({ policy }), 'x/c', '10.96.0.10', 'TCP', 80);
  assert.equal(direct.verdict, 'allowed', 'a pod of x through the cluster IP keeps its source');
  const viaNodePort = trace(inputs({ policy }), 'x/c', '198.51.100.1', 'TCP', 30080);
  assert.deepEqual(viaNodePort.choices.map((c) => [c.target, c.verdict]),
    [['10.244.1.11:8080', 'allowed'], ['10.244.2.12:8080', 'denied']]);
  const ingress = viaNodePort.choices[1]!.steps.find((s) => s.stage === 'policy-ingress')!;
  assert.match(ingress.why, /no policy allows it \(x\/b is selected for ingress by x\/from-x\)/);
});
