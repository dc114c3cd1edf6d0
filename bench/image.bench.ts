/**
 * make bench-image: what the image costs against bin/weftd of a checkout.
 *
 * - image_mb: the image's unpacked size (podman's figure: make image builds it into podman's store);
 * - image_build_s: `make image` from a warm cache (bases and the npm layer cached) after a source
 *   change: a copy of the build context with a comment added to src/cmd/weftd.ts, so the build
 *   stage runs again (addon, bundles, plugin) and the archive is saved; RUNS runs, median;
 * - container_ready_ms / direct_ready_ms: from the start of the DaemonSet's weftd container (its
 *   task's start as containerd reports it, `ctr events`, on a real kubelet node of
 *   test/support/kube-cluster.ts running daemonset.yaml) or of bin/weftd with the same args and
 *   files, to /readyz answering 200 at the node's address; the line above the last gives the same
 *   to subnet.env written, and the kubelet's CreateContainer to that start (containerd's
 *   /containers/create event). Kube mode, one node, the real API server; the DaemonSet's pod is sent
 *   away by a NoExecute taint it does not tolerate and comes back when it is removed, and subnet.env
 *   is removed before each start. RUNS of each, interleaved, medians; ready_ratio is the ratio of
 *   the medians. The line above also splits both at weftd's first log line (its local sockets
 *   served: Node started and the entry loaded), which in the container also counts the runtime's start.
 *
 * A poller in the node's namespace (bench/support/readyz-poller.ts, started before the clock)
 * checks for subnet.env and asks /readyz every 2 ms, and reports when each first succeeded.
 *
 * Medians as bench/support/stats.ts defines them (an even count: the mean of the middle two).
 *
 * Last line: image_mb=<> image_build_s=<> container_ready_ms=<> direct_ready_ms=<> ready_ratio=<>
 */
