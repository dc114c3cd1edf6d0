/**
 * Clusters of real weftd processes on this machine (test/support/cluster.ts): pods made by the
 * real bin/weft reach each other across nodes; the cluster heals and holds through a node
 * leaving, a SIGKILLed weftd, an etcd outage and a flapping external interface.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { Etcd3 } from 'etcd3';
import { Cluster, WEFTD_BIN } from '../support/cluster.ts';
import type { ClusterNode, Pod } from '../support/cluster.ts';
import { DEBIAN_CNI_DIR } from '../support/cni.ts';
import { needsRoot } from '../support/netns.ts';
import { until } from '../support/until.ts';

const skip = needsRoot || (existsSync(`${DEBIAN_CNI_DIR}/bridge`) ? false : `the reference CNI plugins are missing in ${DEBIAN_CNI_DIR} (run make deps)`);
const PREFIX = '/coreos.com/network';
const P = 'flannel.alpha.coreos.com';

async function fullMesh(c: Cluster, pods: Pod[], v6: boolean): Promise<void> {
  for (const a of pods) for (const b of pods) if (a !== b) await c.waitPing(a, b, v6);
}

async function podRoutes(c: Cluster, nodeIndex: number): Promise<string[]> {
  const routes = await c.nodes[nodeIndex]!.ns.ipJson<{ dst: string; protocol?: string }[]>('route', 'show', 'proto', '201');
  return routes.map((r) => r.dst).sort();
}

for (const backend of ['vxlan', 'host-gw'] as const) {
  for (const dualStack of [false, true]) {
    test(`3 nodes, ${backend}, ${dualStack ? 'dual stack' : 'IPv4'}: pods wired by weftd behind the native plugin reach every other node's pods`, { skip, timeout: 180_000 }, async () => {
      const c = await Cluster.start({ nodes: 3, backend, dualStack, mode: 'etcd', weftdArgs: ['--healthz-ip=127.0.0.1', '--healthz-port=8081', '--ip-masq', '--ip-blackhole-route'] });
      try {
        const pods = [];
        for (const n of c.nodes) pods.push(await c.addPod(n));
        for (const [i, p] of pods.entries()) {
          const log = c.nodes[i]!.daemon.log();
          assert.match(log, new RegExp(`wired pod .*container=${p.id} `), `weftd on ${c.nodes[i]!.name} wired ${p.id} itself`);
          assert.doesNotMatch(log, /left to the fallback/);
        }
        const mtu = backend === 'vxlan' ? (dualStack ? 1430 : 1450) : 1500;
        for (const [i, p] of pods.entries()) {
          const v6 = dualStack ? 'FLANNEL_IPV6_NETWORK=fd00:10:244::/56\nFLANNEL_IPV6_SUBNET=fd00:10:244:[0-9a-f]+::1/64\n' : '';
          assert.match(await readFile(join(c.nodes[i]!.dir, 'subnet.env'), 'utf8'), new RegExp(`^FLANNEL_NETWORK=10\\.244\\.0\\.0/16\nFLANNEL_SUBNET=10\\.244\\.\\d+\\.1/24\n${v6}FLANNEL_MTU=${mtu}\nFLANNEL_IPMASQ=true\n$`));
          const env = await c.subnetEnv(c.nodes[i]!);
          assert.equal(p.ip.split('.').slice(0, 3).join('.'), env.FLANNEL_SUBNET!.split('.').slice(0, 3).join('.'), 'the pod is in its node\'s subnet');
          if (dualStack) assert.ok(p.ipv6?.startsWith('fd00:10:244:'), `pod IPv6 ${p.ipv6}`);
        }
        // Every node keeps a blackhole for its own subnet, which must not shadow its own pods.
        await fullMesh(c, pods, false);
        if (dualStack) await fullMesh(c, pods, true);
        const own = (await c.subnetEnv(c.nodes[0]!)).FLANNEL_SUBNET!.replace(/\.1\/24$/, '.0/24');
        assert.match(await c.nodes[0]!.ns.ip('route', 'show', 'type', 'blackhole', 'proto', '201'), new RegExp(`^blackhole ${own.replaceAll('.', '\\.')} metric 4294967295`, 'm'));
        const [eth0] = await pods[0]!.ns.ipJson<{ mtu: number }[]>('link', 'show', 'eth0');
        assert.equal(eth0!.mtu, mtu);
        const readyz = await c.nodes[0]!.ns.exec('curl', '-s', '-w', ' %{http_code}', 'http://127.0.0.1:8081/readyz');
        assert.equal(readyz, 'weftd is ready\n 200');
        const metrics = await c.nodes[0]!.ns.exec('curl', '-s', 'http://127.0.0.1:8081/metrics');
        assert.match(metrics, /^weft_leases 2$/m);

        // --ip-masq: the rules are in place (pods above still reach each other unmasqueraded).
        // SIGTERM: weftd exits 0 and leaves the data plane, rules included; pods keep talking.
        // --cleanup-traffic-rules removes the rules; restarted, weftd has the same subnet.
        const n1 = c.nodes[0]!;
        const subnet = (await c.subnetEnv(n1)).FLANNEL_SUBNET;
        const routes = await podRoutes(c, 0);
        assert.match(await n1.ns.exec('nft', 'list', 'table', 'inet', 'weft'), /ip saddr 10\.244\.0\.0\/16 ip daddr != 224\.0\.0\.0\/4 masquerade/);
        assert.equal(await c.stopWeftd(n1), 0);
        assert.match(n1.daemon.log(), /Exiting cleanly/);
        assert.deepEqual(await podRoutes(c, 0), routes, 'routes stay after weftd exits');
        assert.ok(await c.ping(pods[0]!, pods[1]!), 'pods keep talking after weftd exits');
        await n1.ns.exec('nft', 'list', 'table', 'inet', 'weft');
        await n1.ns.exec(WEFTD_BIN, '--cleanup-traffic-rules');
        await assert.rejects(n1.ns.exec('nft', 'list', 'table', 'inet', 'weft'), 'the table is gone after the cleanup');
        await c.restartWeftd(n1);
        assert.equal((await c.subnetEnv(n1)).FLANNEL_SUBNET, subnet, 'same subnet after a restart');
      } finally {
        await c.stop();
      }
    });
  }
}

test('a node leaves (its lease deleted): its routes disappear on the others; a SIGKILLed weftd restarts on the same subnet without touching a route, and drops a peer that left meanwhile', { skip, timeout: 180_000 }, async () => {
  const c = await Cluster.start({ nodes: 3, backend: 'host-gw', mode: 'etcd' });
  const admin = new Etcd3({ hosts: c.etcd!.endpoint });
  try {
    const [n1, n2, n3] = c.nodes as [typeof c.nodes[0], typeof c.nodes[0], typeof c.nodes[0]];
    const env3 = await c.subnetEnv(n3!);
    const subnet3 = env3.FLANNEL_SUBNET!.replace(/\.1\/24$/, '.0/24');
    // node-1 may have been ready before node-3 took its lease: the route comes with the watch event.
    await until(`the route to ${subnet3} on node 1`, async () => (await podRoutes(c, 0)).includes(subnet3), 20_000);

    // n3 leaves: its weftd stops and its lease is deleted (what an operator or the TTL does).
    await c.stopWeftd(n3!);
    await admin.delete().key(`${PREFIX}/subnets/${subnet3.replace('/', '-')}`);
    for (const i of [0, 1]) {
      await until(`the route to ${subnet3} gone from node ${i + 1}`, async () => !(await podRoutes(c, i)).includes(subnet3), 20_000);
    }

    // n1 is SIGKILLed; while it is down n2's lease goes away; n1 comes back.
    const env1 = await c.subnetEnv(n1!);
    const before = await podRoutes(c, 0);
    const monitor = spawn('ip', ['-n', n1!.ns.name, 'monitor', 'route'], { stdio: ['ignore', 'pipe', 'ignore'] });
    let events = '';
    monitor.stdout.on('data', (d: Buffer) => (events += d.toString()));
    try {
      await c.stopWeftd(n1!, 'SIGKILL');
      await c.restartWeftd(n1!);
      assert.equal((await c.subnetEnv(n1!)).FLANNEL_SUBNET, env1.FLANNEL_SUBNET, 'same subnet after a restart');
      assert.deepEqual(await podRoutes(c, 0), before);
      await new Promise((r) => setTimeout(r, 300));
      assert.doesNotMatch(events, /^Deleted /m, `a restart removes no route:\n${events}`);
      assert.doesNotMatch(events, /proto 201/, `a restart re-adds no route:\n${events}`);

      const subnet2 = (await c.subnetEnv(n2!)).FLANNEL_SUBNET!.replace(/\.1\/24$/, '.0/24');
      await c.stopWeftd(n1!, 'SIGKILL');
      // n2 leaves for good (a running weftd would re-acquire a deleted lease at once).
      await c.stopWeftd(n2!);
      await admin.delete().key(`${PREFIX}/subnets/${subnet2.replace('/', '-')}`);
      await c.restartWeftd(n1!);
      assert.ok(!(await podRoutes(c, 0)).includes(subnet2), 'the peer that left while weftd was down is gone after the restart');
    } finally {
      monitor.kill();
    }
  } finally {
    admin.close();
    await c.stop();
  }
});

test('etcd down for 30 s: pods keep talking; a node joining after recovery is reached by all', { skip, timeout: 240_000 }, async () => {
  const c = await Cluster.start({ nodes: 2, backend: 'vxlan', mode: 'etcd' });
  try {
    const pods = [await c.addPod(c.nodes[0]!), await c.addPod(c.nodes[1]!)];
    await fullMesh(c, pods, false);
    await c.etcd!.pause();
    const until = Date.now() + 30_000;
    let pings = 0;
    while (Date.now() < until) {
      assert.ok(await c.ping(pods[0]!, pods[1]!), `pod traffic stopped ${Math.round((30_000 - (until - Date.now())) / 1000)} s into the etcd outage`);
      pings++;
      await new Promise((r) => setTimeout(r, 1000));
    }
    assert.ok(pings >= 10);
    await c.etcd!.resume();

    // A change after the recovery: a third node joins, and the first two route to it.
    await c.addNode();
    const third = await c.addPod(c.nodes[2]!);
    await c.waitPing(pods[0]!, third, false, 30_000);
    await c.waitPing(third, pods[1]!, false, 30_000);
  } finally {
    await c.stop();
  }
});

test('two nodes, kube mode: weftd takes the pod CIDR nodeipam gave its Node, publishes flannel\'s annotations and the condition, '
  + 'routes to the other Node until it is deleted', { skip, timeout: 120_000 }, async () => {
  const c = await Cluster.start({ nodes: 2, backend: 'vxlan', mode: 'kube' });
  try {
    const [n1, n2] = c.nodes as [ClusterNode, ClusterNode];
    for (const n of c.nodes) assert.equal((await c.subnetEnv(n)).FLANNEL_SUBNET, n.podCidrs[0]!.replace(/\.0\/24$/, '.1/24'));
    const node = (await c.api!.node(n1.name))!;
    const [vtep] = await n1.ns.ipJson<{ address: string }[]>('link', 'show', 'flannel.1');
    assert.deepEqual((node.metadata as { annotations: Record<string, string> }).annotations, {
      [`${P}/backend-type`]: 'vxlan',
      [`${P}/backend-data`]: `{"VNI":1,"VtepMAC":"${vtep!.address}"}`,
      [`${P}/public-ip`]: n1.address,
      [`${P}/kube-subnet-manager`]: 'true',
    });
    const conditions = (node.status as { conditions: Record<string, unknown>[] }).conditions;
    assert.deepEqual(conditions.map((x) => [x.type, x.status, x.reason]), [['NetworkUnavailable', 'False', 'FlannelIsUp']]);
    await fullMesh(c, [await c.addPod(n1), await c.addPod(n2)], false);

    await c.api!.remove(`/api/v1/nodes/${n2.name}`);
    await until(`the route to ${n2.name} gone from ${n1.name}`, async () => (await podRoutes(c, 0)).length === 0, 20_000);
  } finally {
    await c.stop();
  }
});

test('the external interface flaps: host-gw routes the kernel dropped with it come back, and pods talk again', { skip, timeout: 120_000 }, async () => {
  const c = await Cluster.start({ nodes: 2, backend: 'host-gw', mode: 'kube' });
  try {
    const pods = [await c.addPod(c.nodes[0]!), await c.addPod(c.nodes[1]!)];
    await fullMesh(c, pods, false);
    const before = await podRoutes(c, 0);
    await c.nodes[0]!.ns.ip('link', 'set', 'eth0', 'down');
    assert.deepEqual(await podRoutes(c, 0), [], 'the kernel drops routes through a downed interface');
    await c.nodes[0]!.ns.ip('link', 'set', 'eth0', 'up');
    await fullMesh(c, pods, false);
    assert.deepEqual(await podRoutes(c, 0), before);
  } finally {
    await c.stop();
  }
});
