import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseCIDR, parseIP } from '../../../src/ip/ip.ts';
import { tableUpdate } from '../../../src/nft/ruleset.ts';
import type { NftRuleset } from '../../../src/nft/ruleset.ts';
import { NFT_SERVICES_TABLE, ServiceRenderer } from '../../../src/services/render.ts';
import type { RenderedServices } from '../../../src/services/render.ts';
import type { RenderOptions } from '../../../src/services/render-types.ts';
import { endpoint, serviceModel, serviceObject, sliceObject } from '../../support/services.ts';

type Obj = Record<string, unknown>;
const OPTIONS: RenderOptions = { node: 'n1', clusterCIDRs: [parseCIDR('10.244.0.0/16', 'test'), parseCIDR('fd00:244::/56', 'test')] };
const TABLE = `inet ${NFT_SERVICES_TABLE}`;

function render(services: Obj[], slices: Obj[], options: RenderOptions = OPTIONS): RenderedServices {
  return new ServiceRenderer().render(serviceModel(services, slices), options);
}
const elements = (r: NftRuleset, name: string) => r.sets.find((s) => s.name === name)?.elements ?? [];
/** Every element of the endpoint maps of a family, as `<map>: <key> . <slot> : <address> . <port>`. */
const endpointSlots = (r: NftRuleset, f: 4 | 6) => r.sets.filter((s) => new RegExp(`^(nodeport-)?endpoints${f}-`).test(s.name))
  .flatMap((s) => s.elements.map((e) => `${s.name}: ${e}`));
const web = (spec: Obj = {}, status: Obj = {}) =>
  serviceObject('ns', 'web', { clusterIP: '10.96.0.10', ports: [{ port: 80 }], ...spec }, status);
const webSlice = (endpoints: Obj[], name = 'web-1') => sliceObject('ns', name, 'web', 'IPv4', [{ port: 8080 }], endpoints);
const TWO = [endpoint('10.244.1.2', 'n1'), endpoint('10.244.2.2', 'n2')];

test('a ClusterIP Service: a map element sends it to the chain of its endpoint count, which picks one of its endpoints at random', () => {
  const { ruleset } = render([web()], [webSlice(TWO)]);
  assert.deepEqual(elements(ruleset, 'services4'), ['10.96.0.10 . tcp . 80 : goto cluster4-tcp-2']);
  assert.deepEqual(ruleset.chains.get('cluster4-tcp-2'), [
    'ip saddr != 10.244.0.0/16 jump mark-for-masquerade',
    'dnat ip to ip daddr . tcp dport . numgen random mod 2 map @endpoints4-tcp-2',
  ]);
  assert.deepEqual(endpointSlots(ruleset, 4), [
    'endpoints4-tcp-2: 10.96.0.10 . 80 . 0 : 10.244.1.2 . 8080',
    'endpoints4-tcp-2: 10.96.0.10 . 80 . 1 : 10.244.2.2 . 8080',
  ]);
  assert.equal(ruleset.sets.find((x) => x.name === 'endpoints4-tcp-2')?.type,
    'ip daddr . tcp dport . numgen random mod 2 : ip daddr . tcp dport');
  // Hairpin: the node's own endpoint reaching itself through the Service is masqueraded.
  assert.deepEqual(elements(ruleset, 'hairpin4'), ['10.244.1.2 . 10.244.1.2']);
  assert.deepEqual(elements(ruleset, 'no-endpoints4'), []);
});

test('one endpoint is one element; the target port comes from the slice port of the same name and protocol', () => {
  const ports = [{ name: 'http', port: 80 }, { name: 'dns', port: 53, protocol: 'UDP' }];
  const svc = serviceObject('ns', 'web', { clusterIP: '10.96.0.10', ports });
  const slice = sliceObject('ns', 'web-1', 'web', 'IPv4', [{ name: 'http', port: 8080 }, { name: 'dns', port: 5353, protocol: 'UDP' }],
    [endpoint('10.244.2.2', 'n2')]);
  const { ruleset } = render([svc], [slice]);
  assert.deepEqual(elements(ruleset, 'services4'), ['10.96.0.10 . tcp . 80 : goto cluster4-tcp-1', '10.96.0.10 . udp . 53 : goto cluster4-udp-1']);
  assert.deepEqual(endpointSlots(ruleset, 4), [
    'endpoints4-tcp-1: 10.96.0.10 . 80 . 0 : 10.244.2.2 . 8080',
    'endpoints4-udp-1: 10.96.0.10 . 53 . 0 : 10.244.2.2 . 5353',
  ]);
});

test('ready endpoints only; serving terminating ones when none is ready; none usable rejects', () => {
  const mixed = [
    endpoint('10.244.1.2', 'n1', { ready: false, serving: true, terminating: true }),
    endpoint('10.244.2.2', 'n2'),
    endpoint('10.244.2.3', 'n2', { ready: false, serving: false, terminating: false }),
  ];
  assert.deepEqual(endpointSlots(render([web()], [webSlice(mixed)]).ruleset, 4), ['endpoints4-tcp-1: 10.96.0.10 . 80 . 0 : 10.244.2.2 . 8080']);
  const terminating = [endpoint('10.244.1.2', 'n1', { ready: false, serving: true, terminating: true }),
    endpoint('10.244.2.3', 'n2', { ready: false, serving: false, terminating: true })];
  assert.deepEqual(endpointSlots(render([web()], [webSlice(terminating)]).ruleset, 4),
    ['endpoints4-tcp-1: 10.96.0.10 . 80 . 0 : 10.244.1.2 . 8080']);
  const nodePort = web({ type: 'NodePort', ports: [{ port: 80, nodePort: 30080 }] });
  const none = render([nodePort], [webSlice([endpoint('10.244.2.3', 'n2', { ready: false })])]);
  assert.deepEqual(elements(none.ruleset, 'services4'), []);
  assert.deepEqual(elements(none.ruleset, 'no-endpoints4'), ['10.96.0.10 . tcp . 80 : goto reject-chain']);
  assert.deepEqual(elements(none.ruleset, 'no-endpoint-nodeports4'), ['tcp . 30080 : goto reject-chain']);
  assert.deepEqual(none.ruleset.chains.get('reject-chain'), ['meta l4proto tcp reject with tcp reset', 'reject']);
  assert.ok(none.ruleset.chains.get('filter-input')?.includes(
    'ct state new ip daddr != 127.0.0.0/8 fib daddr type local meta l4proto . th dport vmap @no-endpoint-nodeports4'));
});

