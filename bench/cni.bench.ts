/**
 * make bench-cni: the plugin the runtime executes (dist/weft-cni), timed from exec to exit by a
 * runner process inside the node namespace (so no `ip netns exec` wrapper is in the figures):
 *
 *   1. 200 ADD+DEL cycles with weftd's CNI server serving (this process, its handle bound to the
 *      node namespace), each pod in a namespace of its own, made before the ADD and removed after
 *      the DEL as a runtime does (untimed). A served DEL answers once the pod is off the network
 *      and released; the kernel deletes the veth with the namespace or in weftd's next batch;
 *   2. 200 cycles with the server stopped: the plugin falls back to the TypeScript plugin, which
 *      runs Debian's bridge + host-local;
 *   3. 200 cycles of the same delegate config (the bytes the server saved) given to bridge directly;
 *   4. a burst of 100 ADDs, 20 at a time, through the server (then their DELs, untimed).
 *
 * Last line: cni_add_p50_ms=<> cni_add_p99_ms=<> cni_del_p50_ms=<> fallback_add_p50_ms=<>
 * delegate_add_p50_ms=<> burst100_s=<>
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { startCniServer } from '../src/cni/server.ts';
import { silentLogger } from '../src/log.ts';
import { NetlinkHandle } from '../src/netlink/index.ts';
import { DEBIAN_CNI_DIR, PLUGIN_BIN } from '../test/support/cni.ts';
import { RUN_PREFIX, createNetns } from '../test/support/netns.ts';
import type { Netns } from '../test/support/netns.ts';

const CYCLES = 200;
const WARMUP = 5;
const NODE = new URL('../node_modules/.bin/node', import.meta.url).pathname;

/** Runs each request's plugin as a child of its own (so in its namespace) and reports exec-to-exit time. */
const RUNNER = `
const { spawn } = require('node:child_process');
const { performance } = require('node:perf_hooks');
require('node:readline').createInterface({ input: process.stdin }).on('line', (line) => {
  const { seq, plugin, env, stdin } = JSON.parse(line);
  const t0 = performance.now();
  const child = spawn(plugin, [], { env, stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  child.stdin.on('error', () => {});
  child.stdin.end(stdin);
  child.on('close', (status) => process.stdout.write(JSON.stringify({ seq, ms: performance.now() - t0, status, out }) + '\\n'));
});`;

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

/** A runner process in `ns`; `run` resolves with the call's wall time in ms, rejects on failure. */
function runner(ns: Netns): { run: (plugin: string, env: Record<string, string>, stdin: string) => Promise<number>; stop: () => void } {
  const child = spawn('ip', ['netns', 'exec', ns.name, NODE, '-e', RUNNER], { stdio: ['pipe', 'pipe', 'inherit'] });
  const pending = new Map<number, { resolve: (ms: number) => void; reject: (e: Error) => void; what: string }>();
  let seq = 0;
  createInterface({ input: child.stdout! }).on('line', (line) => {
    const r = JSON.parse(line) as { seq: number; ms: number; status: number; out: string };
    const p = pending.get(r.seq)!;
    pending.delete(r.seq);
    if (r.status === 0) p.resolve(r.ms);
    else p.reject(new Error(`${p.what} failed (${r.status}): ${r.out}`));
  });
  return {
    run: (plugin, env, stdin) => new Promise((resolve, reject) => {
      const s = ++seq;
      pending.set(s, { resolve, reject, what: `${plugin} ${env['CNI_COMMAND']} ${env['CNI_CONTAINERID']}` });
      child.stdin!.write(`${JSON.stringify({ seq: s, plugin, env, stdin })}\n`);
    }),
    stop: () => child.kill(),
  };
}

