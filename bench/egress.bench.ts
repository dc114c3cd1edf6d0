/**
 * make bench-egress: egress gateways on the e2e cluster harness (test/support/egress-cluster.ts:
 * 4 kube-mode nodes, vxlan, weftd with --egress-gateways, an outside host reporting the source
 * address of each connection). One node is made the controller (the only one that can be a
 * gateway when the election runs: EgressCluster.electOn); the pod's node and the two gateway
 * nodes of the policy are the others.
 *
 * - policy_ready_ms: from creating an EgressPolicy to the first connection the outside host sees
 *   from the EIP (median of 3: the policy deleted and its pod back to its node's address between);
 * - egress_ratio: iperf3 TCP throughput (3 s) of a selected pod to the outside host, through the
 *   gateway, over that of an unselected pod on the same node, direct: median of 5 pairs, the two
 *   of a pair run back to back;
 * - failover_ms, failover_kill_ms: medians of 5 failovers by link cut and 5 by weftd kill
 *   (bench/support/egress.ts), from the cut or kill to the first connection seen from the EIP
 *   again, through the other gateway node;
 * - dual_answer_ms: over those 10 failovers, the ms in which the outside host's ARP probes for the
 *   EIP got answers from two MACs;
 * - stall_withdrawn: policies whose placement changed during a 10 s API stall (kube-apiserver
 *   frozen) or the 5 s after;
 * - leader_overlap_ms: ms two controllers acted at once in the forced overlap (a leader paused
 *   with SIGSTOP past its deadline, then resumed);
 * - eips40_failover_ms: 40 policies of a gateway whose only node is the first gateway node, their
 *   40 EIPs all there, the second node then added; the first node's weftd killed (SIGKILL): ms
 *   until the outside host, probing every EIP every 50 ms (ARP), saw each answered by the second
 *   node alone (the latest of the 40); eips40_dual_answer_ms: ms in which one of them was
 *   answered by two MACs meanwhile;
 * - api_latency1s_nokey_lost_pct: every node's API requests made 1 s slower (500 ms each way) for
 *   60 s at the default liveness timeout, without the underlay liveness (no --egress-peer-key-file):
 *   the per cent of the outside host's 50 ms probes of the 41 EIPs that nobody answered. The API
 *   heartbeat alone cannot hold an EIP through it (README); bench-egress-peers measures
 *   api_latency1s_lost_pct with the underlay liveness.
 *
 * Needs root. Last line: policy_ready_ms=<> failover_ms=<> failover_kill_ms=<> dual_answer_ms=<>
 * stall_withdrawn=<> egress_ratio=<> leader_overlap_ms=<> eips40_failover_ms=<> eips40_dual_answer_ms=<>
 * api_latency1s_nokey_lost_pct=<>
 *
 * Medians as bench/support/stats.ts defines them: of an even count, the mean of the middle two.
 */
import { performance } from 'node:perf_hooks';
import type { ClusterNode, Pod } from '../test/support/cluster.ts';
import { EgressCluster, OUTSIDE, iperf3 } from '../test/support/egress-cluster.ts';
import { until } from '../test/support/until.ts';
import { failovers, leaderOverlapMs, manyEipsFailover, slowApiLostPct, stallWithdrawn } from './support/egress.ts';
import { median } from './support/stats.ts';

const EIP = '198.51.100.100';
const MANY = Array.from({ length: 40 }, (_, i) => `198.51.100.${130 + i}`);

/**
 * ms from `t0` until `pod` is seen outside as `source`: polled with connections given 200 ms
 * each, so one lost in the switch costs at most that much of the figure.
 */
async function timeUntilSeen(e: EgressCluster, pod: Pod, source: string, t0: number): Promise<number> {
  await until(`${pod.id} seen as ${source}`, async () => (await e.seenFrom(pod, false, 0.2)) === source, 60_000);
  return performance.now() - t0;
}

/**
 * Runs an API write until it is done: on a loaded machine etcd times some out (500), and one that
 * was stored anyway answers 409 when tried again.
 */
async function settled(what: string, write: () => Promise<unknown>): Promise<void> {
  await until(what, () => write().then(() => true, (err: { status?: number }) => err.status === 409), 60_000);
}

