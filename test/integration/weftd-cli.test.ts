import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { needsRoot, withNetns } from '../support/netns.ts';

const run = promisify(execFile);
const WEFTD = join(import.meta.dirname, '../../bin/weftd');

async function weftd(ns: string, args: string[], env: Record<string, string> = {}): Promise<{ code: number; stderr: string; stdout: string }> {
  try {
    const { stdout, stderr } = await run('ip', ['netns', 'exec', ns, WEFTD, ...args], { env: { PATH: process.env.PATH ?? '', ...env } });
    return { code: 0, stdout, stderr };
  } catch (e) {
    const err = e as { code: number; stdout: string; stderr: string };
    return { code: err.code, stdout: err.stdout, stderr: err.stderr };
  }
}

test('bin/weftd: FLANNELD_IFACE picks the interface when --iface is absent; --iface wins', { skip: needsRoot }, async () => {
  await withNetns(['cli'], async (ns) => {
    for (const [name, addr] of [['eth0', '198.51.100.2/24'], ['eth1', '198.18.0.2/24']] as const) {
      await ns!.ip('link', 'add', name, 'type', 'veth', 'peer', 'name', `${name}p`);
      await ns!.ip('addr', 'add', addr, 'dev', name);
      await ns!.ip('link', 'set', name, 'up');
    }
    await ns!.ip('route', 'add', 'default', 'via', '198.51.100.1', 'dev', 'eth0');
    const byDefault = await weftd(ns!.name, []);
    assert.match(byDefault.stderr, /using interface eth0 .*address 198\.51\.100\.2.*default route/);
    const byEnv = await weftd(ns!.name, [], { FLANNELD_IFACE: 'eth1' });
    assert.match(byEnv.stderr, /using interface eth1 .*address 198\.18\.0\.2.*--iface eth1/);
    const byFlag = await weftd(ns!.name, ['--iface=eth0'], { FLANNELD_IFACE: 'eth1' });
    assert.match(byFlag.stderr, /using interface eth0 /);
    const bad = await weftd(ns!.name, ['--iface', 'nosuch']);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /weftd: --iface: no interface matches \(--iface nosuch\)/);
  });
});

test('bin/weftd --version and --help exit 0', async () => {
  const version = await run(WEFTD, ['--version']);
  assert.match(version.stdout, /^\d+\.\d+\.\d+\n$/);
  const help = await run(WEFTD, ['--help']);
  assert.match(help.stdout, /--kube-subnet-mgr/);
  assert.match(help.stdout, /--iface-can-reach/);
});
