/**
 * Faults of a real etcd, each a scenario that both the fault tests (test/integration/
 * etcd-faults.test.ts: what must happen) and `make bench-etcd-faults` (how long it took) run:
 *
 * - partition: weftd's watched member is cut from the other two; a lease written through a
 *   healthy member must reach weftd's kernel, and a lease kept by the lease source must go on
 *   renewing;
 * - dead endpoint: the first endpoint drops SYNs; weftd must start, write subnet.env and converge;
 * - auth restart: with auth on, the one member a watch is on restarts (its simple tokens die with it);
 *   the watch must resume from its revision: no relist, no missed or repeated event;
 * - hostile endpoint: malformed grpc-message, RST_STREAM, GOAWAY, truncated messages and frames;
 *   weftd must log, retry, never exit, and converge once the endpoint behaves;
 * - large answers: 50,000 leases read at start and after a compaction through a proxy that
 *   delays each direction by 20 ms.
 *
 * weftd runs as bin/weftd in a node namespace on the cluster's underlay (198.51.100.1); the
 * in-process lease source reaches the members through their unix sockets.
 */
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseIP } from '../../src/ip/ip.ts';
import { EtcdLeaseSource } from '../../src/lease/etcd/source.ts';
import type { LeaseAttrs } from '../../src/lease/lease.ts';
import { LeaseTable } from '../../src/lease/table.ts';
import { memoryLogger } from '../../src/log.ts';
import { adminClient, ETCD_PREFIX, NET_CONF, nodeNetns, peerLeaseKey, peerLeaseValue, peerSubnet, seedLeases } from '../../bench/support/weftd.ts';
import { spawnWeftd, stopDaemon } from './cluster.ts';
import type { Daemon } from './cluster.ts';
import { DelayProxy } from './delay-proxy.ts';
import { EtcdServer } from './etcd.ts';
import { EtcdCluster } from './etcd-cluster.ts';
import type { Member } from './etcd-cluster.ts';
import { HostileEtcd } from './hostile-etcd.ts';
import { attachToUnderlay, createNetns } from './netns.ts';
import type { Netns } from './netns.ts';
import { until } from './until.ts';

const READY = /ready: the kernel holds every lease/;
const LISTED = / listed leases /;

/** How often `re` matches weftd's log so far. */
function count(d: Daemon, re: RegExp): number {
  return [...d.log().matchAll(new RegExp(re.source, `${re.flags.replace('g', '')}g`))].length;
}

/** Resolves with performance.now() once `re` matched `n` times in weftd's log; rejects if weftd exits or time runs out. */
async function logged(d: Daemon, re: RegExp, n = 1, timeoutMs = 60_000): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  while (count(d, re) < n) {
    if (d.proc.exitCode !== null || d.proc.signalCode !== null) throw new Error(`weftd exited (${d.proc.exitCode ?? d.proc.signalCode}):\n${d.log().slice(-4000)}`);
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${re} ×${n} in weftd's log:\n${d.log().slice(-4000)}`);
    await new Promise((r) => setTimeout(r, 5));
  }
  return performance.now();
}

/** Whether the node's kernel holds weft's route to the n-th peer's subnet. */
async function routed(ns: Netns, n: number): Promise<boolean> {
  const routes = await ns.ip('-4', 'route', 'show', 'proto', '201').catch(() => '');
  return routes.split('\n').some((l) => l.startsWith(`${peerSubnet(n)}/24 `));
}

/** A node namespace on a cluster's underlay (198.51.100.1), a directory for its files, and the weftd started there. */
interface ClusterNode {
  ns: Netns;
  dir: string;
  /** Starts bin/weftd on the node with `endpoints`. */
  weftd(endpoints: string[]): Daemon;
}

