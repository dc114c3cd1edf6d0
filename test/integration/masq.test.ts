/**
 * Traffic rules (issue #7) in namespaces, for both drivers: the source address a listener sees,
 * resync after tampering, driver switches, subnet changes and adoption of flanneld's rules.
 *
 *   pod (10.244.1.2, fd00:0:0:1::2) ── node ── outside (198.51.100.2, 2001:db8::2)
 *                                       │ 198.51.100.1 / 2001:db8::1 toward outside
 *                                       └── remote (198.18.0.2; remote pod 10.244.2.2, fd00:0:0:2::2)
 *
 * Cluster network 10.244.0.0/16 and fd00::/56; the node's subnet 10.244.1.0/24, fd00:0:0:1::/64.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { parseCIDR } from '../../src/ip/ip.ts';
import { memoryLogger, silentLogger } from '../../src/log.ts';
import type { DriverName } from '../../src/masq/drivers.ts';
import { TrafficRules } from '../../src/masq/manager.ts';
import type { TrafficRulesOptions } from '../../src/masq/manager.ts';
import type { TrafficNetworks } from '../../src/masq/rules.ts';
import { execRunner, runnerSysctl } from '../../src/masq/runner.ts';
import { nftChanges } from '../../src/nft/changes.ts';
import type { Runner } from '../../src/masq/runner.ts';
import { sleep } from '../../src/retry.ts';
import { countGenerationReads } from '../support/nft-reads.ts';
import { needsRoot, withNetns } from '../support/netns.ts';
import { until } from '../support/until.ts';
import type { Netns } from '../support/netns.ts';

const NODE = new URL('../../node_modules/.bin/node', import.meta.url).pathname;
const DRIVERS: DriverName[] = ['nftables', 'iptables'];

const NETS: TrafficNetworks = {
  network: parseCIDR('10.244.0.0/16', 'n'),
  subnet: parseCIDR('10.244.1.0/24', 's'),
  ipv6Network: parseCIDR('fd00::/56', 'n6'),
  ipv6Subnet: parseCIDR('fd00:0:0:1::/64', 's6'),
};

/** Reference §6 for <C> = 10.244.0.0/16, <P> = 10.244.1.0/24: what flanneld leaves behind. */
const FLANNELD_NAT = [
  '-A POSTROUTING -m comment --comment "flanneld masq" -j FLANNEL-POSTRTG',
  '-A FLANNEL-POSTRTG -m mark --mark 0x4000/0x4000 -m comment --comment "flanneld masq" -j RETURN',
  '-A FLANNEL-POSTRTG -s 10.244.1.0/24 -d 10.244.0.0/16 -m comment --comment "flanneld masq" -j RETURN',
  '-A FLANNEL-POSTRTG -s 10.244.0.0/16 -d 10.244.1.0/24 -m comment --comment "flanneld masq" -j RETURN',
  '-A FLANNEL-POSTRTG ! -s 10.244.0.0/16 -d 10.244.1.0/24 -m comment --comment "flanneld masq" -j RETURN',
  '-A FLANNEL-POSTRTG -s 10.244.0.0/16 ! -d 224.0.0.0/4 -m comment --comment "flanneld masq" -j MASQUERADE --random-fully',
  '-A FLANNEL-POSTRTG ! -s 10.244.0.0/16 -d 10.244.0.0/16 -m comment --comment "flanneld masq" -j MASQUERADE --random-fully',
];
const FLANNELD_FILTER = [
  '-A FORWARD -m comment --comment "flanneld forward" -j FLANNEL-FWD',
  '-A FLANNEL-FWD -s 10.244.0.0/16 -m comment --comment "flanneld forward" -j ACCEPT',
  '-A FLANNEL-FWD -d 10.244.0.0/16 -m comment --comment "flanneld forward" -j ACCEPT',
];
/** flanneld's nftables mode (reference §6), bug included. */
const FLANNELD_NFT = `table ip flannel-ipv4 {
  chain postrtg {
    type nat hook postrouting priority srcnat; policy accept;
    meta mark 0x4000 return
    ip saddr 10.244.1.0/24 ip daddr 10.244.0.0/16 return
    ip saddr 10.244.0.0/16 ip daddr 10.244.1.0/24 return
    ip saddr != 10.244.1.0/24 ip daddr 10.244.0.0/16 return
    ip saddr 10.244.0.0/16 ip daddr != 224.0.0.0/4 masquerade fully-random
    ip saddr != 10.244.0.0/16 ip daddr 10.244.0.0/16 masquerade fully-random
  }
  chain forward {
    type filter hook forward priority filter; policy accept;
    ip saddr 10.244.0.0/16 accept
    ip daddr 10.244.0.0/16 accept
  }
}
table ip6 flannel-ipv6 {
  chain postrtg {
    type nat hook postrouting priority srcnat; policy accept;
    ip6 saddr fd00::/56 ip6 daddr != ff00::/8 masquerade fully-random
  }
}
`;

