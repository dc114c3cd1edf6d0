/**
 * make bench-scale: one weftd (bin/weftd, in a network namespace of its own) against a real etcd
 * holding N = 5,000, 20,000 and 50,000 vxlan leases, then against the test API server holding
 * 20,000 and 50,000 Nodes (harness: bench/support/weftd.ts).
 *
 * Per N: exec → converged (the first full reconcile done, every entry checked in the kernel), the
 * CPU weftd used until then, VmHWM (at the largest etcd N read after the steady-state figures, so
 * it includes full passes). At the largest etcd N, once converged, in each run:
 * - event latency: EVENTS leases put into etcd one at a time and removed again; each is timed from
 *   the etcd write to the kernel's notification of the route appearing or going (seen by a monitor
 *   of this process in the node's namespace), p99 of the adds and removals;
 * - resync CPU: a stray route carrying weftd's protocol tag makes it run a full pass (dump, diff,
 *   delete the stray); weftd's CPU from before the route is added until it is gone, median of 3.
 *
 * Then host-gw and dual-stack vxlan (SCALE_VARIANTS, default `host-gw,vxlan-dual`) at 5,000 and
 * 50,000 leases (SCALE_VARIANT_N), one run each: exec → converged, CPU and VmHWM, and their
 * linearity. They are printed, not in the last line (its figures are vxlan IPv4's).
 *
 * Each etcd and kube N runs SCALE_RUNS times, default 1: by default every figure is one run's,
 * and with more runs it is the median of the runs. SCALE_N (comma-separated etcd Ns),
 * SCALE_KUBE_N and SCALE_PROF (a directory: weftd writes a --cpu-prof profile per run there)
 * change what runs; SCALE_LOG=1 prints weftd's log lines about its passes.
 *
 * Last line: converge_5000_s=<> converge_20000_s=<> converge_50000_s=<>
 * linearity=<converge_50000/converge_5000> hwm_50000_mb=<> event_p99_50000_ms=<>
 * resync_cpu_50000_ms=<> kube_converge_50000_s=<> ondemand_entries=<> ondemand_first_packet_ms=<>
 * (a figure not measured prints `na`). Then on-demand mode (--vxlan-on-demand): see ondemand();
 * SCALE_ONDEMAND=0 leaves it out.
 *
 * Medians and percentiles as bench/support/stats.ts defines them: the median of an even count is
 * the mean of the middle two, a percentile is the nearest rank.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { Etcd3 } from 'etcd3';
import { NetlinkHandle } from '../src/netlink/handle.ts';
import { sleep } from '../src/retry.ts';
import { EtcdServer } from '../test/support/etcd.ts';
import type { Netns } from '../test/support/netns.ts';
import { Cluster } from '../test/support/cluster.ts';
import type { ClusterNode } from '../test/support/cluster.ts';
import { adminClient, cpuMs, ETCD_PREFIX, expectedEntries, NET_CONF, NET_CONFS, peerLeaseKey, peerLeaseValue, peerSubnet, kubeRuns, removeOwnLease, runWeftd, seedLeases, underlayFor } from './support/weftd.ts';
import type { LeaseKind, Run } from './support/weftd.ts';
import { median, percentile } from './support/stats.ts';

const list = (v: string | undefined, d: number[]) => (v === undefined ? d : v.split(',').filter(Boolean).map(Number));
const ETCD_N = list(process.env.SCALE_N, [5000, 20_000, 50_000]);
const KUBE_N = list(process.env.SCALE_KUBE_N, [20_000, 50_000]);
const RUNS = Number(process.env.SCALE_RUNS ?? 1);
const VARIANTS = (process.env.SCALE_VARIANTS ?? 'host-gw,vxlan-dual').split(',').filter(Boolean) as LeaseKind[];
const VARIANT_N = list(process.env.SCALE_VARIANT_N, [5000, 50_000]);
const PROF = process.env.SCALE_PROF;
const EVENTS = 100;
const DEADLINE_MS = 600_000;

interface Steady {
  eventP99Ms: number;
  eventP50Ms: number;
  eventMaxMs: number;
  resyncCpuMs: number;
}

/** Event latency and resync CPU of the weftd `pid` in `ns`, converged with `n` leases. */
async function steady(ns: Netns, pid: number, admin: Etcd3, n: number): Promise<Steady> {
  const h = NetlinkHandle.open(ns.path);
  const waiters = new Map<string, { del: boolean; resolve: (t: number) => void }>();
  const mon = await h.monitor(['route'], (events) => {
    const t = performance.now();
    for (const e of events) {
      if (e.kind !== 'route') continue;
      const w = waiters.get(e.route.dst);
      if (w && w.del === (e.action === 'del')) {
        waiters.delete(e.route.dst);
        w.resolve(t);
      }
    }
  });
  const seen = (dst: string, del: boolean) => new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no route ${del ? 'removal' : 'addition'} of ${dst} within 30 s`)), 30_000);
    waiters.set(dst, { del, resolve: (t) => { clearTimeout(timer); resolve(t); } });
  });
  try {
    const lat: number[] = [];
    for (let i = 0; i < EVENTS; i++) {
      const peer = n + 1 + i;
      const dst = `${peerSubnet(peer)}/24`;
      let wait = seen(dst, false);
      let t0 = performance.now();
      await admin.put(peerLeaseKey(peer)).value(peerLeaseValue(peer));
      lat.push((await wait) - t0);
      wait = seen(dst, true);
      t0 = performance.now();
      await admin.delete().key(peerLeaseKey(peer));
      lat.push((await wait) - t0);
    }
    const resync: number[] = [];
    for (let i = 0; i < 3; i++) {
      await sleep(1000);
      const stray = '10.255.255.0/24';
      const gone = seen(stray, true);
      const before = await cpuMs(pid);
      await ns.ip('route', 'add', stray, 'dev', 'eth0', 'proto', '201');
      await gone;
      // The pass ends with the deletion; its last bookkeeping follows within milliseconds.
      await sleep(200);
      resync.push((await cpuMs(pid)) - before);
    }
    return { eventP99Ms: percentile(lat, 99), eventP50Ms: percentile(lat, 50), eventMaxMs: Math.max(...lat), resyncCpuMs: median(resync) };
  } finally {
    mon.stop();
    h.close();
  }
}

function profEnv(): Record<string, string> {
  return PROF ? { NODE_OPTIONS: `--cpu-prof --cpu-prof-dir=${PROF}` } : {};
}

/** Runs at `n` leases; with `measureSteady`, each run's steady state too (so its VmHWM includes full passes). */
async function etcdScale(etcd: EtcdServer, admin: Etcd3, n: number, measureSteady: boolean): Promise<{ runs: Run[]; steady: Steady[] }> {
  await seedLeases(admin, n);
  const runs: Run[] = [];
  const steadies: Steady[] = [];
  const dir = await mkdtemp(join(tmpdir(), 'weft-bench-scale-'));
  try {
    for (let r = 0; r < RUNS; r++) {
      runs.push(await runWeftd({
        prefix: 'sc', peers: n, env: profEnv(), deadlineMs: DEADLINE_MS,
        args: [`--etcd-endpoints=${etcd.endpoint}`, '--iface=eth0', `--subnet-file=${join(dir, `subnet-${n}-${r}.env`)}`],
        ...(measureSteady ? { converged: async (ns, d) => void steadies.push(await steady(ns, d.proc.pid!, admin, n)) } : {}),
      }));
      await removeOwnLease(admin);
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  return { runs, steady: steadies };
}

/** Fake leases put beside the on-demand cluster's three nodes, on /24s above those the nodes pick from (the first 100 free). */
const ONDEMAND_LEASES = 100;
const FIRST_PACKETS = 5;

/**
 * On-demand mode: three nodes (test/support/cluster.ts) with --vxlan-on-demand and
 * {@link ONDEMAND_LEASES} more leases in etcd. Node 1's pod pings node 2's pod; then the kernel
 * entries Weft wrote on node 1 are counted, and the first ping to a new peer is timed
 * {@link FIRST_PACKETS} times (both nodes' on-demand entries removed before each: the first RTT
 * includes a miss on each side), median.
 */
async function ondemand(): Promise<{ entries: number; firstPacketMs: number; laterMs: number }> {
  const c = await Cluster.start({ nodes: 3, backend: 'vxlan', mode: 'etcd', weftdArgs: ['--vxlan-on-demand'] });
  const admin = adminClient(c.etcd!.endpoint);
  try {
    for (let i = 0; i < ONDEMAND_LEASES; i++) {
      await admin.put(`${ETCD_PREFIX}/subnets/10.244.${255 - i}.0-24`).value(peerLeaseValue(i));
    }
    const [a, b] = c.nodes as [ClusterNode, ClusterNode];
    const pa = await c.addPod(a);
    const pb = await c.addPod(b);
    await c.waitPing(pa, pb);
    const weftEntries = async (n: ClusterNode) => {
      const lines = async (...cmd: [string, ...string[]]) => (await n.ns.exec(...cmd)).split('\n').filter(Boolean).length;
      return (await lines('ip', 'route', 'show', 'proto', '201')) + (await lines('ip', 'neigh', 'show', 'dev', 'flannel.1'))
        + (await n.ns.bridgeJson<{ dst?: string }[]>('fdb', 'show', 'dev', 'flannel.1')).filter((e) => e.dst).length;
    };
    const entries = await weftEntries(a);
    const rtt = async () => Number(/time=([\d.]+) ms/.exec(await pa.ns.exec('ping', '-c', '1', '-W', '2', pb.ip))?.[1] ?? NaN);
    const first: number[] = [];
    const later: number[] = [];
    for (let i = 0; i < FIRST_PACKETS; i++) {
      for (const n of [a, b]) {
        await n.ns.ip('neigh', 'flush', 'dev', 'flannel.1');
        for (const e of await n.ns.bridgeJson<{ mac: string; dst?: string; state?: string }[]>('fdb', 'show', 'dev', 'flannel.1')) {
          if (e.dst && e.state !== 'permanent') await n.ns.exec('bridge', 'fdb', 'del', e.mac, 'dev', 'flannel.1', 'dst', e.dst);
        }
      }
      first.push(await rtt());
      later.push(await rtt());
    }
    return { entries, firstPacketMs: median(first), laterMs: median(later) };
  } finally {
    admin.close();
    await c.stop();
  }
}

/** {@link VARIANTS}: `kind` at each of {@link VARIANT_N} leases, against an etcd of its own. */
async function variant(kind: LeaseKind): Promise<void> {
  const etcd = await EtcdServer.start({ unixSocket: true });
  const admin = adminClient(etcd.endpoint);
  const dir = await mkdtemp(join(tmpdir(), 'weft-bench-scale-'));
  try {
    await admin.put(`${ETCD_PREFIX}/config`).value(NET_CONFS[kind]);
    for (const n of [...VARIANT_N].sort((a, b) => a - b)) {
      await seedLeases(admin, n, kind);
      const run = await runWeftd({
        prefix: 'sc', peers: n, expect: expectedEntries(kind, n), env: profEnv(), deadlineMs: DEADLINE_MS,
        args: [`--etcd-endpoints=${etcd.endpoint}`, '--iface=eth0', `--subnet-file=${join(dir, `subnet-${kind}-${n}.env`)}`],
        setup: async (ns) => {
          await underlayFor(ns, kind);
          return async () => {};
        },
      });
      await removeOwnLease(admin);
      show(`${kind} ${n}`, [run]);
    }
    const [lo, hi] = [Math.min(...VARIANT_N), Math.max(...VARIANT_N)];
    console.log(`${kind}: ${hi / lo}x the leases took ${(converge.get(`${kind} ${hi}`)! / converge.get(`${kind} ${lo}`)!).toFixed(1)}x the time`);
  } finally {
    admin.close();
    await etcd.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

const converge = new Map<string, number>();
const hwm = new Map<string, number>();
const show = (name: string, runs: Run[]) => {
  if (process.env.SCALE_LOG) {
    for (const r of runs) {
      console.log(r.log.split('\n').filter((l) => /reconciled|refused|overrun|nexthop|adapted/.test(l)).map((l) => `  weftd: ${l.slice(0, 300)}`).join('\n'));
      const perSecond = new Map<number, number>();
      for (const [t, mb] of r.rss) perSecond.set(Math.floor(t / 1000), Math.max(perSecond.get(Math.floor(t / 1000)) ?? 0, mb));
      console.log(`  VmRSS by second: ${[...perSecond].map(([t, mb]) => `${t}:${mb.toFixed(0)}`).join(' ')}; VmHWM once converged ${r.convergedHwmMb.toFixed(1)} MB`);
    }
  }
  console.log(`${name}: ${runs.map((r) => `converged ${(r.convergeMs / 1000).toFixed(2)} s (subnet.env ${r.startMs.toFixed(0)} ms), CPU ${(r.cpuMs / 1000).toFixed(2)} s, VmHWM ${r.hwmMb.toFixed(1)} MB, RssAnon ${r.anonMb.toFixed(1)} MB`).join('\n  ')}`);
  converge.set(name, median(runs.map((r) => r.convergeMs)) / 1000);
  hwm.set(name, median(runs.map((r) => r.hwmMb)));
};

const largest = Math.max(...ETCD_N);
let st: Steady | undefined;
if (ETCD_N.length > 0) {
  const etcd = await EtcdServer.start({ unixSocket: true });
  const admin = adminClient(etcd.endpoint);
  try {
    await admin.put(`${ETCD_PREFIX}/config`).value(NET_CONF);
    for (const n of [...ETCD_N].sort((a, b) => a - b)) {
      const res = await etcdScale(etcd, admin, n, n === largest);
      show(`etcd ${n}`, res.runs);
      for (const x of res.steady) console.log(`etcd ${n} steady: event p50 ${x.eventP50Ms.toFixed(1)} ms, p99 ${x.eventP99Ms.toFixed(1)} ms, max ${x.eventMaxMs.toFixed(1)} ms; full resync CPU ${x.resyncCpuMs.toFixed(0)} ms`);
      if (res.steady.length > 0) {
        const m = (f: (x: Steady) => number) => median(res.steady.map(f));
        st = { eventP50Ms: m((x) => x.eventP50Ms), eventP99Ms: m((x) => x.eventP99Ms), eventMaxMs: m((x) => x.eventMaxMs), resyncCpuMs: m((x) => x.resyncCpuMs) };
      }
    }
  } finally {
    admin.close();
    await etcd.stop();
  }
}
for (const kind of VARIANTS) await variant(kind);
let od: { entries: number; firstPacketMs: number; laterMs: number } | undefined;
if (process.env.SCALE_ONDEMAND !== '0') {
  od = await ondemand();
  console.log(`on demand (3 nodes + ${ONDEMAND_LEASES} leases): ${od.entries} kernel entries of Weft's on node 1 after reaching one peer (a route, a neighbour and an FDB entry per peer in full mode: ${3 * (ONDEMAND_LEASES + 2)}); first packet to a new peer ${od.firstPacketMs.toFixed(2)} ms round trip, the next ${od.laterMs.toFixed(2)} ms`);
}
for (const n of KUBE_N) show(`kube ${n}`, await kubeRuns({ peers: n, runs: RUNS, prefix: 'sc', env: profEnv(), deadlineMs: DEADLINE_MS }));

const fig = (v: number | undefined, digits: number) => (v === undefined ? 'na' : v.toFixed(digits));
const c5 = converge.get('etcd 5000');
const c50 = converge.get('etcd 50000');
console.log([
  `converge_5000_s=${fig(c5, 2)}`,
  `converge_20000_s=${fig(converge.get('etcd 20000'), 2)}`,
  `converge_50000_s=${fig(c50, 2)}`,
  `linearity=${fig(c5 && c50 ? c50 / c5 : undefined, 1)}`,
  `hwm_50000_mb=${fig(hwm.get('etcd 50000'), 1)}`,
  `event_p99_50000_ms=${fig(largest === 50_000 ? st?.eventP99Ms : undefined, 1)}`,
  `resync_cpu_50000_ms=${fig(largest === 50_000 ? st?.resyncCpuMs : undefined, 0)}`,
  `kube_converge_50000_s=${fig(converge.get('kube 50000'), 2)}`,
  `ondemand_entries=${fig(od?.entries, 0)}`,
  `ondemand_first_packet_ms=${fig(od?.firstPacketMs, 2)}`,
].join(' '));
