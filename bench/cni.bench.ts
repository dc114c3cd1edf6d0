/**
 * make bench-cni: the plugin the runtime executes (dist/weft-cni), timed from spawn to exit by
 * bench/spawn-timer.c inside the node namespace (posix_spawn, as a runtime's Go exec clones; no
 * `ip netns exec` wrapper and no fork of a Node process in the figures):
 *
 *   1. 200 ADD+DEL cycles with weftd's CNI server serving (this process, its handle bound to the
 *      node namespace), each pod in a namespace of its own, all made before the cycles and removed
 *      after them, so the kernel's teardown of namespaces (the runtime's work) stays out of the
 *      figures. A served DEL answers once the pod is off the network and released; the kernel
 *      deletes the veth in weftd's next batch;
 *   2. 200 cycles with the server stopped: the plugin falls back to the TypeScript plugin, which
 *      runs Debian's bridge + host-local;
 *   3. 200 cycles of the same delegate config (the bytes the server saved) given to bridge directly;
 *   4. a burst of 100 ADDs, 20 at a time, through the server (then their DELs, untimed);
 *   5. a node's full burst: 220 ADDs at once (twice kubelet's 110 pods per node), each from a
 *      runtime process of its own: the time until the last answer, and how many weftd did not
 *      wire itself (refused, failed or left to the fallback);
 *   6. bandwidth: a pod limited to 10, 25 and 50 Mbit/s both ways (bursts of 50 ms), iperf3 TCP
 *      (3 s) from and to a plain pod on the same bridge; bandwidth_accuracy is the ratio of
 *      measured to asked rate furthest from 1 of the six.
 *
 * The config declares the bandwidth capability as the installed conflist does; the timed pods ask
 * for no limits (kubelet passes runtimeConfig.bandwidth only for pods with the annotations).
 *
 * Every call carries CNI_ARGS as kubelet's runtimes pass them, naming a pod. The fixed-address
 * figures are 200 more served cycles with `fixedAddress` on and ten pod names in turn: each pod
 * re-created 20 times, claiming back its addresses and MAC (their entries stay parked, holding 10
 * of the range's addresses, for the rest of the run).
 *
 * Last line: cni_add_p50_ms=<> cni_add_p99_ms=<> cni_del_p50_ms=<> fallback_add_p50_ms=<>
 * delegate_add_p50_ms=<> burst100_s=<> burst220_s=<> burst220_refused=<> bandwidth_accuracy=<>
 * fixed_add_p50_ms=<> fixed_add_p99_ms=<>
 *
 * Percentiles as bench/support/stats.ts defines them: the nearest rank.
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { startCniServer } from '../src/cni/server.ts';
import { silentLogger } from '../src/log.ts';
import type { Logger } from '../src/log.ts';
import { NetlinkHandle } from '../src/netlink/index.ts';
import { DEBIAN_CNI_DIR, PLUGIN_BIN } from '../test/support/cni.ts';
import { iperf3 } from '../test/support/egress-cluster.ts';
import { RUN_PREFIX, createNetns } from '../test/support/netns.ts';
import type { Netns } from '../test/support/netns.ts';
import { percentile } from './support/stats.ts';

const CYCLES = 200;
const WARMUP = 5;

/** A spawn-timer in `ns`; `run` resolves with the call's wall time in ms, rejects with its output on failure. */
type Run = (plugin: string, command: string, id: string, pod: Netns, config: string, cniArgs?: string) => Promise<number>;

/** CNI_ARGS as kubelet's runtimes pass them, for pod `name`. */
function podArgs(name: string): string {
  return `IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=${name};K8S_POD_INFRA_CONTAINER_ID=${name}`;
}

function runner(ns: Netns, timer: string, dir: string, lane: number): { run: Run; stop: () => void } {
  const child = spawn('ip', ['netns', 'exec', ns.name, timer, DEBIAN_CNI_DIR], { stdio: ['pipe', 'pipe', 'inherit'] });
  const waiting: ((line: string) => void)[] = [];
  createInterface({ input: child.stdout! }).on('line', (line) => waiting.shift()!(line));
  const out = join(dir, `out-${lane}`);
  return {
    run: (plugin, command, id, pod, config, cniArgs = podArgs(id)) => new Promise((resolve, reject) => {
      waiting.push((line) => {
        const [status, ms] = line.split(' ');
        if (status === '0') resolve(Number(ms));
        else reject(new Error(`${plugin} ${command} ${id} failed (${status}): ${readFileSync(out, 'utf8')}`));
      });
      child.stdin!.write(`${[plugin, command, id, pod.path, config, out, cniArgs].join('\t')}\n`);
    }),
    stop: () => child.stdin!.end(),
  };
}

