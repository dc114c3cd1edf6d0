/**
 * make bench-dataplane: iperf3 (TCP, 10 s) pod to pod across two nodes of the e2e cluster
 * (test/support/cluster.ts: real weftd, pods by bin/weft) over vxlan and over host-gw, and node to
 * node over the underlay without overlay, on the same veth + bridge underlay. This machine's own
 * throughput drifts by tens of percent from minute to minute, so each round measures the overlay
 * and then the underlay of the same cluster, and a ratio is the median of the rounds' ratios
 * (WEFT_BENCH_ROUNDS, 5); the Gbit/s figures are medians too, and the rounds' ratios are printed
 * so that the spread is in view. weftd runs with --ip-masq, as
 * daemonset.yaml and flannel's own manifest run it (without it the bridge delegate installs its
 * own masquerade chain, which every forwarded packet then walks).
 *
 * Last line: vxlan_gbps=<> hostgw_gbps=<> underlay_gbps=<> vxlan_ratio=<> hostgw_ratio=<>
 *
 * Medians as bench/support/stats.ts defines them: of an even count, the mean of the middle two.
 */
import { spawn } from 'node:child_process';
import type { Netns } from '../test/support/netns.ts';
import { Cluster } from '../test/support/cluster.ts';
import { median } from './support/stats.ts';

const SECONDS = Number(process.env.WEFT_BENCH_SECONDS ?? 10);
const ROUNDS = Number(process.env.WEFT_BENCH_ROUNDS ?? 5);

/** Runs an iperf3 server in `server` and a client in `client` towards `address`; returns Gbit/s received. */
async function iperf(server: Netns, client: Netns, address: string): Promise<number> {
  const srv = spawn('ip', ['netns', 'exec', server.name, 'iperf3', '-s', '-1', '-B', address], { stdio: 'ignore' });
  try {
    for (let i = 0; ; i++) {
      try {
        const out = await client.exec('iperf3', '-c', address, '-t', String(SECONDS), '-J');
        const r = JSON.parse(out) as { end: { sum_received: { bits_per_second: number } } };
        return r.end.sum_received.bits_per_second / 1e9;
      } catch (e) {
        if (i >= 20) throw e;
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  } finally {
    srv.kill();
  }
}

/** Rounds of pod → pod then node → node in one two-node cluster of `backend`. */
async function measure(backend: 'vxlan' | 'host-gw'): Promise<{ pod: number; underlay: number; ratio: number; ratios: number[] }> {
  const c = await Cluster.start({ nodes: 2, backend, mode: 'etcd', weftdArgs: ['--ip-masq'] });
  try {
    const a = await c.addPod(c.nodes[0]!);
    const b = await c.addPod(c.nodes[1]!);
    await c.waitPing(a, b);
    const pods: number[] = [];
    const underlays: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      pods.push(await iperf(b.ns, a.ns, b.ip));
      underlays.push(await iperf(c.nodes[1]!.ns, c.nodes[0]!.ns, c.nodes[1]!.address));
    }
    const ratios = pods.map((p, i) => p / underlays[i]!);
    return { pod: median(pods), underlay: median(underlays), ratio: median(ratios), ratios };
  } finally {
    await c.stop();
  }
}

const vxlan = await measure('vxlan');
const hostgw = await measure('host-gw');
const underlay = median([vxlan.underlay, hostgw.underlay]);
const f = (x: number) => x.toFixed(2);
console.log(`rounds' ratios: vxlan ${vxlan.ratios.map(f).join(' ')}; host-gw ${hostgw.ratios.map(f).join(' ')}`);
console.log(`iperf3 ${SECONDS} s, median of ${ROUNDS} rounds: pod→pod vxlan ${f(vxlan.pod)} Gbit/s (underlay ${f(vxlan.underlay)}), host-gw ${f(hostgw.pod)} Gbit/s (underlay ${f(hostgw.underlay)})`);
console.log(`vxlan_gbps=${f(vxlan.pod)} hostgw_gbps=${f(hostgw.pod)} underlay_gbps=${f(underlay)} vxlan_ratio=${f(vxlan.ratio)} hostgw_ratio=${f(hostgw.ratio)}`);
