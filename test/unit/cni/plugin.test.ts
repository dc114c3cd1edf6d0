import assert from 'node:assert/strict';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { runPlugin } from '../../../src/cni/plugin.ts';

async function withDataDir(fn: (dataDir: string) => void): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'weft-cni-unit-'));
  try {
    const dataDir = join(dir, 'data');
    mkdirSync(dataDir, { mode: 0o700 });
    fn(dataDir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

test('GC leaves the state of other networks sharing the data directory alone', () => withDataDir((dataDir) => {
  writeFileSync(join(dataDir, 'theirs'), '{"name":"other","type":"bridge"}');
  const conf = { cniVersion: '1.1.0', name: 'cbr0', dataDir, subnetFile: join(dataDir, 'no-subnet.env'), 'cni.dev/valid-attachments': [] };
  const out = runPlugin({ CNI_COMMAND: 'GC', CNI_PATH: '/nonexistent/weft-bin' }, JSON.stringify(conf));
  assert.deepEqual(out, { stdout: '', exitCode: 0 });
  assert.ok(existsSync(join(dataDir, 'theirs')), "another network's container is not ours to release");
}));

test('a state file naming a delegate outside CNI_PATH is refused (code 7), nothing run', () => withDataDir((dataDir) => {
  writeFileSync(join(dataDir, 'c1'), '{"name":"cbr0","type":"../../../bin/sh"}');
  const conf = { cniVersion: '1.0.0', name: 'cbr0', dataDir };
  const out = runPlugin({ CNI_COMMAND: 'DEL', CNI_CONTAINERID: 'c1', CNI_IFNAME: 'eth0', CNI_PATH: '/usr/lib/cni' }, JSON.stringify(conf));
  assert.equal(out.exitCode, 1);
  const err = JSON.parse(out.stdout) as { code: number; msg: string };
  assert.equal(err.code, 7);
  assert.match(err.msg, /delegate\.type: .* is not a plugin file name/);
  assert.ok(existsSync(join(dataDir, 'c1')), 'the state stays for an operator to look at');
}));
