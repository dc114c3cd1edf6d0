/**
 * make bench-egress-peers: the gateways' liveness over the underlay (--egress-peer-key-file) on
 * the e2e cluster harness (test/support/egress-cluster.ts: 4 kube-mode nodes, vxlan, weftd with
 * --egress-gateways). One node is made the controller (EgressCluster.electOn); two others are the
 * gateway nodes of two policies with an EIP each (Spread: one EIP on each).
 *
 * - api_outage30s_lost_pct: every node cut from the API server for 30 s (links up, kube-apiserver
 *   running); the outside host pings each EIP every 50 ms meanwhile: the percentage not answered
 *   (pings allowed 2 s for their answers);
 * - api_latency1s_lost_pct: every node's API requests made 1 s slower (500 ms each way) for 60 s;
 *   the outside host probes each EIP every 50 ms (ARP): the per cent of probes nobody answered
 *   (bench-egress measures the same without the key: api_latency1s_nokey_lost_pct);
 * - partitioned_gateway_withdraw_ms: median of 3: a gateway holding an EIP cut from the API and
 *   from its peers (its pings dropped), until the outside host's ARP probes (100 ms each, back to
 *   back) no longer get its answer; it is put back after, and the next round cuts whichever holds
 *   the EIP then.
 *
 * Needs root. Last line: api_outage30s_lost_pct=<> api_latency1s_lost_pct=<> partitioned_gateway_withdraw_ms=<>
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { NetlinkHandle } from '../src/netlink/index.ts';
import type { ClusterNode } from '../test/support/cluster.ts';
import { EgressCluster } from '../test/support/egress-cluster.ts';
import { apiOutage, cutFromPeers, peerKeyArgs, pingLossPct, rejoinPeers, waitVouchedFor } from '../test/support/egress-peers.ts';
import { until } from '../test/support/until.ts';
import { slowApiLostPct } from './support/egress.ts';
import { median } from './support/stats.ts';

const EIPS = ['198.51.100.100', '198.51.100.101'];
const OUTAGE_MS = 30_000;

/** ms from `t0` until `n` no longer answers the outside host's ARP probes for `eip`. */
async function timeUntilSilent(e: EgressCluster, n: ClusterNode, eip: string, t0: number): Promise<number> {
  const mac = (await n.ns.ipJson<{ address: string }[]>('link', 'show', 'eth0'))[0]!.address;
  const handle = NetlinkHandle.open(e.outside.path);
  try {
    const eth0 = await handle.linkByName('eth0');
    const deadline = t0 + 60_000;
    while (performance.now() < deadline) {
      if (!(await handle.addressProbe(eth0.index, [eip], 100, 1))[0]!.includes(mac)) return performance.now() - t0;
    }
    throw new Error(`${n.name} still answers for ${eip} a minute after it was cut off`);
  } finally {
    handle.close();
  }
}

const dir = await mkdtemp(join(tmpdir(), 'weft-bench-egress-peers-'));
const e = await EgressCluster.start({ nodes: 4, backend: 'vxlan', weftdArgs: await peerKeyArgs(dir), apiDelay: true });
try {
  const [leader, client, g1, g2] = e.c.nodes as [ClusterNode, ClusterNode, ClusterNode, ClusterNode];
  await e.electOn(leader);
  for (const g of [g1, g2]) await e.label(g, { 'egress.weft.dev/gateway': 'true' });
  await e.gateway('gw', {
    nodeSelector: { matchLabels: { 'egress.weft.dev/gateway': 'true' } }, eipPool: { ipv4: ['198.51.100.100-198.51.100.101'] },
    nodeSelection: { mode: 'Spread' },
  });
  for (const [i, name] of ['a', 'b'].entries()) {
    const pod = await e.addPod(client, { app: name });
    await e.policy(name, { gateway: 'gw', podSelector: { matchLabels: { app: name } } });
    await e.waitSeenAs(pod, EIPS[i]!);
  }
  const gateways = [g1, g2];
  for (const g of gateways) await waitVouchedFor(e, g, [leader, ...gateways.filter((x) => x !== g)]);

  let lost: number[] = [];
  await apiOutage(e, OUTAGE_MS, async () => {
    lost = await Promise.all(EIPS.map((eip) => pingLossPct(e, eip, OUTAGE_MS / 50)));
  });
  console.log(`API outage of ${OUTAGE_MS / 1000} s: ${lost.map((l, i) => `${EIPS[i]} ${l.toFixed(1)} % lost`).join(', ')}`);

  for (const g of gateways) await waitVouchedFor(e, g, [leader, ...gateways.filter((x) => x !== g)]);
  const slowLost = await slowApiLostPct(e, EIPS, 1000, 60_000);
  console.log(`every API request 1 s slower for 60 s: ${slowLost.toFixed(2)} % of the EIP probes unanswered`);

  const withdraw: number[] = [];
  for (let i = 0; i < 3; i++) {
    const placed = (await e.policyStatus('a')).node;
    const from = gateways.find((g) => g.name === placed)!;
    const others = [leader, ...gateways.filter((g) => g !== from)];
    await waitVouchedFor(e, from, others);
    const t0 = performance.now();
    await e.c.cutFromApi(from);
    await cutFromPeers(from);
    withdraw.push(await timeUntilSilent(e, from, EIPS[0]!, t0));
    console.log(`round ${i + 1}: ${from.name}, cut from the API and its peers, silent for ${EIPS[0]} `
      + `after ${Math.round(withdraw.at(-1)!)} ms`);
    await until(`policy a moved off ${from.name}`, async () => (await e.policyStatus('a')).node !== from.name, 60_000);
    await rejoinPeers(from);
    await e.c.rejoinApi(from);
  }

  console.log(`api_outage30s_lost_pct=${(lost.reduce((a, b) => a + b, 0) / lost.length).toFixed(1)} `
    + `api_latency1s_lost_pct=${slowLost.toFixed(2)} partitioned_gateway_withdraw_ms=${Math.round(median(withdraw))}`);
} finally {
  await e.stop();
  await rm(dir, { recursive: true, force: true });
}
