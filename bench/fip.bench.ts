/**
 * make bench-fip: inbound EIPs on the e2e cluster harness (test/support/egress-cluster.ts:
 * 4 kube-mode nodes, vxlan, weftd with --egress-gateways, an outside host on the underlay). One
 * node is made the controller (EgressCluster.electOn); the pod's node and the two gateway
 * nodes are the others; the pod runs a server answering with the source address it sees.
 *
 * - fip_ready_ms: from creating a FloatingIP to the first connection from the outside host to
 *   the EIP answered by the pod (median of 3: the FloatingIP deleted and unreachable between);
 * - fip_ratio: iperf3 TCP throughput (3 s) of the outside host to the pod through the EIP, over
 *   that to another pod on the same node reached at its own address (the outside host routes
 *   the node's pod subnet to the node): median of 5 pairs, the two of a pair run back to back;
 * - failover_ms, failover_kill_ms: medians of 5 failovers by link cut and 5 by weftd kill
 *   (bench/support/egress.ts), from the cut or kill to the first connection to the EIP answered
 *   again, through the other gateway node;
 * - dual_answer_ms: over those 10 failovers, the ms in which the outside host's ARP probes for the
 *   EIP got answers from two MACs;
 * - stall_withdrawn: floating IPs whose placement changed during a 10 s API stall (kube-apiserver
 *   frozen) or the 5 s after;
 * - leader_overlap_ms: ms two controllers acted at once in the forced overlap (a leader paused
 *   with SIGSTOP past its deadline, then resumed).
 *
 * Needs root. Last line: fip_ready_ms=<> failover_ms=<> failover_kill_ms=<> dual_answer_ms=<>
 * stall_withdrawn=<> fip_ratio=<> leader_overlap_ms=<>
 *
 * Medians as bench/support/stats.ts defines them: of an even count, the mean of the middle two.
 */
import { performance } from 'node:perf_hooks';
import type { ClusterNode } from '../test/support/cluster.ts';
import { EgressCluster, OUTSIDE, iperf3, startSourceServer } from '../test/support/egress-cluster.ts';
import { until } from '../test/support/until.ts';
import { failovers, leaderOverlapMs, stallWithdrawn } from './support/egress.ts';
import { median } from './support/stats.ts';

const EIP = '198.51.100.100';
const URL_ = `http://${EIP}:8080/`;

/**
 * ms from `t0` until the outside host gets `answer` from the EIP: polled with connections given
 * 200 ms each, so one lost in the switch costs at most that much of the figure.
 */
async function timeUntil(e: EgressCluster, answer: string | undefined, t0: number): Promise<number> {
  await until(`the EIP answers ${answer}`, async () => (await e.fromOutside(URL_, 0.2)) === answer, 60_000);
  return performance.now() - t0;
}

const overlap = await leaderOverlapMs();
const e = await EgressCluster.start({ nodes: 4, backend: 'vxlan' });
let stopServer: (() => Promise<void>) | undefined;
try {
  const [leader, podNode, g1, g2] = e.c.nodes as [ClusterNode, ClusterNode, ClusterNode, ClusterNode];
  await e.electOn(leader);
  for (const g of [g1, g2]) await e.label(g, { 'egress.weft.dev/gateway': 'true' });
  const pod = await e.addPod(podNode, { app: 'web' }, 'web');
  const direct = await e.addPod(podNode, { app: 'direct' }, 'direct');
  stopServer = await startSourceServer(pod.ns);
  await e.gateway('gw', { nodeSelector: { matchLabels: { 'egress.weft.dev/gateway': 'true' } }, eipPool: { ipv4: [EIP] } });

  const ready: number[] = [];
  for (let i = 0; i < 3; i++) {
    const t0 = performance.now();
    await e.inbound('FloatingIP', 'web', { gateway: 'gw', pod: 'web' });
    ready.push(await timeUntil(e, OUTSIDE.ipv4, t0));
    console.log(`round ${i + 1}: floating IP ready in ${Math.round(ready.at(-1)!)} ms`);
    if (i < 2) {
      await e.removeInbound('FloatingIP', 'web');
      await timeUntil(e, undefined, performance.now());
    }
  }

  await e.outside.ip('route', 'add', `${direct.ip.split('.').slice(0, 3).join('.')}.0/24`, 'via', podNode.address);
  const ratios: number[] = [];
  for (let i = 0; i < 5; i++) {
    const viaEip = await iperf3(pod.ns, e.outside, EIP);
    const viaNode = await iperf3(direct.ns, e.outside, direct.ip);
    ratios.push(viaEip / viaNode);
    console.log(`iperf3 pair ${i + 1}: ${(viaEip / 1e9).toFixed(2)} Gbit/s through the EIP, ${(viaNode / 1e9).toFixed(2)} Gbit/s to the pod's own address`);
  }

  const placement = async () => {
    const s = await e.inboundStatus('FloatingIP', 'web');
    return JSON.stringify([s.node, s.eip]);
  };
  const f = await failovers(e, {
    rounds: 5, eip: EIP, gateways: [g1, g2], node: async () => (await e.inboundStatus('FloatingIP', 'web')).node,
    reached: (t0) => timeUntil(e, OUTSIDE.ipv4, t0),
  });
  const withdrawn = await stallWithdrawn(e, ['web'], placement);
  await timeUntil(e, OUTSIDE.ipv4, performance.now());

  console.log([
    `fip_ready_ms=${Math.round(median(ready))}`, `failover_ms=${Math.round(median(f.cutMs))}`, `failover_kill_ms=${Math.round(median(f.killMs))}`,
    `dual_answer_ms=${f.dualMs}`, `stall_withdrawn=${withdrawn.length}`, `fip_ratio=${median(ratios).toFixed(2)}`, `leader_overlap_ms=${overlap}`,
  ].join(' '));
} finally {
  await stopServer?.();
  await e.stop();
}
