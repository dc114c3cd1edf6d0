/**
 * make bench-image: what the image costs against bin/weftd of a checkout.
 *
 * - image_mb: the image's unpacked size (podman's figure, MiB);
 * - image_build_s: `make image` from a warm cache (bases and the npm layer cached) after a source
 *   change: a copy of the build context with a comment added to src/cmd/weftd.ts, so the build
 *   stage runs again (addon, bundles, plugin) and the archive is saved; RUNS runs, median;
 * - container_ready_ms / direct_ready_ms: from the start of the DaemonSet's weftd container
 *   (`podman start` of the container created with everything daemonset.yaml gives it,
 *   test/support/kubelet.ts: the kubelet's StartContainer after its CreateContainer) or of
 *   bin/weftd with the same args and files, to /readyz answering 200 at the node's address; the
 *   line above the last gives the same to subnet.env written, and what `podman create` took.
 *   Kube mode, one node, the test API server; subnet.env is removed before each start. RUNS of
 *   each, interleaved, medians; ready_ratio is the ratio of the medians. The line above also
 *   splits both at weftd's first log line (its local sockets served: Node started and the entry
 *   loaded), which in the container also counts the runtime's start.
 *
 * A poller in the node's namespace (started before the clock) checks for subnet.env and asks
 * /readyz every 2 ms, and reports when each first succeeded.
 *
 * Medians as bench/support/stats.ts defines them (an even count: the mean of the middle two).
 *
 * Last line: image_mb=<> image_build_s=<> container_ready_ms=<> direct_ready_ms=<> ready_ratio=<>
 */
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { appendFile, cp, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { stopDaemon } from '../test/support/cluster.ts';
import { ImageCluster, MAIN, VERSION, needsImage } from '../test/support/image-cluster.ts';
import type { ImageNode } from '../test/support/image-cluster.ts';
import { median } from './support/stats.ts';

const run = promisify(execFile);
const RUNS = Number(process.env.IMAGE_RUNS ?? 5);
const ROOT = new URL('../', import.meta.url).pathname;
/** What the Dockerfile's COPY lines read, and the files make image needs beside them. */
const CONTEXT = ['Dockerfile', '.dockerignore', 'Makefile', 'package.json', 'package-lock.json', 'tsconfig.json', 'bin', 'scripts', 'src', 'native/binding.gyp', 'native/src', 'native/plugin'];

const POLLER = `
const [url, file] = process.argv.slice(1);
const { existsSync } = require('node:fs');
const http = require('node:http');
let subnet = 0, ready = 0, asking = false;
console.log('polling');
const tick = () => {
  if (!subnet && existsSync(file)) subnet = Date.now();
  if (!ready && !asking) {
    asking = true;
    http.get(url, (res) => { res.resume(); if (res.statusCode === 200) ready = Date.now(); asking = false; })
      .on('error', () => { asking = false; });
  }
  if (subnet && ready) console.log(JSON.stringify({ subnet, ready })); else setTimeout(tick, 2);
};
tick();
`;

interface Timing { subnetMs: number; readyMs: number; firstLogMs: number }

/** The time of weftd's first log line (klog's `I1125 22:15:27.402`, UTC), in ms since the epoch. */
function firstLogEpochMs(log: string): number {
  const m = /^[IWE](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{3}) /m.exec(log);
  if (!m) throw new Error(`no log line in\n${log}`);
  const [month, day, h, min, sec, ms] = m.slice(1).map(Number) as [number, number, number, number, number, number];
  return Date.UTC(new Date().getUTCFullYear(), month - 1, day, h, min, sec, ms);
}

/** Starts weftd on `n` with `start` and resolves with the ms to its first log line, to subnet.env and to /readyz 200 (`log` gives its log). */
async function timeStart(c: ImageCluster, n: ImageNode, start: () => Promise<unknown>, log: () => Promise<string>): Promise<Timing> {
  await rm(join(n.pod.hostPath('/run/flannel'), 'subnet.env'), { force: true });
  const probe = n.pod.container(MAIN).readinessProbe!.httpGet;
  const poller = spawn('ip', ['netns', 'exec', n.ns.name, process.execPath, '-e', POLLER, `http://${n.address}:${probe.port}${probe.path}`, join(n.pod.hostPath('/run/flannel'), 'subnet.env')], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  poller.stdout.on('data', (b: Buffer) => (out += b.toString()));
  await new Promise<void>((resolve) => { const check = (): void => { if (out.includes('polling')) resolve(); else setTimeout(check, 1); }; check(); });
  const t0 = Date.now();
  await start();
  const [code] = await Promise.race([once(poller, 'exit'), new Promise<[string]>((r) => setTimeout(r, 60_000, ['timeout']))]);
  if (code !== 0) {
    poller.kill();
    throw new Error(`weftd on ${n.name} did not get ready within 60 s\n${await c.logs()}`);
  }
  const times = JSON.parse(out.slice(out.indexOf('{'))) as { subnet: number; ready: number };
  return { subnetMs: times.subnet - t0, readyMs: times.ready - t0, firstLogMs: firstLogEpochMs(await log()) - t0 };
}

async function imageBuildSeconds(): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    const context = await mkdtemp(join(tmpdir(), 'weft-bench-image-'));
    try {
      for (const path of CONTEXT) await cp(join(ROOT, path), join(context, path), { recursive: true });
      await appendFile(join(context, 'src/cmd/weftd.ts'), `// bench-image build ${i} at ${Date.now()}\n`);
      const t0 = performance.now();
      await run('make', ['-s', 'image', `IMAGE_CONTEXT=${context}`], { cwd: ROOT, maxBuffer: 64 << 20 });
      times.push((performance.now() - t0) / 1000);
    } finally {
      await rm(context, { recursive: true, force: true });
    }
  }
  // Leave the checkout's own image and archive behind (every layer is cached by now).
  await run('make', ['-s', 'image'], { cwd: ROOT, maxBuffer: 64 << 20 });
  return median(times);
}

