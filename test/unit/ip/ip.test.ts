import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError } from '../../../src/errors.ts';
import {
  containsCIDR, firstFreeSubnets, formatCIDR, formatIP, gatewayOf, nextSubnet, overlaps, parseCIDR, parseIP, subnetsIn, tryParseIP,
} from '../../../src/ip/ip.ts';

test('IPv6 text is canonical RFC 5952, as Go prints it', () => {
  const cases: [string, string][] = [
    ['2001:DB8:0:0:0:0:0:1', '2001:db8::1'],
    ['fc00:0:0:34::', 'fc00:0:0:34::'],
    ['fc00:0000:0000:0034:0000:0000:0000:0000', 'fc00:0:0:34::'],
    ['2001:db8:0:1:0:0:0:1', '2001:db8:0:1::1'],
    ['2001:0:0:1:0:0:0:1', '2001:0:0:1::1'],
    ['2001:db8:1:1:1:1:1:1', '2001:db8:1:1:1:1:1:1'],
    ['2001:db8::1:0:0:1', '2001:db8::1:0:0:1'],
    ['::', '::'],
    ['::1', '::1'],
    ['1::', '1::'],
    ['::ffff:198.51.100.1', '::ffff:198.51.100.1'],
    ['::FFFF:c633:6401', '::ffff:198.51.100.1'],
  ];
  for (const [input, want] of cases) assert.equal(formatIP(parseIP(input, 'x')), want, input);
});

test('CIDRs mask host bits like net.ParseCIDR; bad text is a ConfigError naming the field', () => {
  assert.equal(formatCIDR(parseCIDR('10.244.1.1/24', 'Network')), '10.244.1.0/24');
  assert.equal(formatCIDR(parseCIDR('2001:cafe:42::1/56', 'IPv6Network')), '2001:cafe:42::/56');
  for (const bad of ['10.244.0.0', '10.244.0.0/33', '10.244.0.0/-1', '10.244.0.0/08', '010.1.1.1/8', '1.2.3/8', 'fe80::1%eth0/64', '::/129', '1:2:3:4:5:6:7:8:9/64', '']) {
    assert.throws(() => parseCIDR(bad, 'Network'), (e: unknown) => e instanceof ConfigError && e.field === 'Network' && e.message.includes(JSON.stringify(bad)), bad);
  }
  assert.equal(tryParseIP('256.1.1.1'), undefined);
  assert.equal(tryParseIP('1:2:3:4:5:6:7::8'), undefined);
});

test('containment, overlap, gateway and iteration', () => {
  const net = parseCIDR('10.244.0.0/16', 'n');
  assert.ok(containsCIDR(net, parseCIDR('10.244.3.0/24', 's')));
  assert.ok(!containsCIDR(net, parseCIDR('10.245.0.0/24', 's')));
  assert.ok(overlaps(parseCIDR('10.244.0.0/23', 'a'), parseCIDR('10.244.1.0/24', 'b')));
  assert.ok(!overlaps(parseCIDR('10.244.0.0/24', 'a'), parseCIDR('10.244.1.0/24', 'b')));
  assert.ok(!overlaps(parseCIDR('10.244.0.0/24', 'a'), parseCIDR('::/0', 'b')), 'families never overlap');
  assert.equal(formatIP(gatewayOf(parseCIDR('10.244.1.0/24', 's'))), '10.244.1.1');
  assert.equal(formatCIDR(nextSubnet(parseCIDR('10.244.255.0/24', 's'))!), '10.245.0.0/24');
  assert.equal(nextSubnet(parseCIDR('255.255.255.0/24', 's')), undefined);
  const all = [...subnetsIn(parseIP('10.244.1.0', 'a'), parseIP('10.244.3.0', 'b'), 24)].map(formatCIDR);
  assert.deepEqual(all, ['10.244.1.0/24', '10.244.2.0/24', '10.244.3.0/24']);
});

test('firstFreeSubnets skips taken blocks of any size and stops at the maximum', () => {
  const taken = ['10.244.1.0/24', '10.244.4.0/22', '10.244.9.0/24'].map((t) => parseCIDR(t, 't'));
  const free = firstFreeSubnets(parseIP('10.244.1.0', 'a'), parseIP('10.244.10.0', 'b'), 24, taken, 100).map(formatCIDR);
  assert.deepEqual(free, ['10.244.2.0/24', '10.244.3.0/24', '10.244.8.0/24', '10.244.10.0/24']);
  assert.deepEqual(firstFreeSubnets(parseIP('10.244.1.0', 'a'), parseIP('10.244.10.0', 'b'), 24, taken, 2).map(formatCIDR), ['10.244.2.0/24', '10.244.3.0/24']);
  const v6 = firstFreeSubnets(parseIP('fc00:0:0:1::', 'a'), parseIP('fc00:0:ffff:ffff::', 'b'), 64, [parseCIDR('fc00:0:0:1::/64', 't')], 2).map(formatCIDR);
  assert.deepEqual(v6, ['fc00:0:0:2::/64', 'fc00:0:0:3::/64']);
});

test('firstFreeSubnets against 5,000 leases stays linear: each lease is read a constant number of times', () => {
  // Counting reads of the leases, not time: an implementation that scans the leases again for
  // every candidate subnet (quadratic) reads each of them about a hundred times here.
  let reads = 0;
  const taken = Array.from({ length: 5000 }, (_, i) => new Proxy(parseCIDR(`10.${i >> 8}.${i & 255}.0/24`, 't'), {
    get: (t, k) => {
      reads++;
      return t[k as keyof typeof t];
    },
  }));
  const free = firstFreeSubnets(parseIP('10.0.0.0', 'a'), parseIP('10.255.255.0', 'b'), 24, taken, 100);
  assert.equal(free.length, 100);
  assert.equal(formatCIDR(free[0]!), '10.19.136.0/24');
  assert.ok(reads <= 8 * taken.length, `${reads} reads of ${taken.length} leases`);
});

test('IPv4 text is read as Go reads it, whatever the characters (checked against a reference reader)', () => {
  // Go's rules: four decimal octets, each 0 or 1-3 digits without a leading zero, at most 255.
  const reference = (t: string) => {
    const parts = t.split('.');
    if (parts.length !== 4 || !parts.every((p) => /^(0|[1-9]\d{0,2})$/.test(p) && Number(p) <= 255)) return undefined;
    return parts.reduce((v, p) => v * 256 + Number(p), 0);
  };
  const alphabet = '0123456789..a ';
  let state = 7;
  const rand = (n: number) => (state = (state * 1103515245 + 12345) % 2 ** 31) % n;
  const cases = ['0.0.0.0', '255.255.255.255', '10.244.1.0', '1.2.3.4', '01.2.3.4', '1.2.3.04', '1.2.3.256', '1.2.3', '1.2.3.4.5', '1..2.3', '.1.2.3', '1.2.3.', '1.2.3.4 ', '1000.1.1.1'];
  for (let i = 0; i < 20_000; i++) cases.push(Array.from({ length: 1 + rand(16) }, () => alphabet[rand(alphabet.length)]).join(''));
  for (const t of cases) {
    const ip = tryParseIP(t);
    const want = reference(t);
    assert.equal(ip === undefined ? undefined : Number(ip.value), want, JSON.stringify(t));
    if (ip) assert.equal(ip.family, 4);
  }
});
