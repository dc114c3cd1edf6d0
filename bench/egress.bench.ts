/**
 * make bench-egress: egress gateways on the e2e cluster harness (test/support/egress-cluster.ts:
 * 4 kube-mode nodes, vxlan, weftd with --egress-gateways, the controller elected among them, an
 * outside host reporting the source address of each connection). The pod's node and the two
 * gateway candidates are nodes other than the controller's.
 *
 * - policy_ready_ms: from creating an EgressPolicy to the first connection the outside host sees
 *   from the EIP (median of 3: the policy deleted and its pod back to its node's address between);
 * - failover_ms: from SIGKILLing the gateway node's weftd and cutting its link to the first
 *   connection seen from the EIP again, through the other gateway node;
 * - egress_ratio: iperf3 TCP throughput (3 s) of a selected pod to the outside host, through the
 *   gateway, over that of an unselected pod on the same node, direct.
 *
 * Needs root. Last line: policy_ready_ms=<> failover_ms=<> egress_ratio=<>
 *
 * Medians as bench/support/stats.ts defines them: of an even count, the mean of the middle two.
 */
import { performance } from 'node:perf_hooks';
import type { ClusterNode, Pod } from '../test/support/cluster.ts';
import { EgressCluster, OUTSIDE, iperf3 } from '../test/support/egress-cluster.ts';
import { until } from '../test/support/until.ts';
import { median } from './support/stats.ts';

const EIP = '198.51.100.100';

/**
 * ms from `t0` until `pod` is seen outside as `source`: polled with connections given 200 ms
 * each, so one lost in the switch costs at most that much of the figure.
 */
async function timeUntilSeen(e: EgressCluster, pod: Pod, source: string, t0: number): Promise<number> {
  await until(`${pod.id} seen as ${source}`, async () => (await e.seenFrom(pod, false, 0.2)) === source, 60_000);
  return performance.now() - t0;
}

const e = await EgressCluster.start({ nodes: 4, backend: 'vxlan' });
try {
  await until('an egress controller elected', () => e.leader !== undefined, 30_000);
  const [client, g1, g2] = e.c.nodes.filter((n) => n.name !== e.leader) as [ClusterNode, ClusterNode, ClusterNode];
  for (const g of [g1, g2]) e.label(g, { 'egress.weft.dev/gateway': 'true' });
  const pod = await e.addPod(client, { app: 'a' });
  const direct = await e.addPod(client, { app: 'direct' });
  e.gateway('gw', { nodeSelector: { matchLabels: { 'egress.weft.dev/gateway': 'true' } }, eipPool: { ipv4: [EIP] } });
  await e.waitSeenAs(pod, client.address);

  const ready: number[] = [];
  for (let i = 0; i < 3; i++) {
    const t0 = performance.now();
    e.policy('a', { gateway: 'gw', podSelector: { matchLabels: { app: 'a' } } });
    ready.push(await timeUntilSeen(e, pod, EIP, t0));
    console.log(`round ${i + 1}: policy ready in ${Math.round(ready.at(-1)!)} ms`);
    if (i < 2) {
      e.removePolicy('a');
      await e.waitSeenAs(pod, client.address);
    }
  }

  const viaGateway = await iperf3(e.outside, pod.ns, OUTSIDE.ipv4);
  const viaNode = await iperf3(e.outside, direct.ns, OUTSIDE.ipv4);
  console.log(`iperf3: ${(viaGateway / 1e9).toFixed(2)} Gbit/s through the gateway, ${(viaNode / 1e9).toFixed(2)} Gbit/s direct`);

  const gateway = e.policyStatus('a').node === g1.name ? g1 : g2;
  const t0 = performance.now();
  await e.c.stopWeftd(gateway, 'SIGKILL');
  await gateway.ns.ip('link', 'set', 'eth0', 'down');
  const failover = await timeUntilSeen(e, pod, EIP, t0);
  console.log(`failover from ${gateway.name}: ${Math.round(failover)} ms`);

  console.log(`policy_ready_ms=${Math.round(median(ready))} failover_ms=${Math.round(failover)} egress_ratio=${(viaGateway / viaNode).toFixed(2)}`);
} finally {
  await e.stop();
}