async function main(): Promise<void> {
  if (needsImage) throw new Error(`bench-image ${needsImage}`);
  const size = Number((await run('podman', ['image', 'inspect', '--format', '{{.Size}}', `weft:${VERSION}`])).stdout.trim());
  const imageBuildS = await imageBuildSeconds();
  const c = await ImageCluster.start(1);
  const container: Timing[] = [];
  const direct: Timing[] = [];
  const createMs: number[] = [];
  try {
    const n = c.nodes[0]!;
    await n.pod.runInitContainers();
    for (let i = 0; i < RUNS; i++) {
      const t0 = performance.now();
      await n.pod.create(MAIN);
      createMs.push(performance.now() - t0);
      container.push(await timeStart(c, n, () => n.pod.start(MAIN), () => n.pod.logs(MAIN)));
      await n.pod.stop(MAIN);
      direct.push(await timeStart(c, n, () => c.startDirect(n), async () => n.direct!.log()));
      await stopDaemon(n.direct!);
      delete n.direct;
    }
  } finally {
    await c.stop();
  }
  const med = (xs: Timing[], k: keyof Timing): number => median(xs.map((x) => x[k]));
  const afterLog = (xs: Timing[]): number => median(xs.map((x) => x.readyMs - x.firstLogMs));
  console.log(`runs=${RUNS} container_create_ms=${median(createMs).toFixed(0)} container_first_log_ms=${med(container, 'firstLogMs')} direct_first_log_ms=${med(direct, 'firstLogMs')}`
    + ` container_ready_after_log_ms=${afterLog(container)} direct_ready_after_log_ms=${afterLog(direct)} container_subnet_ms=${med(container, 'subnetMs')} direct_subnet_ms=${med(direct, 'subnetMs')}`
    + ` container_ready_all=${container.map((x) => x.readyMs).join(',')} direct_ready_all=${direct.map((x) => x.readyMs).join(',')}`);
  const containerReady = med(container, 'readyMs');
  const directReady = med(direct, 'readyMs');
  console.log(`image_mb=${(size / 2 ** 20).toFixed(1)} image_build_s=${imageBuildS.toFixed(1)} container_ready_ms=${containerReady} direct_ready_ms=${directReady} ready_ratio=${(containerReady / directReady).toFixed(2)}`);
}

await main();
