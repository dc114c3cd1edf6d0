import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { ConfigError } from '../../../src/errors.ts';
import { formatCIDR, parseCIDR } from '../../../src/ip/ip.ts';
import { parseSubnetEnv, readSubnetEnv, renderSubnetEnv, writeSubnetEnv } from '../../../src/subnetenv/subnetenv.ts';
import type { SubnetEnv } from '../../../src/subnetenv/subnetenv.ts';

const dual: SubnetEnv = {
  network: parseCIDR('10.244.0.0/16', 'n'),
  subnet: parseCIDR('10.244.1.0/24', 's'),
  ipv6Network: parseCIDR('2001:cafe:42::/56', 'n6'),
  ipv6Subnet: parseCIDR('2001:cafe:42::/64', 's6'),
  mtu: 1450,
  ipMasq: true,
};

test("renders flanneld's exact bytes and line order", () => {
  assert.equal(renderSubnetEnv(dual), [
    'FLANNEL_NETWORK=10.244.0.0/16',
    'FLANNEL_SUBNET=10.244.1.1/24',
    'FLANNEL_IPV6_NETWORK=2001:cafe:42::/56',
    'FLANNEL_IPV6_SUBNET=2001:cafe:42::1/64',
    'FLANNEL_MTU=1450',
    'FLANNEL_IPMASQ=true',
    '',
  ].join('\n'));
  assert.equal(renderSubnetEnv({ network: dual.network!, subnet: dual.subnet!, mtu: 1500, ipMasq: false }),
    'FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1500\nFLANNEL_IPMASQ=false\n');
});

test('parses back what it writes, with the subnets masked to the lease', () => {
  const env = parseSubnetEnv(renderSubnetEnv(dual));
  assert.equal(formatCIDR(env.subnet!), '10.244.1.0/24');
  assert.equal(formatCIDR(env.ipv6Subnet!), '2001:cafe:42::/64');
  assert.equal(formatCIDR(env.network!), '10.244.0.0/16');
  assert.equal(env.mtu, 1450);
  assert.equal(env.ipMasq, true);
});

test("tolerates flannel's variations: comma lists, comments, quotes, CRLF, export", () => {
  const env = parseSubnetEnv('# written by flanneld\r\nexport FLANNEL_NETWORK="10.244.0.0/16,10.245.0.0/16,10.244.0.0/16"\r\nFLANNEL_SUBNET=10.244.7.1/24\r\n\r\nFLANNEL_MTU=1450\r\nFLANNEL_IPMASQ=yes\r\n');
  assert.deepEqual(env.networks.map(formatCIDR), ['10.244.0.0/16', '10.245.0.0/16']);
  assert.equal(formatCIDR(env.subnet!), '10.244.7.0/24');
  assert.equal(env.ipMasq, false, 'only exactly "true" is true');
  assert.equal(env.ipv6Subnet, undefined);
});

test('a missing or bad required line is a ConfigError naming the file and key', () => {
  const cases: [string, RegExp][] = [
    ['FLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n', /FLANNEL_NETWORK: missing/],
    ['FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n', /FLANNEL_SUBNET: missing/],
    ['FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_IPMASQ=true\n', /FLANNEL_MTU: missing/],
    ['FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=14x0\nFLANNEL_IPMASQ=true\n', /FLANNEL_MTU: not an unsigned integer: "14x0"/],
    ['FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\n', /FLANNEL_IPMASQ: missing/],
    ['FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=fd00::1/64\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n', /FLANNEL_SUBNET: fd00::\/64 is not an IPv4 subnet/],
    ['FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n', /FLANNEL_SUBNET: not a CIDR: "10.244.1.1"/],
    ['garbage\n', /line "garbage" is not KEY=VALUE/],
  ];
  for (const [text, message] of cases) {
    assert.throws(() => parseSubnetEnv(text, '/run/flannel/subnet.env'), (e: unknown) => {
      assert.ok(e instanceof ConfigError, String(e));
      assert.match(e.message, /^\/run\/flannel\/subnet\.env/);
      assert.match(e.message, message);
      return true;
    });
  }
});

test('writes atomically with mode 0644 under a restrictive umask, creating the directory 0755', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'weft-subnetenv-'));
  const old = process.umask(0o077);
  try {
    const path = join(dir, 'run', 'flannel', 'subnet.env');
    assert.equal(await readSubnetEnv(path), undefined);
    await writeSubnetEnv(path, dual);
    assert.equal(await readFile(path, 'utf8'), renderSubnetEnv(dual));
    assert.equal((await stat(path)).mode & 0o777, 0o644);
    assert.equal((await stat(join(dir, 'run', 'flannel'))).mode & 0o777, 0o755);
    await writeSubnetEnv(path, { ...dual, mtu: 1400 });
    assert.equal((await readSubnetEnv(path))?.mtu, 1400);
    await writeFile(join(dir, 'blocker'), 'x');
    await assert.rejects(writeSubnetEnv(join(dir, 'blocker', 'subnet.env'), dual));
    assert.equal((await readSubnetEnv(path))?.mtu, 1400, 'a failed write leaves the previous file');
  } finally {
    process.umask(old);
    await rm(dir, { recursive: true, force: true });
  }
});
