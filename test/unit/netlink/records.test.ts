import assert from 'node:assert/strict';
import { test } from 'node:test';
import { describe } from '../../../src/netlink/operation.ts';
import {
  AF_BRIDGE,
  AF_INET6,
  fdbFromRaw,
  fdbKey,
  linkFromRaw,
  routeEqual,
  routeFromRaw,
  routeKey,
} from '../../../src/netlink/records.ts';
import type { RawRoute } from '../../../src/netlink/native.ts';

const raw: RawRoute = {
  type: 'route', family: 2, dst: '10.244.2.0', dstLen: 24, table: 254, protocol: 201, scope: 0,
  routeType: 1, priority: 0, flags: 0, oif: 4, gateway: '10.244.2.0', nhFlags: 4, nexthops: 1,
};

test('routeFromRaw: CIDR destination, onlink from the next hop, default routes named', () => {
  const r = routeFromRaw(raw);
  assert.deepEqual(r, {
    family: 4, dst: '10.244.2.0/24', gateway: '10.244.2.0', linkIndex: 4, table: 254, protocol: 201,
    scope: 0, type: 1, metric: 0, onlink: true,
  });
  assert.equal(routeFromRaw({ ...raw, dst: '', dstLen: 0 }).dst, '0.0.0.0/0');
  assert.equal(routeFromRaw({ ...raw, family: AF_INET6, dst: '', dstLen: 0 }).dst, '::/0');
  assert.equal(routeFromRaw({ ...raw, nhFlags: 0 }).onlink, false);
  assert.equal(routeFromRaw({ ...raw, oif: 0 }).linkIndex, undefined);
  // IPv6 reports reject routes (blackhole, unreachable, prohibit) on the loopback device.
  assert.equal(routeFromRaw({ ...raw, family: AF_INET6, dst: 'fd00::', dstLen: 64, routeType: 6, oif: 1, gateway: undefined, nhFlags: 0 }).linkIndex, undefined);
});

test('route identity and equality: the key ignores the next hop, equality does not', () => {
  const a = routeFromRaw(raw);
  const b = routeFromRaw({ ...raw, gateway: '10.244.2.1' });
  assert.equal(routeKey(a), routeKey(b));
  assert.equal(routeEqual(a, routeFromRaw(raw)), true);
  assert.equal(routeEqual(a, b), false);
  assert.notEqual(routeKey(a), routeKey(routeFromRaw({ ...raw, priority: 5 })));
});

test('fdb and link records', () => {
  const f = fdbFromRaw({ type: 'neigh', family: AF_BRIDGE, index: 4, ip: '198.51.100.3', mac: '6e:11:22:33:44:55', state: 128, flags: 2, vlan: 0, master: 0 });
  assert.deepEqual(f, { linkIndex: 4, mac: '6e:11:22:33:44:55', dst: '198.51.100.3', state: 128, flags: 2 });
  assert.equal(fdbKey(f), '4|6e:11:22:33:44:55|198.51.100.3');
  const l = linkFromRaw({ type: 'link', index: 3, name: 'eth0', kind: 'veth', mac: 'aa:bb:cc:dd:ee:ff', mtu: 1500, flags: 0x1043, operstate: 6, master: 0, ifLink: 7 });
  assert.equal(l.ifLink, 7);
  assert.equal(l.up, true);
  assert.equal(l.vxlan, undefined);
  assert.equal(linkFromRaw({ type: 'link', index: 3, name: 'x', kind: '', mac: '', mtu: 0, flags: 0x1002, operstate: 2, master: 0, ifLink: 0 }).up, false);
});

test('describe: operations read like the iproute2 command they stand for', () => {
  assert.deepEqual(describe({ op: 'routeReplace', route: { dst: '10.244.2.0/24', gateway: '10.244.2.0', linkIndex: 4, onlink: true } }), {
    verb: 'replace route',
    object: '10.244.2.0/24 via 10.244.2.0 dev #4 onlink',
  });
  assert.deepEqual(describe({ op: 'fdbAppend', fdb: { linkIndex: 4, mac: '6e:11:22:33:44:55', dst: '198.51.100.3' } }), {
    verb: 'append fdb entry',
    object: '6e:11:22:33:44:55 dst 198.51.100.3 dev #4',
  });
  assert.equal(describe({ op: 'neighDel', neigh: { linkIndex: 4, ip: '10.244.2.0' } }).verb, 'del neighbour');
  assert.equal(describe({ op: 'addrAdd', addr: { linkIndex: 4, address: '10.244.1.0', prefixLen: 32 } }).object, '10.244.1.0/32 dev #4');
});
