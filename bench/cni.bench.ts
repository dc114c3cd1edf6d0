/**
 * make bench-cni: 200 ADD+DEL cycles of one pod through bin/weft (bundled plugin, compile cache
 * warm) delegating to Debian's bridge + host-local, then 200 cycles of the same delegate config
 * (the bytes weft saved) given to bridge directly. Both run one at a time inside a node namespace
 * through `ip netns exec`, so that wrapper's cost is in both figures and cancels in the overhead.
 *
 * Last line: cni_add_p50_ms=<> cni_add_p99_ms=<> delegate_add_p50_ms=<> shim_overhead_ms=<>
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { DEBIAN_CNI_DIR, WEFT_BIN } from '../test/support/cni.ts';
import { RUN_PREFIX, createNetns } from '../test/support/netns.ts';

const CYCLES = 200;
const WARMUP = 5;

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

const dir = mkdtempSync(join(tmpdir(), 'weft-bench-cni-'));
const name = `${RUN_PREFIX}-bench`;
const subnetFile = join(dir, 'subnet.env');
const dataDir = join(dir, 'data');
writeFileSync(subnetFile, 'FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.7.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n');
const node = await createNetns('node');
const pod = await createNetns('pod');

/** One plugin call in the node namespace; returns its wall time in ms. Throws on failure. */
function call(plugin: string, command: string, id: string, stdin: string): number {
  const env = { PATH: process.env.PATH, CNI_COMMAND: command, CNI_CONTAINERID: id, CNI_IFNAME: 'eth0', CNI_NETNS: pod.path, CNI_PATH: DEBIAN_CNI_DIR };
  const t0 = performance.now();
  const r = spawnSync('ip', ['netns', 'exec', node.name, plugin], { input: stdin, env, encoding: 'utf8' });
  const ms = performance.now() - t0;
  if (r.status !== 0) throw new Error(`${plugin} ${command} ${id} failed: ${r.stdout}${r.stderr}`);
  return ms;
}

/** ADD+DEL cycles; returns the sorted ADD times after the warm-up. */
function cycles(plugin: string, stdin: string, tag: string): number[] {
  const adds: number[] = [];
  for (let i = 0; i < WARMUP + CYCLES; i++) {
    const id = `${tag}-${i}`;
    const ms = call(plugin, 'ADD', id, stdin);
    if (i >= WARMUP) adds.push(ms);
    call(plugin, 'DEL', id, stdin);
  }
  return adds.sort((a, b) => a - b);
}

try {
  const conf = JSON.stringify({ cniVersion: '1.0.0', name, type: 'weft', subnetFile, dataDir });
  const weft = cycles(WEFT_BIN, conf, 'weft');
  // The delegate config weft renders, captured from its state file by one more ADD.
  call(WEFT_BIN, 'ADD', 'capture', conf);
  const delegate = readFileSync(join(dataDir, 'capture'), 'utf8');
  call(WEFT_BIN, 'DEL', 'capture', conf);
  const direct = cycles(join(DEBIAN_CNI_DIR, 'bridge'), delegate, 'direct');

  const f = (x: number) => x.toFixed(1);
  const overhead = percentile(weft, 50) - percentile(direct, 50);
  console.log(`weft ADD over ${CYCLES} cycles: p50 ${f(percentile(weft, 50))} ms, p99 ${f(percentile(weft, 99))} ms; bridge directly: p50 ${f(percentile(direct, 50))} ms, p99 ${f(percentile(direct, 99))} ms`);
  console.log(`cni_add_p50_ms=${f(percentile(weft, 50))} cni_add_p99_ms=${f(percentile(weft, 99))} delegate_add_p50_ms=${f(percentile(direct, 50))} shim_overhead_ms=${f(overhead)}`);
} finally {
  await pod.remove();
  await node.remove();
  rmSync(dir, { recursive: true, force: true });
  rmSync(`/var/lib/cni/networks/${name}`, { recursive: true, force: true });
}