const overlap = await leaderOverlapMs();
const e = await EgressCluster.start({ nodes: 4, backend: 'vxlan', apiDelay: true });
try {
  const [leader, client, g1, g2] = e.c.nodes as [ClusterNode, ClusterNode, ClusterNode, ClusterNode];
  await e.electOn(leader);
  for (const g of [g1, g2]) await e.label(g, { 'egress.weft.dev/gateway': 'true' });
  const pod = await e.addPod(client, { app: 'a' });
  const direct = await e.addPod(client, { app: 'direct' });
  await e.gateway('gw', { nodeSelector: { matchLabels: { 'egress.weft.dev/gateway': 'true' } }, eipPool: { ipv4: [EIP] } });
  await e.waitSeenAs(pod, client.address);

  const ready: number[] = [];
  for (let i = 0; i < 3; i++) {
    const t0 = performance.now();
    await e.policy('a', { gateway: 'gw', podSelector: { matchLabels: { app: 'a' } } });
    ready.push(await timeUntilSeen(e, pod, EIP, t0));
    console.log(`round ${i + 1}: policy ready in ${Math.round(ready.at(-1)!)} ms`);
    if (i < 2) {
      await e.removePolicy('a');
      await e.waitSeenAs(pod, client.address);
    }
  }

  const ratios: number[] = [];
  for (let i = 0; i < 5; i++) {
    const viaGateway = await iperf3(e.outside, pod.ns, OUTSIDE.ipv4);
    const viaNode = await iperf3(e.outside, direct.ns, OUTSIDE.ipv4);
    ratios.push(viaGateway / viaNode);
    console.log(`iperf3 pair ${i + 1}: ${(viaGateway / 1e9).toFixed(2)} Gbit/s through the gateway, ${(viaNode / 1e9).toFixed(2)} Gbit/s direct`);
  }

  const f = await failovers(e, {
    rounds: 5, eip: EIP, gateways: [g1, g2], node: async () => (await e.policyStatus('a')).node,
    reached: (t0) => timeUntilSeen(e, pod, EIP, t0),
  });
  const withdrawn = await stallWithdrawn(e, ['a'], async () => {
    const status = await e.policyStatus('a');
    return JSON.stringify([status.node, status.eip]);
  });
  await e.waitSeenAs(pod, EIP);

  await settled('label many', () => e.label(g1, { 'egress.weft.dev/many': 'true' }));
  await settled('gateway many', () => e.gateway('many', {
    nodeSelector: { matchLabels: { 'egress.weft.dev/many': 'true' } }, eipPool: { ipv4: [`${MANY[0]}-${MANY.at(-1)}`] },
  }));
  for (const [i] of MANY.entries()) {
    await settled(`policy m${i}`, () => e.policy(`m${i}`, { gateway: 'many', podSelector: { matchLabels: { app: `m${i}` } } }));
  }
  await until(`${g1.name} holding the 40 EIPs`, async () => (await Promise.all(MANY.map((a) => e.holds(g1, a)))).every(Boolean), 120_000,
    () => g1.daemon.log().split('\n').filter((l) => /egress/.test(l)).slice(-40).join('\n'));
  await settled('label many', () => e.label(g2, { 'egress.weft.dev/many': 'true' }));
  await until('gateway many on both nodes', async () =>
    ((await e.c.api!.request('GET', '/apis/egress.weft.dev/v1alpha1/egressgateways/many'))?.status as { nodes?: unknown[] } | undefined)
      ?.nodes?.length === 2, 30_000);
  const many = await manyEipsFailover(e, { eips: MANY, from: g1, to: g2 });
  console.log(`40 EIPs: all answered by ${g2.name} ${many.failoverMs} ms after the kill; two MACs for ${many.dualMs} ms`);
  const lostPct = await slowApiLostPct(e, [...MANY, EIP], 1000, 60_000);
  console.log(`every API request 1 s slower for 60 s: ${lostPct.toFixed(2)} % of the EIP probes unanswered`);

  console.log([
    `policy_ready_ms=${Math.round(median(ready))}`, `failover_ms=${Math.round(median(f.cutMs))}`, `failover_kill_ms=${Math.round(median(f.killMs))}`,
    `dual_answer_ms=${f.dualMs}`, `stall_withdrawn=${withdrawn.length}`, `egress_ratio=${median(ratios).toFixed(2)}`, `leader_overlap_ms=${overlap}`,
    `eips40_failover_ms=${many.failoverMs}`, `eips40_dual_answer_ms=${many.dualMs}`, `api_latency1s_nokey_lost_pct=${lostPct.toFixed(2)}`,
  ].join(' '));
} finally {
  await e.stop();
}
