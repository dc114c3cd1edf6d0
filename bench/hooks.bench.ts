/**
 * make bench-hooks: how the extension backend's commands (src/backend/extension) end and how they
 * load a pass, no root needed.
 *
 * - hook_overrun_ms: a command that leaves `sleep 30 &` holding its output and then runs past its
 *   1 s timeout: how long after the timeout the call returns (the worst of 5 runs). Before its
 *   process group was killed, this was the background child's whole life (29 s here).
 * - hook_overrun_term_ignored_ms: the same, the command and its child ignoring SIGTERM, so it
 *   takes SIGKILL after the grace (the worst of 5).
 * - hook_exit_return_ms: a command that exits at once leaving `sleep 30 &`: how long after its
 *   start the call returns (the worst of 5).
 * - extension_pass_ms, extension_done_ms: a pass over 200 leases whose add command takes 100 ms:
 *   how long the pass takes, and until every add has run (200 × 100 ms run one after another were
 *   a 20 s pass).
 *
 * Last line: hook_overrun_ms=<> hook_overrun_term_ignored_ms=<> hook_exit_return_ms=<> extension_pass_ms=<> extension_done_ms=<>
 */
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { BackendDeps } from '../src/backend/backend.ts';
import { ExtensionBackend } from '../src/backend/extension/backend.ts';
import { runCommand } from '../src/backend/extension/commands.ts';
import { parseNetConfig } from '../src/config/netconf.ts';
import { silentLogger } from '../src/log.ts';

const TIMEOUT_MS = 1000;
const RUNS = 5;
const dir = await mkdtemp(join(tmpdir(), 'weft-bench-hooks-'));

async function script(name: string, text: string): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, `#!/bin/sh\n${text}`);
  await chmod(path, 0o755);
  return path;
}

/** The worst of {@link RUNS} calls of `path`: ms from its start until the call settled, less `offsetMs`. */
async function worst(path: string, offsetMs: number): Promise<number> {
  let most = 0;
  for (let i = 0; i < RUNS; i++) {
    const t0 = performance.now();
    await runCommand('bench', path, {}, '', { timeoutMs: TIMEOUT_MS }).catch(() => undefined);
    most = Math.max(most, performance.now() - t0 - offsetMs);
  }
  return Math.round(most);
}

try {
  const overrun = await worst(await script('overrun.sh', 'sleep 30 &\nsleep 30\n'), TIMEOUT_MS);
  const ignored = await worst(await script('ignored.sh', 'trap "" TERM\nsleep 30 &\nsleep 30\n'), TIMEOUT_MS);
  const exited = await worst(await script('exited.sh', 'sleep 30 &\necho $! >> "$0.pids"\n'), 0);

  const add = await script('add.sh', 'sleep 0.1\n');
  const config = parseNetConfig(JSON.stringify({ Network: '10.244.0.0/16', Backend: { Type: 'extension', SubnetAddCommand: add } }));
  const ext = { link: { index: 2, name: 'eth0' }, ifaceAddr: '198.51.100.1', mtu: 1500, reason: 'bench' };
  const backend = new ExtensionBackend({ config, ext, log: silentLogger } as unknown as BackendDeps);
  const leases = Array.from({ length: 200 }, (_, i) => [{ peer: `n${i}`, subnet: `10.244.${i}.0/24`, publicIP: '198.51.100.2', data: '' }]);
  const [side] = backend.sides(() => leases);
  const t0 = performance.now();
  await side!.reconcile();
  const pass = performance.now() - t0;
  await backend.settled();
  const done = performance.now() - t0;

  console.log(`hook_overrun_ms=${overrun} hook_overrun_term_ignored_ms=${ignored} hook_exit_return_ms=${exited} `
    + `extension_pass_ms=${pass.toFixed(1)} extension_done_ms=${Math.round(done)}`);
} finally {
  // The children left by exited.sh live on, as an operator's would: not past the bench.
  for (const pid of (await readFile(join(dir, 'exited.sh.pids'), 'utf8').catch(() => '')).split('\n').filter(Boolean)) {
    try {
      process.kill(Number(pid));
    } catch {
      // gone already
    }
  }
  await rm(dir, { recursive: true, force: true });
}
