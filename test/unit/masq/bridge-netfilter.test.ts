import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError } from '../../../src/errors.ts';
import { memoryLogger } from '../../../src/log.ts';
import { BRIDGE_NF_SYSCTLS, ensureBridgeNetfilter } from '../../../src/masq/bridge-netfilter.ts';
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

const options = (n: ReturnType<typeof node>, log = memoryLogger()) => ({
  sysctl: n.sysctl, run: n.run, log, flag: '--service-proxy', what: 'service proxy', without: 'replies would be dropped',
});

test('both sysctls at 1: nothing is run, written or logged', async () => {
  const n = node({ loaded: true });
  const log = memoryLogger();
  await ensureBridgeNetfilter(options(n, log), true);
  assert.deepEqual([n.commands, log.records], [[], []]);
});

test('a sysctl at 0 is set to 1: logged as info at start, as a warning when found switched off later', async () => {
  const n = node({ loaded: true, values: { 'net.bridge.bridge-nf-call-iptables': '1', 'net.bridge.bridge-nf-call-ip6tables': '0' } });
  const log = memoryLogger();
  await ensureBridgeNetfilter(options(n, log), true);
  assert.equal(n.values.get('net.bridge.bridge-nf-call-ip6tables'), '1');
  n.values.set('net.bridge.bridge-nf-call-iptables', '0');
  await ensureBridgeNetfilter(options(n, log), false);
  assert.deepEqual([...n.values.values()], ['1', '1']);
  assert.deepEqual(log.records.map((r) => `${r.level} ${r.msg}`), [
    'info service proxy: set net.bridge.bridge-nf-call-ip6tables=1 (was 0); otherwise replies would be dropped',
    'warn service proxy: net.bridge.bridge-nf-call-iptables was switched to 0; set it back to 1',
  ]);
});

test('absent sysctls load br_netfilter once, then are set', async () => {
  const n = node({ loaded: false, loads: true, values: {} });
  const log = memoryLogger();
  await ensureBridgeNetfilter(options(n, log), true);
  assert.deepEqual(n.commands, ['modprobe br_netfilter']);
  assert.deepEqual([...n.values.values()], ['1', '1']);
  assert.deepEqual(log.records.map((r) => r.msg), [
    'service proxy: loaded the kernel module br_netfilter (its sysctls were absent)',
    'service proxy: set net.bridge.bridge-nf-call-iptables=1 (was 0); otherwise replies would be dropped',
    'service proxy: set net.bridge.bridge-nf-call-ip6tables=1 (was 0); otherwise replies would be dropped',
  ]);
});

test('what cannot be done is a ConfigError at start naming the sysctl and why; later an error in the log', async () => {
  const refused = (n: ReturnType<typeof node>, message: RegExp) => assert.rejects(ensureBridgeNetfilter(options(n), true), (e: unknown) => {
    assert.ok(e instanceof ConfigError, String(e));
    assert.equal(e.field, '--service-proxy');
    assert.match(e.message, message);
    return true;
  });
  await refused(node({ loaded: false }), new RegExp('net\\.bridge\\.bridge-nf-call-iptables cannot be read \\(ENOENT.*\\) and br_netfilter '
    + 'could not be loaded \\(modprobe br_netfilter: modprobe: FATAL: Module br_netfilter not found.*\\): replies would be dropped$'));
  await refused(node({ loaded: true, values: {}, readOnly: true }), new RegExp('net\\.bridge\\.bridge-nf-call-iptables is 0 and could not be '
    + 'set to 1 \\(EROFS: read-only file system\\): replies would be dropped; set it on the host'));
  const n = node({ loaded: false });
  const log = memoryLogger();
  await ensureBridgeNetfilter(options(n, log), false);
  assert.deepEqual(log.records.map((r) => r.level), ['error', 'error']);
  assert.deepEqual(n.commands, ['modprobe br_netfilter'], 'the module is tried once per check');
});