const dir = mkdtempSync(join(tmpdir(), 'weft-bench-cni-'));
const name = `${RUN_PREFIX}-bench`;
const subnetFile = join(dir, 'subnet.env');
const dataDir = join(dir, 'data');
writeFileSync(subnetFile, 'FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.7.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n');
const timer = join(dir, 'spawn-timer');
execFileSync('gcc', ['-O2', '-o', timer, new URL('spawn-timer.c', import.meta.url).pathname]);
const node = await createNetns('node');
const pods: Netns[] = [];
const host = NetlinkHandle.open(node.path);
const lanes = Array.from({ length: 20 }, (_, i) => runner(node, timer, dir, i));
const r = lanes[0]!;
const conf = join(dir, 'conf.json');
const flannel = {
  cniVersion: '1.0.0', name, type: 'flannel', subnetFile, dataDir,
  delegate: { hairpinMode: true, isDefaultGateway: true }, capabilities: { bandwidth: true },
};
writeFileSync(conf, JSON.stringify(flannel));

/** The pod's address on eth0. */
async function podIp(pod: Netns): Promise<string> {
  const [eth0] = await pod.ipJson<{ addr_info: { local: string; family: string }[] }[]>('addr', 'show', 'eth0');
  return eth0!.addr_info.find((a) => a.family === 'inet')!.local;
}

/** Of 3 rates, both ways, the measured / asked ratio furthest from 1 (pods[0] shaped, pods[1] its plain peer). */
async function bandwidthAccuracy(): Promise<number> {
  const [shaped, peer] = [pods[0]!, pods[1]!];
  await r.run(PLUGIN_BIN, 'ADD', 'peer', peer, conf);
  const ratios: number[] = [];
  for (const mbit of [10, 25, 50]) {
    const rate = mbit * 1_000_000;
    const limited = join(dir, `bandwidth-${mbit}.json`);
    const bandwidth = { ingressRate: rate, ingressBurst: rate / 20, egressRate: rate, egressBurst: rate / 20 };
    writeFileSync(limited, JSON.stringify({ ...flannel, runtimeConfig: { bandwidth } }));
    await r.run(PLUGIN_BIN, 'ADD', `shaped-${mbit}`, shaped, limited);
    const ingress = (await iperf3(shaped, peer, await podIp(shaped))) / rate;
    const egress = (await iperf3(peer, shaped, await podIp(peer))) / rate;
    console.log(`bandwidth ${mbit} Mbit/s: ingress ${(ingress * mbit).toFixed(2)} Mbit/s, egress ${(egress * mbit).toFixed(2)} Mbit/s`);
    ratios.push(ingress, egress);
    await r.run(PLUGIN_BIN, 'DEL', `shaped-${mbit}`, shaped, limited);
  }
  await r.run(PLUGIN_BIN, 'DEL', 'peer', peer, conf);
  return ratios.reduce((worst, x) => (Math.abs(x - 1) > Math.abs(worst - 1) ? x : worst));
}

/**
 * ADD+DEL cycles; returns the sorted ADD and DEL times after the warm-up. Each pod is named after
 * its container in CNI_ARGS, or after one of `recreated` names in turn (a StatefulSet's pods
 * re-created again and again).
 */
async function cycles(plugin: string, config: string, tag: string, recreated?: number): Promise<{ add: number[]; del: number[] }> {
  const add: number[] = [];
  const del: number[] = [];
  const mine: Netns[] = [];
  try {
    for (let i = 0; i < WARMUP + CYCLES; i++) mine.push(await createNetns('pod'));
    for (const [i, pod] of mine.entries()) {
      const id = `${tag}-${i}`;
      const args = podArgs(recreated === undefined ? id : `${tag}-${i % recreated}`);
      const a = await r.run(plugin, 'ADD', id, pod, config, args);
      const d = await r.run(plugin, 'DEL', id, pod, config, args);
      if (i >= WARMUP) {
        add.push(a);
        del.push(d);
      }
    }
  } finally {
    for (const pod of mine) await pod.remove();
  }
  return { add: add.sort((x, y) => x - y), del: del.sort((x, y) => x - y) };
}

