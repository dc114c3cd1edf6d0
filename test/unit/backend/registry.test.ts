import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createBackend } from '../../../src/backend/registry.ts';
import { parseNetConfig } from '../../../src/config/netconf.ts';
import { ConfigError } from '../../../src/errors.ts';
import type { ExternalInterface } from '../../../src/iface/select.ts';
import { silentLogger } from '../../../src/log.ts';
import type { NetlinkHandle } from '../../../src/netlink/handle.ts';

const ext: ExternalInterface = {
  link: { index: 2, name: 'eth0', kind: '', mac: '02:00:00:00:00:01', mtu: 1500, up: true } as ExternalInterface['link'],
  ifaceAddr: '198.51.100.1', extAddr: '198.51.100.1', mtu: 1500, reason: 'test',
};
// host-gw set-up reads no kernel state: a handle that throws proves it.
const noKernel = new Proxy({}, { get: () => { throw new Error('kernel touched'); } }) as NetlinkHandle;

test('registry: backend types are looked up case-insensitively', () => {
  const config = parseNetConfig('{"Network":"10.244.0.0/16","Backend":{"Type":"Host-GW"}}');
  assert.equal(createBackend({ handle: noKernel, config, ext, log: silentLogger }).type, 'host-gw');
});

test('host-gw publishes the interface address and the interface MTU', async () => {
  const config = parseNetConfig('{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}');
  const b = createBackend({ handle: noKernel, config, ext, log: silentLogger });
  const attrs = await b.setup();
  assert.equal(attrs.backendType, 'host-gw');
  assert.equal(attrs.backendData, undefined);
  assert.equal(b.mtu, 1500);
});

test('host-gw refuses a public IP that is not the interface address (NAT), naming the flag', async () => {
  const config = parseNetConfig('{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}');
  const b = createBackend({ handle: noKernel, config, ext: { ...ext, extAddr: '198.18.0.7' }, log: silentLogger });
  await assert.rejects(b.setup(), (e: unknown) => e instanceof ConfigError && e.field === '--public-ip' && /NAT/.test(e.message) && /vxlan/.test(e.message));
});

test('alloc publishes the interface address and plans nothing for any peer: leases only', async () => {
  const config = parseNetConfig('{"Network":"10.244.0.0/16","Backend":{"Type":"alloc"}}');
  const b = createBackend({ handle: noKernel, config, ext, log: silentLogger });
  const attrs = await b.setup();
  assert.deepEqual(attrs, { backendType: 'alloc', publicIP: { family: 4, value: 0xc6336401n } });
  assert.equal(b.mtu, 1500);
  const lease = { peer: 'n2', subnet: { ip: { family: 4 as const, value: 0x0af40200n }, prefix: 24 }, attrs: { backendType: 'alloc' } };
  assert.deepEqual(await b.plan(lease, lease), { state: { routes: [], neighs: [], fdb: [] }, warnings: [] });
  assert.deepEqual(b.ownership().devices, []);
});
