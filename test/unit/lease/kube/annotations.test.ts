import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseNetConfig } from '../../../../src/config/netconf.ts';
import { ConfigError, PeerDataError } from '../../../../src/errors.ts';
import { formatCIDR, formatIP, parseCIDR, parseIP } from '../../../../src/ip/ip.ts';
import { annotationKeys, encodeBackendData, nodePublicIPs, ownAnnotationChanges, ownSubnets, remoteLease } from '../../../../src/lease/kube/annotations.ts';
import type { NodeLike } from '../../../../src/lease/kube/annotations.ts';

const K = annotationKeys('flannel.alpha.coreos.com');
const V4 = parseNetConfig('{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}');
const DUAL = parseNetConfig('{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}');
const MAC = { VNI: 1, VtepMAC: '12:c6:65:89:b4:e3' };

test('prefix rules: "/" or "-" appended as flanneld does; more than one slash or a bad form is a ConfigError naming the flag', () => {
  assert.equal(annotationKeys('flannel.alpha.coreos.com').backendData, 'flannel.alpha.coreos.com/backend-data');
  assert.equal(annotationKeys('example.com/').subnetKubeManaged, 'example.com/kube-subnet-manager');
  assert.equal(annotationKeys('example.com/weft').backendPublicIP, 'example.com/weft-public-ip');
  assert.equal(annotationKeys('example.com/weft-').backendV6Data, 'example.com/weft-backend-v6-data');
  assert.equal(annotationKeys('a.b.c/x').nodePublicIPv6, 'a.b.c/x-node-public-ipv6');
  // flanneld's regexp is not anchored at the start; so the same prefixes pass here.
  assert.equal(annotationKeys('My.example.com').backendType, 'My.example.com/backend-type');
  for (const bad of ['example.com/a/b', 'nodots', 'example.com/Upper', 'example.com/a b']) {
    assert.throws(() => annotationKeys(bad), (e: unknown) => e instanceof ConfigError && e.field === '--kube-annotation-prefix', bad);
  }
});

test('own annotations byte-identical to flanneld: vxlan, vxlan dual stack, host-gw', () => {
  const vx = ownAnnotationChanges(K, { backendType: 'vxlan', publicIP: parseIP('198.18.0.7', 'ip'), backendData: MAC });
  assert.deepEqual(vx, {
    'flannel.alpha.coreos.com/backend-type': 'vxlan',
    'flannel.alpha.coreos.com/backend-data': '{"VNI":1,"VtepMAC":"12:c6:65:89:b4:e3"}',
    'flannel.alpha.coreos.com/public-ip': '198.18.0.7',
    'flannel.alpha.coreos.com/kube-subnet-manager': 'true',
  });
  const dual = ownAnnotationChanges(K, {
    backendType: 'vxlan', publicIP: parseIP('198.18.0.7', 'ip'), publicIPv6: parseIP('2001:DB8:0:0::7', 'ip'),
    backendData: MAC, backendV6Data: { VNI: 1, VtepMAC: 'aa:00:00:00:00:01' },
  });
  assert.equal(dual['flannel.alpha.coreos.com/backend-v6-data'], '{"VNI":1,"VtepMAC":"aa:00:00:00:00:01"}');
  assert.equal(dual['flannel.alpha.coreos.com/public-ipv6'], '2001:db8::7');
  const hostgw = ownAnnotationChanges(K, { backendType: 'host-gw', publicIP: parseIP('198.18.0.7', 'ip') });
  assert.equal(hostgw['flannel.alpha.coreos.com/backend-data'], 'null');
  assert.equal(hostgw['flannel.alpha.coreos.com/backend-v6-data'], undefined);
  const hostgw6 = ownAnnotationChanges(K, { backendType: 'host-gw', publicIP: parseIP('198.18.0.7', 'ip'), publicIPv6: parseIP('2001:db8::7', 'ip') });
  assert.equal(hostgw6['flannel.alpha.coreos.com/backend-v6-data'], 'null');
  assert.equal(encodeBackendData(undefined), 'null');
});