let wiredByWeftd = 0;
const counting: Logger = { ...silentLogger, info: (msg) => void (msg === 'wired pod' && wiredByWeftd++), child: () => counting };
const server = await startCniServer({ subnetFile, host, log: counting });
try {
  const served = await cycles(PLUGIN_BIN, conf, 'served');
  // Fixed addresses on: ten pods, each re-created 20 times, keep their addresses and MACs.
  const fixedConf = join(dir, 'fixed.json');
  writeFileSync(fixedConf, JSON.stringify({ ...flannel, fixedAddress: true }));
  const fixed = await cycles(PLUGIN_BIN, fixedConf, 'fixed', 10);
  // The delegate config, captured from the state file of one more ADD.
  for (let i = 0; i < 100; i++) pods.push(await createNetns(`pod${i}`));
  await r.run(PLUGIN_BIN, 'ADD', 'capture', pods[0]!, conf);
  const delegate = join(dir, 'delegate.json');
  writeFileSync(delegate, readFileSync(join(dataDir, 'capture'), 'utf8'));
  await r.run(PLUGIN_BIN, 'DEL', 'capture', pods[0]!, conf);

  // A burst: 100 ADDs (100 pods), 20 at a time.
  const t0 = performance.now();
  const queue = Array.from({ length: 100 }, (_, i) => i);
  await Promise.all(lanes.map(async (lane) => {
    for (let i = queue.shift(); i !== undefined; i = queue.shift()) await lane.run(PLUGIN_BIN, 'ADD', `burst-${i}`, pods[i]!, conf);
  }));
  const burst = (performance.now() - t0) / 1000;
  for (let i = 0; i < 100; i++) await r.run(PLUGIN_BIN, 'DEL', `burst-${i}`, pods[i]!, conf);

  // A node's full burst: 220 ADDs at once, one runtime process each.
  for (let i = 100; i < 220; i++) pods.push(await createNetns(`pod${i}`));
  const wide = Array.from({ length: 220 }, (_, i) => runner(node, timer, dir, 20 + i));
  lanes.push(...wide);
  await server.settled();
  wiredByWeftd = 0;
  const t1 = performance.now();
  const answers = await Promise.allSettled(wide.map((lane, i) => lane.run(PLUGIN_BIN, 'ADD', `full-${i}`, pods[i]!, conf)));
  const burst220 = (performance.now() - t1) / 1000;
  const refused = answers.length - Math.min(wiredByWeftd, answers.filter((a) => a.status === 'fulfilled').length);
  for (let i = 0; i < 220; i++) await r.run(PLUGIN_BIN, 'DEL', `full-${i}`, pods[i]!, conf).catch(() => undefined);
  const accuracy = await bandwidthAccuracy();

  await server.close();
  const fallback = await cycles(PLUGIN_BIN, conf, 'fallback');
  const direct = await cycles(join(DEBIAN_CNI_DIR, 'bridge'), delegate, 'direct');

  const f = (x: number) => x.toFixed(1);
  const p = (xs: number[], q: number) => f(percentile(xs, q));
  console.log(`served over ${CYCLES} cycles: ADD p50 ${p(served.add, 50)} ms p90 ${p(served.add, 90)} ms p99 ${p(served.add, 99)} ms, DEL p50 ${p(served.del, 50)} ms p99 ${p(served.del, 99)} ms`);
  console.log(`fixed addresses, 10 pods re-created 20 times each, served: ADD p50 ${p(fixed.add, 50)} ms p99 ${p(fixed.add, 99)} ms, DEL p50 ${p(fixed.del, 50)} ms`);
  console.log(`fallback: ADD p50 ${p(fallback.add, 50)} ms p99 ${p(fallback.add, 99)} ms, DEL p50 ${p(fallback.del, 50)} ms; bridge directly: ADD p50 ${p(direct.add, 50)} ms, DEL p50 ${p(direct.del, 50)} ms`);
  console.log(`burst of 100 ADDs, 20 at a time, served: ${burst.toFixed(2)} s; 220 at once: ${burst220.toFixed(2)} s, ${refused} not wired by weftd`);
  console.log(
    `cni_add_p50_ms=${p(served.add, 50)} cni_add_p99_ms=${p(served.add, 99)} cni_del_p50_ms=${p(served.del, 50)} ` +
      `fallback_add_p50_ms=${p(fallback.add, 50)} delegate_add_p50_ms=${p(direct.add, 50)} burst100_s=${burst.toFixed(2)} ` +
      `burst220_s=${burst220.toFixed(2)} burst220_refused=${refused} bandwidth_accuracy=${accuracy.toFixed(3)} ` +
      `fixed_add_p50_ms=${p(fixed.add, 50)} fixed_add_p99_ms=${p(fixed.add, 99)}`,
  );
} finally {
  await server.close();
  for (const lane of lanes) lane.stop();
  host.close();
  for (const pod of pods) await pod.remove();
  await node.remove();
  rmSync(dir, { recursive: true, force: true });
  rmSync(`/var/lib/cni/networks/${name}`, { recursive: true, force: true });
}
