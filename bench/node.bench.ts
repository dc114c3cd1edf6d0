/**
 * make bench-node: a node as an operator installs it, on the real control plane and a real
 * kubelet node (test/support/kube-cluster.ts: containerd, runc, kubelet, kube-proxy v1.28.4),
 * daemonset.yaml applied unchanged with kubectl:
 *
 * - apply_to_ready_ms: from `kubectl apply -f daemonset.yaml` to weftd's /readyz answering 200 at
 *   the node's address (bench/support/readyz-poller.ts in the node's namespace);
 * - waiting_pods_after_ready_ms: five pods created on the node before the apply, waiting for its
 *   network: from weftd ready to the last of them Running with its address (the API asked every
 *   20 ms), 0 when all were running before; the line before the last also gives
 *   waiting_pods_after_network_ready_ms, from the later of weftd ready and the Node turning Ready
 *   (the kubelet starts a network-waiting pod only once its runtime status poll, every 5 s, has
 *   seen the conflist);
 * - doctor_warnings_fresh: `weftctl doctor` in weftd's container on that fresh node: its warnings;
 * - finished_pods_ips_held: fixed addresses turned on in the ConfigMap's conflist, a Job of 200
 *   pods run to completion on the node (10 at a time): addresses still parked a minute after the
 *   Job completed (host-local files holding `weft-fixed:`);
 * - hook_overrun_ms: bench/hooks.bench.ts's figure, a hook that backgrounds a child run past its
 *   timeout (hooks are the extension backend's, not the DaemonSet's; measured the same way).
 *
 * Needs root, containerd and the image (`make image`). Last line:
 * apply_to_ready_ms=<> waiting_pods_after_ready_ms=<> doctor_warnings_fresh=<> finished_pods_ips_held=<> hook_overrun_ms=<>
 */
