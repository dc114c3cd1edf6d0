import assert from 'node:assert/strict';
import { test } from 'node:test';
import { renderTrace } from '../../../src/admin/render-trace.ts';
import { trace } from '../../../src/admin/trace.ts';
import { checkKernel } from '../../../src/admin/trace-kernel.ts';
import { parseProtoPort, parseTraceRequest } from '../../../src/admin/trace-request.ts';
import type { Route } from '../../../src/netlink/records.ts';
import type { TraceInputs } from '../../../src/admin/trace.ts';
import type { DataplanePlan, DataplaneResult } from '../../../src/egress/dataplane.ts';
import { parseCIDR, parseIP } from '../../../src/ip/ip.ts';
import type { Lease } from '../../../src/lease/lease.ts';
import { allowed } from '../../../src/policy/evaluate.ts';
import type { Protocol } from '../../../src/policy/model.ts';
import type { KernelState } from '../../../src/reconcile/state.ts';
import { CASES, PROBES } from '../../support/netpol-cases.ts';
import { clusterModel, PODS, policyObject } from '../../support/netpol-cluster.ts';
import { endpoint, serviceModel, serviceObject, sliceObject } from '../../support/services.ts';

const lease = (peer: string, subnet: string, publicIP: string): Lease => ({
  peer, subnet: parseCIDR(subnet, 'subnet'), attrs: { backendType: 'vxlan', publicIP: parseIP(publicIP, 'publicIP') },
});

/** node-1's view of the netpol cluster: vxlan entries towards node-2 (10.244.2.0/24). */
function inputs(over: Partial<TraceInputs> = {}): TraceInputs {
  const node2: KernelState = {
    routes: [{ family: 4, dst: '10.244.2.0/24', gateway: '10.244.2.0', linkIndex: 7, table: 254, protocol: 0, scope: 0, type: 1,
      metric: 0, onlink: true }],
    neighs: [{ family: 4, linkIndex: 7, ip: '10.244.2.0', mac: '0a:00:00:00:00:02', state: 0x80 }],
    fdb: [{ linkIndex: 7, mac: '0a:00:00:00:00:02', dst: '198.51.100.2', state: 0x80, flags: 0 }],
  };
  const own = lease('node-1', '10.244.1.0/24', '198.51.100.1');
  return {
    node: 'node-1', own, leases: [own, lease('node-2', '10.244.2.0/24', '198.51.100.2')],
    wanted: (peer) => (peer === 'node-2' ? node2 : undefined),
    dev: (i) => (i === 7 ? 'flannel.1' : `#${i}`),
    policy: clusterModel([]),
    ...over,
  };
}

test('every case of the policy truth tables: trace\'s verdict is the evaluator\'s, and a deny step says which end decided', () => {
  for (const c of CASES) {
    for (const state of c.states) {
      const model = clusterModel(state.policies, state);
      for (const probe of PROBES) {
        const [proto, port] = probe.split('/') as [Protocol, string];
        for (const from of PODS) {
          for (const to of PODS) {
            const want = allowed(model, { pod: from }, { pod: to }, proto, Number(port));
            const got = trace(inputs({ policy: model }), from, to, proto, Number(port));
            const at = `${c.name} / ${state.what}: ${from} → ${to} ${probe}`;
            assert.equal(got.verdict, want ? 'allowed' : 'denied', at);
            const steps = got.choices[0]!.steps;
            assert.equal(steps.some((s) => s.decision === 'deny'), !want, at);
            assert.equal(steps.some((s) => s.stage === 'route'), want, `${at}: a route only for what passes`);
          }
        }
      }
    }
  }
});

test('a denial names the policies selecting the pod; an allow names the policy that allowed it', () => {
  const model = clusterModel([
    policyObject('x', 'deny-all', { podSelector: {}, policyTypes: ['Ingress'] }),
    policyObject('x', 'from-y', {
      podSelector: { matchLabels: { pod: 'a' } }, ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: 'y' } } }] }],
    }),
  ]);
  const denied = trace(inputs({ policy: model }), 'z/a', 'x/a', 'TCP', 80);
  assert.equal(denied.verdict, 'denied');
  const ingress = denied.choices[0]!.steps.find((s) => s.stage === 'policy-ingress')!;
  assert.equal(ingress.decision, 'deny');
  assert.match(ingress.why, /no policy allows it .*x\/deny-all, x\/from-y/);
  const passed = trace(inputs({ policy: model }), 'y/a', 'x/a', 'TCP', 80);
  assert.equal(passed.verdict, 'allowed');
  assert.match(passed.choices[0]!.steps.find((s) => s.stage === 'policy-ingress')!.why, /allowed by x\/from-y$/);
  assert.match(passed.choices[0]!.steps.find((s) => s.stage === 'policy-egress')!.why, /no policy selects y\/a for egress/);
});