/** Runs `fn` on a fresh three-member cluster and a node on its underlay; removes everything after. */
async function onCluster<T>(fn: (cluster: EtcdCluster, node: ClusterNode) => Promise<T>): Promise<T> {
  const cluster = await EtcdCluster.start();
  const daemons: Daemon[] = [];
  let node: ClusterNode | undefined;
  try {
    const ns = await createNetns('node');
    const dir = await mkdtemp(join(tmpdir(), 'weft-etcd-faults-'));
    node = { ns, dir, weftd: (endpoints) => {
      const d = spawnWeftd(ns, [`--etcd-endpoints=${endpoints.join(',')}`, '--iface=eth0', `--subnet-file=${join(dir, 'subnet.env')}`]);
      daemons.push(d);
      return d;
    } };
    await attachToUnderlay(cluster.underlay, ns, 1);
    return await fn(cluster, node);
  } finally {
    for (const d of daemons) await stopDaemon(d);
    await node?.ns.remove();
    if (node) await rm(node.dir, { recursive: true, force: true });
    await cluster.close();
  }
}

/** A metric of member `m`, read over its unix socket. */
async function memberMetric(cluster: EtcdCluster, m: Member, series: RegExp): Promise<number> {
  const text = await new Promise<string>((resolve, reject) => {
    const req = request({ socketPath: cluster.unixEndpoint(m).slice('unix://'.length), path: '/metrics' }, (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (c: string) => (body += c)).on('end', () => resolve(body));
    });
    req.on('error', reject).end();
  });
  const found = series.exec(text);
  return found ? Number(found[1]) : 0;
}

/** The member holding the one watch there is. */
async function watchedMember(cluster: EtcdCluster): Promise<Member> {
  let found: Member | undefined;
  await until('a member to hold the watch', async () => {
    for (const m of cluster.members) {
      if (await memberMetric(cluster, m, /^etcd_debugging_mvcc_watcher_total (\d+)/m) > 0) found = m;
    }
    return found !== undefined;
  });
  return found!;
}

const attrs = (n: number): LeaseAttrs => ({ publicIP: parseIP(`198.18.200.${n}`, 'ip'), backendType: 'vxlan', backendData: { VNI: 1, VtepMAC: `6e:00:00:00:c8:${n.toString(16).padStart(2, '0')}` } });

export interface PartitionResult {
  /** From the cut to the lease written through a healthy member being routed by weftd. */
  convergeMs: number;
  /** Renewals of the in-process source's lease while its first member was cut off. */
  renewals: number;
  /** Whether the renewing source ever lost its key. */
  lost: boolean;
}

/** Partition: weftd's watched member cut from its peers. */
export async function partition(): Promise<PartitionResult> {
  return onCluster(async (cluster, node) => {
    const admin0 = cluster.admin(cluster.members[0]!);
    await admin0.put(`${ETCD_PREFIX}/config`).value(NET_CONF);
    admin0.close();
    const d = node.weftd(cluster.endpoints);
    await logged(d, READY);
    const cut = await watchedMember(cluster);
    const healthy = cluster.members.find((m) => m !== cut)!;
    // A lease kept alive by the lease source itself, its first endpoint the member to be cut:
    // a 10 s etcd lease renewed every 2 s.
    const log = memoryLogger();
    let renewals = 0;
    const source = await EtcdLeaseSource.create({
      endpoints: [cut, ...cluster.members.filter((m) => m !== cut)].map((m) => cluster.unixEndpoint(m)),
      prefix: ETCD_PREFIX, log, leaseTtlSeconds: 10, renewMarginMs: 8000, renewRetryMs: 500, callTimeoutMs: 2000,
      observer: { leaseRenewed: () => renewals++ },
    });
    const admin = cluster.admin(healthy);
    const ctl = new AbortController();
    try {
      await source.networkConfig(ctl.signal);
      await source.acquire({ attrs: attrs(1) }, ctl.signal);
      await cluster.partition(cut);
      const t0 = performance.now();
      await admin.put(peerLeaseKey(7)).value(peerLeaseValue(7));
      await until('the lease written through a healthy member to be routed', () => routed(node.ns, 7), 60_000, () => d.log().slice(-3000));
      const convergeMs = performance.now() - t0;
      const before = renewals;
      await until('two renewals while cut off', () => renewals >= before + 2, 30_000, () => JSON.stringify(log.records.slice(-10)));
      return { convergeMs, renewals: renewals - before, lost: log.records.some((r) => r.msg.startsWith('lost our lease')) };
    } finally {
      ctl.abort();
      admin.close();
      await source.close();
      await cluster.heal(cut);
    }
  });
}

