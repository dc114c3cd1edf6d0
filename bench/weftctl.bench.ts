/**
 * make bench-weftctl: `bin/weftctl status` against a running weftd, as an operator runs it on a
 * node: a 3-node vxlan cluster (test/support/cluster.ts), weftctl started through `ip netns exec`
 * in node-1's namespace (that wrapper's few ms included), compile cache warm. 20 timed runs after
 * 3 warm-ups; also `weftctl doctor` (5 runs, it pings each peer), the admin socket's answer
 * alone (20 requests from this process), and a bare `node -e 0` the same way, interleaved with
 * the status runs, for how loaded the machine was.
 *
 * Last line: weftctl_status_ms=<median of 20> weftctl_status_max_ms=<> admin_answer_ms=<median>
 * weftctl_doctor_ms=<median of 5> node_bare_ms=<median of 20>
 *
 * Medians as bench/support/stats.ts defines them: of an even count, the mean of the middle two.
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import { localRequest } from '../src/local/client.ts';
import { ADMIN_PROTOCOL, adminSocketPath } from '../src/admin/status.ts';
import { Cluster } from '../test/support/cluster.ts';
import { median } from './support/stats.ts';

const WEFTCTL = fileURLToPath(new URL('../bin/weftctl', import.meta.url));
const NODE = fileURLToPath(new URL('../node_modules/.bin/node', import.meta.url));

const c = await Cluster.start({ nodes: 3, backend: 'vxlan', mode: 'etcd' });
try {
  const n = c.nodes[0]!;
  const subnetFile = join(n.dir, 'subnet.env');
  /** One command in node-1's namespace; its wall time in ms. Throws unless it exits 0. */
  const timeRun = (argv: string[]): number => {
    const t0 = performance.now();
    const r = spawnSync('ip', ['netns', 'exec', n.ns.name, ...argv], { encoding: 'utf8' });
    const ms = performance.now() - t0;
    if (r.status !== 0) throw new Error(`${argv.join(' ')} exited ${r.status}: ${r.stdout}${r.stderr}`);
    return ms;
  };
  const time = (verb: string) => timeRun([WEFTCTL, `--subnet-file=${subnetFile}`, verb]);
  // Ready means node-1 programmed the leases it had listed; the others' may arrive just after.
  for (let tries = 0; spawnSync('ip', ['netns', 'exec', n.ns.name, WEFTCTL, `--subnet-file=${subnetFile}`, 'status']).status !== 0; tries++) {
    if (tries === 50) throw new Error('weftctl status never reported node-1 healthy');
    await new Promise((r) => setTimeout(r, 200));
  }
  for (let i = 0; i < 3; i++) time('status');
  const status: number[] = [];
  const bare: number[] = [];
  for (let i = 0; i < 20; i++) {
    status.push(time('status'));
    bare.push(timeRun([NODE, '-e', '0']));
  }
  const answers: number[] = [];
  for (let i = 0; i < 20; i++) {
    const t0 = performance.now();
    await localRequest(adminSocketPath(subnetFile), { verb: 'status' }, { protocol: ADMIN_PROTOCOL });
    answers.push(performance.now() - t0);
  }
  const doctor = Array.from({ length: 5 }, () => time('doctor'));
  const f = (x: number) => x.toFixed(1);
  console.log(`weftctl status: ${status.map((x) => x.toFixed(0)).join(' ')} ms`);
  console.log(`weftctl_status_ms=${f(median(status))} weftctl_status_max_ms=${f(Math.max(...status))} admin_answer_ms=${f(median(answers))} weftctl_doctor_ms=${f(median(doctor))} node_bare_ms=${f(median(bare))}`);
} finally {
  await c.stop();
}
