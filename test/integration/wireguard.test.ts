/**
 * The wireguard configuration paths against the real thing: the generic netlink transport
 * (native/, NetlinkHandle.genl) against this kernel's nlctrl family, and the choice of path
 * (control.ts) with wireguard-go's UAPI socket, since this kernel has no WireGuard.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { chooseControl } from '../../src/backend/wireguard/control.ts';
import { GENL_ID_CTRL, resolveFamily } from '../../src/backend/wireguard/genl.ts';
import { generatePrivateKey, publicKeyOf } from '../../src/backend/wireguard/keys.ts';
import { NetlinkError } from '../../src/errors.ts';
import { memoryLogger } from '../../src/log.ts';
import { NetlinkHandle } from '../../src/netlink/index.ts';
import { needsRoot, needsRootAnd, withNetns } from '../support/netns.ts';

const skip = needsRootAnd('/usr/bin/wireguard-go');

test('generic netlink: nlctrl resolves to its fixed id; this kernel has no wireguard family (ENOENT)', { skip: needsRoot }, async () => {
  await withNetns(['genl'], async (ns) => {
    const h = NetlinkHandle.open(ns.path);
    try {
      assert.equal(await resolveFamily(h, 'nlctrl'), GENL_ID_CTRL);
      await assert.rejects(resolveFamily(h, 'wireguard'), (e: unknown) => e instanceof NetlinkError && e.errno === 'ENOENT');
      await assert.rejects(h.genl('send nothing', new Uint8Array(3)), (e: unknown) => e instanceof NetlinkError && e.errno === 'EINVAL');
    } finally {
      h.close();
    }
  });
});

test('without WireGuard in the kernel: wireguard-go per device, configured and read back over its socket, adopted, recreated', { skip, timeout: 30_000 }, async () => {
  const dir = await mkdtemp(join(tmpdir(), 'weft-wgctl-'));
  await withNetns(['wgctl'], async (ns) => {
    const h = NetlinkHandle.open(ns.path);
    const log = memoryLogger();
    try {
      const control = await chooseControl(h, 'flannel-wg', join(dir, 'wireguard'), log);
      assert.equal(control.kind, 'userspace');
      assert.equal(await h.linkByName('flannel-wg').catch(() => undefined), undefined, 'the refused probe left no device');
      assert.match(log.records.map((r) => r.msg).join('\n'), /this kernel has no WireGuard: running wireguard-go/);
      const made = await control.ensureDevice('flannel-wg');
      assert.match(made.join(), /created flannel-wg \(wireguard-go, pid \d+\)/);
      const key = generatePrivateKey();
      const peer = publicKeyOf(generatePrivateKey());
      await control.set({
        device: 'flannel-wg', privateKey: key, listenPort: 51820, remove: [],
        set: [{ device: 'flannel-wg', publicKey: peer, endpoint: '198.51.100.2:51820', allowedIPs: ['10.244.2.0/24'], keepalive: 25 }],
      });
      assert.deepEqual(await control.get('flannel-wg'), {
        privateKey: key, listenPort: 51820,
        peers: [{ device: 'flannel-wg', publicKey: peer, endpoint: '198.51.100.2:51820', allowedIPs: ['10.244.2.0/24'], keepalive: 25 }],
      });
      assert.deepEqual(await control.ensureDevice('flannel-wg'), [], 'a running device is adopted');
      await h.linkDel((await h.linkByName('flannel-wg')).index);
      assert.match((await control.ensureDevice('flannel-wg')).join(), /created flannel-wg/);
      assert.equal((await control.get('flannel-wg')).peers.length, 0, 'a new wireguard-go starts empty');
    } finally {
      await h.linkByName('flannel-wg').then((l) => h.linkDel(l.index)).catch(() => undefined);
      h.close();
    }
  });
  await rm(dir, { recursive: true, force: true });
});