import { execFile } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { appendFile, cp, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { WEFTD_BIN, stopDaemon } from '../test/support/cluster.ts';
import { KubeCluster, needsKubeNodes } from '../test/support/kube-cluster.ts';
import { VERSION, WEFT_IMAGE_ARCHIVE, needsWeftImage } from '../test/support/kube-images.ts';
import type { KubeNode } from '../test/support/kube-node.ts';
import { podsOn } from '../test/support/kube-pods.ts';
import { POLLER } from './support/readyz-poller.ts';
import { median } from './support/stats.ts';

const run = promisify(execFile);
const RUNS = Number(process.env.IMAGE_RUNS ?? 5);
const ROOT = new URL('../', import.meta.url).pathname;
const DAEMONSET = join(ROOT, 'daemonset.yaml');
const NODE = fileURLToPath(new URL('../node_modules/.bin/node', import.meta.url));
const NS = 'kube-flannel';
const MAIN = 'kube-weft';
const AWAY = 'weft.bench/away';
const READYZ_PORT = 8081;
/** What the Dockerfile's COPY lines read, and the files make image needs beside them. */
const CONTEXT = ['Dockerfile', '.dockerignore', 'Makefile', 'package.json', 'package-lock.json', 'tsconfig.json', 'bin', 'scripts', 'src', 'native/binding.gyp', 'native/src', 'native/plugin'];


interface Timing { subnetMs: number; readyMs: number; firstLogMs: number }

/** The time of weftd's first log line (klog's `I1125 22:15:27.402`, UTC), in ms since the epoch. */
function firstLogEpochMs(log: string): number {
  const m = /^[IWE](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{3}) /m.exec(log);
  if (!m) throw new Error(`no log line in\n${log}`);
  const [month, day, h, min, sec, ms] = m.slice(1).map(Number) as [number, number, number, number, number, number];
  return Date.UTC(new Date().getUTCFullYear(), month - 1, day, h, min, sec, ms);
}

/** Reads what a node process prints into a string. */
function collect(proc: ChildProcess): () => string {
  let out = '';
  proc.stdout!.on('data', (b: Buffer) => (out += b.toString()));
  proc.stderr!.on('data', (b: Buffer) => (out += b.toString()));
  return () => out;
}

/** Sends the DaemonSet's pod away from `n` (or lets it back), waiting until it is gone (or Ready). */
async function away(c: KubeCluster, n: KubeNode, on: boolean): Promise<void> {
  if (!on) {
    await c.kubectl('taint', 'node', n.name, `${AWAY}-`);
    await c.kubectl('rollout', 'status', '-n', NS, 'ds/kube-weft-ds', '--timeout=300s');
    return;
  }
  const pods = await podsOn(c, NS, 'app=flannel', n.name);
  await c.kubectl('taint', 'node', n.name, `${AWAY}=true:NoExecute`);
  for (const pod of pods) await c.kubectl('wait', '-n', NS, '--for=delete', `pod/${pod}`, '--timeout=300s');
}

/**
 * Starts weftd on `n` with `start` (subnet.env removed first) and resolves with the ms from the
 * epoch time `start` resolves with to its first log line, to subnet.env and to /readyz 200 (`log` gives its log).
 */
async function timeStart(c: KubeCluster, n: KubeNode, start: () => Promise<number>, log: () => Promise<string>): Promise<Timing> {
  const subnetEnv = join(n.hostPath('/run/flannel'), 'subnet.env');
  await rm(subnetEnv, { force: true });
  const poller = await n.spawn(NODE, ['-e', POLLER, `http://${n.address}:${READYZ_PORT}/readyz`, '/run/flannel/subnet.env']);
  const out = collect(poller);
  const exited = once(poller, 'exit');
  await Promise.race([once(poller.stdout!, 'data'), exited]);
  if (!out().includes('polling')) throw new Error(`the poller did not start: ${out()}`);
  const t0 = await start();
  const [code] = await Promise.race([exited, new Promise<[string]>((r) => setTimeout(r, 120_000, ['timeout']))]);
  if (code !== 0) {
    poller.kill();
    throw new Error(`weftd on ${n.name} did not get ready within 120 s\n${out()}\n${c.logs()}`);
  }
  const times = JSON.parse(out().slice(out().indexOf('{'))) as { subnet: number; ready: number };
  return { subnetMs: times.subnet - t0, readyMs: times.ready - t0, firstLogMs: firstLogEpochMs(await log()) - t0 };
}

/** One event of containerd's (`ctr events`): its time in ms since the epoch, its topic and what it carries. */
interface ContainerdEvent { at: number; topic: string; body: Record<string, unknown> }

/** containerd's events on `n` while it runs. */
async function watchEvents(n: KubeNode): Promise<{ events: () => ContainerdEvent[]; stop: () => void }> {
  const proc = await n.spawn('ctr', ['--namespace', 'k8s.io', 'events']);
  const out = collect(proc);
  return {
    events: () => out().split('\n').flatMap((line) => {
      const m = /^(\S+) (\d\d:\d\d:\d\d)(\.\d+)? \+0000 UTC \S+ (\S+) (\{.*\})$/.exec(line);
      if (!m) return [];
      const at = Date.parse(`${m[1]}T${m[2]}${(m[3] ?? '.0').slice(0, 4)}Z`);
      return [{ at, topic: m[4]!, body: JSON.parse(m[5]!) as Record<string, unknown> }];
    }),
    stop: () => void proc.kill('SIGTERM'),
  };
}

/** The DaemonSet's weftd container started on `n` after it came back: its CreateContainer and its task's start (epoch ms). */
async function containerStart(c: KubeCluster, n: KubeNode, events: ContainerdEvent[]): Promise<{ created: number; started: number }> {
  for (const e of events.filter((x) => x.topic === '/tasks/start')) {
    const id = String(e.body.container_id);
    const info = JSON.parse(await n.ctr('containers', 'info', id).catch(() => '{}')) as { Labels?: Record<string, string> };
    if (info.Labels?.['io.kubernetes.container.name'] !== MAIN) continue;
    const created = events.find((x) => x.topic === '/containers/create' && x.body.id === id);
    if (!created) throw new Error(`no /containers/create event for ${id}`);
    return { created: created.at, started: e.at };
  }
  throw new Error(`no start of a ${MAIN} container among containerd's events on ${n.name}\n${c.logs()}`);
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
  const missing = needsKubeNodes || needsWeftImage;
  if (missing) throw new Error(`bench-image ${missing}`);
  const size = Number((await run('podman', ['image', 'inspect', '--format', '{{.Size}}', `weft:${VERSION}`])).stdout.trim());
  const imageBuildS = await imageBuildSeconds();
  const c = await KubeCluster.start({ nodes: 1, images: [WEFT_IMAGE_ARCHIVE], manifests: [DAEMONSET] });
  const container: Timing[] = [];
  const direct: Timing[] = [];
  const createMs: number[] = [];
  try {
    const n = c.nodes[0]!;
    await c.kubectl('rollout', 'status', '-n', NS, 'ds/kube-weft-ds', '--timeout=300s');
    const args = await c.kubectl('get', '-n', NS, 'ds/kube-weft-ds', '-o',
      `jsonpath={.spec.template.spec.containers[?(@.name=="${MAIN}")].args}`);
    const kubeconfig = await c.serviceAccountKubeconfig(NS, 'flannel', join(c.dir, 'direct-kubeconfig.json'));
    const netConf = join(c.dir, 'net-conf.json');
    const data = await c.getJson<{ data: Record<string, string> }>('-n', NS, 'configmap/kube-flannel-cfg').then((o) => o.data);
    await writeFile(netConf, data['net-conf.json']!);
    const directArgs = [...JSON.parse(args) as string[], `--kubeconfig-file=${kubeconfig}`, `--net-config-path=${netConf}`];
    for (let i = 0; i < RUNS; i++) {
      await away(c, n, true);
      const watch = await watchEvents(n);
      let start = { created: 0, started: 0 };
      try {
        container.push(await timeStart(c, n, async () => {
          await away(c, n, false);
          start = await containerStart(c, n, watch.events());
          return start.started;
        }, async () => c.kubectl('logs', '-n', NS, '-c', MAIN, (await podsOn(c, NS, 'app=flannel', n.name))[0]!)));
      } finally {
        watch.stop();
      }
      createMs.push(start.started - start.created);
      await away(c, n, true);
      let weftd: Awaited<ReturnType<typeof n.spawn>> | undefined;
      let log = (): string => '';
      try {
        direct.push(await timeStart(c, n, async () => {
          const t0 = Date.now();
          weftd = await n.spawn(WEFTD_BIN, directArgs, { NODE_NAME: n.name });
          log = collect(weftd);
          return t0;
        }, async () => log()));
      } finally {
        if (weftd) await stopDaemon({ proc: weftd, log, exited: once(weftd, 'exit').then(([code]) => code as number | null) });
      }
      await away(c, n, false);
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
