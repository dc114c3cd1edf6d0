import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError, WeftError } from '../../../src/errors.ts';
import { parseCIDR } from '../../../src/ip/ip.ts';
import { memoryLogger } from '../../../src/log.ts';
import { TrafficRules } from '../../../src/masq/manager.ts';
import { stdinText, TrafficRulesError } from '../../../src/masq/runner.ts';
import type { RunResult, Runner, Stdin, Sysctl } from '../../../src/masq/runner.ts';

const NETS = { network: parseCIDR('10.244.0.0/16', 'n'), subnet: parseCIDR('10.244.1.0/24', 's') };

/** A runner answering from `answer` (argv joined by spaces → result) and recording every call. */
function fakeRunner(answer: (cmd: string, stdin?: string) => Partial<RunResult> | undefined): Runner & { calls: string[] } {
  const calls: string[] = [];
  const run = async (argv: readonly string[], stdin?: Stdin): Promise<RunResult> => {
    const cmd = argv.join(' ');
    calls.push(cmd);
    const r = answer(cmd, stdin === undefined ? undefined : stdinText(stdin));
    return { code: 0, stdout: '', stderr: '', ...r };
  };
  return Object.assign(run, { calls });
}

/** Sysctls held in memory (absent keys read as '0'), recording every write as `key=value`. */
function fakeSysctl(): Sysctl & { values: Map<string, string>; writes: string[] } {
  const values = new Map<string, string>();
  const writes: string[] = [];
  return {
    values,
    writes,
    read: async (key) => values.get(key) ?? '0',
    write: async (key, value) => {
      writes.push(`${key}=${value}`);
      values.set(key, value);
    },
  };
}

const noNft = (cmd: string): Partial<RunResult> | undefined => (cmd.startsWith('nft') ? { code: 1, stderr: 'Error: Could not process rule: Operation not supported' } : undefined);

test('auto picks nftables when nft works, says why once, and switches forwarding on', async () => {
  const sysctl = fakeSysctl();
  const log = memoryLogger();
  const run = fakeRunner((cmd) => (cmd.startsWith('iptables --version') ? { stdout: 'iptables v1.8.9 (nf_tables)' } : undefined));
  const rules = new TrafficRules({ ipMasq: true, runner: run, log, sysctl });
  await rules.start(NETS);
  await rules.stop();
  assert.equal(rules.driver, 'nftables');
  assert.deepEqual(sysctl.writes, ['net.ipv4.ip_forward=1']);
  const info = log.records.filter((r) => r.msg.startsWith('traffic rules installed'));
  assert.equal(info.length, 1);
  assert.equal(info[0]!.fields.why, 'auto: nft works here');
  assert.ok(run.calls.includes('nft -f -'));
});

test('auto falls back to iptables (with --wait) when nft does not work; an explicit driver that does not work is a ConfigError', async () => {
  const run = fakeRunner((cmd) => noNft(cmd) ?? (cmd === 'iptables --version' ? { stdout: 'iptables v1.8.9 (legacy)' } : undefined));
  const rules = new TrafficRules({ ipMasq: true, runner: run, log: memoryLogger(), sysctl: fakeSysctl() });
  await rules.start(NETS);
  await rules.stop();
  assert.equal(rules.driver, 'iptables');
  assert.ok(run.calls.includes('iptables-restore --noflush --wait'));
  const forced = new TrafficRules({ driver: 'nftables', ipMasq: true, runner: run, log: memoryLogger(), sysctl: fakeSysctl() });
  await assert.rejects(forced.start(NETS), (e: unknown) => e instanceof ConfigError && /Operation not supported/.test(e.message));
});

test('a failing apply is a TrafficRulesError naming the command and its stderr', async () => {
  const run = fakeRunner((cmd) => (cmd === 'nft -f -' ? { code: 1, stderr: 'Error: syntax error' } : cmd === 'iptables --version' ? { code: 127 } : undefined));
  const rules = new TrafficRules({ ipMasq: true, runner: run, log: memoryLogger(), sysctl: fakeSysctl() });
  await assert.rejects(rules.start(NETS), (e: unknown) => e instanceof TrafficRulesError && e.message === 'failed to apply nftables table inet weft: nft -f -: Error: syntax error');
});

