import assert from 'node:assert/strict';
import { test } from 'node:test';
import { NetlinkError } from '../../src/errors.ts';
import { NetlinkHandle } from '../../src/netlink/index.ts';
import { needsRoot, withNetns } from '../support/netns.ts';
import type { Netns } from '../support/netns.ts';

/** Sends one UDP datagram from each `sport` to `dst`:`dport` inside `ns` (python3, so the source port is ours to pick). */
async function sendUdp(ns: Netns, dst: string, dport: number, sports: number[]): Promise<void> {
  const script = [
    'import socket, sys',
    'for p in sys.argv[3:]:',
    '    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)',
    "    s.bind(('', int(p)))",
    "    s.sendto(b'x', (sys.argv[1], int(sys.argv[2])))",
    '    s.close()',
  ].join('\n');
  await ns.exec('python3', '-c', script, dst, String(dport), ...sports.map(String));
}

/** `conntrack -L -p udp`, one "origDst:dport>replySrc sport" line per entry, sorted. */
async function udpEntries(ns: Netns): Promise<string[]> {
  const out = await ns.exec('conntrack', '-L', '-p', 'udp');
  return out.split('\n').filter((l) => l.startsWith('udp')).map((line) => {
    const dst = [...line.matchAll(/dst=(\S+)/g)].map((m) => m[1]);
    const src = [...line.matchAll(/src=(\S+)/g)].map((m) => m[1]);
    const port = [...line.matchAll(/[sd]port=(\d+)/g)].map((m) => m[1]);
    return `${dst[0]}:${port[1]}>${src[1]} ${port[0]}`;
  }).sort();
}

test('conntrackDelete removes the UDP entries its filters name, in one dump, and keeps the rest', { skip: needsRoot }, async () => {
  await withNetns(['ct'], async (ns) => {
    // Endpoints behind eth0 (a veth whose peer stays here); 10.96.0.10:53 DNATed to one of two by
    // source port, 10.96.0.10:54 and 10.96.0.11:53 to the first.
    await ns.ip('link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth0p');
    await ns.ip('addr', 'add', '198.51.100.1/24', 'dev', 'eth0');
    await ns.ip('link', 'set', 'eth0', 'up');
    await ns.ip('link', 'set', 'eth0p', 'up');
    await ns.ip('route', 'add', '10.96.0.0/16', 'dev', 'eth0');
    await ns.exec('nft', [
      'add table ip t',
      'add chain ip t out { type nat hook output priority -100; }',
      'add rule ip t out ip daddr 10.96.0.10 udp sport 40002 dnat to 198.51.100.3:5353',
      'add rule ip t out ip daddr { 10.96.0.10, 10.96.0.11 } meta l4proto udp dnat to 198.51.100.2:5353',
    ].join('; '));
    await sendUdp(ns, '10.96.0.10', 53, [40001, 40002]);
    await sendUdp(ns, '10.96.0.10', 54, [40003]);
    await sendUdp(ns, '10.96.0.11', 53, [40004]);
    assert.deepEqual(await udpEntries(ns), [
      '10.96.0.10:53>198.51.100.2 40001', '10.96.0.10:53>198.51.100.3 40002',
      '10.96.0.10:54>198.51.100.2 40003', '10.96.0.11:53>198.51.100.2 40004',
    ]);
    const h = NetlinkHandle.open(ns.path);
    try {
      const stale = { family: 4, protocol: 'udp', origDst: '10.96.0.10', origDstPort: 53, replySrc: '198.51.100.2' } as const;
      assert.equal(await h.conntrackDelete([stale]), 1);
      assert.deepEqual(await udpEntries(ns), [
        '10.96.0.10:53>198.51.100.3 40002', '10.96.0.10:54>198.51.100.2 40003', '10.96.0.11:53>198.51.100.2 40004',
      ]);
      assert.equal(await h.conntrackDelete([stale]), 0, 'nothing left to match is not an error');
      assert.equal(await h.conntrackDelete([{ family: 4, protocol: 'tcp', origDst: '10.96.0.10' }]), 0, 'another protocol');
      assert.equal(await h.conntrackDelete([
        { family: 4, protocol: 'udp', origDst: '10.96.0.10', replySrc: '198.51.100.3' }, { family: 4, protocol: 'udp', origDstPort: 54 },
      ]), 2, 'either filter, one dump');
      assert.deepEqual(await udpEntries(ns), ['10.96.0.11:53>198.51.100.2 40004']);
      assert.equal(await h.conntrackDelete([{ family: 6, protocol: 'udp' }]), 0, 'another family');
      assert.equal(await h.conntrackDelete([{ family: 4, protocol: 'udp', origDst: '10.96.0.11' }]), 1, 'the last one');
      assert.deepEqual(await udpEntries(ns), []);
      await assert.rejects(h.conntrackDelete([{ family: 4, protocol: 'udp', origDst: '2001:db8::1' }]),
        (e: unknown) => e instanceof NetlinkError && e.errno === 'EINVAL');
    } finally {
      h.close();
    }
  });
});
