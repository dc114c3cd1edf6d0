import assert from 'node:assert/strict';
import { test } from 'node:test';
import { checkNetworkConfig, parseNetConfig } from '../../../../src/config/netconf.ts';
import { formatCIDR, parseCIDR, parseIP } from '../../../../src/ip/ip.ts';
import { chooseLease, compatible, PICK_AMONG } from '../../../../src/lease/etcd/choose.ts';
import type { RegistryEntry } from '../../../../src/lease/etcd/choose.ts';

const v4 = checkNetworkConfig(parseNetConfig('{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}'));
const dual = checkNetworkConfig(parseNetConfig('{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10::/56","Backend":{"Type":"vxlan"}}'));

function entry(subnet: string, publicIP?: string, ipv6Subnet?: string): RegistryEntry {
  const e: RegistryEntry = { key: `k/${subnet}`, subnet: parseCIDR(subnet, 's'), modRevision: '7' };
  if (publicIP) e.publicIP = parseIP(publicIP, 'ip');
  if (ipv6Subnet) e.ipv6Subnet = parseCIDR(ipv6Subnet, 's');
  return e;
}

test('a lease carrying our public IP is reused when it fits the configuration', () => {
  const c = chooseLease({ config: v4, entries: [entry('10.244.5.0/24', '198.51.100.1'), entry('10.244.7.0/24', '198.51.100.2')], publicIP: parseIP('198.51.100.2', 'ip') });
  assert.equal(c.kind, 'reuse');
  assert.equal(c.kind === 'reuse' && c.entry.key, 'k/10.244.7.0/24');
});

test('a lease carrying our public IP that no longer fits is deleted first', () => {
  const c = chooseLease({ config: v4, entries: [entry('10.9.5.0/24', '198.51.100.2')], publicIP: parseIP('198.51.100.2', 'ip') });
  assert.equal(c.kind, 'delete');
  // Dual stack enabled since: an IPv4-only lease no longer fits either.
  assert.equal(chooseLease({ config: dual, entries: [entry('10.244.5.0/24', '198.51.100.2')], publicIP: parseIP('198.51.100.2', 'ip') }).kind, 'delete');
});

test('compatibility: prefix length, SubnetMin/Max, IPv6 exactly when enabled', () => {
  assert.equal(compatible(v4, entry('10.244.5.0/24')), true);
  assert.equal(compatible(v4, entry('10.244.0.0/24')), false, 'below SubnetMin (the first subnet is reserved)');
  assert.equal(compatible(v4, entry('10.244.5.0/25')), false);
  assert.equal(compatible(v4, entry('10.244.5.0/24', undefined, 'fd00:10:0:1::/64')), false);
  assert.equal(compatible(dual, entry('10.244.5.0/24', undefined, 'fd00:10:0:1::/64')), true);
});

test('the subnet from subnet.env is reused when free and fitting, else a random free one', () => {
  const prev = { subnet: parseCIDR('10.244.9.0/24', 's') };
  const c = chooseLease({ config: v4, entries: [entry('10.244.5.0/24')], previous: prev });
  assert.equal(c.kind === 'create' && formatCIDR(c.subnet), '10.244.9.0/24');
  const taken = chooseLease({ config: v4, entries: [entry('10.244.9.0/24')], previous: prev, random: () => 0 });
  assert.equal(taken.kind === 'create' && formatCIDR(taken.subnet), '10.244.1.0/24');
});

test('the random pick is uniform over the first 100 free subnets, skipping taken ones', () => {
  const entries = [entry('10.244.1.0/24'), entry('10.244.5.0/24')];
  const free = ['10.244.2.0/24', '10.244.3.0/24', '10.244.4.0/24', ...Array.from({ length: PICK_AMONG - 3 }, (_, i) => `10.244.${6 + i}.0/24`)];
  const pick = (r: number) => {
    const c = chooseLease({ config: v4, entries, random: () => r });
    return c.kind === 'create' ? formatCIDR(c.subnet) : c.kind;
  };
  // Each free subnet gets an equal share of [0, 1): [k/100, (k+1)/100) picks the k-th (the edges
  // less a rounding margin).
  for (let k = 0; k < PICK_AMONG; k++) {
    assert.equal(pick(k / PICK_AMONG + 1e-9), free[k], `start of share ${k}`);
    assert.equal(pick((k + 1) / PICK_AMONG - 1e-9), free[k], `end of share ${k}`);
  }
});

test('dual stack: each family chosen on its own; a taken previous IPv6 subnet does not cost the IPv4 one', () => {
  const c = chooseLease({
    config: dual,
    entries: [entry('10.244.5.0/24', undefined, 'fd00:10:0:1::/64')],
    previous: { subnet: parseCIDR('10.244.9.0/24', 's'), ipv6Subnet: parseCIDR('fd00:10:0:1::/64', 's') },
    random: () => 0,
  });
  assert.equal(c.kind, 'create');
  if (c.kind !== 'create') return;
  assert.equal(formatCIDR(c.subnet), '10.244.9.0/24');
  assert.equal(c.ipv6Subnet && formatCIDR(c.ipv6Subnet), 'fd00:10:0:2::/64');
});

test('out of subnets: a clear reason with the counts', () => {
  const small = checkNetworkConfig(parseNetConfig('{"Network":"10.244.0.0/22","Backend":{"Type":"vxlan"}}'));
  const entries = ['10.244.1.0/24', '10.244.2.0/24', '10.244.3.0/24'].map((s) => entry(s));
  const c = chooseLease({ config: small, entries });
  assert.equal(c.kind, 'exhausted');
  assert.match(c.reason, /out of subnets: .*10\.244\.0\.0\/22.*leases held: 3$/);
});