function manager(node: Netns, driver: DriverName, extra: Partial<TrafficRulesOptions> = {}): TrafficRules {
  const runner = execRunner(['ip', 'netns', 'exec', node.name]);
  return new TrafficRules({ driver, ipMasq: true, enableIPv6: true, runner, sysctl: runnerSysctl(runner), log: silentLogger, ...extra });
}

/** FLANNEL-* lines of `iptables-save` (and `ip6tables-save`) in `ns`. */
async function flannelLines(ns: Netns, family: 4 | 6 = 4): Promise<string[]> {
  const out = await ns.exec(family === 4 ? 'iptables-save' : 'ip6tables-save');
  return out.split('\n').filter((l) => /FLANNEL-/.test(l));
}

async function nftTables(ns: Netns): Promise<string[]> {
  return (await ns.exec('nft', 'list', 'tables')).split('\n').filter(Boolean).sort();
}

/** Asserts `ns` holds exactly one set: `driver`'s, for `subnet`. */
async function assertOneSet(ns: Netns, driver: DriverName, subnet = '10.244.1.0/24'): Promise<void> {
  const v4 = await flannelLines(ns, 4);
  const tables = await nftTables(ns);
  assert.ok(!tables.includes('table ip flannel-ipv4') && !tables.includes('table ip6 flannel-ipv6'), `flanneld's nftables tables gone: ${tables.join(', ')}`);
  if (driver === 'iptables') {
    const want = [':FLANNEL-FWD - [0:0]', ...FLANNELD_FILTER, ':FLANNEL-POSTRTG - [0:0]', ...FLANNELD_NAT].map((l) => l.replaceAll('10.244.1.0/24', subnet));
    assert.deepEqual(v4, want);
    assert.equal((await flannelLines(ns, 6)).filter((l) => l.startsWith('-A POSTROUTING')).length, 1);
    assert.ok(!tables.includes('table inet weft'), 'no nftables set beside iptables');
  } else {
    assert.deepEqual(v4, [], 'no iptables set beside nftables');
    assert.deepEqual(await flannelLines(ns, 6), []);
    assert.ok(tables.includes('table inet weft'));
    const listing = await ns.exec('nft', 'list', 'table', 'inet', 'weft');
    assert.equal(listing.split('\n').filter((l) => l.includes(`ip saddr ${subnet} ip daddr 10.244.0.0/16 return`)).length, 1);
  }
}

interface Site {
  pod: Netns;
  node: Netns;
  outside: Netns;
  remote: Netns;
}

async function veth(a: Netns, aName: string, b: Netns, bName: string, aAddrs: string[], bAddrs: string[]): Promise<void> {
  await a.ip('link', 'add', aName, 'type', 'veth', 'peer', 'name', bName, 'netns', b.name);
  for (const [ns, dev, addrs] of [[a, aName, aAddrs], [b, bName, bAddrs]] as const) {
    for (const addr of addrs) await ns.ip('addr', 'add', addr, 'dev', dev, ...(addr.includes(':') ? ['nodad'] : []));
    await ns.ip('link', 'set', dev, 'up');
  }
}

