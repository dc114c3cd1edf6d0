/**
 * make bench-fixed-release: what a node running Jobs keeps of its pods' fixed addresses (#41).
 * The real kube-apiserver (etcd + kube-apiserver v1.28.4 from ../shared/peers) holds 200 Job
 * pods bound to node-a; weftd's CNI server (this process, in kube mode: the Pods are asked and
 * this node's are watched) serves a node namespace, its config with `"fixedAddress": true`.
 * Twenty lanes play kubelet's part, each in a pod namespace of its own, one pod after another:
 * create the Pod, report it Running, ADD through the plugin the runtime executes (dist/weft-cni,
 * kubelet's CNI_ARGS), then finish it: report Succeeded and DEL its sandbox, in that order for
 * even pods and the other way round for odd ones (kubelet does either). A poller (every 20 ms)
 * notes when each finished pod's entry is released; a minute after the last pod finished, the
 * addresses still reserved for a pod are counted.
 *
 * Last line: finished_pods_release_p50_ms=<> finished_pods_release_p99_ms=<> finished_pods_release_max_ms=<>
 * finished_pods_ips_held=<n>, the release figures from the later of a pod's phase and its DEL to
 * its entry gone (nearest rank, bench/support/stats.ts); held: the address files still reserved
 * for a pod (`weft-fixed:` in host-local's store) a minute after the last pod finished.
 */
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { KubePods } from '../src/cni/kube-pods.ts';
import { silentLogger } from '../src/log.ts';
import { withNode, withPods } from '../test/support/cni-node.ts';
import type { CniNode } from '../test/support/cni-node.ts';
import { KubeControlPlane } from '../test/support/control-plane.ts';
import { weftClient } from '../test/support/control-plane-objects.ts';
import type { Netns } from '../test/support/netns.ts';
import { until } from '../test/support/until.ts';
import { percentile } from './support/stats.ts';

const PODS = 200;
const LANES = 20;
const HELD_AFTER_MS = 60_000;
const NS = 'bench';
const path = `/api/v1/namespaces/${NS}/pods`;
const JOB = { apiVersion: 'batch/v1', kind: 'Job', name: 'job', uid: '5f0c8a52-7d2e-4c1b-9a57-3b2f1e0c0001', controller: true };

/** Pod `name`'s fixed-address entry in the node's store. */
function entryFile(node: CniNode, name: string): string {
  return join(node.store, '.weft-fixed', `${NS}_${name}`);
}

const cp = await KubeControlPlane.start();
try {
  await cp.namespace(NS);
  const directory = new KubePods(await weftClient(cp), 'node-a', silentLogger);
  await withNode(async (node) => withPods(LANES, async (lanes) => {
    await node.serve({ directory });
    const conf = node.conf('1.0.0', { fixedAddress: true });
    const finishedAt = new Map<string, number>();
    const releasedAt = new Map<string, number>();
    const poller = setInterval(() => {
      for (const [name, at] of finishedAt) {
        if (!releasedAt.has(name) && !existsSync(entryFile(node, name))) releasedAt.set(name, performance.now() - at);
      }
    }, 20);
    try {
      let next = 0;
      await Promise.all(lanes.map(async (ns) => {
        while (next < PODS) await runJobPod(node, ns, conf, next++, finishedAt);
      }));
      await new Promise((resolve) => setTimeout(resolve, HELD_AFTER_MS));
    } finally {
      clearInterval(poller);
    }
    const reserved = (f: string) => !f.startsWith('.') && readFileSync(join(node.store, f), 'utf8').startsWith('weft-fixed:');
    const held = readdirSync(node.store).filter(reserved).length;
    const released = [...releasedAt.values()];
    const ms = (p: number) => (released.length === 0 ? 'none' : percentile(released, p).toFixed(0));
    const load = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
    console.log(`${PODS} Job pods finished, ${released.length} released; load average ${load}`);
    console.log(`finished_pods_release_p50_ms=${ms(50)} finished_pods_release_p99_ms=${ms(99)} finished_pods_release_max_ms=${ms(100)} `
      + `finished_pods_ips_held=${held}`);
  }));
} finally {
  await cp.stop();
}

/** One Job pod's life on node-a, as kubelet and the runtime live it; notes when it finished. */
async function runJobPod(node: CniNode, ns: Netns, conf: object, i: number, finishedAt: Map<string, number>): Promise<void> {
  const name = `job-${i}`;
  await cp.create(path, {
    apiVersion: 'v1', kind: 'Pod',
    metadata: { name, labels: { 'job-name': 'job' }, ownerReferences: [JOB] },
    spec: { nodeName: 'node-a', restartPolicy: 'Never', automountServiceAccountToken: false, containers: [{ name: 'c', image: 'i' }] },
  });
  const cni = async (command: string) => {
    const r = await node.plugin({
      containerId: name, ifname: 'eth0', netns: ns.path, command,
      env: { CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${NS};K8S_POD_NAME=${name};K8S_POD_INFRA_CONTAINER_ID=${name}` },
    }, conf);
    if (r.code !== 0) throw new Error(`${command} ${name}: ${r.stdout}`);
  };
  const phase = (p: string) => cp.mergePatch(`${path}/${name}/status`, { status: { phase: p } });
  await cni('ADD');
  await until(`${name}'s fixed-address entry`, () => existsSync(entryFile(node, name)));
  await phase('Running');
  if (i % 2 === 0) {
    await phase('Succeeded');
    await cni('DEL');
  } else {
    await cni('DEL');
    await phase('Succeeded');
  }
  finishedAt.set(name, performance.now());
}