test('hairpin: only this node\'s endpoints in the cluster network, a host-network one reaching itself stays on the node', () => {
  const { ruleset } = render([web()], [webSlice([endpoint('10.244.1.2', 'n1'), endpoint('198.51.100.1', 'n1'), endpoint('10.244.2.2', 'n2')])]);
  assert.deepEqual(elements(ruleset, 'hairpin4'), ['10.244.1.2 . 10.244.1.2']);
});

test('two slices holding one endpoint during churn give it once', () => {
  const { ruleset } = render([web()], [webSlice(TWO), webSlice([endpoint('10.244.2.2', 'n2')], 'web-2')]);
  assert.deepEqual(endpointSlots(ruleset, 4), [
    'endpoints4-tcp-2: 10.96.0.10 . 80 . 0 : 10.244.1.2 . 8080',
    'endpoints4-tcp-2: 10.96.0.10 . 80 . 1 : 10.244.2.2 . 8080',
  ]);
});

test('endpoints in any order, in slices in any order, are numbered by address then port; the readier of a pair is kept', () => {
  const terminating = { ready: false, serving: true, terminating: true };
  const slices = [
    webSlice([endpoint('10.244.3.2', 'n2'), endpoint('10.244.1.2', 'n1', terminating), endpoint('10.244.2.2', 'n2')], 'web-2'),
    webSlice([endpoint('10.244.1.2', 'n1'), endpoint('10.244.2.2', 'n2', terminating)], 'web-1'),
  ];
  const { ruleset } = render([web()], slices);
  assert.deepEqual(endpointSlots(ruleset, 4), [
    'endpoints4-tcp-3: 10.96.0.10 . 80 . 0 : 10.244.1.2 . 8080',
    'endpoints4-tcp-3: 10.96.0.10 . 80 . 1 : 10.244.2.2 . 8080',
    'endpoints4-tcp-3: 10.96.0.10 . 80 . 2 : 10.244.3.2 . 8080',
  ]);
  // Both copies ready or both not: the first slice's (by name) stands; its conditions decide.
  const notReady = render([web()], [webSlice([endpoint('10.244.1.2', 'n1', terminating)], 'web-1'),
    webSlice([endpoint('10.244.1.2', 'n1', { ready: false, serving: false, terminating: true })], 'web-2')]);
  assert.deepEqual(endpointSlots(notReady.ruleset, 4), ['endpoints4-tcp-1: 10.96.0.10 . 80 . 0 : 10.244.1.2 . 8080']);
});

test('NodePort, externalIPs and load balancer IPs go through external chains, which masquerade (externalTrafficPolicy Cluster)', () => {
  const lb = web({ type: 'LoadBalancer', ports: [{ port: 80, nodePort: 30080 }], externalIPs: ['198.51.100.50'] },
    { loadBalancer: { ingress: [{ ip: '198.51.100.200' }] } });
  const { ruleset, healthChecks } = render([lb], [webSlice(TWO)]);
  assert.deepEqual(elements(ruleset, 'services4'), [
    '10.96.0.10 . tcp . 80 : goto cluster4-tcp-2',
    '198.51.100.50 . tcp . 80 : goto ext4-tcp-2',
    '198.51.100.200 . tcp . 80 : goto ext4-tcp-2',
  ]);
  assert.deepEqual(elements(ruleset, 'nodeports4'), ['tcp . 30080 : goto nodeport4-tcp-2']);
  assert.deepEqual(ruleset.chains.get('ext4-tcp-2'), [
    'jump mark-for-masquerade',
    'dnat ip to ip daddr . tcp dport . numgen random mod 2 map @endpoints4-tcp-2',
  ]);
  assert.deepEqual(ruleset.chains.get('nodeport4-tcp-2'), [
    'jump mark-for-masquerade',
    'dnat ip to tcp dport . numgen random mod 2 map @nodeport-endpoints4-tcp-2',
  ]);
  // Each way in has the endpoints under its own key.
  assert.deepEqual(endpointSlots(ruleset, 4).filter((e) => e.endsWith('10.244.2.2 . 8080')), [
    'endpoints4-tcp-2: 10.96.0.10 . 80 . 1 : 10.244.2.2 . 8080',
    'endpoints4-tcp-2: 198.51.100.50 . 80 . 1 : 10.244.2.2 . 8080',
    'endpoints4-tcp-2: 198.51.100.200 . 80 . 1 : 10.244.2.2 . 8080',
    'nodeport-endpoints4-tcp-2: 30080 . 1 : 10.244.2.2 . 8080',
  ]);
  const nodePorts = 'ip daddr != 127.0.0.0/8 fib daddr type local meta l4proto . th dport vmap @nodeports4';
  assert.ok(ruleset.chains.get('nat-prerouting')?.includes(nodePorts));
  assert.deepEqual(healthChecks, []);
});

