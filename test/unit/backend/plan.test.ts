import assert from 'node:assert/strict';
import { test } from 'node:test';
import { BLACKHOLE_METRIC, ownBlackhole, planHostGw, planVxlan, vtepMac } from '../../../src/backend/plan.ts';
import type { PlanInput } from '../../../src/backend/plan.ts';
import { formatIP, parseCIDR, parseIP } from '../../../src/ip/ip.ts';
import type { Lease } from '../../../src/lease/lease.ts';

const own: Lease = { peer: 'node-a', subnet: parseCIDR('10.244.1.0/24', 's'), ipv6Subnet: parseCIDR('fd00:0:0:1::/64', 's'), attrs: { backendType: 'vxlan' } };

function remote(n: number, over: Partial<Lease['attrs']> = {}, v6 = true): Lease {
  return {
    peer: `node-${n}`,
    subnet: parseCIDR(`10.244.${n}.0/24`, 's'),
    ...(v6 ? { ipv6Subnet: parseCIDR(`fd00:0:0:${n}::/64`, 's') } : {}),
    attrs: {
      publicIP: parseIP(`198.51.100.${n}`, 'p'),
      publicIPv6: parseIP(`2001:db8::${n}`, 'p'),
      backendType: 'vxlan',
      backendData: { VNI: 1, VtepMAC: `6E:11:22:33:44:0${n}` },
      backendV6Data: { VNI: 1, VtepMAC: `6e:11:22:33:66:0${n}` },
      ...over,
    },
  };
}

const base: PlanInput = { own, remotes: [], enabled: [4, 6], extIndex: 2, vxlan: { 4: { index: 5, mac: '0e:00:00:00:00:01' }, 6: { index: 6, mac: '0e:00:00:00:00:02' } } };

test('vxlan: route via the subnet address onlink, permanent neighbour, FDB to the public IP, per family', () => {
  const { state, warnings } = planVxlan({ ...base, remotes: [remote(2)] });
  assert.deepEqual(warnings, []);
  assert.deepEqual(state.routes.map((r) => `${r.dst} via ${r.gateway} dev ${r.linkIndex}${r.onlink ? ' onlink' : ''} proto ${r.protocol} metric ${r.metric}`), [
    '10.244.2.0/24 via 10.244.2.0 dev 5 onlink proto 201 metric 0',
    'fd00:0:0:2::/64 via fd00:0:0:2:: dev 6 onlink proto 201 metric 1024',
  ]);
  assert.deepEqual(state.neighs.map((n) => `${n.ip} lladdr ${n.mac} dev ${n.linkIndex}`), [
    '10.244.2.0 lladdr 6e:11:22:33:44:02 dev 5',
    'fd00:0:0:2:: lladdr 6e:11:22:33:66:02 dev 6',
  ]);
  assert.deepEqual(state.fdb.map((f) => `${f.mac} dst ${f.dst} dev ${f.linkIndex}`), [
    '6e:11:22:33:44:02 dst 198.51.100.2 dev 5',
    '6e:11:22:33:66:02 dst 2001:db8::2 dev 6',
  ]);
});

test('vxlan: bad peers are skipped with a warning naming them, good ones still planned', () => {
  const remotes = [
    remote(2, { backendType: 'host-gw' }),
    remote(3, { backendData: { VNI: 1, VtepMAC: 'not-a-mac' } }),
    remote(4, { publicIP: undefined }),
    { ...remote(5), subnet: parseCIDR('10.244.1.0/25', 's') },
    remote(6, {}, false),
  ];
  const { state, warnings } = planVxlan({ ...base, remotes });
  assert.deepEqual(warnings, [
    'ignoring peer node-2: backend type "host-gw", this node runs vxlan',
    'ignoring peer node-3 IPv4: no usable VtepMAC in its backend data',
    'ignoring peer node-4 IPv4: no public IPv4 address',
    "ignoring peer node-5 IPv4: subnet 10.244.1.0/25 overlaps this node's own",
  ]);
  assert.deepEqual(state.routes.map((r) => r.dst).sort(), ['10.244.6.0/24', 'fd00:0:0:3::/64', 'fd00:0:0:4::/64', 'fd00:0:0:5::/64']);
});

test('vxlan DirectRouting: a peer on our L2 segment gets a plain route via its public IP and no neighbour or FDB', () => {
  const near = (ip: Parameters<NonNullable<PlanInput['directlyReachable']>>[0]) => formatIP(ip) === '198.51.100.2';
  const { state } = planVxlan({ ...base, enabled: [4], remotes: [remote(2), remote(3)], directlyReachable: near });
  assert.deepEqual(state.routes.map((r) => `${r.dst} via ${r.gateway} dev ${r.linkIndex}${r.onlink ? ' onlink' : ''}`), [
    '10.244.2.0/24 via 198.51.100.2 dev 2',
    '10.244.3.0/24 via 10.244.3.0 dev 5 onlink',
  ]);
  assert.deepEqual(state.neighs.map((n) => n.ip), ['10.244.3.0']);
});

test('host-gw: route via the public IP on the external interface; a disabled family is left alone', () => {
  const hg = (n: number) => remote(n, { backendType: 'host-gw', backendData: undefined, backendV6Data: undefined });
  const { state, warnings } = planHostGw({ ...base, enabled: [4], vxlan: undefined, remotes: [hg(2), hg(3), remote(4)] });
  assert.deepEqual(state.routes.map((r) => `${r.dst} via ${r.gateway} dev ${r.linkIndex}`), ['10.244.2.0/24 via 198.51.100.2 dev 2', '10.244.3.0/24 via 198.51.100.3 dev 2']);
  assert.deepEqual(state.neighs, []);
  assert.deepEqual(warnings, ['ignoring peer node-4: backend type "vxlan", this node runs host-gw']);
});

test('vtepMac reads flannel backend data case-insensitively', () => {
  assert.equal(vtepMac({ vtepmac: 'AA:bb:cc:dd:ee:ff' }), 'aa:bb:cc:dd:ee:ff');
  assert.equal(vtepMac({ VtepMAC: 'aa:bb:cc:dd:ee' }), undefined);
  assert.equal(vtepMac(null), undefined);
  assert.equal(vtepMac('aa:bb:cc:dd:ee:ff'), undefined);
});

test('ownBlackhole: one blackhole per family of our lease, tagged as ours, at the largest metric', () => {
  assert.deepEqual(ownBlackhole(own).routes.map((r) => [r.dst, r.type, r.metric, r.protocol, r.linkIndex, r.gateway]), [
    ['10.244.1.0/24', 6, BLACKHOLE_METRIC, 201, undefined, undefined],
    ['fd00:0:0:1::/64', 6, BLACKHOLE_METRIC, 201, undefined, undefined],
  ]);
  assert.equal(BLACKHOLE_METRIC, 2 ** 32 - 1);
  assert.deepEqual(ownBlackhole({ ...own, ipv6Subnet: undefined }).routes.map((r) => r.dst), ['10.244.1.0/24']);
});
