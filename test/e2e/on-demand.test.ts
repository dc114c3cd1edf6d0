/**
 * vxlan on-demand mode (--vxlan-on-demand, src/backend/on-demand.ts) on a cluster of real weftd
 * processes: pods reach each other, and a node's kernel holds entries only for the peers it sent
 * to, answered from the lease table when the vxlan device reports a miss.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Cluster } from '../support/cluster.ts';
import type { ClusterNode } from '../support/cluster.ts';
import { DEBIAN_CNI_DIR } from '../support/cni.ts';
import { needsRootAnd } from '../support/netns.ts';
import { weftctl } from '../support/weftctl.ts';

const skip = needsRootAnd(`${DEBIAN_CNI_DIR}/bridge`);

/** flannel.1's neighbour addresses and remote VTEPs of node `n`. */
async function entries(n: ClusterNode): Promise<{ neighs: string[]; fdb: string[]; routes: string[] }> {
  const neighs = (await n.ns.ipJson<{ dst: string }[]>('neigh', 'show', 'dev', 'flannel.1')).map((e) => e.dst).sort();
  const fdb = (await n.ns.bridgeJson<{ dst?: string }[]>('fdb', 'show', 'dev', 'flannel.1')).flatMap((e) => (e.dst ? [e.dst] : [])).sort();
  const routes = (await n.ns.ipJson<{ dst: string }[]>('route', 'show', 'proto', '201')).map((r) => r.dst).sort();
  return { neighs, fdb, routes };
}

test('vxlan on demand: pods reach each other; a node holds entries only for the peers it sent to', { skip, timeout: 180_000 }, async () => {
  const c = await Cluster.start({ nodes: 3, backend: 'vxlan', mode: 'etcd', weftdArgs: ['--vxlan-on-demand'] });
  try {
    const [a, b, cc] = c.nodes as [ClusterNode, ClusterNode, ClusterNode];
    const pods = [await c.addPod(a), await c.addPod(b), await c.addPod(cc)];
    assert.deepEqual((await entries(a)).routes, ['10.244.0.0/16'], 'one route for the whole network, none per peer');
    assert.deepEqual((await entries(a)).neighs, [], 'nothing before any traffic');

    await c.waitPing(pods[0]!, pods[1]!);
    const afterB = await entries(a);
    assert.deepEqual(afterB.neighs, [pods[1]!.ip], 'a neighbour entry for the one pod node 1 sent to');
    assert.deepEqual(afterB.fdb, [b.address], 'node 2\'s VTEP only');

    for (const x of pods) for (const y of pods) if (x !== y) await c.waitPing(x, y);
    assert.deepEqual((await entries(a)).fdb, [b.address, cc.address].sort());
    assert.match(a.daemon.log(), /on-demand mode/);
  } finally {
    await c.stop();
  }
});

test('vxlan on demand, dual stack: IPv6 misses are answered from the lease table too', { skip, timeout: 180_000 }, async () => {
  const c = await Cluster.start({ nodes: 3, backend: 'vxlan', mode: 'etcd', dualStack: true, weftdArgs: ['--vxlan-on-demand'] });
  try {
    const [a, b, cc] = c.nodes as [ClusterNode, ClusterNode, ClusterNode];
    const pods = [await c.addPod(a), await c.addPod(b), await c.addPod(cc)];
    const v6 = async (n: ClusterNode) => ({
      neighs: (await n.ns.ipJson<{ dst: string }[]>('-6', 'neigh', 'show', 'dev', 'flannel-v6.1')).map((e) => e.dst).sort(),
      fdb: (await n.ns.bridgeJson<{ dst?: string }[]>('fdb', 'show', 'dev', 'flannel-v6.1')).flatMap((e) => (e.dst ? [e.dst] : [])),
    });
    const underlay6 = async (n: ClusterNode) => (await n.ns.ipJson<{ addr_info: { local: string; scope: string }[] }[]>('-6', 'addr', 'show', 'dev', 'eth0'))[0]!.addr_info.find((i) => i.scope === 'global')!.local;
    assert.deepEqual(await v6(a), { neighs: [], fdb: [] }, 'nothing on flannel-v6.1 before any traffic');

    await c.waitPing(pods[0]!, pods[1]!, true);
    const after = await v6(a);
    assert.deepEqual(after.neighs, [pods[1]!.ipv6], 'a neighbour entry for the one pod node 1 sent to over IPv6');
    assert.deepEqual(after.fdb, [await underlay6(b)], 'node 2\'s IPv6 VTEP only');
    assert.deepEqual((await entries(a)).neighs, [], 'no IPv4 entry: nothing was sent over IPv4');

    for (const x of pods) for (const y of pods) if (x !== y) await c.waitPing(x, y, true);
    for (const x of pods) for (const y of pods) if (x !== y) await c.waitPing(x, y);
    assert.deepEqual((await v6(a)).fdb.sort(), [await underlay6(b), await underlay6(cc)].sort());
    // The kernel holds what weftd wants, the IPv6 network's route included (IPv6 routes have no
    // scope of their own: one wanted with scope link was written again on every pass).
    const diff = await weftctl(c, a, 'diff');
    assert.equal(diff.code, 0, diff.stdout + diff.stderr);
  } finally {
    await c.stop();
  }
});