test('externalTrafficPolicy Local: outside clients keep their address, reach this node\'s endpoints; pods and the node reach all', () => {
  const lb = web({
    type: 'LoadBalancer', ports: [{ port: 80, nodePort: 30080 }], externalTrafficPolicy: 'Local', healthCheckNodePort: 32000,
  });
  const { ruleset, healthChecks } = render([lb], [webSlice(TWO)]);
  assert.deepEqual(elements(ruleset, 'nodeports4'), ['tcp . 30080 : goto nodeport-local4-tcp-2-1']);
  const pick = 'dnat ip to tcp dport . numgen random mod';
  assert.deepEqual(ruleset.chains.get('nodeport-local4-tcp-2-1'), [
    `ip saddr 10.244.0.0/16 ${pick} 2 map @nodeport-endpoints4-tcp-2`,
    'fib saddr type local jump mark-for-masquerade',
    `fib saddr type local ${pick} 2 map @nodeport-endpoints4-tcp-2`,
    `${pick} 1 offset 2 map @nodeport-endpoints4-tcp-1`,
  ]);
  assert.deepEqual(endpointSlots(ruleset, 4).filter((e) => e.startsWith('nodeport-')), [
    'nodeport-endpoints4-tcp-1: 30080 . 2 : 10.244.1.2 . 8080',
    'nodeport-endpoints4-tcp-2: 30080 . 0 : 10.244.1.2 . 8080',
    'nodeport-endpoints4-tcp-2: 30080 . 1 : 10.244.2.2 . 8080',
  ]);
  assert.deepEqual(healthChecks, [{ port: 32000, namespace: 'ns', name: 'web', localEndpoints: 1 }]);
  const elsewhere = render([lb], [webSlice([endpoint('10.244.2.2', 'n2')])]);
  assert.equal(elsewhere.ruleset.chains.get('nodeport-local4-tcp-1-0')?.at(-1), 'drop');
  assert.deepEqual(elsewhere.healthChecks, [{ port: 32000, namespace: 'ns', name: 'web', localEndpoints: 0 }]);
});

test('the health check counts this node\'s ready endpoints only: a node left with terminating ones answers 503 (#39)', () => {
  const lb = web({
    type: 'LoadBalancer', externalTrafficPolicy: 'Local', healthCheckNodePort: 32000,
    ports: [{ name: 'http', port: 80, nodePort: 30080 }, { name: 'alt', port: 81, nodePort: 30081 }],
  });
  const ports = [{ name: 'http', port: 8080 }, { name: 'alt', port: 8081 }];
  const terminating = { ready: false, serving: true, terminating: true };
  const rollout = sliceObject('ns', 'web-1', 'web', 'IPv4', ports,
    [endpoint('10.244.1.2', 'n1', terminating), endpoint('10.244.1.3', 'n1', terminating), endpoint('10.244.2.2', 'n2')]);
  const draining = render([lb], [rollout]);
  assert.deepEqual(draining.healthChecks, [{ port: 32000, namespace: 'ns', name: 'web', localEndpoints: 0 }]);
  // The terminating endpoints still take what reaches this node, as kube-proxy's do.
  assert.deepEqual(draining.ruleset.chains.get('nodeport-local4-tcp-1-2')?.at(-1),
    'dnat ip to tcp dport . numgen random mod 2 offset 1 map @nodeport-endpoints4-tcp-2');
  // kube-proxy counts each address and target port once: one pod serving two ports is two.
  const ready = sliceObject('ns', 'web-1', 'web', 'IPv4', ports, [endpoint('10.244.1.2', 'n1'), endpoint('10.244.1.3', 'n1', terminating)]);
  assert.deepEqual(render([lb], [ready]).healthChecks, [{ port: 32000, namespace: 'ns', name: 'web', localEndpoints: 2 }]);
});

test('a cluster IP on a port no Service defines rejects; unallocated addresses of --service-cluster-ip-range drop (#39)', () => {
  const dual = web({ clusterIPs: ['10.96.0.10', 'fd00:10:96::10'], ipFamilyPolicy: 'RequireDualStack' });
  const serviceCIDRs = [parseCIDR('10.96.0.0/12', 'test'), parseCIDR('fd00:10:96::/108', 'test')];
  const renderer = new ServiceRenderer();
  const { ruleset } = renderer.render(serviceModel([dual, serviceObject('ns', 'none', { clusterIP: 'None', ports: [{ port: 80 }] })], []),
    { ...OPTIONS, serviceCIDRs });
  assert.deepEqual(elements(ruleset, 'cluster-ips4'), ['10.96.0.10']);
  assert.deepEqual(elements(ruleset, 'cluster-ips6'), ['fd00:10:96::10']);
  assert.deepEqual(ruleset.chains.get('cluster-ips-check'), [
    'ip daddr @cluster-ips4 goto reject-chain', 'ip6 daddr @cluster-ips6 goto reject-chain',
    'ip daddr 10.96.0.0/12 drop', 'ip6 daddr fd00:10:96::/108 drop',
  ]);
  // After the DNAT of the ports Services define, on the way through the node and out of it.
  for (const hook of ['forward', 'output']) {
    assert.equal(ruleset.chains.get(`filter-${hook}`)?.at(-1), 'ct state new jump cluster-ips-check');
  }
  assert.ok(!ruleset.chains.get('filter-input')?.includes('ct state new jump cluster-ips-check'));
  const gone = renderer.render(serviceModel([], []), OPTIONS).ruleset;
  assert.deepEqual(elements(gone, 'cluster-ips4'), [], 'a Service deleted takes its cluster IP out');
  const rejects = ['ip daddr @cluster-ips4 goto reject-chain', 'ip6 daddr @cluster-ips6 goto reject-chain'];
  assert.deepEqual(gone.chains.get('cluster-ips-check'), rejects, 'no range, no drop');
  assert.deepEqual(tableUpdate(TABLE, ruleset, gone).includes('delete element inet weft-services cluster-ips4 { 10.96.0.10 }'), true);
});

