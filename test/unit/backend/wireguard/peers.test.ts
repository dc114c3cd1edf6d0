import assert from 'node:assert/strict';
import { test } from 'node:test';
import { diffDevice, planWireguard, wgDevices, wgLeaseData } from '../../../../src/backend/wireguard/peers.ts';
import type { WgPeer, WgPlanInput } from '../../../../src/backend/wireguard/peers.ts';
import { parseCIDR, parseIP } from '../../../../src/ip/ip.ts';
import type { Lease } from '../../../../src/lease/lease.ts';

const K1 = 'hSDwCYkwp1R0i33ctD73Wg2/Og0mOBr066SpjqqbTmo=';
const K2 = 'GPSsS6YhV9Bb4XrC+Xs0y9DHnYPc1jKQZ/J+lKBZ1Bs=';
const own: Lease = { peer: 'own', subnet: parseCIDR('10.244.1.0/24', 't'), ipv6Subnet: parseCIDR('fd00:10:244:1::/64', 't'), attrs: { backendType: 'wireguard' } };

function remote(over: Partial<Lease['attrs']> = {}, subnets = { v4: '10.244.2.0/24', v6: 'fd00:10:244:2::/64' }): Lease {
  return {
    peer: 'node-2', subnet: parseCIDR(subnets.v4, 't'), ipv6Subnet: parseCIDR(subnets.v6, 't'),
    attrs: {
      backendType: 'wireguard', publicIP: parseIP('198.51.100.2', 't'), publicIPv6: parseIP('2001:db8::2', 't'),
      backendData: { PublicKey: K2, Port: 51820 }, backendV6Data: { PublicKey: K2, Port: 51821 }, ...over,
    },
  };
}

const config: WgPlanInput['config'] = { mode: 'separate', listenPort: 51820, listenPortV6: 51821, keepalive: 0 };
const plan = (r: Lease, over: Partial<WgPlanInput> = {}) =>
  planWireguard({ own, remote: r, enabled: [4, 6], config, ownPublic: { ipv4: parseIP('198.51.100.1', 't') }, ...over });

test('separate mode: one peer per family on its own device, at the port the lease names (ours when it names none)', () => {
  assert.deepEqual(wgDevices('separate', [4, 6]).map((d) => d.device), ['flannel-wg', 'flannel-wg-v6']);
  assert.deepEqual(plan(remote()), {
    peers: [
      { device: 'flannel-wg', publicKey: K2, endpoint: '198.51.100.2:51820', allowedIPs: ['10.244.2.0/24'], keepalive: 0 },
      { device: 'flannel-wg-v6', publicKey: K2, endpoint: '[2001:db8::2]:51821', allowedIPs: ['fd00:10:244:2::/64'], keepalive: 0 },
    ],
    warnings: [],
  });
  const noPort = plan(remote({ backendData: { publickey: K2 }, backendV6Data: { PublicKey: K2, Port: 7000 } }), {
    config: { ...config, psk: K1, keepalive: 25, listenPort: 6000 },
  });
  assert.deepEqual(noPort.peers.map((p) => [p.endpoint, p.presharedKey, p.keepalive]), [['198.51.100.2:6000', K1, 25], ['[2001:db8::2]:7000', K1, 25]]);
  assert.deepEqual(plan(remote(), { enabled: [4] }).peers.map((p) => p.device), ['flannel-wg']);
});

test('single-device modes: both subnets on flannel-wg, reached over the mode\'s family (auto: IPv4 unless only IPv6 is public)', () => {
  const one = (mode: 'auto' | 'ipv4' | 'ipv6', r = remote(), ownPublic: WgPlanInput['ownPublic'] = { ipv4: parseIP('198.51.100.1', 't') }) =>
    plan(r, { config: { ...config, mode }, ownPublic }).peers;
  assert.deepEqual(one('ipv4'), [{ device: 'flannel-wg', publicKey: K2, endpoint: '198.51.100.2:51820', allowedIPs: ['10.244.2.0/24', 'fd00:10:244:2::/64'], keepalive: 0 }]);
  assert.equal(one('ipv6')[0]!.endpoint, '[2001:db8::2]:51821');
  assert.equal(one('auto')[0]!.endpoint, '198.51.100.2:51820');
  const privateV4 = remote({ publicIP: parseIP('10.0.0.2', 't') });
  assert.equal(one('auto', privateV4, { ipv6: parseIP('2001:db8::1', 't') })[0]!.endpoint, '[2001:db8::2]:51821');
  assert.equal(one('auto', privateV4, { ipv6: parseIP('fd00::1', 't') })[0]!.endpoint, '10.0.0.2:51820');
  assert.equal(one('auto', remote({ publicIPv6: undefined }), {})[0]!.endpoint, '198.51.100.2:51820');
});

test('peer data is never trusted: another type, a bad key, no address, an overlapping subnet are skipped with a reason', () => {
  assert.match(plan(remote({ backendType: 'vxlan' })).warnings.join(), /backend type "vxlan", this node runs wireguard/);
  const badKey = plan(remote({ backendData: { PublicKey: 'x' } }));
  assert.deepEqual(badKey.peers.map((p) => p.device), ['flannel-wg-v6']);
  assert.match(badKey.warnings.join(), /on flannel-wg: no usable PublicKey/);
  assert.match(plan(remote({ publicIP: undefined }), { enabled: [4] }).warnings.join(), /no public IPv4 address/);
  const overlap = plan(remote({}, { v4: '10.244.1.0/24', v6: 'fd00:10:244:2::/64' }));
  assert.match(overlap.warnings.join(), /IPv4: subnet 10\.244\.1\.0\/24 overlaps this node's own/);
  assert.deepEqual(overlap.peers.map((p) => p.device), ['flannel-wg-v6']);
  assert.deepEqual(wgLeaseData({ PublicKey: 5, Port: 70000 }), {});
  assert.deepEqual(wgLeaseData('{"PublicKey":"k"}'), {});
});

test('the device diff: key and port put back, missing or changed peers written, peers nobody wants removed; nothing when in line', () => {
  const p = (key: string, endpoint: string, allowed: string[]): WgPeer => ({ device: 'flannel-wg', publicKey: key, endpoint, allowedIPs: allowed, keepalive: 0 });
  const want = { config: { device: 'flannel-wg', privateKey: K1, listenPort: 51820 }, peers: [p(K2, '198.51.100.2:51820', ['10.244.2.0/24'])] };
  assert.equal(diffDevice(want, { privateKey: K1, listenPort: 51820, peers: [p(K2, '198.51.100.2:51820', ['10.244.2.0/24'])] }), undefined);
  assert.deepEqual(diffDevice(want, { privateKey: undefined, listenPort: 0, peers: [] }), {
    device: 'flannel-wg', privateKey: K1, listenPort: 51820, set: want.peers, remove: [],
  });
  const stale = p(K1, '198.51.100.9:51820', ['10.244.9.0/24']);
  assert.deepEqual(diffDevice(want, { privateKey: K1, listenPort: 51820, peers: [p(K2, '198.51.100.2:51820', ['10.244.3.0/24']), stale] }), {
    device: 'flannel-wg', set: want.peers, remove: [K1],
  });
  // wireguard-go updates a roaming peer's endpoint: it is written back.
  assert.deepEqual(diffDevice(want, { privateKey: K1, listenPort: 51820, peers: [p(K2, '198.51.100.7:4000', ['10.244.2.0/24'])] })?.set, want.peers);
});
