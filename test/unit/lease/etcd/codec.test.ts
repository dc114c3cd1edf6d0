import assert from 'node:assert/strict';
import { test } from 'node:test';
import { PeerDataError } from '../../../../src/errors.ts';
import { formatCIDR, formatIP, parseCIDR, parseIP } from '../../../../src/ip/ip.ts';
import { configKey, decodeLease, decodeLeaseValue, encodeLeaseValue, leaseKey, parseLeaseKey, subnetsPrefix } from '../../../../src/lease/etcd/codec.ts';

const P = '/coreos.com/network';

test('keys as flannel writes them, IPv4 and dual stack; a trailing slash in the prefix is ignored', () => {
  assert.equal(leaseKey(P, parseCIDR('10.5.52.0/24', 's')), '/coreos.com/network/subnets/10.5.52.0-24');
  assert.equal(leaseKey(`${P}/`, parseCIDR('10.5.52.0/24', 's'), parseCIDR('fc00:0:0:34::/64', 's')),
    '/coreos.com/network/subnets/10.5.52.0-24&fc00:0:0:34::-64');
  assert.equal(subnetsPrefix(`${P}/`), '/coreos.com/network/subnets');
  assert.equal(configKey(P), '/coreos.com/network/config');
});

test('keys parse back; upper-case IPv6, bad addresses and other keys do not', () => {
  const dual = parseLeaseKey('/coreos.com/network/subnets/10.5.52.0-24&fc00:0:0:34::-64');
  assert.equal(dual && formatCIDR(dual.subnet), '10.5.52.0/24');
  assert.equal(dual?.ipv6Subnet && formatCIDR(dual.ipv6Subnet), 'fc00:0:0:34::/64');
  assert.equal(parseLeaseKey('/coreos.com/network/subnets/10.5.52.0-24&FC00::-64'), undefined);
  assert.equal(parseLeaseKey('/coreos.com/network/subnets/10.5.300.0-24'), undefined);
  assert.equal(parseLeaseKey('/coreos.com/network/subnets/10.5.52.0-33'), undefined);
  assert.equal(parseLeaseKey('/coreos.com/network/config'), undefined);
});

test('values byte-identical to flanneld: vxlan, dual-stack vxlan, host-gw', () => {
  const mac = { VNI: 1, VtepMAC: 'c6:d2:32:6f:8f:44' };
  assert.equal(
    encodeLeaseValue({ publicIP: parseIP('198.51.100.3', 'ip'), backendType: 'vxlan', backendData: mac }),
    '{"PublicIP":"198.51.100.3","PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}}',
  );
  assert.equal(
    encodeLeaseValue({ publicIP: parseIP('198.51.100.3', 'ip'), publicIPv6: parseIP('fc00::3', 'ip'), backendType: 'vxlan', backendData: mac, backendV6Data: { VNI: 1, VtepMAC: '6e:00:00:00:00:02' } }),
    '{"PublicIP":"198.51.100.3","PublicIPv6":"fc00::3","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"},"BackendV6Data":{"VNI":1,"VtepMAC":"6e:00:00:00:00:02"}}',
  );
  assert.equal(encodeLeaseValue({ publicIP: parseIP('198.51.100.4', 'ip'), backendType: 'host-gw' }),
    '{"PublicIP":"198.51.100.4","PublicIPv6":null,"BackendType":"host-gw"}');
  assert.equal(encodeLeaseValue({ backendType: '' }), '{"PublicIP":"0.0.0.0","PublicIPv6":null}');
});

test('decoding is as tolerant as Go: any key case, last duplicate wins, unknown keys, 0.0.0.0 and null as unset', () => {
  const a = decodeLeaseValue('k', '{"publicip":"198.51.100.1","PUBLICIP":"198.51.100.9","PublicIPv6":null,"backendtype":"vxlan","Extra":[1],"backenddata":{"VNI":1,"VtepMAC":"6e:00:00:00:00:01"}}');
  assert.equal(a.publicIP && formatIP(a.publicIP), '198.51.100.9');
  assert.equal(a.publicIPv6, undefined);
  assert.equal(a.backendType, 'vxlan');
  assert.deepEqual(a.backendData, { VNI: 1, VtepMAC: '6e:00:00:00:00:01' });
  assert.equal(decodeLeaseValue('k', '{"PublicIP":"0.0.0.0","BackendType":"host-gw"}').publicIP, undefined);
});

test('round trip: what we write decodes to the same attrs', () => {
  const attrs = { publicIP: parseIP('198.51.100.3', 'ip'), publicIPv6: parseIP('2001:db8::3', 'ip'), backendType: 'vxlan', backendData: { VNI: 4, VtepMAC: '6e:00:00:00:00:02' } };
  assert.deepEqual(decodeLeaseValue('k', encodeLeaseValue(attrs)), attrs);
});

test('bad values are PeerDataErrors naming the key', () => {
  const key = '/coreos.com/network/subnets/10.244.9.0-24';
  for (const value of ['not json', '[]', 'null', '{"PublicIP":7}', '{"PublicIP":"fc00::1"}', '{"PublicIPv6":"198.51.100.1"}', '{"BackendType":{}}']) {
    assert.throws(() => decodeLease(key, value), (e: unknown) => e instanceof PeerDataError && e.message.includes(key), value);
  }
  assert.throws(() => decodeLease('/coreos.com/network/subnets/garbage', '{}'), PeerDataError);
});

test('a decoded lease names its key as the peer and carries the subnets of the key', () => {
  const l = decodeLease('/coreos.com/network/subnets/10.244.9.0-24', '{"PublicIP":"198.51.100.9","BackendType":"host-gw"}');
  assert.equal(l.peer, '/coreos.com/network/subnets/10.244.9.0-24');
  assert.equal(l.subnet && formatCIDR(l.subnet), '10.244.9.0/24');
  assert.equal(l.ipv6Subnet, undefined);
});