test('auto picks iptables when its FORWARD policy is DROP (Docker): an nftables accept could not let pod traffic through', async () => {
  const filter = '*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n';
  const run = fakeRunner((cmd) => (cmd === 'iptables --version' ? { stdout: 'iptables v1.8.9 (nf_tables)' } : cmd === 'iptables-save -t filter' ? { stdout: filter } : undefined));
  const log = memoryLogger();
  const rules = new TrafficRules({ ipMasq: true, runner: run, log, sysctl: fakeSysctl() });
  await rules.start(NETS);
  await rules.stop();
  assert.equal(rules.driver, 'iptables');
  assert.match(String(log.records.find((r) => r.msg.startsWith('traffic rules installed'))?.fields.why), /FORWARD policy is DROP/);
  const noForward = new TrafficRules({ ipMasq: true, forwardRules: false, runner: run, log: memoryLogger(), sysctl: fakeSysctl() });
  await noForward.start(NETS);
  await noForward.stop();
  assert.equal(noForward.driver, 'nftables', 'without forward rules the FORWARD policy does not matter');
});

test('a resync switches forwarding back on when something switched it off, and says so', async () => {
  const run = fakeRunner((cmd) => (cmd === 'iptables --version' ? { code: 127 } : undefined));
  const sysctl = fakeSysctl();
  const log = memoryLogger();
  const rules = new TrafficRules({ ipMasq: true, enableIPv6: true, runner: run, log, sysctl });
  await rules.start({ ...NETS, ipv6Network: parseCIDR('fd00::/56', 'n6'), ipv6Subnet: parseCIDR('fd00:0:0:1::/64', 's6') });
  await rules.stop();
  assert.deepEqual(sysctl.writes, ['net.ipv4.ip_forward=1', 'net.ipv6.conf.all.forwarding=1']);
  sysctl.values.set('net.ipv6.conf.all.forwarding', '0');
  const drift = await rules.resync();
  assert.ok(drift.includes('net.ipv6.conf.all.forwarding=0'), drift.join('; '));
  assert.equal(sysctl.values.get('net.ipv6.conf.all.forwarding'), '1');
  assert.equal(sysctl.writes.length, 3, 'IPv4 forwarding, still on, is left alone');
  const warn = log.records.find((r) => r.msg === 'forwarding was switched off; switched it back on');
  assert.equal(warn?.fields.sysctl, 'net.ipv6.conf.all.forwarding');
  assert.equal(warn?.fields.was, '0');
});

