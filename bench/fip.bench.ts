/**
 * make bench-fip: inbound EIPs on the e2e cluster harness (test/support/egress-cluster.ts:
 * 4 kube-mode nodes, vxlan, weftd with --egress-gateways, the controller elected among them, an
 * outside host on the underlay). The pod's node and the two gateway candidates are nodes other
 * than the controller's; the pod runs a server answering with the source address it sees.
 *
 * - fip_ready_ms: from creating a FloatingIP to the first connection from the outside host to
 *   the EIP answered by the pod (median of 3: the FloatingIP deleted and unreachable between);
 * - fip_failover_ms: from SIGKILLing the gateway node's weftd and cutting its link to the first
 *   connection to the EIP answered again, through the other gateway node;
 * - fip_ratio: iperf3 TCP throughput (3 s) of the outside host to the pod through the EIP, over
 *   that to another pod on the same node reached at its own address (the outside host routes
 *   the node's pod subnet to the node).
 *
 * Needs root. Last line: fip_ready_ms=<> fip_failover_ms=<> fip_ratio=<>
 *
 * Medians as bench/support/stats.ts defines them: of an even count, the mean of the middle two.
 */
import { performance } from 'node:perf_hooks';
import type { ClusterNode } from '../test/support/cluster.ts';
import { EgressCluster, OUTSIDE, iperf3, startSourceServer } from '../test/support/egress-cluster.ts';
import { until } from '../test/support/until.ts';
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

const e = await EgressCluster.start({ nodes: 4, backend: 'vxlan' });
let stopServer: (() => Promise<void>) | undefined;
try {
  const [leader, podNode, g1, g2] = e.c.nodes as [ClusterNode, ClusterNode, ClusterNode, ClusterNode];
  await e.electOn(leader);
  for (const g of [g1, g2]) e.label(g, { 'egress.weft.dev/gateway': 'true' });
  const pod = await e.addPod(podNode, { app: 'web' }, 'web');
  const direct = await e.addPod(podNode, { app: 'direct' }, 'direct');
  stopServer = await startSourceServer(pod.ns);
  e.gateway('gw', { nodeSelector: { matchLabels: { 'egress.weft.dev/gateway': 'true' } }, eipPool: { ipv4: [EIP] } });

  const ready: number[] = [];
  for (let i = 0; i < 3; i++) {
    const t0 = performance.now();
    e.inbound('FloatingIP', 'web', { gateway: 'gw', pod: 'web' });
    ready.push(await timeUntil(e, OUTSIDE.ipv4, t0));
    console.log(`round ${i + 1}: floating IP ready in ${Math.round(ready.at(-1)!)} ms`);
    if (i < 2) {
      e.removeInbound('FloatingIP', 'web');
      await timeUntil(e, undefined, performance.now());
    }
  }

  await e.outside.ip('route', 'add', `${direct.ip.split('.').slice(0, 3).join('.')}.0/24`, 'via', podNode.address);
  const viaEip = await iperf3(pod.ns, e.outside, EIP);
  const viaNode = await iperf3(direct.ns, e.outside, direct.ip);
  console.log(`iperf3: ${(viaEip / 1e9).toFixed(2)} Gbit/s through the EIP, ${(viaNode / 1e9).toFixed(2)} Gbit/s to the pod's own address through its node`);

  const gateway = e.inboundStatus('FloatingIP', 'web').node === g1.name ? g1 : g2;
  const t0 = performance.now();
  await e.c.stopWeftd(gateway, 'SIGKILL');
  await gateway.ns.ip('link', 'set', 'eth0', 'down');
  const failover = await timeUntil(e, OUTSIDE.ipv4, t0);
  console.log(`failover from ${gateway.name}: ${Math.round(failover)} ms`);

  console.log(`fip_ready_ms=${Math.round(median(ready))} fip_failover_ms=${Math.round(failover)} fip_ratio=${(viaEip / viaNode).toFixed(2)}`);
} finally {
  await stopServer?.();
  await e.stop();
}