test('internalTrafficPolicy Local: cluster IP traffic reaches this node\'s endpoints, masqueraded only from outside the cluster '
  + '(as kube-proxy marks it before the policy\'s chain); dropped when there are none', () => {
  const svc = web({ internalTrafficPolicy: 'Local' });
  const here = render([svc], [webSlice(TWO)]).ruleset;
  assert.deepEqual(elements(here, 'services4'), ['10.96.0.10 . tcp . 80 : goto cluster-local4-tcp-1']);
  assert.deepEqual(here.chains.get('cluster-local4-tcp-1'), ['ip saddr != 10.244.0.0/16 jump mark-for-masquerade',
    'dnat ip to ip daddr . tcp dport . numgen random mod 1 map @endpoints4-tcp-1']);
  assert.deepEqual(endpointSlots(here, 4), ['endpoints4-tcp-1: 10.96.0.10 . 80 . 0 : 10.244.1.2 . 8080']);
  const elsewhere = render([svc], [webSlice([endpoint('10.244.2.2', 'n2')])]).ruleset;
  assert.deepEqual(elements(elsewhere, 'no-endpoints4'), ['10.96.0.10 . tcp . 80 : drop']);
  assert.deepEqual(elements(elsewhere, 'services4'), []);
  assert.deepEqual([...elsewhere.chains.keys()].filter((n) => /^cluster(-local)?[46]-/.test(n)), []);
});

test('ClientIP affinity: a set per endpoint with the Service\'s timeout, checked before the random choice', () => {
  const sticky = web({ sessionAffinity: 'ClientIP', sessionAffinityConfig: { clientIP: { timeoutSeconds: 600 } } });
  const { ruleset } = render([sticky], [webSlice(TWO)]);
  const sets = ruleset.sets.filter((s) => s.name.startsWith('affinity-'));
  assert.deepEqual(sets.map((s) => [s.name, s.type, s.flags, s.timeoutSeconds]), [
    ['affinity-ns/web/80/tcp/v4/10.244.1.2_8080', 'ipv4_addr', ['dynamic', 'timeout'], 600],
    ['affinity-ns/web/80/tcp/v4/10.244.2.2_8080', 'ipv4_addr', ['dynamic', 'timeout'], 600],
  ]);
  assert.equal(ruleset.chains.get('svc-ns/web/80/tcp/v4')?.at(-1), 'goto aff-all-ns/web/80/tcp/v4');
  assert.deepEqual(ruleset.chains.get('aff-all-ns/web/80/tcp/v4'), [
    'ip saddr @affinity-ns/web/80/tcp/v4/10.244.1.2_8080 goto ep-ns/web/80/tcp/v4/10.244.1.2_8080',
    'ip saddr @affinity-ns/web/80/tcp/v4/10.244.2.2_8080 goto ep-ns/web/80/tcp/v4/10.244.2.2_8080',
    'numgen random mod 2 vmap { 0 : goto ep-ns/web/80/tcp/v4/10.244.1.2_8080, 1 : goto ep-ns/web/80/tcp/v4/10.244.2.2_8080 }',
  ]);
  assert.deepEqual(ruleset.chains.get('ep-ns/web/80/tcp/v4/10.244.2.2_8080'), [
    'update @affinity-ns/web/80/tcp/v4/10.244.2.2_8080 { ip saddr }',
    'meta l4proto tcp dnat ip to 10.244.2.2:8080',
  ]);
});

test('loadBalancerSourceRanges drop other sources to the load balancer IPs, per family', () => {
  const ranges = ['198.18.0.0/15', '203.0.113.0/24'];
  const svc = web({ type: 'LoadBalancer', ports: [{ port: 80, nodePort: 30080 }], loadBalancerSourceRanges: ranges },
    { loadBalancer: { ingress: [{ ip: '198.51.100.200' }] } });
  const { ruleset } = render([svc], [webSlice(TWO)]);
  assert.deepEqual(elements(ruleset, 'firewall4'), ['198.51.100.200 . tcp . 80 : goto fw-ns/web/80/tcp/v4']);
  assert.deepEqual(ruleset.chains.get('fw-ns/web/80/tcp/v4'), ['ip saddr != { 198.18.0.0/15, 203.0.113.0/24 } drop']);
  assert.ok(ruleset.chains.get('filter-prerouting')?.[0]?.includes('priority dstnat - 10'), 'checked before the DNAT');
});

test('IPv6 and dual stack: each family has its own maps, chains and endpoints; SCTP is one more protocol', () => {
  const svc = serviceObject('ns', 'dual', { clusterIPs: ['10.96.0.20', 'fd00:96::20'], ports: [{ port: 9, protocol: 'SCTP' }] });
  const slices = [
    sliceObject('ns', 'd4', 'dual', 'IPv4', [{ port: 9, protocol: 'SCTP' }], [endpoint('10.244.2.9', 'n2')]),
    sliceObject('ns', 'd6', 'dual', 'IPv6', [{ port: 9, protocol: 'SCTP' }],
      [endpoint('fd00:244:0:2::9', 'n2'), endpoint('fd00:244:0:1::9', 'n1')]),
  ];
  const { ruleset } = render([svc], slices);
  assert.deepEqual(elements(ruleset, 'services4'), ['10.96.0.20 . sctp . 9 : goto cluster4-sctp-1']);
  assert.deepEqual(elements(ruleset, 'services6'), ['fd00:96::20 . sctp . 9 : goto cluster6-sctp-2']);
  assert.deepEqual(ruleset.chains.get('cluster6-sctp-2'), [
    'ip6 saddr != fd00:244::/56 jump mark-for-masquerade',
    'dnat ip6 to ip6 daddr . sctp dport . numgen random mod 2 map @endpoints6-sctp-2',
  ]);
  assert.deepEqual(endpointSlots(ruleset, 6), [
    'endpoints6-sctp-2: fd00:96::20 . 9 . 0 : fd00:244:0:1::9 . 9',
    'endpoints6-sctp-2: fd00:96::20 . 9 . 1 : fd00:244:0:2::9 . 9',
  ]);
  assert.equal(ruleset.sets.find((x) => x.name === 'endpoints6-sctp-2')?.type,
    'ip6 daddr . sctp dport . numgen random mod 2 : ip6 daddr . sctp dport');
  assert.deepEqual(elements(ruleset, 'hairpin6'), ['fd00:244:0:1::9 . fd00:244:0:1::9']);
});

