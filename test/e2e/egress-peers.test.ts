/**
 * The gateways' liveness over the underlay (issue #40): weftd with --egress-peer-key-file on a
 * kube-mode cluster of real weftd processes (test/support/egress-cluster.ts), the API server cut
 * from every node or from one, and a gateway cut from its peers.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import type { ClusterNode } from '../support/cluster.ts';
import type { Obj } from '../support/control-plane.ts';
import { DEBIAN_CNI_DIR } from '../support/cni.ts';
import { EgressCluster } from '../support/egress-cluster.ts';
import { apiOutage, cutFromPeers, firstAbsence, peerKeyArgs, waitVouchedFor } from '../support/egress-peers.ts';
import { needsRootAnd } from '../support/netns.ts';
import { until } from '../support/until.ts';

/** weftd's default --egress-liveness-timeout. */
const LIVENESS_MS = 3000;
const EIP = '198.51.100.100';
const skip = needsRootAnd(`${DEBIAN_CNI_DIR}/bridge`);

/** Sets `n`'s Node Ready condition to Unknown through its status, as the node lifecycle controller does for a node not heard from. */
async function readyUnknown(e: EgressCluster, n: ClusterNode): Promise<void> {
  await e.c.api!.modify(`/api/v1/nodes/${n.name}`, (node) => {
    const s = (node.status ??= {}) as Obj;
    const others = ((s.conditions ?? []) as Obj[]).filter((x) => x.type !== 'Ready');
    s.conditions = [...others, { type: 'Ready', status: 'Unknown', reason: 'NodeStatusUnknown' }];
  }, '/status');
}

test('egress underlay liveness: a 30 s API outage withdraws no EIP; a gateway cut from the API only keeps it and nothing moves, '
  + 'its Node NotReady or not; '
  + 'cut from its peers too, it drops it within the bound and the other gateway takes it; never two answering',
{ skip, timeout: 360_000 }, async () => {
  const dir = await mkdtemp(join(tmpdir(), 'weft-egress-peers-'));
  const e = await EgressCluster.start({ nodes: 4, backend: 'vxlan', weftdArgs: await peerKeyArgs(dir) });
  try {
    const [leader, client, g1, g2] = e.c.nodes as [ClusterNode, ClusterNode, ClusterNode, ClusterNode];
    await e.electOn(leader);
    for (const g of [g1, g2]) await e.label(g, { 'egress.weft.dev/gateway': 'true' });
    const pod = await e.addPod(client, { app: 'a' });
    await e.gateway('gw', { nodeSelector: { matchLabels: { 'egress.weft.dev/gateway': 'true' } }, eipPool: { ipv4: [EIP] } });
    await e.policy('a', { gateway: 'gw', podSelector: { matchLabels: { app: 'a' } } });
    await e.waitSeenAs(pod, EIP);
    const [from, to] = (await e.policyStatus('a')).node === g1.name ? [g1, g2] : [g2, g1];
    await waitVouchedFor(e, from, [leader, to]);
    const watch = e.watchAnswers(EIP);
    let answers;
    try {
      // Every node cut from the API server for 30 s: the gateways see each other, so the EIP stays on its node throughout.
      let absent: number | undefined;
      await apiOutage(e, 30_000, async () => {
        absent = await firstAbsence(e, from, EIP, 29_000);
      });
      assert.equal(absent, undefined, `the EIP left ${from.name} ${absent} ms into the API outage\n${from.daemon.log().slice(-3000)}`);
      await e.waitSeenAs(pod, EIP);
      assert.equal((await e.policyStatus('a')).node, from.name, 'the outage moved policy a');

      // Cut from the API only: its peers still see it, so it keeps the EIP and the controller moves nothing,
      // also once its Node is NotReady (Ready Unknown, as the node lifecycle controller marks a node whose kubelet is cut off).
      await waitVouchedFor(e, from, [leader, to]);
      await e.c.cutFromApi(from);
      await readyUnknown(e, from);
      absent = await firstAbsence(e, from, EIP, 4 * LIVENESS_MS);
      assert.equal(absent, undefined, `${from.name}, cut from the API only, dropped the EIP after ${absent} ms`);
      assert.equal((await e.policyStatus('a')).node, from.name, 'the controller moved the EIP of a gateway its peers see');
      assert.match(leader.daemon.log(), /a gateway's heartbeat is quiet but its peers may still see it/);

      // Cut from its peers too: it drops the EIP within the bound, and only then does the other gateway take it.
      await cutFromPeers(from);
      await until(`${from.name} drops the EIP`, async () => !(await e.holds(from, EIP)), 2 * LIVENESS_MS,
        () => from.daemon.log().slice(-3000));
      await until(`policy a moved to ${to.name}`, async () => (await e.policyStatus('a')).node === to.name, 30_000,
        () => leader.daemon.log().slice(-3000));
      await until(`${to.name} holding the EIP`, () => e.holds(to, EIP), 10_000, () => to.daemon.log().slice(-6000));
      await e.waitSeenAs(pod, EIP);
      assert.match(leader.daemon.log(), /a quiet gateway's peers do not see it: its EIPs lapsed and move/);
    } finally {
      answers = await watch.stop();
    }
    assert.equal(answers.dualMs, 0, `two MACs answered for the EIP:\n${answers.dual.join('\n')}`);
    assert.equal(answers.macs.size, 2, `the outside host saw ${[...answers.macs].join(', ')} in ${answers.probes} probes`);
  } finally {
    await e.stop();
    await rm(dir, { recursive: true, force: true });
  }
});