async function site(fn: (s: Site) => Promise<void>): Promise<void> {
  await withNetns(['pod', 'node', 'out', 'remote'], async (pod, node, outside, remote) => {
    const s = { pod: pod!, node: node!, outside: outside!, remote: remote! };
    await veth(s.pod, 'eth0', s.node, 'vpod', ['10.244.1.2/24', 'fd00:0:0:1::2/64'], ['10.244.1.1/24', 'fd00:0:0:1::1/64']);
    await veth(s.node, 'eth0', s.outside, 'eth0', ['198.51.100.1/24', '2001:db8::1/64'], ['198.51.100.2/24', '2001:db8::2/64']);
    await veth(s.node, 'eth1', s.remote, 'eth0', ['198.18.0.1/24', '2001:db8:1::1/64'], ['198.18.0.2/24', '2001:db8:1::2/64']);
    await s.remote.ip('addr', 'add', '10.244.2.2/32', 'dev', 'lo');
    await s.remote.ip('addr', 'add', 'fd00:0:0:2::2/128', 'dev', 'lo');
    await s.pod.ip('route', 'add', 'default', 'via', '10.244.1.1');
    await s.pod.ip('-6', 'route', 'add', 'default', 'via', 'fd00:0:0:1::1');
    await s.node.ip('route', 'add', '10.244.2.0/24', 'via', '198.18.0.2');
    await s.node.ip('-6', 'route', 'add', 'fd00:0:0:2::/64', 'via', '2001:db8:1::2');
    await s.remote.ip('route', 'add', 'default', 'via', '198.18.0.1');
    await s.remote.ip('-6', 'route', 'add', 'default', 'via', '2001:db8:1::1');
    await fn(s);
  });
}

/** Prints `<source address> <payload>` for every UDP datagram to port 7000 (either family). */
const LISTENER = `
const s = require('node:dgram').createSocket({ type: 'udp6', ipv6Only: false });
s.on('message', (m, r) => process.stdout.write(r.address.replace(/^::ffff:/, '') + ' ' + m + '\\n'));
s.bind(7000, '::', () => process.stdout.write('ready\\n'));`;

/** Sends argv[2] to argv[1]:7000 (from argv[3] when given) ten times, 100 ms apart. */
const SENDER = `
const [dst, token, src] = process.argv.slice(1);
const s = require('node:dgram').createSocket(dst.includes(':') ? 'udp6' : 'udp4');
let n = 0;
const send = () => { s.send(token, 7000, dst); if (++n < 10) setTimeout(send, 100); else setTimeout(() => s.close(), 100); };
s.bind(0, src || undefined, send);`;

class Listener {
  readonly lines: string[] = [];
  readonly #child;

  private constructor(ns: Netns) {
    this.#child = spawn('ip', ['netns', 'exec', ns.name, NODE, '-e', LISTENER], { stdio: ['ignore', 'pipe', 'inherit'] });
    let buf = '';
    this.#child.stdout!.on('data', (b: Buffer) => {
      buf += b.toString();
      const parts = buf.split('\n');
      buf = parts.pop()!;
      this.lines.push(...parts);
    });
  }

  static async start(ns: Netns): Promise<Listener> {
    const l = new Listener(ns);
    for (let i = 0; i < 100 && !l.lines.includes('ready'); i++) await sleep(50);
    if (!l.lines.includes('ready')) throw new Error(`listener in ${ns.name} did not start`);
    return l;
  }

  /** Sends a datagram from `from` to `dst` and returns the source address this listener saw. */
  async sourceOf(from: Netns, dst: string, src?: string): Promise<string> {
    const token = randomBytes(6).toString('hex');
    const sender = spawn('ip', ['netns', 'exec', from.name, NODE, '-e', SENDER, dst, token, ...(src ? [src] : [])], { stdio: 'inherit' });
    const exited = once(sender, 'exit');
    for (let i = 0; i < 60; i++) {
      const hit = this.lines.find((l) => l.endsWith(` ${token}`));
      if (hit) {
        sender.kill('SIGTERM');
        await exited;
        return hit.split(' ')[0]!;
      }
      await sleep(50);
    }
    await exited;
    throw new Error(`nothing from ${from.name} reached ${dst}`);
  }

  async stop(): Promise<void> {
    if (this.#child.exitCode === null && this.#child.signalCode === null) {
      this.#child.kill('SIGTERM');
      await once(this.#child, 'exit');
    }
  }
}