export interface DeadEndpointResult {
  /** From exec to subnet.env written. */
  envMs: number;
  /** From exec to the first full reconcile done. */
  readyMs: number;
  /** Whether subnet.env exists once ready. */
  subnetEnv: boolean;
  routed: boolean;
}

/** Dead endpoint: the first endpoint drops SYNs. */
export async function deadEndpoint(): Promise<DeadEndpointResult> {
  return onCluster(async (cluster, node) => {
    const admin = cluster.admin(cluster.members[1]!);
    await admin.put(`${ETCD_PREFIX}/config`).value(NET_CONF);
    await admin.put(peerLeaseKey(3)).value(peerLeaseValue(3));
    admin.close();
    await cluster.dropSyns(cluster.members[0]!);
    const t0 = performance.now();
    const d = node.weftd(cluster.endpoints);
    const envAt = await logged(d, /wrote the subnet file/);
    const readyAt = await logged(d, READY);
    const subnetEnv = await stat(join(node.dir, 'subnet.env')).then(() => true, () => false);
    return { envMs: envAt - t0, readyMs: readyAt - t0, subnetEnv, routed: await routed(node.ns, 3) };
  });
}

export interface AuthRestartResult {
  /** Listings after the first one. */
  relists: number;
  /** Leases written around the restart that the watch never delivered. */
  missed: number;
  /** Leases delivered more than once. */
  repeated: number;
}

/** Auth restart: with auth on, the member the watch is on restarts. */
export async function authRestart(): Promise<AuthRestartResult> {
  const cluster = await EtcdCluster.start();
  const ctl = new AbortController();
  let source: EtcdLeaseSource | undefined;
  try {
    const admin = cluster.admin(cluster.members[0]!);
    await admin.put(`${ETCD_PREFIX}/config`).value(NET_CONF);
    await admin.role('root').create();
    await (await admin.user('root').create('s3cret')).addRole('root');
    await admin.auth.authEnable();
    admin.close();
    const auth = { username: 'root', password: 's3cret' };
    const log = memoryLogger();
    let restarts = 0;
    // The source's one endpoint is the member to restart: its watch has to come back to it.
    const watched = cluster.members[0]!;
    source = await EtcdLeaseSource.create({
      endpoints: [cluster.unixEndpoint(watched)], prefix: ETCD_PREFIX, log, ...auth, callTimeoutMs: 3000,
      observer: { watchRestarted: () => restarts++ },
    });
    const table = new LeaseTable();
    const added = new Map<string, number>();
    table.subscribe((batch) => {
      for (const ev of batch) if (ev.type === 'added') added.set(ev.lease.peer, (added.get(ev.lease.peer) ?? 0) + 1);
    });
    await source.networkConfig(ctl.signal);
    await source.acquire({ attrs: attrs(2) }, ctl.signal);
    const running = source.watch(table, ctl.signal);
    await until('the first listing', () => table.synced);
    const writer = cluster.admin(cluster.members.find((m) => m !== watched)!, auth);
    const keys: string[] = [];
    try {
      const put = async (n: number) => {
        await writer.put(peerLeaseKey(n)).value(peerLeaseValue(n));
        keys.push(peerLeaseKey(n));
      };
      await put(10);
      await until('the first lease', () => table.get(peerLeaseKey(10)) !== undefined);
      await cluster.stop(watched);
      for (let n = 11; n < 16; n++) await put(n);
      await cluster.restart(watched);
      for (let n = 16; n < 21; n++) await put(n);
      await until('every lease written', () => keys.every((k) => table.get(k) !== undefined), 30_000).catch(() => {});
    } finally {
      writer.close();
    }
    const listings = log.records.filter((r) => r.msg === 'listed leases').length;
    ctl.abort();
    await running;
    return {
      relists: listings - 1 + restarts,
      missed: keys.filter((k) => table.get(k) === undefined).length,
      repeated: [...added.values()].filter((n) => n > 1).length,
    };
  } finally {
    ctl.abort();
    await source?.close();
    await cluster.close();
  }
}

export interface HostileResult {
  /** How many times weftd exited while the endpoint misbehaved. */
  exits: number;
  /** Faults served (each of the five at least twice). */
  faults: number;
  /** Warnings weftd logged meanwhile. */
  warnings: number;
  /** Whether weftd converged once the endpoint forwarded to etcd. */
  converged: boolean;
}

