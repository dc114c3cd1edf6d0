import assert from 'node:assert/strict';
import { test } from 'node:test';
import { EipPool, parsePool } from '../../../src/egress/pool.ts';

function pool(ipv4: string[], ipv6: string[] = []): EipPool {
  const p = parsePool({ ipv4, ipv6 });
  assert.ok(p instanceof EipPool, String(p));
  return p;
}

test('addresses, ranges and CIDRs index in the order given, across entries', () => {
  const p = pool(['198.51.100.7', '198.51.100.20-198.51.100.22', '198.51.100.64/30']);
  assert.equal(p.size, 8n);
  assert.deepEqual(Array.from({ length: 8 }, (_, i) => p.eip(BigInt(i)).ipv4), [
    '198.51.100.7', '198.51.100.20', '198.51.100.21', '198.51.100.22', '198.51.100.64', '198.51.100.65', '198.51.100.66', '198.51.100.67',
  ]);
  assert.equal(p.find('198.51.100.65', undefined), 5n);
  assert.equal(p.find('198.51.100.23', undefined), '198.51.100.23 is not in the pool');
  assert.equal(p.find('2001:db8::1', undefined), '2001:db8::1 is not in the pool', 'an IPv6 address asked as ipv4');
  assert.equal(p.find(undefined, '2001:db8::1'), '2001:db8::1 is not in the pool');
  assert.throws(() => p.eip(8n), RangeError);
});

test('dual stack pairs the Nth addresses; the longer list\'s tail is no EIP; a large IPv6 CIDR is not expanded', () => {
  const p = pool(['198.51.100.10-198.51.100.12'], ['2001:db8:1::/64']);
  assert.equal(p.size, 3n);
  assert.deepEqual(p.eip(2n), { index: 2n, ipv4: '198.51.100.12', ipv6: '2001:db8:1::2' });
  assert.equal(p.find(undefined, '2001:db8:1::3'), '2001:db8:1::3 is not in the pool');
  assert.equal(p.find('198.51.100.11', '2001:db8:1::1'), 1n);
  assert.match(String(p.find('198.51.100.11', '2001:db8:1::2')), /are not one EIP/);
  const v6 = pool([], ['2001:db8:1::/64']);
  assert.equal(v6.size, 2n ** 64n);
  assert.deepEqual(v6.eip(2n ** 64n - 1n), { index: 2n ** 64n - 1n, ipv6: '2001:db8:1:0:ffff:ffff:ffff:ffff' });
  assert.equal(pool([]).size, 0n);
});

test('a bad entry is a message naming it, never an exception', () => {
  const cases: [string[], string[], string][] = [
    [['nope'], [], 'spec.eipPool.ipv4[0]: "nope" is not an address, a range first-last or a CIDR'],
    [['198.51.100.1', '2001:db8::1'], [], 'spec.eipPool.ipv4[1]: "2001:db8::1" is not IPv4'],
    [[], ['198.51.100.1'], 'spec.eipPool.ipv6[0]: "198.51.100.1" is not IPv6'],
    [['198.51.100.9-198.51.100.1'], [], 'spec.eipPool.ipv4[0]: "198.51.100.9-198.51.100.1" ends before it starts'],
    [['198.51.100.1/24'], [], 'spec.eipPool.ipv4[0]: "198.51.100.1/24" has host bits set'],
    [['198.51.100.0/33'], [], 'spec.eipPool.ipv4[0]: "198.51.100.0/33" has a prefix length outside 0-32'],
    [['198.51.100.0/30', '198.51.100.3-198.51.100.9'], [], 'spec.eipPool.ipv4[1]: "198.51.100.3-198.51.100.9" overlaps "198.51.100.0/30"'],
    [[], ['2001:db8::/126', '2001:db8::2'], 'spec.eipPool.ipv6[1]: "2001:db8::2" overlaps "2001:db8::/126"'],
  ];
  for (const [ipv4, ipv6, message] of cases) assert.equal(parsePool({ ipv4, ipv6 }), message);
});