for (const driver of DRIVERS) {
  test(`${driver}: pods leave as the node, keep their address toward pods; the host is masqueraded toward remote pods (IPv4, IPv6)`, { skip: needsRoot }, async () => {
    await site(async ({ pod, node, outside, remote }) => {
      const records = memoryLogger();
      const rules = manager(node, driver, { log: records });
      const out = await Listener.start(outside);
      const rem = await Listener.start(remote);
      try {
        await rules.start(NETS);
        assert.equal(rules.driver, driver);
        assert.equal((await node.exec('sysctl', '-n', 'net.ipv4.ip_forward')).trim(), '1');
        assert.equal((await node.exec('sysctl', '-n', 'net.ipv6.conf.all.forwarding')).trim(), '1');
        assert.ok(records.records.some((r) => r.level === 'info' && r.fields.driver === driver && typeof r.fields.why === 'string'));
        await assertOneSet(node, driver);

        assert.equal(await out.sourceOf(pod, '198.51.100.2'), '198.51.100.1', 'pod → outside: masqueraded');
        assert.equal(await rem.sourceOf(pod, '10.244.2.2'), '10.244.1.2', 'pod → remote pod: own address');
        assert.equal(await rem.sourceOf(node, '10.244.2.2', '198.51.100.1'), '198.18.0.1', 'host → remote pod: masqueraded');
        assert.equal(await out.sourceOf(pod, '2001:db8::2'), '2001:db8::1', 'IPv6 pod → outside: masqueraded');
        assert.equal(await rem.sourceOf(pod, 'fd00:0:0:2::2'), 'fd00:0:0:1::2', 'IPv6 pod → remote pod: own address');
        assert.equal(await rem.sourceOf(node, 'fd00:0:0:2::2', '2001:db8::1'), '2001:db8:1::1', 'IPv6 host → remote pod: masqueraded');

        // Stopping keeps the rules (pods keep working across a restart); cleanup removes them.
        await rules.stop();
        await assertOneSet(node, driver);
        await rules.cleanup();
        assert.deepEqual(await flannelLines(node), []);
        assert.ok(!(await nftTables(node)).includes('table inet weft'));
        assert.notEqual(await out.sourceOf(pod, '198.51.100.2'), '198.51.100.1', 'no masquerade after cleanup');
      } finally {
        await rules.stop();
        await out.stop();
        await rem.stop();
      }
    });
  });

  test(`${driver}: a deleted rule is back within one resync`, { skip: needsRoot }, async () => {
    await withNetns(['node'], async (node) => {
      const records = memoryLogger();
      const ac = new AbortController();
      const rules = manager(node!, driver, { log: records, resyncSeconds: 1 });
      try {
        await rules.start(NETS, { signal: ac.signal });
        if (driver === 'iptables') {
          await node!.exec('iptables', '-t', 'nat', '-D', 'FLANNEL-POSTRTG', '3');
          assert.equal((await flannelLines(node!)).length, FLANNELD_NAT.length + FLANNELD_FILTER.length + 1);
        } else {
          await deleteNftRule(node!);
        }
        for (let i = 0; i < 30 && !records.records.some((r) => r.msg === 'traffic rules drifted; restored'); i++) await sleep(100);
        const warn = records.records.find((r) => r.msg === 'traffic rules drifted; restored');
        assert.ok(warn, 'restored within one resync period');
        assert.match(String(warn.fields.drift), /10\.244\.0\.0\/16/);
        await assertOneSet(node!, driver);
        assert.deepEqual(await rules.resync(), [], 'nothing to restore afterwards');
      } finally {
        ac.abort();
        await rules.stop();
      }
    });
  });
}

