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
 * wireguard: pod to pod through weftd's flannel-wg mesh, against the same two pods joined by a
 * wireguard-go tunnel between their nodes configured by hand (keys, peers, a route for the other
 * node's pods: what an operator would do with wg(8)), in interleaved pairs; wg_ratio is the
 * median of the pairs' ratios. Both run wireguard-go (this kernel has no WireGuard), so the
 * ratio is what weftd's way of setting the tunnel up costs, or saves.
 *
 * Last line: vxlan_gbps=<> hostgw_gbps=<> underlay_gbps=<> vxlan_ratio=<> hostgw_ratio=<> wg_gbps=<> wg_ratio=<>
 *
 * Medians as bench/support/stats.ts defines them: of an even count, the mean of the middle two.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { generatePrivateKey, publicKeyOf } from '../src/backend/wireguard/keys.ts';
import { formatSet, uapiRequest } from '../src/backend/wireguard/uapi.ts';
import type { Netns } from '../test/support/netns.ts';
import { Cluster } from '../test/support/cluster.ts';
import type { ClusterNode } from '../test/support/cluster.ts';
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

/** The hand-made tunnel's device and port. */
const HAND = { device: 'wghand', port: 51900 };

/** wireguard-go for `device` in `node`'s namespace, its socket in `dir` (as weftd runs it, control.ts); returns the process. */
function wireguardGo(node: ClusterNode, device: string, dir: string) {
  const script = 'mkdir -p "$1" /var/run/wireguard && mount --bind "$1" /var/run/wireguard && exec wireguard-go --foreground "$2"';
  const unshare = ['unshare', '--mount', '--propagation', 'private', '--', 'sh', '-c', script, 'sh', dir, device];
  return spawn('ip', ['netns', 'exec', node.ns.name, ...unshare], { stdio: 'ignore' });
}

/**
 * A second wireguard-go tunnel between the two nodes, configured by hand (fresh keys, the other
 * node as peer for its pod subnet), as an operator would with wg(8); returns its processes.
 */
async function handTunnel(c: Cluster, podSubnets: string[]) {
  const keys = c.nodes.map(() => generatePrivateKey());
  const procs = c.nodes.map((n) => wireguardGo(n, HAND.device, join(n.dir, 'hand')));
  for (const [i, n] of c.nodes.entries()) {
    const other = 1 - i;
    const sock = join(n.dir, 'hand', `${HAND.device}.sock`);
    for (let t = 0; ; t++) {
      try {
        await uapiRequest(HAND.device, sock, formatSet({
          device: HAND.device, privateKey: keys[i]!, listenPort: HAND.port, remove: [],
          set: [{
            device: HAND.device, publicKey: publicKeyOf(keys[other]!), endpoint: `${c.nodes[other]!.address}:${HAND.port}`,
            allowedIPs: [podSubnets[other]!], keepalive: 0,
          }],
        }));
        break;
      } catch (e) {
        if (t >= 100) throw e;
        await new Promise((r) => setTimeout(r, 50));
      }
    }
    await n.ns.ip('link', 'set', HAND.device, 'mtu', '1420', 'up');
  }
  return procs;
}

/** Routes each node's traffic for the other's pods through the hand-made tunnel (more specific than weftd's), or takes that back. */
async function viaHand(c: Cluster, podSubnets: string[], on: boolean): Promise<void> {
  for (const [i, n] of c.nodes.entries()) await n.ns.ip('route', on ? 'add' : 'del', podSubnets[1 - i]!, 'dev', HAND.device);
}

/**
 * Interleaved pairs of pod → pod through weftd's wireguard mesh, then between the same two pods
 * through a hand-made wireguard-go tunnel joining their nodes: one path, two ways to configure it.
 */
async function measureWireguard(): Promise<{ pod: number; hand: number; ratio: number; ratios: number[] }> {
  const c = await Cluster.start({ nodes: 2, backend: 'wireguard', mode: 'etcd', weftdArgs: ['--ip-masq'] });
  const procs = [];
  try {
    const a = await c.addPod(c.nodes[0]!);
    const b = await c.addPod(c.nodes[1]!);
    await c.waitPing(a, b);
    const podSubnets = await Promise.all(c.nodes.map(async (n) => (await c.subnetEnv(n)).FLANNEL_SUBNET!.replace(/\.1\/24$/, '.0/24')));
    procs.push(...await handTunnel(c, podSubnets));
    const pods: number[] = [];
    const hands: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      pods.push(await iperf(b.ns, a.ns, b.ip));
      await viaHand(c, podSubnets, true);
      hands.push(await iperf(b.ns, a.ns, b.ip));
      await viaHand(c, podSubnets, false);
    }
    const ratios = pods.map((p, i) => p / hands[i]!);
    return { pod: median(pods), hand: median(hands), ratio: median(ratios), ratios };
  } finally {
    for (const p of procs) p.kill();
    // weftd's own wireguard-go processes run detached (control.ts): deleting their devices ends them.
    for (const n of c.nodes) await n.ns.ip('link', 'del', 'flannel-wg').catch(() => undefined);
    await c.stop();
  }
}

const vxlan = await measure('vxlan');
const hostgw = await measure('host-gw');
const wg = await measureWireguard();
const underlay = median([vxlan.underlay, hostgw.underlay]);
const f = (x: number) => x.toFixed(2);
console.log(`rounds' ratios: vxlan ${vxlan.ratios.map(f).join(' ')}; host-gw ${hostgw.ratios.map(f).join(' ')}; ` +
  `wireguard ${wg.ratios.map(f).join(' ')}`);
console.log(`iperf3 ${SECONDS} s, median of ${ROUNDS} rounds: pod→pod vxlan ${f(vxlan.pod)} Gbit/s (underlay ${f(vxlan.underlay)}), ` +
  `host-gw ${f(hostgw.pod)} Gbit/s (underlay ${f(hostgw.underlay)}), wireguard ${f(wg.pod)} Gbit/s (hand-made wireguard-go tunnel ${f(wg.hand)})`);
console.log(`vxlan_gbps=${f(vxlan.pod)} hostgw_gbps=${f(hostgw.pod)} underlay_gbps=${f(underlay)} vxlan_ratio=${f(vxlan.ratio)} ` +
  `hostgw_ratio=${f(hostgw.ratio)} wg_gbps=${f(wg.pod)} wg_ratio=${f(wg.ratio)}`);