test('--nodeport-addresses limits node ports to the node\'s addresses in those networks', () => {
  const np = web({ type: 'NodePort', ports: [{ port: 80, nodePort: 30080 }] });
  const { ruleset } = render([np], [webSlice(TWO)], { ...OPTIONS, nodePortCIDRs: [parseCIDR('198.51.100.0/24', 'test')] });
  const nat = ruleset.chains.get('nat-prerouting')!;
  assert.ok(nat.includes('ip daddr { 198.51.100.0/24 } fib daddr type local meta l4proto . th dport vmap @nodeports4'));
  assert.ok(!nat.some((r) => r.includes('@nodeports6')), 'no IPv6 node port address given: no IPv6 node ports');
});

test('an endpoint change sends only the elements that changed; a chain and a map go with the last Service using them', () => {
  const renderer = new ServiceRenderer();
  const other = serviceObject('ns', 'aaa', { clusterIP: '10.96.0.5', ports: [{ port: 80 }] });
  const otherSlice = sliceObject('ns', 'aaa-1', 'aaa', 'IPv4', [{ port: 80 }], TWO);
  const before = renderer.render(serviceModel([web(), other], [webSlice(TWO), otherSlice]), OPTIONS).ruleset;
  const moved = [endpoint('10.244.1.2', 'n1'), endpoint('10.244.3.2', 'n3')];
  const after = renderer.render(serviceModel([web(), other], [webSlice(moved), otherSlice]), OPTIONS, ['ns/web']).ruleset;
  assert.equal(tableUpdate(TABLE, before, after), [
    'delete element inet weft-services endpoints4-tcp-2 { 10.96.0.10 . 80 . 1 }',
    'add element inet weft-services endpoints4-tcp-2 { 10.96.0.10 . 80 . 1 : 10.244.3.2 . 8080 }',
    '',
  ].join('\n'));
  const without = renderer.render(serviceModel([web()], [webSlice(moved)]), OPTIONS, ['ns/aaa']).ruleset;
  const gone = tableUpdate(TABLE, after, without);
  assert.match(gone, /^delete element inet weft-services endpoints4-tcp-2 \{ 10\.96\.0\.5 \. 80 \. 0, 10\.96\.0\.5 \. 80 \. 1 \}$/m);
  assert.match(gone, /^delete element inet weft-services services4 \{ 10\.96\.0\.5 \. tcp \. 80 \}$/m);
  assert.doesNotMatch(gone, /chain/, 'the other Service still goes to cluster4-tcp-2');
  const three = renderer.render(serviceModel([web()], [webSlice([...moved, endpoint('10.244.4.2', 'n4')])]), OPTIONS, ['ns/web']).ruleset;
  const grown = tableUpdate(TABLE, without, three);
  assert.match(grown, /^add chain inet weft-services cluster4-tcp-3$/m);
  assert.match(grown, /^delete chain inet weft-services cluster4-tcp-2$/m);
  assert.match(grown, /^add map inet weft-services endpoints4-tcp-3 \{ typeof .*elements = \{ .*10\.244\.4\.2 \. 8080 \}; \}$/m);
  assert.match(grown, /^delete map inet weft-services endpoints4-tcp-2$/m);
  assert.match(grown, /^add element inet weft-services services4 \{ 10\.96\.0\.10 \. tcp \. 80 : goto cluster4-tcp-3 \}$/m);
});

test('two Services claiming one address and port (or node port) get one element, the first by name, not a failed transaction', () => {
  const a = serviceObject('ns', 'a', { type: 'NodePort', clusterIP: '10.96.0.10', ports: [{ port: 80, nodePort: 30080 }] });
  const b = serviceObject('ns', 'b', { type: 'NodePort', clusterIP: '10.96.0.10', ports: [{ port: 80, nodePort: 30080 }] });
  const slices = [sliceObject('ns', 'a-1', 'a', 'IPv4', [{ port: 8080 }], TWO),
    sliceObject('ns', 'b-1', 'b', 'IPv4', [{ port: 9090 }], [endpoint('10.244.9.9', 'n2')])];
  const renderer = new ServiceRenderer();
  const both = renderer.render(serviceModel([b, a], slices), OPTIONS).ruleset;
  assert.deepEqual(elements(both, 'services4'), ['10.96.0.10 . tcp . 80 : goto cluster4-tcp-2']);
  assert.deepEqual(elements(both, 'nodeports4'), ['tcp . 30080 : goto nodeport4-tcp-2']);
  assert.ok(!endpointSlots(both, 4).some((e) => e.includes('10.244.9.9')), 'the endpoints of the key\'s holder only');
  // The first by name gone, the other holds the keys, with its endpoints.
  const one = renderer.render(serviceModel([b], [slices[1]!]), OPTIONS, ['ns/a']).ruleset;
  assert.deepEqual(elements(one, 'services4'), ['10.96.0.10 . tcp . 80 : goto cluster4-tcp-1']);
  assert.deepEqual(endpointSlots(one, 4), [
    'endpoints4-tcp-1: 10.96.0.10 . 80 . 0 : 10.244.9.9 . 9090',
    'nodeport-endpoints4-tcp-1: 30080 . 0 : 10.244.9.9 . 9090',
  ]);
  const fresh = new ServiceRenderer().render(serviceModel([b], [slices[1]!]), OPTIONS).ruleset;
  assert.equal(tableUpdate(TABLE, both, one), tableUpdate(TABLE, { sets: both.sets, chains: both.chains }, fresh));
});