test('forwarding switched off on the node is back on within one resync', { skip: needsRoot }, async () => {
  await withNetns(['node'], async (node) => {
    const records = memoryLogger();
    const ac = new AbortController();
    const rules = manager(node!, 'nftables', { log: records, resyncSeconds: 1 });
    try {
      await rules.start(NETS, { signal: ac.signal });
      await node!.exec('sysctl', '-w', 'net.ipv4.ip_forward=0');
      // The next resync is due in 1 s; the wait allows for a machine loaded many times over.
      for (let i = 0; i < 150 && !records.records.some((r) => r.msg === 'forwarding was switched off; switched it back on'); i++) await sleep(100);
      assert.equal((await node!.exec('sysctl', '-n', 'net.ipv4.ip_forward')).trim(), '1');
      assert.ok(records.records.some((r) => r.level === 'warn' && r.fields.sysctl === 'net.ipv4.ip_forward'));
    } finally {
      ac.abort();
      await rules.stop();
    }
  });
});

/** Deletes the rule returning pod traffic to the cluster network from Weft's nftables table in `node`. */
async function deleteNftRule(node: Netns): Promise<void> {
  const listing = await node.exec('nft', '-a', 'list', 'chain', 'inet', 'weft', 'postrouting');
  const handle = /ip saddr 10\.244\.0\.0\/16 ip daddr 10\.244\.1\.0\/24 return # handle (\d+)/.exec(listing)?.[1];
  assert.ok(handle, listing);
  await node.exec('nft', 'delete', 'rule', 'inet', 'weft', 'postrouting', 'handle', handle);
}

test('nftables watched through the ruleset\'s generation: a change is restored without waiting for a full check, an idle node '
  + 'runs nothing, forwarding is still checked', { skip: needsRoot }, async () => {
  await withNetns(['node'], async (node) => {
    const records = memoryLogger();
    const ac = new AbortController();
    const prefix = ['ip', 'netns', 'exec', node!.name];
    const inner = execRunner(prefix);
    const commands: string[] = [];
    const runner: Runner = (argv, stdin) => {
      commands.push(argv.join(' '));
      return inner(argv, stdin);
    };
    // What ran from index `from` on (a function: the assertion below narrows `commands` itself to never[]).
    const since = (from: number) => commands.slice(from);
    const { reads, restore } = countGenerationReads();
    const readsPass = async (n: number) => {
      const from = reads();
      await until(`${n} reads of the generation`, () => reads() >= from + n, 30_000);
    };
    const rules = manager(node!, 'nftables', { log: records, resyncSeconds: 1, runner, sysctl: runnerSysctl(inner), watch: nftChanges(node!.path) });
    try {
      await rules.start(NETS, { signal: ac.signal });
      // The first reads may report the start's own apply, and a check follows; after three, nothing is due.
      await readsPass(3);
      commands.length = 0;
      await readsPass(3);
      assert.deepEqual(commands, [], 'three periods without a change run no nft or iptables');

      await node!.exec('sysctl', '-w', 'net.ipv4.ip_forward=0');
      // The next resync is due in 1 s; the wait allows for a machine loaded many times over.
      for (let i = 0; i < 150 && !records.records.some((r) => r.msg === 'forwarding was switched off; switched it back on'); i++) await sleep(100);
      assert.equal((await node!.exec('sysctl', '-n', 'net.ipv4.ip_forward')).trim(), '1', 'forwarding back on within a period');

      // Light periodic checks do not look at the rules, and the full one is minutes away: only the watch restores them.
      await deleteNftRule(node!);
      await until('the drift restored', () => records.records.some((r) => r.msg === 'traffic rules drifted; restored'), 15_000);
      // The restore went through the watcher's quiet(): it wakes no check of its own (a full check lists the chains).
      const fromRestore = commands.length;
      await readsPass(3);
      assert.deepEqual(since(fromRestore).filter((c) => c.endsWith('nft list chains')), [], 'the restore wakes no check');
      await assertOneSet(node!, 'nftables');
    } finally {
      restore();
      ac.abort();
      await rules.stop();
    }
  });
});