test('the route: a peer\'s subnet leaves for that node by the vxlan route, neighbour and FDB entry; this node\'s stays', () => {
  const remote = trace(inputs(), 'x/a', 'x/b', 'TCP', 80).choices[0]!.steps.at(-1)!;
  assert.equal(remote.stage, 'route');
  assert.equal(remote.decision, 'leaves for node node-2');
  assert.ok(remote.why.endsWith(
    'route 10.244.2.0/24 via 10.244.2.0 dev flannel.1 onlink, neigh 10.244.2.0 lladdr 0a:00:00:00:00:02, '
      + 'fdb 0a:00:00:00:00:02 dst 198.51.100.2',
  ), remote.why);
  assert.deepEqual(remote.expect, { dst: '10.244.2.12', gateway: '10.244.2.0', device: 'flannel.1' });
  const local = trace(inputs(), 'x/b', 'x/c', 'TCP', 80).choices[0]!.steps.at(-1)!;
  assert.equal(local.decision, 'delivered on this node');
  const outside = trace(inputs(), 'x/a', '198.18.0.9', 'TCP', 443).choices[0]!.steps.at(-1)!;
  assert.equal(outside.decision, 'leaves by the node\'s own routes');
});

test('a ClusterIP: DNAT to each usable endpoint, each traced through policy and route; no endpoint rejects', () => {
  const services = serviceModel(
    [serviceObject('x', 'web', { clusterIP: '10.96.0.10', ports: [{ name: 'http', port: 8080, targetPort: 80 }] }),
      serviceObject('x', 'empty', { clusterIP: '10.96.0.11', ports: [{ port: 80 }] })],
    [sliceObject('x', 'web-1', 'web', 'IPv4', [{ name: 'http', port: 80 }], [
      endpoint('10.244.2.12', 'node-2'),
      endpoint('10.244.1.13', 'node-1'),
      endpoint('10.244.2.11', 'node-2', { ready: false, serving: true, terminating: true }),
    ])],
  );
  const model = clusterModel([policyObject('x', 'only-c', { podSelector: { matchLabels: { pod: 'b' } }, ingress: [] })]);
  const got = trace(inputs({ policy: model, services }), 'y/a', '10.96.0.10', 'TCP', 8080);
  const service = got.steps.find((s) => s.stage === 'service')!;
  assert.equal(service.decision, 'DNAT to one of 10.244.1.13:80, 10.244.2.12:80');
  assert.match(service.why, /Service x\/web port http's cluster IP: 2 of 3 endpoints usable/);
  assert.equal(got.verdict, 'depends on the endpoint');
  assert.deepEqual(got.choices.map((c) => [c.target, c.verdict]), [['10.244.1.13:80', 'allowed'], ['10.244.2.12:80', 'denied']]);
  assert.equal(got.choices[0]!.steps.at(-1)!.decision, 'delivered on this node');
  const none = trace(inputs({ policy: model, services }), 'y/a', '10.96.0.11', 'TCP', 80);
  assert.equal(none.verdict, 'rejected');
  assert.match(none.steps.at(-1)!.why, /has no ready endpoint/);
  assert.equal(trace(inputs({ policy: model, services }), 'y/a', '10.96.0.10', 'TCP', 9).verdict, 'rejected');
});

test('bad ends are refused naming the field', () => {
  assert.throws(() => trace(inputs(), 'x/nope', 'x/a', 'TCP', 80), /src: no pod x\/nope/);
  assert.throws(() => trace(inputs(), 'x/a', 'not an address', 'TCP', 80), /dst: neither an address, a node nor a pod/);
  assert.throws(() => trace(inputs({ policy: undefined }), 'x/a', '10.244.1.12', 'TCP', 80),
    /src: pods are known to weftd only with --network-policy/);
});

const kernelRoute = (dst: string, gateway: string | undefined, linkIndex: number): Route => ({
  family: 4, dst, linkIndex, table: 254, protocol: 0, scope: 0, type: 1, metric: 0, onlink: false, ...(gateway ? { gateway } : {}),
});

test('the kernel check: a route as expected agrees; another next hop is a difference, printed first', async () => {
  const dev = inputs().dev!;
  const path = () => trace(inputs(), 'x/a', 'x/b', 'TCP', 80);
  const same = await checkKernel(path(), { routeGet: async (d) => kernelRoute(d, '10.244.2.0', 7) }, dev);
  assert.deepEqual(same.differences, []);
  assert.deepEqual(same.choices[0]!.steps.at(-1)!.kernel, { route: '10.244.2.12 via 10.244.2.0 dev flannel.1', agrees: true });
  const other = await checkKernel(path(), { routeGet: async (d) => kernelRoute(d, '198.51.100.254', 2) }, dev);
  assert.equal(other.differences!.length, 1);
  assert.match(other.differences![0]!, /the kernel routes 10\.244\.2\.12 by 10\.244\.2\.12 via 198\.51\.100\.254 dev #2/);
  const text = renderTrace(other).split('\n');
  assert.equal(text[0], 'the kernel does otherwise than weftd expects:');
  assert.match(text.at(-1)!, /^  route +leaves for node node-2 .*\[kernel: .*, DIFFERS\]$/);
  const none = await checkKernel(path(), { routeGet: async () => { throw new Error('unreachable'); } }, dev);
  assert.match(none.differences![0]!, /the kernel has no route to 10\.244\.2\.12/);
});

test('the request: PROTO/PORT and the socket\'s fields are checked, naming the field', () => {
  assert.deepEqual(parseProtoPort('udp/53'), { protocol: 'UDP', port: 53 });
  assert.deepEqual(parseProtoPort('8080'), { protocol: 'TCP', port: 8080 });
  assert.throws(() => parseProtoPort('icmp/1'), /PROTO\/PORT: protocol must be one of/);
  assert.throws(() => parseProtoPort('tcp/0'), /PROTO\/PORT: port must be 1-65535/);
  assert.deepEqual(parseTraceRequest({ src: 'x/a', dst: 'x/b', proto: 'TCP', port: 80, protocol: 1 }),
    { src: 'x/a', dst: 'x/b', protocol: 'TCP', port: 80 });
  assert.throws(() => parseTraceRequest({ src: 'x/a', proto: 'TCP', port: 80 }), /dst: required/);
  assert.throws(() => parseTraceRequest({ src: 'x/a', dst: 'x/b', proto: 'TCP', port: 70_000 }), /port: must be 1-65535/);
});

test('egress: a steered pod goes to its gateway\'s table, the gateway SNATs, the cluster inside is never touched', () => {
  const plan: DataplanePlan = {
    families: [4], inside: { 4: ['10.244.0.0/16', '10.96.0.0/12'], 6: [] }, dnat: [], keepSource: [], connMarks: [],
    policies: [
      { index: 0, family: 4, dst: ['198.18.0.0/24'], steer: { local: ['10.244.1.11'], mark: 0x10000 } },
      { index: 1, family: 4, dst: [], snat: { all: ['10.244.1.13', '10.244.3.9'], to: '198.51.100.50' } },
    ],
  };
  const egress: DataplaneResult = {
    nft: '', plan, eips: [], warnings: [],
    rules: [{ family: 4, fwmark: '0x10000/0xff0000', table: 7700 }],
    routes: [{ family: 4, table: 7700, hop: { gateway: '10.244.2.0', linkIndex: 7, onlink: true } }],
  };
  const steps = (src: string, dst: string) => trace(inputs({ egress }), src, dst, 'TCP', 443).choices[0]!.steps;
  const steered = steps('x/a', '198.18.0.9');
  assert.deepEqual(steered.at(-1)!.decision, 'steered to its gateway node');
  assert.match(steered.at(-1)!.why, /mark 0x10000: table 7700 default via 10\.244\.2\.0 onlink; it keeps its source/);
  assert.equal(steps('x/a', '198.18.1.9').find((s) => s.stage === 'egress')!.decision, 'not steered');
  assert.equal(steps('x/a', '10.244.2.12').find((s) => s.stage === 'egress')!.decision, 'not steered');
  assert.equal(steps('x/c', '198.18.1.9').find((s) => s.stage === 'egress')!.decision, 'SNAT to 198.51.100.50');
  assert.equal(steps('x/b', '198.18.1.9').find((s) => s.stage === 'egress'), undefined, 'no egress policy concerns x/b here');
});