import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { readFile, readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { sleep } from '../src/retry.ts';
import { KubeCluster, needsKubeNodes } from '../test/support/kube-cluster.ts';
import { PEER_IMAGES, VERSION, WEFT_IMAGE_ARCHIVE, needsWeftImage } from '../test/support/kube-images.ts';
import type { KubeNode } from '../test/support/kube-node.ts';
import { createTestPod, execIn, podsOn } from '../test/support/kube-pods.ts';
import { until } from '../test/support/until.ts';
import { POLLER } from './support/readyz-poller.ts';

const ROOT = new URL('../', import.meta.url).pathname;
const DAEMONSET = join(ROOT, 'daemonset.yaml');
const NODE = fileURLToPath(new URL('../node_modules/.bin/node', import.meta.url));
const NS = 'kube-flannel';
const MAIN = 'kube-weft';
const DS = 'ds/kube-weft-ds';
const WAITING = 5;
const JOB_PODS = 200;

/** bench/hooks.bench.ts's hook_overrun_ms, from its last line. */
async function hookOverrunMs(): Promise<number> {
  const { stdout } = await promisify(execFile)(NODE, [join(ROOT, 'bench/hooks.bench.ts')]);
  const m = /\bhook_overrun_ms=(\d+)/.exec(stdout.trim().split('\n').at(-1) ?? '');
  if (!m) throw new Error(`bench/hooks.bench.ts printed no hook_overrun_ms:\n${stdout}`);
  return Number(m[1]);
}


/** Starts the poller in `n`'s namespace; resolves once it polls, with `ready`: when weftd answered 200 (epoch ms). */
async function readyPoller(n: KubeNode): Promise<{ ready: Promise<number> }> {
  const proc = await n.spawn(NODE, ['-e', POLLER, `http://${n.address}:8081/readyz`, '/run/flannel/subnet.env']);
  let out = '';
  proc.stdout!.on('data', (b: Buffer) => (out += b.toString()));
  await until('the readyz poller polling', () => out.includes('polling'), 30_000);
  return { ready: once(proc, 'exit').then(() => (JSON.parse(out.slice(out.indexOf('{'))) as { ready: number }).ready) };
}

/** When each pod labelled bench=waiting was first seen Running with an address (epoch ms). */
async function runningTimes(c: KubeCluster, count: number): Promise<number[]> {
  const seen = new Map<string, number>();
  await until(`the ${count} waiting pods running`, async () => {
    const list = await c.cp.request('GET', '/api/v1/namespaces/default/pods?labelSelector=bench%3Dwaiting') as {
      items: { metadata: { name: string }; status: { phase?: string; podIP?: string } }[];
    };
    for (const p of list.items) {
      if (p.status.phase === 'Running' && p.status.podIP && !seen.has(p.metadata.name)) seen.set(p.metadata.name, Date.now());
    }
    return seen.size === count;
  }, 300_000);
  return [...seen.values()];
}

/**
 * When the Node `name` was first seen Ready (epoch ms; the API asked every 20 ms): the kubelet
 * posts it as soon as its runtime status poll (every 5 s) has found the network ready, and only
 * then starts the sandboxes of pods waiting for the network.
 */
async function nodeReadyTime(c: KubeCluster, name: string): Promise<number> {
  await until(`node ${name} Ready`, async () => {
    const node = await c.cp.request('GET', `/api/v1/nodes/${name}`) as { status?: { conditions?: { type: string; status: string }[] } };
    return node.status?.conditions?.some((x) => x.type === 'Ready' && x.status === 'True') ?? false;
  }, 300_000);
  return Date.now();
}

/** `weftctl doctor` in weftd's container on `n`: its warning lines. */
async function doctorWarnings(c: KubeCluster, n: KubeNode): Promise<string[]> {
  const pod = (await podsOn(c, NS, 'app=flannel', n.name))[0]!;
  const out = await execIn(c, pod, ['weftctl', 'doctor'], NS, MAIN).catch((e: { stdout?: string }) => e.stdout ?? '');
  return out.split('\n').filter((l) => l.startsWith('[warn]'));
}

/** Turns fixed addresses on in the ConfigMap's conflist and restarts the DaemonSet, whose install-cni writes it. */
async function fixedAddressesOn(c: KubeCluster, n: KubeNode): Promise<void> {
  const cm = await c.getJson<{ data: Record<string, string> }>('-n', NS, 'configmap/kube-flannel-cfg');
  const conflist = JSON.parse(cm.data['cni-conf.json']!) as { plugins: Record<string, unknown>[] };
  conflist.plugins[0]!['fixedAddress'] = true;
  const text = `${JSON.stringify(conflist, null, 2)}\n`;
  const patch = JSON.stringify({ data: { 'cni-conf.json': text } });
  await c.kubectl('patch', '-n', NS, 'configmap/kube-flannel-cfg', '--type=merge', '-p', patch);
  await c.kubectl('rollout', 'restart', '-n', NS, DS);
  await c.kubectl('rollout', 'status', '-n', NS, DS, '--timeout=300s');
  const onNode = join(n.hostPath('/etc/cni/net.d'), '10-weft.conflist');
  await until('the conflist with fixed addresses on the node', async () => (await readFile(onNode, 'utf8')) === text, 60_000);
}

/** A Job of `pods` pods on `n` (10 at a time), each exiting at once; resolves once it completed. */
async function runJob(c: KubeCluster, n: KubeNode, pods: number): Promise<void> {
  await c.kubectl('apply', '-f', '-', {
    input: JSON.stringify({
      apiVersion: 'batch/v1', kind: 'Job', metadata: { name: 'finished', namespace: 'default' },
      spec: {
        completions: pods, parallelism: 10, backoffLimit: 0,
        template: {
          spec: {
            restartPolicy: 'Never', nodeSelector: { 'kubernetes.io/hostname': n.name }, tolerations: [{ operator: 'Exists' }],
            terminationGracePeriodSeconds: 0,
            containers: [{ name: 'main', image: `weft:${VERSION}`, imagePullPolicy: 'IfNotPresent', command: ['/bin/true'] }],
          },
        },
      },
    }),
  });
  await c.kubectl('wait', '--for=condition=complete', 'job/finished', '--timeout=900s');
}

/** Addresses host-local's store on `n` holds parked for a pod (`weft-fixed:<namespace>/<name>`). */
async function parked(n: KubeNode): Promise<number> {
  const dir = join(n.hostPath('/var/lib/cni'), 'networks', 'cbr0');
  let count = 0;
  for (const f of await readdir(dir)) {
    if (!/^[0-9.]+$|:/.test(f)) continue;
    if ((await readFile(join(dir, f), 'utf8')).startsWith('weft-fixed:')) count++;
  }
  return count;
}

async function main(): Promise<void> {
  const missing = needsKubeNodes || needsWeftImage;
  if (missing) throw new Error(`bench-node ${missing}`);
  const hookOverrun = await hookOverrunMs();
  const c = await KubeCluster.start({ nodes: 1, images: [WEFT_IMAGE_ARCHIVE, PEER_IMAGES.agnhost.archive] });
  // The kubelet polls its runtime's network status every 100 ms (fastStatusUpdateOnce) only in the
  // 120 s after it starts; later, every 5 s.
  const kubeletUp = Date.now();
  try {
    const n = c.nodes[0]!;
    // Pods are admitted once the controller-manager has made the namespace's service account.
    await until('the default service account', () => c.cp.request('GET', '/api/v1/namespaces/default/serviceaccounts/default')
      .then((sa) => sa !== undefined, () => false), 60_000);
    for (let i = 0; i < WAITING; i++) await createTestPod(c, `waiting-${i}`, n.name, { labels: { bench: 'waiting' } });
    const { ready } = await readyPoller(n);
    const t0 = Date.now();
    console.log(`the kubelet started more than ${Math.round((t0 - kubeletUp) / 1000)} s before the apply`);
    const nodeReady = nodeReadyTime(c, n.name);
    await c.kubectl('apply', '-f', DAEMONSET);
    const readyAt = await ready;
    const running = await runningTimes(c, WAITING);
    const nodeReadyAt = await nodeReady;
    const applyToReady = readyAt - t0;
    const afterReady = Math.max(0, Math.max(...running) - readyAt);
    console.log(`waiting pods running at ${running.map((t) => t - readyAt).join(', ')} ms from weftd ready`);
    // The kubelet starts them once it has seen the conflist (its runtime status poll, every 5 s).
    const conflistAt = (await stat(join(n.hostPath('/etc/cni/net.d'), '10-weft.conflist'))).mtimeMs;
    console.log(`install-cni wrote the conflist ${Math.round(readyAt - conflistAt)} ms before weftd was ready; the kubelet `
      + `turned the node Ready ${Math.round(nodeReadyAt - conflistAt)} ms after the conflist, ${Math.round(nodeReadyAt - readyAt)} ms `
      + 'from weftd ready');
    console.log(`waiting_pods_after_network_ready_ms=${Math.max(0, Math.max(...running) - Math.max(readyAt, nodeReadyAt))} (from the `
      + 'later of weftd ready and the kubelet\'s node Ready)');
    const warnings = await doctorWarnings(c, n);
    for (const w of warnings) console.log(`doctor: ${w}`);

    await fixedAddressesOn(c, n);
    await runJob(c, n, JOB_PODS);
    const completed = await parked(n);
    await sleep(60_000);
    const held = await parked(n);
    console.log(`fixed addresses parked when the Job completed: ${completed}; a minute later: ${held}`);
    console.log(`apply_to_ready_ms=${applyToReady} waiting_pods_after_ready_ms=${afterReady} doctor_warnings_fresh=${warnings.length} `
      + `finished_pods_ips_held=${held} hook_overrun_ms=${hookOverrun}`);
  } finally {
    await c.stop();
  }
}

await main();