test('own annotations: only what differs; IPv6-only vxlan writes no IPv4 pair; overwrite annotations win', () => {
  const attrs = { backendType: 'vxlan', publicIP: parseIP('10.0.0.7', 'ip'), backendData: MAC };
  const current = ownAnnotationChanges(K, attrs);
  assert.deepEqual(ownAnnotationChanges(K, attrs, current), {});
  assert.deepEqual(ownAnnotationChanges(K, attrs, { ...current, 'flannel.alpha.coreos.com/public-ip-overwrite': '203.0.113.9' }),
    { 'flannel.alpha.coreos.com/public-ip': '203.0.113.9' });
  const v6only = ownAnnotationChanges(K, { backendType: 'vxlan', publicIPv6: parseIP('2001:db8::7', 'ip'), backendV6Data: MAC },
    { 'flannel.alpha.coreos.com/public-ipv6-overwrite': '2001:db8::99' });
  assert.deepEqual(Object.keys(v6only).sort(), ['flannel.alpha.coreos.com/backend-type', 'flannel.alpha.coreos.com/backend-v6-data',
    'flannel.alpha.coreos.com/kube-subnet-manager', 'flannel.alpha.coreos.com/public-ipv6']);
  assert.equal(v6only['flannel.alpha.coreos.com/public-ipv6'], '2001:db8::99');
});

function node(name: string, ann: Record<string, string>, spec: NodeLike['spec']): NodeLike {
  return { metadata: { name, annotations: ann }, spec };
}

const managed = (n: number, extra: Record<string, string> = {}) => ({
  'flannel.alpha.coreos.com/kube-subnet-manager': 'true',
  'flannel.alpha.coreos.com/backend-type': 'vxlan',
  'flannel.alpha.coreos.com/backend-data': `{"VNI":1,"VtepMAC":"aa:00:00:00:00:0${n}"}`,
  'flannel.alpha.coreos.com/public-ip': `198.18.0.${n}`,
  ...extra,
});

test('remote Node → lease: IPv4 from podCIDR, dual stack from podCIDRs by family, host bits masked', () => {
  const l = remoteLease(node('b', managed(2), { podCIDR: '10.244.2.0/24' }), { keys: K, config: V4 })!;
  assert.equal(l.peer, 'b');
  assert.equal(formatCIDR(l.subnet!), '10.244.2.0/24');
  assert.equal(formatIP(l.attrs.publicIP!), '198.18.0.2');
  assert.deepEqual(l.attrs.backendData, { VNI: 1, VtepMAC: 'aa:00:00:00:00:02' });
  assert.equal(l.attrs.backendType, 'vxlan');
  const d = remoteLease(node('c', managed(3, {
    'flannel.alpha.coreos.com/public-ipv6': '2001:db8::3', 'flannel.alpha.coreos.com/backend-v6-data': '{"VNI":1,"VtepMAC":"bb:00:00:00:00:03"}',
  }), { podCIDR: '10.244.3.0/24', podCIDRs: ['fd00:10:244:3::1/64', '10.244.3.9/24'] }), { keys: K, config: DUAL })!;
  assert.equal(formatCIDR(d.subnet!), '10.244.3.0/24');
  assert.equal(formatCIDR(d.ipv6Subnet!), 'fd00:10:244:3::/64');
  assert.equal(formatIP(d.attrs.publicIPv6!), '2001:db8::3');
  assert.deepEqual(d.attrs.backendV6Data, { VNI: 1, VtepMAC: 'bb:00:00:00:00:03' });
});

test('remote Node: without kube-subnet-manager exactly "true" it is ignored, not an error', () => {
  assert.equal(remoteLease(node('x', {}, { podCIDR: '10.244.9.0/24' }), { keys: K, config: V4 }), undefined);
  assert.equal(remoteLease(node('x', managed(9, { 'flannel.alpha.coreos.com/kube-subnet-manager': 'True' }), { podCIDR: '10.244.9.0/24' }), { keys: K, config: V4 }), undefined);
});

