import assert from 'node:assert/strict';
import { test } from 'node:test';
import { WeftError } from '../../../src/errors.ts';
import { memoryLogger } from '../../../src/log.ts';
import { BRIDGE_NF_SYSCTLS, BridgeNetfilter } from '../../../src/masq/bridge-netfilter.ts';
import type { Runner, Sysctl } from '../../../src/masq/runner.ts';

/**
 * A node's /proc/sys as far as br_netfilter goes: absent until `modprobe br_netfilter` runs
 * (and `loads`), then the values given; `readOnly` refuses writes. Records the commands run.
 */
function node(o: { loaded: boolean; loads?: boolean; values?: Record<string, string>; readOnly?: boolean }) {
  const values = new Map(Object.entries(o.values ?? Object.fromEntries(BRIDGE_NF_SYSCTLS.map((k) => [k, '1']))));
  let loaded = o.loaded;
  const commands: string[] = [];
  const run: Runner = async (argv) => {
    commands.push(argv.join(' '));
    if (argv.join(' ') !== 'modprobe br_netfilter') return { code: 1, stdout: '', stderr: 'unexpected' };
    if (!o.loads) return { code: 1, stdout: '', stderr: 'modprobe: FATAL: Module br_netfilter not found in directory /lib/modules/6.18\n' };
    loaded = true;
    return { code: 0, stdout: '', stderr: '' };
  };
  const sysctl: Sysctl = {
    read: async (key) => {
      if (!loaded) throw new Error(`ENOENT: no such file or directory, open '/proc/sys/${key.replaceAll('.', '/')}'`);
      return values.get(key) ?? '0';
    },
    write: async (key, value) => {
      if (o.readOnly) throw new Error('EROFS: read-only file system');
      values.set(key, value);
    },
  };
  return { run, sysctl, commands, values };
}

const check = (n: ReturnType<typeof node>, log = memoryLogger()) =>
  new BridgeNetfilter({ sysctl: n.sysctl, run: n.run, log, what: 'service proxy', without: 'replies would be dropped' });

test('both sysctls at 1: nothing is run, written or logged', async () => {
  const n = node({ loaded: true });
  const log = memoryLogger();
  await check(n, log).ensure();
  assert.deepEqual([n.commands, log.records], [[], []]);
});

test('a sysctl at 0 is set to 1: logged as info at start, as a warning when found switched off later', async () => {
  const n = node({ loaded: true, values: { 'net.bridge.bridge-nf-call-iptables': '1', 'net.bridge.bridge-nf-call-ip6tables': '0' } });
  const log = memoryLogger();
  const b = check(n, log);
  await b.ensure();
  assert.equal(n.values.get('net.bridge.bridge-nf-call-ip6tables'), '1');
  n.values.set('net.bridge.bridge-nf-call-iptables', '0');
  await b.ensure();
  assert.deepEqual([...n.values.values()], ['1', '1']);
  assert.deepEqual(log.records.map((r) => `${r.level} ${r.msg}`), [
    'info service proxy: set net.bridge.bridge-nf-call-ip6tables=1 (was 0); otherwise replies would be dropped',
    'warn service proxy: net.bridge.bridge-nf-call-iptables was switched to 0; set it back to 1',
  ]);
});

test('absent sysctls load br_netfilter once, then are set', async () => {
  const n = node({ loaded: false, loads: true, values: {} });
  const log = memoryLogger();
  await check(n, log).ensure();
  assert.deepEqual(n.commands, ['modprobe br_netfilter']);
  assert.deepEqual([...n.values.values()], ['1', '1']);
  assert.deepEqual(log.records.map((r) => r.msg), [
    'service proxy: loaded the kernel module br_netfilter (its sysctls were absent)',
    'service proxy: set net.bridge.bridge-nf-call-iptables=1 (was 0); otherwise replies would be dropped',
    'service proxy: set net.bridge.bridge-nf-call-ip6tables=1 (was 0); otherwise replies would be dropped',
  ]);
});

test('what cannot be done degrades: an error naming the sysctl and why, once while it lasts, and its end said once', async () => {
  const errors = async (n: ReturnType<typeof node>) => {
    const log = memoryLogger();
    const b = check(n, log);
    await b.ensure();
    assert.ok(b.problem);
    return log.records.map((r) => {
      assert.equal(r.level, 'error');
      assert.equal(r.msg, 'service proxy: degraded, the rest goes on');
      const err = r.fields?.['err'];
      assert.ok(err instanceof WeftError && err.code === 'EBRNETFILTER', String(err));
      return err.message;
    });
  };
  const absent = await errors(node({ loaded: false }));
  assert.equal(absent.length, 1);
  assert.match(absent[0]!, new RegExp('^net\\.bridge\\.bridge-nf-call-iptables cannot be read \\(ENOENT.*\\) and br_netfilter could not be loaded '
    + '\\(modprobe br_netfilter: modprobe: FATAL: Module br_netfilter not found.*\\); net\\.bridge\\.bridge-nf-call-ip6tables cannot be read'
    + '.*: replies would be dropped; set it on the host \\(daemonset\\.yaml\'s node-prep init container does\\)'));
  const readOnly = await errors(node({ loaded: true, values: {}, readOnly: true }));
  assert.match(readOnly[0]!, /^net\.bridge\.bridge-nf-call-iptables is 0 and could not be set to 1 \(EROFS: read-only file system\)/);

  // While it lasts: no modprobe again, nothing logged again; then its end, once.
  const n = node({ loaded: true, values: {}, readOnly: true });
  const log = memoryLogger();
  const b = check(n, log);
  await b.ensure();
  await b.ensure();
  assert.equal(log.records.length, 1);
  for (const k of BRIDGE_NF_SYSCTLS) n.values.set(k, '1');
  await b.ensure();
  await b.ensure();
  assert.equal(b.problem, undefined);
  assert.deepEqual(log.records.slice(1).map((r) => `${r.level} ${r.msg}`), ["info service proxy: br_netfilter's calls are on again; no longer degraded"]);
  const absentNode = node({ loaded: false });
  const twice = check(absentNode);
  await twice.ensure();
  await twice.ensure();
  assert.deepEqual(absentNode.commands, ['modprobe br_netfilter'], 'the module is tried at the first check only');
});
