import assert from 'node:assert/strict';
import { test } from 'node:test';
import { NetlinkError } from '../../src/errors.ts';
import { NetlinkHandle } from '../../src/netlink/index.ts';
import { joinUnderlay, needsRoot, withNetns } from '../support/netns.ts';
import type { Netns } from '../support/netns.ts';
import { until } from '../support/until.ts';

const STALE_MAC = '02:00:00:00:00:99';

/** The MAC `peer` holds for `ip` on eth0, or undefined. */
async function learnt(peer: Netns, ip: string): Promise<string | undefined> {
  const neigh = await peer.ipJson<{ dst: string; lladdr?: string }[]>('neigh', 'show', 'dev', 'eth0');
  return neigh.find((n) => n.dst === ip)?.lladdr;
}

test('announce: a gratuitous ARP and an unsolicited NA move a neighbour\'s entry to the link\'s MAC, and nothing else changes',
  { skip: needsRoot }, async () => {
    await withNetns(['ul', 'gw', 'peer'], async (ul, gw, peer) => {
      await joinUnderlay(ul, [gw, peer], { ipv6: true });
      // The peer still believes another node holds the addresses (as after a failover); the
      // addresses are not on the gateway at all, so only the announcement can change that.
      const eips = ['198.51.100.100', '2001:db8::100'];
      for (const ip of eips) await peer.ip('neigh', 'replace', ip, 'lladdr', STALE_MAC, 'nud', 'stale', 'dev', 'eth0');
      await gw.ip('neigh', 'replace', '198.51.100.50', 'lladdr', '02:00:00:00:00:50', 'nud', 'permanent', 'dev', 'eth0');
      const h = NetlinkHandle.open(gw.path);
      try {
        const eth0 = await h.linkByName('eth0');
        await new Promise((r) => setTimeout(r, 200));
        for (const ip of eips) assert.equal(await learnt(peer, ip), STALE_MAC, `${ip} before the announcement`);
        for (const ip of eips) {
          await h.announce(eth0.index, ip);
          await until(`the peer to learn ${ip} at ${eth0.mac}`, async () => (await learnt(peer, ip)) === eth0.mac, 3000);
        }
        assert.equal((await h.linkByName('eth0')).mac, eth0.mac);
        assert.match(await gw.ip('neigh', 'show', 'dev', 'eth0'), /^198\.51\.100\.50 lladdr 02:00:00:00:00:50 PERMANENT/m);
        await assert.rejects(h.announce(eth0.index, '198.51.100.300'), (e: unknown) =>
          e instanceof NetlinkError && e.errno === 'EINVAL' && /198\.51\.100\.300/.test(e.message));
        await assert.rejects(h.announce(99_999, '198.51.100.100'), (e: unknown) => e instanceof NetlinkError && e.errno === 'ENODEV');
      } finally {
        h.close();
      }
    });
  });

test('addressProbe: finds who holds IPv4 and IPv6 addresses (DAD whatever accept_dad says), none for free ones, teaching no one anything',
  { skip: needsRoot }, async () => {
    await withNetns(['ul', 'gw', 'peer'], async (ul, gw, peer) => {
      await joinUnderlay(ul, [gw, peer], { ipv6: true });
      // The prober's kernel would run no DAD of its own: the probe must not depend on it.
      await gw.exec('sysctl', '-q', '-w', 'net.ipv6.conf.eth0.accept_dad=0');
      await peer.ip('addr', 'add', '198.51.100.100/32', 'dev', 'eth0');
      await peer.ip('-6', 'addr', 'add', '2001:db8::100/128', 'dev', 'eth0', 'nodad');
      const peerMac = (await peer.ipJson<{ address: string }[]>('link', 'show', 'dev', 'eth0'))[0]!.address;
      const h = NetlinkHandle.open(gw.path);
      try {
        const eth0 = await h.linkByName('eth0');
        const asked = ['198.51.100.100', '198.51.100.101', '2001:db8::100', '2001:db8::101'];
        const t0 = performance.now();
        assert.deepEqual(await h.addressProbe(eth0.index, asked, 300, 3), [[peerMac], [], [peerMac], []]);
        assert.ok(performance.now() - t0 < 3000, 'the addresses are probed together, in one window');
        assert.equal(await learnt(peer, '0.0.0.0'), undefined);
        assert.equal(await learnt(peer, '198.51.100.1'), undefined, 'the probe carries no sender address to learn');
        assert.deepEqual(await h.addressProbe(eth0.index, [], 300), []);
        await assert.rejects(h.addressProbe(eth0.index, ['198.51.100.300'], 100), (e: unknown) =>
          e instanceof NetlinkError && e.errno === 'EINVAL' && /198\.51\.100\.300/.test(e.message));
      } finally {
        h.close();
      }
    });
  });