const dir = mkdtempSync(join(tmpdir(), 'weft-bench-cni-'));
const name = `${RUN_PREFIX}-bench`;
const subnetFile = join(dir, 'subnet.env');
const dataDir = join(dir, 'data');
writeFileSync(subnetFile, 'FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.7.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n');
const node = await createNetns('node');
const pods: Netns[] = [];
const host = NetlinkHandle.open(node.path);
const r = runner(node);
const conf = JSON.stringify({ cniVersion: '1.0.0', name, type: 'flannel', subnetFile, dataDir, delegate: { hairpinMode: true, isDefaultGateway: true } });
const env = (command: string, id: string, pod: Netns) => ({ CNI_COMMAND: command, CNI_CONTAINERID: id, CNI_IFNAME: 'eth0', CNI_NETNS: pod.path, CNI_PATH: DEBIAN_CNI_DIR });

/** ADD+DEL cycles; returns the sorted ADD and DEL times after the warm-up. */
async function cycles(plugin: string, stdin: string, tag: string): Promise<{ add: number[]; del: number[] }> {
  const add: number[] = [];
  const del: number[] = [];
  for (let i = 0; i < WARMUP + CYCLES; i++) {
    const id = `${tag}-${i}`;
    const pod = await createNetns('pod');
    const a = await r.run(plugin, env('ADD', id, pod), stdin);
    const d = await r.run(plugin, env('DEL', id, pod), stdin);
    await pod.remove();
    if (i >= WARMUP) {
      add.push(a);
      del.push(d);
    }
  }
  return { add: add.sort((x, y) => x - y), del: del.sort((x, y) => x - y) };
}

const server = await startCniServer({ subnetFile, host, log: silentLogger });
try {
  const served = await cycles(PLUGIN_BIN, conf, 'served');
  // The delegate config, captured from the state file of one more ADD.
  for (let i = 0; i < 100; i++) pods.push(await createNetns(`pod${i}`));
  await r.run(PLUGIN_BIN, env('ADD', 'capture', pods[0]!), conf);
  const delegate = readFileSync(join(dataDir, 'capture'), 'utf8');
  await r.run(PLUGIN_BIN, env('DEL', 'capture', pods[0]!), conf);

  // A burst: 100 ADDs (100 pods), 20 at a time.
  const t0 = performance.now();
  const queue = Array.from({ length: 100 }, (_, i) => i);
  await Promise.all(Array.from({ length: 20 }, async () => {
    for (let i = queue.shift(); i !== undefined; i = queue.shift()) await r.run(PLUGIN_BIN, env('ADD', `burst-${i}`, pods[i]!), conf);
  }));
  const burst = (performance.now() - t0) / 1000;
  for (let i = 0; i < 100; i++) await r.run(PLUGIN_BIN, env('DEL', `burst-${i}`, pods[i]!), conf);

  await server.close();
  const fallback = await cycles(PLUGIN_BIN, conf, 'fallback');
  const direct = await cycles(join(DEBIAN_CNI_DIR, 'bridge'), delegate, 'direct');

  const f = (x: number) => x.toFixed(1);
  const p = (xs: number[], q: number) => f(percentile(xs, q));
  console.log(`served over ${CYCLES} cycles: ADD p50 ${p(served.add, 50)} ms p90 ${p(served.add, 90)} ms p99 ${p(served.add, 99)} ms, DEL p50 ${p(served.del, 50)} ms p99 ${p(served.del, 99)} ms`);
  console.log(`fallback: ADD p50 ${p(fallback.add, 50)} ms p99 ${p(fallback.add, 99)} ms, DEL p50 ${p(fallback.del, 50)} ms; bridge directly: ADD p50 ${p(direct.add, 50)} ms, DEL p50 ${p(direct.del, 50)} ms`);
  console.log(`burst of 100 ADDs, 20 at a time, served: ${burst.toFixed(2)} s`);
  console.log(`cni_add_p50_ms=${p(served.add, 50)} cni_add_p99_ms=${p(served.add, 99)} cni_del_p50_ms=${p(served.del, 50)} fallback_add_p50_ms=${p(fallback.add, 50)} delegate_add_p50_ms=${p(direct.add, 50)} burst100_s=${burst.toFixed(2)}`);
} finally {
  await server.close();
  r.stop();
  host.close();
  for (const pod of pods) await pod.remove();
  await node.remove();
  rmSync(dir, { recursive: true, force: true });
  rmSync(`/var/lib/cni/networks/${name}`, { recursive: true, force: true });
}