/** Hostile endpoint: weftd's only endpoint misbehaves, then forwards to a real etcd. */
export async function hostileEndpoint(): Promise<HostileResult> {
  const etcd = await EtcdServer.start({ unixSocket: true });
  const dir = await mkdtemp(join(tmpdir(), 'weft-hostile-'));
  const hostile = await HostileEtcd.start(join(dir, 'hostile.sock'), etcd.endpoint.slice('unix://'.length));
  const ns = await nodeNetns('hostile');
  let d: Daemon | undefined;
  try {
    const admin = adminClient(etcd.endpoint);
    await admin.put(`${ETCD_PREFIX}/config`).value(NET_CONF);
    admin.close();
    d = spawnWeftd(ns, [`--etcd-endpoints=${hostile.endpoint}`, '--iface=eth0', `--subnet-file=${join(dir, 'subnet.env')}`]);
    const proc = d.proc;
    await until('every fault served twice', () => hostile.servedEach(2) || proc.exitCode !== null || proc.signalCode !== null, 120_000, () => d!.log().slice(-3000));
    const exits = proc.exitCode !== null || proc.signalCode !== null ? 1 : 0;
    const warnings = count(d, /^W/m);
    hostile.forward = true;
    const converged = exits === 0 && await logged(d, READY, 1, 60_000).then(() => true, () => false);
    return { exits, faults: Object.values(hostile.served).reduce((a, b) => a + b, 0), warnings, converged };
  } finally {
    if (d) await stopDaemon(d);
    await ns.remove();
    await hostile.close();
    await rm(dir, { recursive: true, force: true });
    await etcd.stop();
  }
}

export interface LargeResult {
  /** From exec to the listing of every lease logged. */
  startListS: number;
  /** From the watch cancelled for a compacted revision to the relist logged. */
  relistS: number;
  /** Leases weftd listed each time. */
  listed: number[];
}

/** Large answers: `leases` leases read at start and after a compaction, through a proxy delaying 20 ms each way. */
export async function largeAnswers(leases = 50_000, delayMs = 20): Promise<LargeResult> {
  const etcd = await EtcdServer.start({ unixSocket: true });
  const dir = await mkdtemp(join(tmpdir(), 'weft-large-'));
  const proxy = await DelayProxy.start(join(dir, 'delay.sock'), etcd.endpoint.slice('unix://'.length), delayMs);
  const ns = await nodeNetns('large');
  let d: Daemon | undefined;
  try {
    const admin = adminClient(etcd.endpoint);
    try {
      await admin.put(`${ETCD_PREFIX}/config`).value(NET_CONF);
      await seedLeases(admin, leases);
      const t0 = performance.now();
      d = spawnWeftd(ns, [`--etcd-endpoints=${proxy.endpoint}`, '--iface=eth0', `--subnet-file=${join(dir, 'subnet.env')}`]);
      const listedAt = await logged(d, LISTED, 1, 300_000);
      await logged(d, READY, 1, 300_000);
      // A change while the watch is away, then history compacted: the watch cannot resume.
      proxy.refuse(true);
      proxy.drop();
      await admin.delete().key(peerLeaseKey(0));
      await admin.put(peerLeaseKey(leases)).value(peerLeaseValue(leases));
      const rev = (await admin.get('anything').exec()).header.revision;
      await admin.kv.compact({ revision: rev, physical: true });
      proxy.refuse(false);
      const relistFrom = await logged(d, /relisting leases: the watch was cancelled/, 1, 300_000);
      const relistedAt = await logged(d, LISTED, 2, 300_000);
      const listed = [...d.log().matchAll(/ listed leases .*?count=(\d+)/g)].map((m) => Number(m[1]));
      return { startListS: (listedAt - t0) / 1000, relistS: (relistedAt - relistFrom) / 1000, listed };
    } finally {
      admin.close();
    }
  } finally {
    if (d) await stopDaemon(d);
    await ns.remove();
    await proxy.close();
    await rm(dir, { recursive: true, force: true });
    await etcd.stop();
  }
}
