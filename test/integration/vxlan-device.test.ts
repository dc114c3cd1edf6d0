import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ensureDeviceAddress, ensureVxlanDevice, generateMac, vxlanMtu } from '../../src/backend/vxlan-device.ts';
import type { VxlanDeviceSpec } from '../../src/backend/vxlan-device.ts';
import { parseCIDR } from '../../src/ip/ip.ts';
import { NetlinkHandle } from '../../src/netlink/index.ts';
import { needsRoot, withNetns } from '../support/netns.ts';

test('generated MACs are locally administered unicast; MTU leaves room for the encapsulation', () => {
  for (let i = 0; i < 50; i++) {
    const first = parseInt(generateMac().slice(0, 2), 16);
    assert.equal(first & 0x01, 0, 'unicast');
    assert.equal(first & 0x02, 0x02, 'locally administered');
  }
  assert.equal(vxlanMtu(1500, 0, 4), 1450);
  assert.equal(vxlanMtu(1500, 0, 6), 1430);
  assert.equal(vxlanMtu(1500, 9000, 4), 8950);
});

test('the vxlan device is created, adopted without churn, repaired, and recreated when incompatible', { skip: needsRoot }, async () => {
  await withNetns(['vxdev'], async (ns) => {
    await ns!.ip('link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth0p');
    await ns!.ip('addr', 'add', '198.51.100.2/24', 'dev', 'eth0');
    await ns!.ip('link', 'set', 'eth0', 'up');
    const h = NetlinkHandle.open(ns!.path);
    try {
      const eth0 = await h.linkByName('eth0');
      const spec: VxlanDeviceSpec = { name: 'flannel.1', vni: 1, local: '198.51.100.2', vtepIndex: eth0.index, port: 0, learning: false, gbp: false, mtu: 1450 };
      const first = await ensureVxlanDevice(h, spec);
      assert.match(first.actions.join(), /created flannel\.1/);
      const mac = first.link.mac;
      assert.match(await ns!.ip('-d', 'link', 'show', 'flannel.1'), /mtu 1450 .*\n.*link\/ether [0-9a-f:]+ [\s\S]*vxlan id 1 local 198\.51\.100\.2 dev eth0 srcport 0 0 dstport 8472 nolearning/);

      const again = await ensureVxlanDevice(h, spec);
      assert.deepEqual(again.actions, []);
      assert.equal(again.link.index, first.link.index, 'adopted, not recreated');
      assert.equal(again.link.mac, mac, 'the MAC survives a restart');

      await ns!.ip('link', 'set', 'flannel.1', 'address', '02:11:11:11:11:11');
      await ns!.ip('link', 'set', 'flannel.1', 'mtu', '1300');
      const repaired = await ensureVxlanDevice(h, { ...spec, mac });
      assert.equal(repaired.link.mac, mac, 'a MAC changed behind our back (udev) is put back');
      assert.equal(repaired.link.mtu, 1450);
      assert.equal(repaired.link.index, first.link.index);

      const recreated = await ensureVxlanDevice(h, { ...spec, vni: 2, mac });
      assert.match(recreated.actions[0]!, /deleted incompatible flannel\.1 \(VNI 1 ≠ 2\)/);
      assert.equal(recreated.link.vxlan?.vni, 2);
      assert.equal(recreated.link.mac, mac, 'the MAC our lease carries is kept across recreation');

      const network = parseCIDR('10.244.0.0/16', 'n');
      await ns!.ip('addr', 'add', '10.244.9.0/32', 'dev', 'flannel.1');
      await ns!.ip('addr', 'add', '203.0.113.7/32', 'dev', 'flannel.1');
      const addrActions = await ensureDeviceAddress(h, recreated.link, parseCIDR('10.244.1.0/24', 's'), network);
      assert.deepEqual(addrActions, ['added 10.244.1.0/32 to flannel.1', 'removed stale 10.244.9.0/32 from flannel.1']);
      const shown = await ns!.ip('-4', 'addr', 'show', 'dev', 'flannel.1');
      assert.match(shown, /inet 10\.244\.1\.0\/32 scope global flannel\.1/);
      assert.match(shown, /inet 203\.0\.113\.7\/32/, 'addresses outside the network are not ours to remove');
      assert.doesNotMatch(shown, /10\.244\.9\.0/);
      assert.deepEqual(await ensureDeviceAddress(h, recreated.link, parseCIDR('10.244.1.0/24', 's'), network), []);
    } finally {
      h.close();
    }
  });
});