test('endpoints on different target ports (a named port resolving differently) are elements like any other', () => {
  const slices = [
    sliceObject('ns', 'web-1', 'web', 'IPv4', [{ port: 8080 }], [endpoint('10.244.1.2', 'n1')]),
    sliceObject('ns', 'web-2', 'web', 'IPv4', [{ port: 9090 }], [endpoint('10.244.2.2', 'n2')]),
  ];
  const { ruleset } = render([web()], slices);
  assert.deepEqual(endpointSlots(ruleset, 4), [
    'endpoints4-tcp-2: 10.96.0.10 . 80 . 0 : 10.244.1.2 . 8080',
    'endpoints4-tcp-2: 10.96.0.10 . 80 . 1 : 10.244.2.2 . 9090',
  ]);
});

test('a renderer keeping its parts gives, model after model, the rules a fresh one gives', () => {
  const renderer = new ServiceRenderer();
  const models = [
    [[web(), serviceObject('ns', 'b', { type: 'NodePort', clusterIP: '10.96.0.11', ports: [{ port: 80, nodePort: 30080 }] })],
      [webSlice(TWO), sliceObject('ns', 'b-1', 'b', 'IPv4', [{ port: 80 }], TWO)]],
    [[web({ sessionAffinity: 'ClientIP' })], [webSlice([endpoint('10.244.1.2', 'n1')])]],
    [[web(), serviceObject('ns', 'c', { clusterIP: '10.96.0.12', ports: [{ port: 53, protocol: 'UDP' }] })],
      [webSlice(TWO), sliceObject('ns', 'c-1', 'c', 'IPv4', [{ port: 53, protocol: 'UDP' }], TWO)]],
    [[web({ type: 'LoadBalancer', externalTrafficPolicy: 'Local', ports: [{ port: 80, nodePort: 30080 }] })], [webSlice(TWO)]],
    [[web({ type: 'NodePort', internalTrafficPolicy: 'Local', externalIPs: ['198.51.100.9'], ports: [{ port: 80, nodePort: 30080 }] })],
      [webSlice([...TWO, endpoint('10.244.1.3', 'n1')])]],
    [[web({ type: 'NodePort', internalTrafficPolicy: 'Local', externalTrafficPolicy: 'Local', ports: [{ port: 80, nodePort: 30080 }] })],
      [webSlice([endpoint('10.244.2.2', 'n2')])]],
    [[], []],
    [[web()], [webSlice(TWO)]],
  ] as const;
  /** The ruleset in name order (the order of chains and elements depends on history). */
  const shape = (r: NftRuleset) => JSON.stringify({
    chains: [...r.chains].sort(),
    sets: r.sets.map((s) => [s.name, s.type, [...s.elements].sort()]).sort(),
  });
  /** Every set a rule or element names is there, and every endpoint map is looked up by a rule. */
  const whole = (r: NftRuleset) => {
    const named = new Set([...r.chains.values()].flat().flatMap((l) => [...l.matchAll(/@([\w./-]+)/g)].map((m) => m[1]!)));
    const sets = new Set(r.sets.map((x) => x.name));
    for (const name of named) assert.ok(sets.has(name), `a rule names ${name}, which is not there`);
    for (const set of r.sets) if (/endpoints/.test(set.name) && !/^no-/.test(set.name)) assert.ok(named.has(set.name), `${set.name} is looked up by no rule`);
    const targets = r.sets.flatMap((x) => x.elements).flatMap((e) => [...e.matchAll(/goto ([\w./-]+)/g)].map((m) => m[1]!));
    for (const chain of targets) assert.ok(r.chains.has(chain), `an element goes to ${chain}, which is not there`);
  };
  for (const [services, slices] of models) {
    const kept = renderer.render(serviceModel([...services], [...slices]), OPTIONS).ruleset;
    const fresh = new ServiceRenderer().render(serviceModel([...services], [...slices]), OPTIONS).ruleset;
    assert.equal(shape(kept), shape(fresh));
    whole(kept);
  }
});