test('forwarding already on is only read (a read-only /proc/sys is fine); off and not settable stops start-up naming the sysctl', async () => {
  const run = fakeRunner((cmd) => (cmd === 'iptables --version' ? { code: 127 } : undefined));
  const readOnly = (values: Record<string, string>): Sysctl => ({
    read: async (key) => values[key] ?? '0',
    write: async () => {
      throw Object.assign(new Error('EROFS: read-only file system'), { code: 'EROFS' });
    },
  });
  const values: Record<string, string> = { 'net.ipv4.ip_forward': '1' };
  const log = memoryLogger();
  const on = new TrafficRules({ ipMasq: true, runner: run, log, sysctl: readOnly(values) });
  await on.start(NETS);
  await on.stop();
  values['net.ipv4.ip_forward'] = '0';
  const applies = run.calls.filter((c) => c === 'nft -f -').length;
  await on.resync();
  assert.equal(run.calls.filter((c) => c === 'nft -f -').length, applies + 1, 'the rules are still restored');
  assert.match(String((log.records.find((r) => r.level === 'error')?.fields.err as Error | undefined)?.message), /net\.ipv4\.ip_forward is 0 and could not be set/);
  const off = new TrafficRules({ ipMasq: true, runner: run, log: memoryLogger(), sysctl: readOnly({}) });
  await assert.rejects(off.start(NETS), (e: unknown) => e instanceof WeftError && e.code === 'EFORWARDING' && /^net\.ipv4\.ip_forward is 0 and could not be set to 1 \(EROFS/.test(e.message));
});

test('br_netfilter missing or off is a warning naming the sysctl, not a stop', async () => {
  const run = fakeRunner((cmd) => (cmd === 'iptables --version' ? { code: 127 } : undefined));
  const start = async (values: Record<string, string>) => {
    const log = memoryLogger();
    const sysctl: Sysctl = {
      read: async (key) => {
        if (values[key] === undefined) throw Object.assign(new Error(`ENOENT: no such file, open '/proc/sys/${key}'`), { code: 'ENOENT' });
        return values[key];
      },
      write: async (key, value) => void (values[key] = value),
    };
    const rules = new TrafficRules({ ipMasq: true, runner: run, log, sysctl });
    await rules.start(NETS);
    await rules.stop();
    return log.records.filter((r) => r.level === 'warn').map((r) => r.msg);
  };
  assert.deepEqual(await start({ 'net.ipv4.ip_forward': '1', 'net.bridge.bridge-nf-call-iptables': '1' }), []);
  assert.match((await start({ 'net.ipv4.ip_forward': '1' })).join(), /br_netfilter is not loaded/);
  assert.match((await start({ 'net.ipv4.ip_forward': '1', 'net.bridge.bridge-nf-call-iptables': '0' })).join(), /net\.bridge\.bridge-nf-call-iptables is 0/);
});

test('prepare() chooses the engine, switches forwarding on, probes the other; start() applies, then looks for leftovers', async () => {
  const sysctl = fakeSysctl();
  const run = fakeRunner((cmd) => (cmd.startsWith('iptables --version') ? { stdout: 'iptables v1.8.9 (nf_tables)' } : undefined));
  const rules = new TrafficRules({ ipMasq: true, runner: run, log: memoryLogger(), sysctl });
  rules.prepare();
  await new Promise((r) => setTimeout(r, 10));
  const before = [...run.calls];
  assert.ok(before.includes('nft list chains') && before.includes('iptables-save -t nat'), before.join(', '));
  assert.deepEqual(sysctl.writes, ['net.ipv4.ip_forward=1'], 'forwarding switched on before the lease is known');
  assert.ok(!before.includes('nft -f -'), 'no rules before the networks are known');
  await rules.start(NETS);
  await rules.stop();
  const after = run.calls.slice(before.length);
  assert.ok(after.includes('nft -f -'), after.join(', '));
  const known = ['nft list chains', 'iptables-save -t nat', 'iptables --version'];
  assert.ok(!after.some((c) => known.includes(c)), `start() asked nothing prepare() knew: ${after.join(', ')}`);
  assert.ok(after.indexOf('iptables-save') > after.indexOf('nft -f -'), `leftovers looked for after the apply: ${after.join(', ')}`);
});

test('flanneld\'s iptables set goes only once the nftables set is in: the node is never without masquerade', async () => {
  const flanneld = [
    '*nat', ':POSTROUTING ACCEPT [0:0]', ':FLANNEL-POSTRTG - [0:0]',
    '-A POSTROUTING -m comment --comment "flanneld masq" -j FLANNEL-POSTRTG',
    '-A FLANNEL-POSTRTG -s 10.244.0.0/16 -d 10.244.0.0/16 -m comment --comment "flanneld masq" -j RETURN',
    '-A FLANNEL-POSTRTG -s 10.244.0.0/16 ! -d 224.0.0.0/4 -m comment --comment "flanneld masq" -j MASQUERADE --random-fully',
    'COMMIT', '*filter', ':FORWARD ACCEPT [0:0]', ':FLANNEL-FWD - [0:0]',
    '-A FORWARD -m comment --comment "flanneld forward" -j FLANNEL-FWD',
    '-A FLANNEL-FWD -s 10.244.0.0/16 -m comment --comment "flanneld forward" -j ACCEPT', 'COMMIT', '',
  ].join('\n');
  const run = fakeRunner((cmd) => {
    if (cmd.startsWith('iptables --version')) return { stdout: 'iptables v1.8.9 (nf_tables)' };
    return cmd.startsWith('iptables-save') ? { stdout: flanneld } : undefined;
  });
  const log = memoryLogger();
  const rules = new TrafficRules({ ipMasq: true, runner: run, log, sysctl: fakeSysctl() });
  await rules.start(NETS);
  await rules.stop();
  const apply = run.calls.indexOf('nft -f -');
  const removal = run.calls.findIndex((c) => c.startsWith('iptables-restore'));
  assert.ok(apply >= 0 && removal > apply, `nftables applied, then flanneld's chains removed: ${run.calls.join(', ')}`);
  assert.ok(log.records.some((r) => r.msg === 'removed iptables traffic rules (Weft\'s or flanneld\'s) after installing nftables'));
});

test('a failing prepare() surfaces in start()', async () => {
  const run = fakeRunner((cmd) => noNft(cmd) ?? (cmd.startsWith('iptables') ? { code: 127, stderr: 'not found' } : undefined));
  const rules = new TrafficRules({ ipMasq: true, runner: run, log: memoryLogger(), sysctl: fakeSysctl() });
  rules.prepare();
  await assert.rejects(rules.start(NETS), (e: unknown) => e instanceof ConfigError && /neither nftables/.test(e.message));
});
