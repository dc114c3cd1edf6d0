/**
 * flannel's extension and alloc backends end to end (test/support/cluster.ts), in etcd and kube
 * mode: extension nodes route each other's pods with the operator's commands (a script adding
 * host routes, as host-gw would), see the environment and standard input flanneld gives, and
 * survive a failing command, which is retried; alloc nodes take leases and touch nothing else.
 */
import assert from 'node:assert/strict';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { Etcd3 } from 'etcd3';
import { Cluster } from '../support/cluster.ts';
import type { Pod } from '../support/cluster.ts';
import { DEBIAN_CNI_DIR } from '../support/cni.ts';
import { needsRootAnd } from '../support/netns.ts';
import { until } from '../support/until.ts';

const skip = needsRootAnd(`${DEBIAN_CNI_DIR}/bridge`);

/** The operator's script: logs what it is given per node, and routes a subnet via its node's address. */
const SCRIPT = `#!/bin/sh
dir=$(dirname "$0")
log="$dir/$NODE_NAME.log"
case "$1" in
pre) echo "data-of-$NODE_NAME" ;;
post) echo "post NETWORK=$NETWORK SUBNET=$SUBNET IPV6SUBNET=$IPV6SUBNET PUBLIC_IP=$PUBLIC_IP" >> "$log" ;;
add)
  read -r data
  if [ -e "$dir/fail-add" ]; then echo "refusing $SUBNET"; exit 3; fi
  echo "add SUBNET=$SUBNET PUBLIC_IP=$PUBLIC_IP stdin=$data arg=$2" >> "$log"
  ip route replace "$SUBNET" via "$PUBLIC_IP" dev eth0 ;;
remove)
  read -r data
  echo "remove SUBNET=$SUBNET stdin=$data" >> "$log"
  ip route del "$SUBNET" ;;
esac
`;

for (const mode of ['etcd', 'kube'] as const) {
  test(`3 nodes, extension, ${mode}: commands with flannel's environment and input route the pods; a failing one is retried`, { skip, timeout: 120_000 }, async () => {
    let c: Cluster | undefined;
    const dir = await mkdtemp(join(tmpdir(), 'weft-ext-'));
    const script = join(dir, 'ext.sh');
    try {
      await writeFile(script, SCRIPT);
      await chmod(script, 0o755);
      await writeFile(join(dir, 'fail-add'), '');
      c = await Cluster.start({
        nodes: 3, backend: 'extension', mode,
        backendKeys: `"PreStartupCommand":"${script} pre","PostStartupCommand":"${script} post",` +
          `"SubnetAddCommand":"${script} add \${PUBLIC_IP}","SubnetRemoveCommand":"${script} remove"`,
      });
      const pods: Pod[] = [];
      for (const n of c.nodes) pods.push(await c.addPod(n));
      const n1 = c.nodes[0]!;
      await until('node-1 logs the failing add with its exit status', () => /SubnetAddCommand.*exit status 3.*refusing 10\.244\./.test(n1.daemon.log()), 15_000, n1.daemon.log);
      assert.equal(await c.ping(pods[0]!, pods[1]!), false);
      await rm(join(dir, 'fail-add'));
      for (const a of pods) for (const b of pods) if (a !== b) await c.waitPing(a, b);
      const log = await readFile(join(dir, 'node-1.log'), 'utf8');
      const own = (await c.subnetEnv(n1)).FLANNEL_SUBNET!.replace(/\.1\/24$/, '.0/24');
      const s2 = (await c.subnetEnv(c.nodes[1]!)).FLANNEL_SUBNET!.replace(/\.1\/24$/, '.0/24');
      assert.match(log, new RegExp(`^post NETWORK=10\\.244\\.0\\.0/16 SUBNET=${own} IPV6SUBNET= PUBLIC_IP=198\\.51\\.100\\.1$`, 'm'));
      assert.match(log, new RegExp(`^add SUBNET=${s2} PUBLIC_IP=198\\.51\\.100\\.2 stdin=data-of-node-2 arg=198\\.51\\.100\\.2$`, 'm'));
      assert.equal((await c.subnetEnv(n1)).FLANNEL_MTU, '1500');
      // node-3 leaves: the others run the remove command with what its add was given.
      const s3 = (await c.subnetEnv(c.nodes[2]!)).FLANNEL_SUBNET!.replace(/\.1\/24$/, '.0-24');
      await c.stopWeftd(c.nodes[2]!);
      if (c.etcd) {
        const etcd = new Etcd3({ hosts: c.etcd.endpoint });
        try {
          await etcd.delete().key(`/coreos.com/network/subnets/${s3}`);
        } finally {
          etcd.close();
        }
      }
      await c.api?.remove('/api/v1/nodes/node-3');
      await until('node-1 ran the remove of node-3', async () => /^remove SUBNET=10\.244\.\d+\.0\/24 stdin=data-of-node-3$/m.test(await readFile(join(dir, 'node-1.log'), 'utf8')), 15_000);
      assert.match(n1.daemon.log(), /ran SubnetAddCommand/);
    } finally {
      await c?.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });

  test(`3 nodes, alloc, ${mode}: leases and subnet.env, and nothing in the kernel`, { skip, timeout: 60_000 }, async () => {
    const c = await Cluster.start({ nodes: 3, backend: 'alloc', mode });
    try {
      const subnets = new Set<string>();
      for (const n of c.nodes) {
        const env = await c.subnetEnv(n);
        assert.equal(env.FLANNEL_MTU, '1500');
        subnets.add(env.FLANNEL_SUBNET!);
        assert.equal(await n.ns.ip('route', 'show', 'proto', '201'), '');
        assert.deepEqual((await n.ns.ipJson<{ ifname: string }[]>('link', 'show')).map((l) => l.ifname).sort(), ['eth0', 'lo']);
      }
      assert.equal(subnets.size, 3);
    } finally {
      await c.stop();
    }
  });
}