test('a render names what it changed: the update from the one before looks at that only, and sends what a full comparison sends', () => {
  const renderer = new ServiceRenderer();
  const fill = (i: number, ep: number) => [
    serviceObject('fill', `s${i}`, { clusterIP: `10.96.1.${i}`, ports: [{ port: 80 }] }),
    sliceObject('fill', `s${i}-1`, `s${i}`, 'IPv4', [{ port: 8080 }], [endpoint(`10.244.${ep}.2`, 'n1'), endpoint(`10.244.${ep}.3`, 'n2')]),
  ];
  // As the reflectors do, unchanged objects are handed over again as they were.
  const kept = serviceModel(...[0, 1].map((k) => Array.from({ length: 50 }, (_, i) => fill(i, i)[k]!)) as [Obj[], Obj[]]);
  const model = (changed: number, ep: number, count = 50) => {
    const services = new Map([...kept.services].slice(0, count));
    const slices = new Map([...kept.slices].filter(([k]) => services.has(k)));
    slices.set(`fill/s${changed}`, serviceModel([], [fill(changed, ep)[1]!]).slices.get(`fill/s${changed}`)!);
    return { services, slices };
  };
  const full = (r: NftRuleset): NftRuleset => ({ sets: r.sets, chains: r.chains });
  const first = renderer.render(model(7, 7), OPTIONS).ruleset;
  const second = renderer.render(model(7, 99), OPTIONS, ['fill/s7']).ruleset;
  assert.ok(second.delta);
  assert.deepEqual([...second.delta.chains], [], 'two endpoints a Service had: only elements change');
  assert.deepEqual([...second.delta.sets].sort(), ['endpoints4-tcp-2', 'hairpin4']);
  const script = tableUpdate(TABLE, first, second);
  assert.match(script, /10\.244\.99\.2/);
  assert.equal(script, tableUpdate(TABLE, full(first), full(second)));
  assert.match(script, /delete element inet weft-services hairpin4 \{ 10\.244\.7\.2 \. 10\.244\.7\.2 \}/);
  assert.match(script, /add element inet weft-services hairpin4 \{ 10\.244\.99\.2 \. 10\.244\.99\.2 \}/);
  assert.deepEqual(second.delta.elements?.get('hairpin4'), { gone: ['10.244.7.2 . 10.244.7.2'], added: ['10.244.99.2 . 10.244.99.2'] });

  const third = renderer.render(model(7, 99, 49), OPTIONS, ['fill/s49']).ruleset;
  assert.deepEqual([...third.delta!.chains], [], 'a Service gone: its elements only');
  assert.equal(tableUpdate(TABLE, second, third), tableUpdate(TABLE, full(second), full(third)));
  assert.match(tableUpdate(TABLE, second, third), /delete element inet weft-services services4 \{ 10\.96\.1\.49 \. tcp \. 80 \}/);
  // Not the render before: everything is compared, and the update is still right.
  const skipped = tableUpdate(TABLE, first, third);
  assert.equal(skipped, tableUpdate(TABLE, full(first), full(third)));
  assert.match(skipped, /delete element inet weft-services services4 \{ 10\.96\.1\.49 \. tcp \. 80 \}/);
  assert.match(skipped, /add element inet weft-services endpoints4-tcp-2 \{ 10\.96\.1\.7 \. 80 \. 0 : 10\.244\.99\.2 \. 8080/);
  // The rulesets handed out stay as they were while the renderer goes on.
  assert.ok(elements(second, 'services4').includes('10.96.1.49 . tcp . 80 : goto cluster4-tcp-2'));
  // Told nothing changed, the renderer looks at nothing: the same rules.
  assert.equal(tableUpdate(TABLE, third, renderer.render(model(7, 99, 49), OPTIONS, []).ruleset), '');
});

test('a Service of 32,769 endpoints, all on this node, keeps its local slots apart from the others (#39)', () => {
  const many = Array.from({ length: 32_769 }, (_, i) => endpoint(`10.244.${1 + (i >> 8)}.${i & 255}`, 'n1'));
  const lb = web({ type: 'NodePort', ports: [{ port: 80, nodePort: 30080 }], externalTrafficPolicy: 'Local' });
  const { ruleset } = render([lb], [webSlice(many)]);
  const map = ruleset.sets.find((s) => s.name === 'nodeport-endpoints4-tcp-32769')!;
  // All endpoints and this node's both in this map (the same count), under one key: every slot once.
  const slots = map.elements.map((e) => e.split(' : ')[0]);
  assert.equal(new Set(slots).size, slots.length, 'a slot given twice fails the whole transaction');
  assert.equal(slots.length, 2 * 32_769);
  assert.equal(ruleset.chains.get('nodeport-local4-tcp-32769-32769')?.at(-1),
    'dnat ip to tcp dport . numgen random mod 32769 offset 32769 map @nodeport-endpoints4-tcp-32769');
});

test('topology hints, as kube-proxy v1.28 reads them: this zone\'s endpoints when every ready one is hinted, else all (#39)', () => {
  const hinted = (ip: string, node: string, zones: string[] | undefined, conditions: Obj = { ready: true }) =>
    ({ ...endpoint(ip, node, conditions), ...(zones ? { hints: { forZones: zones.map((name) => ({ name })) } } : {}) });
  const auto = web({}, {});
  (auto.metadata as Obj).annotations = { 'service.kubernetes.io/topology-mode': 'Auto' };
  const zoneA = { ...OPTIONS, zone: 'a' };
  const served = (services: Obj[], endpoints: Obj[], options: RenderOptions = zoneA) =>
    endpointSlots(render(services, [webSlice(endpoints)], options).ruleset, 4).map((e) => e.split(' : ')[1]);
  const both = [hinted('10.244.1.2', 'n1', ['a']), hinted('10.244.2.2', 'n2', ['b']), hinted('10.244.3.2', 'n3', ['a', 'b'])];
  assert.deepEqual(served([auto], both), ['10.244.1.2 . 8080', '10.244.3.2 . 8080']);
  // A not-ready endpoint without hints does not matter; a ready one without hints turns them off.
  assert.deepEqual(served([auto], [...both, hinted('10.244.4.2', 'n4', undefined, { ready: false })]),
    ['10.244.1.2 . 8080', '10.244.3.2 . 8080']);
  const all = ['10.244.1.2 . 8080', '10.244.2.2 . 8080', '10.244.3.2 . 8080', '10.244.4.2 . 8080'];
  assert.deepEqual(served([auto], [...both, hinted('10.244.4.2', 'n4', undefined)]), all);
  assert.deepEqual(served([auto], both.slice(0, 2), { ...OPTIONS, zone: 'c' }), all.slice(0, 2), 'no endpoint for this zone');
  assert.deepEqual(served([auto], both.slice(0, 2), OPTIONS), all.slice(0, 2), 'a node without a zone');
  assert.deepEqual(served([web()], both), all.slice(0, 3), 'a Service not asking for them');
  for (const [annotation, value, used] of [['topology-aware-hints', 'Auto', true], ['topology-mode', 'disabled', false],
    ['topology-mode', 'Disabled', false], ['topology-mode', 'anything', true]] as const) {
    const svc = web();
    (svc.metadata as Obj).annotations = { [`service.kubernetes.io/${annotation}`]: value };
    assert.equal(served([svc], both).length, used ? 2 : 3, `${annotation}: ${value}`);
  }
  // The older annotation decides when both are there.
  const older = web();
  (older.metadata as Obj).annotations = {
    'service.kubernetes.io/topology-aware-hints': 'disabled', 'service.kubernetes.io/topology-mode': 'Auto',
  };
  assert.equal(served([older], both).length, 3);
  // A change of zone renders every Service again.
  const renderer = new ServiceRenderer();
  renderer.render(serviceModel([auto], [webSlice(both)]), zoneA);
  const inB = renderer.render(serviceModel([auto], [webSlice(both)]), { ...OPTIONS, zone: 'b' }, []).ruleset;
  assert.deepEqual(endpointSlots(inB, 4).map((e) => e.split(' : ')[1]), ['10.244.2.2 . 8080', '10.244.3.2 . 8080']);
});

test('loadBalancerSourceRanges as kube-proxy\'s nftables mode: a family without ranges open, the node\'s VIPs, its own connections (#39)', () => {
  const dual = web({ type: 'LoadBalancer', clusterIPs: ['10.96.0.10', 'fd00:10:96::10'], ipFamilyPolicy: 'RequireDualStack',
    ports: [{ port: 80, nodePort: 30080 }], loadBalancerSourceRanges: ['198.51.100.0/24'] },
  { loadBalancer: { ingress: [{ ip: '198.18.0.20' }, { ip: 'fd00:18::20' }] } });
  const slice6 = sliceObject('ns', 'web-6', 'web', 'IPv6', [{ port: 8080 }], [endpoint('fd00:244::2', 'n2')]);
  const { ruleset } = render([dual], [webSlice(TWO), slice6]);
  assert.deepEqual(ruleset.chains.get('fw-ns/web/80/tcp/v4'), ['ip saddr != { 198.51.100.0/24 } drop']);
  assert.deepEqual(elements(ruleset, 'firewall6'), [], 'no IPv6 range: IPv6 is not filtered (was: all dropped)');
  assert.equal(ruleset.chains.get('fw-ns/web/80/tcp/v6'), undefined);
  // A range holding the node's address: the load balancer IPs are sources too.
  const nodeIPs = [parseIP('198.51.100.1', 'test')];
  const here = render([dual], [webSlice(TWO)], { ...OPTIONS, nodeIPs }).ruleset;
  assert.deepEqual(here.chains.get('fw-ns/web/80/tcp/v4'), ['ip saddr != { 198.51.100.0/24, 198.18.0.20 } drop']);
  const elsewhere = render([dual], [webSlice(TWO)], { ...OPTIONS, nodeIPs: [parseIP('198.18.5.1', 'test')] }).ruleset;
  assert.deepEqual(elsewhere.chains.get('fw-ns/web/80/tcp/v4'), ['ip saddr != { 198.51.100.0/24 } drop']);
  // The node's own connections are checked too, before nat-output's DNAT; a port without endpoints as well.
  assert.deepEqual(ruleset.chains.get('filter-output-firewall'), ['type filter hook output priority -110; policy accept;',
    'ct state new ip daddr . meta l4proto . th dport vmap @firewall4', 'ct state new ip6 daddr . meta l4proto . th dport vmap @firewall6']);
  assert.deepEqual(elements(render([dual], []).ruleset, 'firewall4'), ['198.18.0.20 . tcp . 80 : goto fw-ns/web/80/tcp/v4']);
});

test('a load balancer ingress of ipMode Proxy is not translated on the node; VIP or none is (#39)', () => {
  const lb = web({ type: 'LoadBalancer', ports: [{ port: 80, nodePort: 30080 }] }, { loadBalancer: { ingress: [
    { ip: '198.18.0.20', ipMode: 'Proxy' }, { ip: '198.18.0.21', ipMode: 'VIP' }, { ip: '198.18.0.22' },
  ] } });
  assert.deepEqual(elements(render([lb], [webSlice(TWO)]).ruleset, 'services4').map((e) => e.split(' : ')[0]),
    ['10.96.0.10 . tcp . 80', '198.18.0.21 . tcp . 80', '198.18.0.22 . tcp . 80']);
});

test('externalTrafficPolicy Local on a ClusterIP Service with externalIPs keeps the client and this node\'s endpoints (#39)', () => {
  const svc = web({ externalIPs: ['198.18.0.10'], externalTrafficPolicy: 'Local' });
  const { ruleset } = render([svc], [webSlice(TWO)]);
  assert.deepEqual(elements(ruleset, 'services4'),
    ['10.96.0.10 . tcp . 80 : goto cluster4-tcp-2', '198.18.0.10 . tcp . 80 : goto ext-local4-tcp-2-1']);
  assert.equal(ruleset.chains.get('ext-local4-tcp-2-1')?.at(-1), 'dnat ip to ip daddr . tcp dport . numgen random mod 1 offset 2 map @endpoints4-tcp-1');
  // Without externalIPs nothing outside reaches it: the policy means nothing, as the API says.
  const plain = render([web({ externalTrafficPolicy: 'Local' })], [webSlice(TWO)]).ruleset;
  assert.deepEqual(elements(plain, 'services4'), ['10.96.0.10 . tcp . 80 : goto cluster4-tcp-2']);
});
