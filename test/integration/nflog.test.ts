/**
 * NetlinkHandle.nflog on a real kernel: packets an nftables rule logs to an NFLOG group (`log group
 * N prefix "…"`) arrive decoded, IPv4 and IPv6; a group another socket holds is refused; stopping
 * frees it. The packets are the namespace's own UDP datagrams, logged at the output hook (before
 * any neighbour is resolved, so nothing needs to answer them).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { NetlinkError } from '../../src/errors.ts';
import { NetlinkHandle } from '../../src/netlink/index.ts';
import type { LoggedPacket } from '../../src/netlink/index.ts';
import { needsRoot, withNetns } from '../support/netns.ts';
import { until } from '../support/until.ts';

const GROUP = 4711;

test('nflog: logged packets arrive with prefix, addresses, protocol and ports; a held group is refused; stop frees it', {
  skip: needsRoot,
}, async () => {
  await withNetns(['nflog'], async (ns) => {
    await ns.ip('link', 'add', 'd0', 'type', 'veth', 'peer', 'name', 'd1');
    await ns.ip('link', 'set', 'd1', 'up');
    await ns.ip('addr', 'add', '198.18.0.1/15', 'dev', 'd0');
    await ns.ip('-6', 'addr', 'add', 'fd00:10:244:1::1/64', 'dev', 'd0', 'nodad');
    await ns.ip('link', 'set', 'd0', 'up');
    await ns.exec('nft', 'add', 'table', 'inet', 't');
    await ns.exec('nft', 'add', 'chain', 'inet', 't', 'out', '{ type filter hook output priority filter; policy accept; }');
    await ns.exec('nft', 'add', 'rule', 'inet', 't', 'out', 'udp', 'dport', '53', 'log', 'group', String(GROUP), 'prefix', '"weft-test"');
    const handle = NetlinkHandle.open(ns.path);
    const other = NetlinkHandle.open(ns.path);
    const got: LoggedPacket[] = [];
    const reader = await handle.nflog(GROUP, (packets) => got.push(...packets));
    try {
      await assert.rejects(other.nflog(GROUP, () => undefined), (e: unknown) => e instanceof NetlinkError && e.errno === 'EPERM');
      const send = (family: 4 | 6, ip: string) => ns.exec(process.execPath, '-e',
        `const s = require('node:dgram').createSocket('udp${family}'); s.bind(5300, () => s.send('x', 53, '${ip}', () => s.close()));`);
      await send(4, '198.18.0.2');
      await send(6, 'fd00:10:244:1::2');
      await until('both packets', () => got.length >= 2, 10_000, () => JSON.stringify(got));
      assert.deepEqual(got.slice(0, 2), [
        { prefix: 'weft-test', family: 4, src: '198.18.0.1', dst: '198.18.0.2', protocol: 17, sport: 5300, dport: 53 },
        { prefix: 'weft-test', family: 6, src: 'fd00:10:244:1::1', dst: 'fd00:10:244:1::2', protocol: 17, sport: 5300, dport: 53 },
      ]);
    } finally {
      reader.stop();
    }
    const again = await other.nflog(GROUP, () => undefined);
    again.stop();
    handle.close();
    other.close();
  });
});