test('remote Node: invalid cases are PeerDataError naming the Node', () => {
  const cases: [string, NodeLike, typeof V4, RegExp][] = [
    ['bad ip', node('n1', managed(1, { 'flannel.alpha.coreos.com/public-ip': 'nope' }), { podCIDR: '10.244.1.0/24' }), V4, /public-ip is not an IPv4/],
    ['v6 as v4', node('n2', managed(2, { 'flannel.alpha.coreos.com/public-ip': '2001:db8::1' }), { podCIDR: '10.244.2.0/24' }), V4, /IPv4/],
    ['no cidr', node('n3', managed(3), {}), V4, /no IPv4 pod CIDR/],
    ['bad cidr', node('n4', managed(4), { podCIDR: '10.244.4.0/33' }), V4, /not a CIDR/],
    ['three cidrs', node('n5', managed(5), { podCIDRs: ['10.244.5.0/24', 'fd00::/64', '10.244.6.0/24'] }), V4, /3 entries/],
    ['outside', node('n6', managed(6), { podCIDR: '10.99.6.0/24' }), V4, /outside the network 10\.244\.0\.0\/16/],
    ['bad json', node('n7', managed(7, { 'flannel.alpha.coreos.com/backend-data': '{"VNI":' }), { podCIDR: '10.244.7.0/24' }), V4, /backend-data is not JSON/],
    ['dual stack without v6 half', node('n8', managed(8), { podCIDR: '10.244.8.0/24' }), DUAL, /public-ipv6/],
  ];
  for (const [what, n, config, msg] of cases) {
    assert.throws(() => remoteLease(n, { keys: K, config }), (e: unknown) => e instanceof PeerDataError && e.peer === n.metadata!.name && msg.test(e.message), what);
  }
  assert.throws(() => remoteLease(node('n9', managed(9), { podCIDR: '10.244.1.0/24' }), { keys: K, config: V4, own: { subnet: parseCIDR('10.244.1.0/24', 's') } }),
    /overlaps our own subnet/);
});

test('own subnets: podCIDRs by family, else podCIDR; none assigned yet is undefined; outside the Network is a ConfigError', () => {
  assert.equal(ownSubnets(node('a', {}, {}), V4), undefined);
  assert.equal(formatCIDR(ownSubnets(node('a', {}, { podCIDR: '10.244.1.0/24' }), V4)!.subnet!), '10.244.1.0/24');
  const d = ownSubnets(node('a', {}, { podCIDR: '10.244.1.0/24', podCIDRs: ['10.244.1.0/24', 'fd00:10:244:1::/64'] }), DUAL)!;
  assert.equal(formatCIDR(d.ipv6Subnet!), 'fd00:10:244:1::/64');
  assert.throws(() => ownSubnets(node('a', {}, { podCIDR: '10.1.0.0/24' }), V4), (e: unknown) => e instanceof ConfigError && e.field === 'Network' && /Node "a"/.test(e.message));
  assert.throws(() => ownSubnets(node('a', {}, { podCIDR: '10.244.1.0/24' }), DUAL), /no IPv6 pod CIDR/);
});

test('node-public-ip annotations are read as hints; a bad one names the annotation and the Node', () => {
  assert.deepEqual(nodePublicIPs(K, node('a', { 'flannel.alpha.coreos.com/node-public-ip': '198.51.100.1' }, {})), { publicIP: '198.51.100.1' });
  assert.deepEqual(nodePublicIPs(K, node('a', { 'flannel.alpha.coreos.com/node-public-ipv6': '2001:db8::1' }, {})), { publicIPv6: '2001:db8::1' });
  assert.throws(
    () => nodePublicIPs(K, node('a', { 'flannel.alpha.coreos.com/node-public-ip': '2001:db8::1' }, {})),
    (e: unknown) => e instanceof ConfigError && e.field === 'annotation flannel.alpha.coreos.com/node-public-ip' && /IPv4 address on Node "a": "2001:db8::1"/.test(e.message),
  );
  assert.throws(() => nodePublicIPs(K, node('a', { 'flannel.alpha.coreos.com/node-public-ipv6': 'nope' }, {})), /node-public-ipv6: not an IPv6 address/);
});