test('nftables: a monitor that keeps dying is started again, and the rules are still checked every period', { skip: needsRoot }, async () => {
  await withNetns(['node'], async (node) => {
    const records = memoryLogger();
    const ac = new AbortController();
    let starts = 0;
    const dying = () => {
      starts++;
      return { ended: Promise.resolve(), stop: () => {} };
    };
    const rules = manager(node!, 'nftables', { log: records, resyncSeconds: 1, watch: dying });
    try {
      await rules.start(NETS, { signal: ac.signal });
      await deleteNftRule(node!);
      // The first restart waits a backoff of under a second.
      const restored = () => records.records.some((r) => r.msg === 'traffic rules drifted; restored');
      for (let i = 0; i < 30 && (starts < 2 || !restored()); i++) await sleep(100);
      assert.ok(records.records.some((r) => r.msg === 'the watch of the nftables ruleset ended; checking the traffic rules now and starting it again'));
      assert.ok(records.records.some((r) => r.msg === 'traffic rules drifted; restored'), 'restored by the periodic check');
      assert.ok(starts >= 2, `the monitor started again (${starts} starts)`);
    } finally {
      ac.abort();
      await rules.stop();
    }
  });
});

test('switching driver leaves one set, both ways', { skip: needsRoot }, async () => {
  await withNetns(['node'], async (node) => {
    for (const driver of ['iptables', 'nftables', 'iptables'] as const) {
      const rules = manager(node!, driver);
      await rules.start(NETS);
      await rules.stop();
      await assertOneSet(node!, driver);
    }
  });
});

test('a subnet change recycles the rules, for both drivers', { skip: needsRoot }, async () => {
  await withNetns(['node'], async (node) => {
    for (const driver of DRIVERS) {
      const first = manager(node!, driver);
      await first.start(NETS);
      await first.stop();
      const records = memoryLogger();
      const moved = { ...NETS, subnet: parseCIDR('10.244.3.0/24', 's') };
      const second = manager(node!, driver, { log: records });
      await second.start(moved, { previous: NETS });
      await second.stop();
      await assertOneSet(node!, driver, '10.244.3.0/24');
      const all = `${await node!.exec('iptables-save')}${await node!.exec('nft', 'list', 'ruleset')}`;
      assert.doesNotMatch(all, /10\.244\.1\.0\/24/);
      assert.ok(records.records.some((r) => r.msg.includes('recycling')));
    }
  });
});

test("flanneld's rules are adopted, not duplicated: iptables set (jump twice, as v0.20 + HEAD leave it) and nftables tables", { skip: needsRoot }, async () => {
  for (const driver of DRIVERS) {
    await withNetns(['node'], async (node) => {
      const restore = `*nat\n:FLANNEL-POSTRTG - [0:0]\n${FLANNELD_NAT.join('\n')}\n-I POSTROUTING 1 -m comment --comment "flanneld masq" -j FLANNEL-POSTRTG\nCOMMIT\n*filter\n:FLANNEL-FWD - [0:0]\n${FLANNELD_FILTER.join('\n')}\nCOMMIT\n`;
      await execRunner(['ip', 'netns', 'exec', node!.name])(['iptables-restore', '--noflush'], restore).then((r) => assert.equal(r.code, 0, r.stderr));
      await execRunner(['ip', 'netns', 'exec', node!.name])(['nft', '-f', '-'], FLANNELD_NFT).then((r) => assert.equal(r.code, 0, r.stderr));
      assert.equal((await flannelLines(node!)).filter((l) => l.startsWith('-A POSTROUTING')).length, 2);
      const rules = manager(node!, driver);
      await rules.start(NETS);
      await rules.stop();
      await assertOneSet(node!, driver);
      assert.deepEqual(await rules.resync(), []);
    });
  }
});
