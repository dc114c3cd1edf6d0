/**
 * make demo: a 3-node Weft cluster on this machine (test/support/cluster.ts): an etcd, three node
 * namespaces on an underlay bridge each running bin/weftd with the vxlan backend, one pod per node
 * wired by bin/weft. Prints the nodes, subnets and pods, a cross-node ping matrix and what
 * `weftctl status` and `weftctl doctor` say on node-1, then keeps running until Ctrl-C (or
 * SIGTERM), removes everything it made and exits 0.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Cluster } from '../test/support/cluster.ts';
import type { ClusterNode } from '../test/support/cluster.ts';

const WEFTCTL = fileURLToPath(new URL('../bin/weftctl', import.meta.url));

/** `weftctl <verb>` inside `node`'s namespace: its output, whatever its exit status. */
function weftctl(node: ClusterNode, verb: string): Promise<string> {
  return new Promise((resolve) => {
    execFile('ip', ['netns', 'exec', node.ns.name, WEFTCTL, `--subnet-file=${join(node.dir, 'subnet.env')}`, verb], (_e, stdout, stderr) => resolve(`${stdout}${stderr}`.trimEnd()));
  });
}

const backend = process.env.WEFT_DEMO_BACKEND === 'host-gw' ? 'host-gw' : 'vxlan';
console.log(`starting etcd and 3 nodes running weftd (${backend}); this takes a few seconds...`);
const cluster = await Cluster.start({ nodes: 3, backend, mode: 'etcd' });
let stopping: Promise<void> | undefined;
const stop = (why: string) => {
  stopping ??= (async () => {
    console.log(`\n${why}: removing the cluster...`);
    await cluster.stop();
    console.log('removed the namespaces, weftd processes, etcd and files of the demo');
  })();
  return stopping;
};
process.on('SIGINT', () => void stop('Ctrl-C'));
process.on('SIGTERM', () => void stop('SIGTERM'));

try {
  const pods = [];
  for (const node of cluster.nodes) pods.push(await cluster.addPod(node));
  const pad = (s: string, n: number) => s.padEnd(n);
  console.log(`\n${pad('NODE', 8)} ${pad('UNDERLAY', 15)} ${pad('SUBNET', 16)} ${pad('BACKEND', 8)} ${pad('MTU', 5)} POD IP`);
  for (const [i, node] of cluster.nodes.entries()) {
    const env = await cluster.subnetEnv(node);
    console.log(`${pad(node.name, 8)} ${pad(node.address, 15)} ${pad(env.FLANNEL_SUBNET!, 16)} ${pad(backend, 8)} ${pad(env.FLANNEL_MTU!, 5)} ${pods[i]!.ip}`);
  }
  console.log('\ncross-node pings (pod → pod):');
  let failures = 0;
  for (const from of pods) {
    for (const to of pods) {
      if (from === to) continue;
      let ok = false;
      for (let attempt = 0; attempt < 10 && !ok; attempt++) ok = await cluster.ping(from, to);
      if (!ok) failures++;
      console.log(`  ${from.node.name} ${pad(from.ip, 13)} → ${to.node.name} ${pad(to.ip, 13)} ${ok ? 'ok' : 'FAILED'}`);
    }
  }
  const first = cluster.nodes[0]!;
  for (const verb of ['status', 'doctor']) console.log(`\n$ weftctl ${verb}   (on ${first.name})\n${await weftctl(first, verb)}`);
  console.log(failures === 0 ? '\nall pods reach each other. Press Ctrl-C to stop and clean up.' : `\n${failures} pings failed. Press Ctrl-C to stop and clean up.`);
  process.exitCode = failures === 0 ? 0 : 1;
  await new Promise<void>((resolve) => {
    const timer = setInterval(() => undefined, 1 << 30);
    const done = () => {
      clearInterval(timer);
      resolve();
    };
    process.once('SIGINT', done);
    process.once('SIGTERM', done);
  });
  await stopping;
} catch (e) {
  await stop(`failed: ${(e as Error).message}`);
  process.exitCode = 1;
}
