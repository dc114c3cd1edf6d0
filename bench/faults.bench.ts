/**
 * make bench-faults: what faults cost, measured on the e2e cluster harness (test/support/cluster.ts:
 * network namespaces on one underlay bridge, a real etcd or the test API server, real bin/weftd,
 * pods wired by bin/weft pinging each other all along). One fault at a time, one figure each:
 *
 * - burst: 100 leases written to etcd back to back → how many reach every node's kernel;
 * - sigkill: weftd SIGKILLed and restarted 10 times under traffic → route deletions seen by
 *   `ip monitor route` on every node, subnet changes, pings lost;
 * - kernel_chaos: 1,000 random deletions of Weft's routes, FDB and neighbour entries on one node
 *   (and its vxlan device twice) → p99 time until each is back (from just before the delete),
 *   and entries never back within 5 s;
 * - bad_peers: peers publishing malformed leases (fuzzed values, keys and overlapping subnets,
 *   and known peers turning bad) and, in kube mode, malformed annotations → agent exits, and good
 *   peers disturbed (an entry of theirs removed on any node, or a ping between pods lost);
 * - race: 50 weftd started in the same instant against one etcd → duplicate subnets, exits;
 * - etcd_outage: etcd stopped 60 s → pings lost; then the time until a lease written after
 *   recovery is in every kernel, and the same after a compaction past every watcher's revision
 *   (the weftds frozen and etcd restarted meanwhile, so every watch must resume from a compacted
 *   revision); the larger of the two is outage_converge_ms;
 * - api_outage: kube mode, the API server answering 503 to everything for 60 s, then every watch
 *   answered with 410 Gone → the time until a Node added after recovery is in every kernel.
 *
 * WEFT_BENCH_OUTAGE_S shortens the outages (default 60). Needs root.
 *
 * Last line: burst_installed=<of 100> race_duplicates=<> race_exits=<> outage_pings_lost=<>
 * outage_converge_ms=<> api_outage_converge_ms=<> sigkill_route_flaps=<> chaos_restore_p99_ms=<>
 * chaos_unrestored=<> bad_peer_exits=<> bad_peer_disturbed=<>
 *
 * Percentiles as bench/support/stats.ts defines them: the nearest rank.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { Etcd3 } from 'etcd3';
import fc from 'fast-check';
import { NUD_PERMANENT, NetlinkHandle } from '../src/netlink/index.ts';
import type { NetlinkEvent } from '../src/netlink/index.ts';
import { fdbKey, neighKey, routeKey } from '../src/netlink/records.ts';
import { WEFT_RTPROT, ours } from '../src/reconcile/state.ts';
import { sleep } from '../src/retry.ts';
import { Cluster } from '../test/support/cluster.ts';
import type { ClusterNode, Pod } from '../test/support/cluster.ts';
import { ApiError } from '../test/support/kube-apiserver.ts';
import { isRoot } from '../test/support/netns.ts';
import type { Netns } from '../test/support/netns.ts';
import { until } from '../test/support/until.ts';
import { FLANNEL_PREFIX, flannelNode } from '../test/support/kube-nodes.ts';
import { percentile } from './support/stats.ts';

const PREFIX = '/coreos.com/network';
const OUTAGE_MS = Number(process.env.WEFT_BENCH_OUTAGE_S ?? 60) * 1000;
const hex = (n: number) => n.toString(16).padStart(2, '0');

/** A valid lease value as flanneld writes it, for a fake peer `i` (public IPs from 198.18.0.0/15). */
function leaseValue(i: number): string {
  return `{"PublicIP":"198.18.${i >> 8}.${(i & 255) + 1}","PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"0e:00:00:00:${hex(i >> 8)}:${hex(i & 255)}"}}`;
}

const subnetKey = (third: number) => `${PREFIX}/subnets/10.244.${third}.0-24`;

/**
 * Pings between pods every 200 ms until stopped; then how many went unanswered. `ping -O` says
 * "no answer yet" for each request not answered when the next one goes out (200 ms later, where
 * an answer takes well under a millisecond), which is what is counted.
 */
class Pinger {
  readonly #procs: { proc: ChildProcess; out: string[] }[] = [];

  constructor(pairs: [Pod, Pod][]) {
    for (const [from, to] of pairs) {
      const proc = spawn('ip', ['netns', 'exec', from.ns.name, 'ping', '-O', '-i', '0.2', to.ip], { stdio: ['ignore', 'pipe', 'ignore'] });
      const out: string[] = [];
      proc.stdout!.on('data', (c: Buffer) => out.push(c.toString()));
      this.#procs.push({ proc, out });
    }
  }

  async stop(): Promise<number> {
    let lost = 0;
    for (const { proc, out } of this.#procs) {
      const exited = new Promise((resolve) => proc.once('exit', resolve));
      proc.kill('SIGINT');
      await exited;
      const text = out.join('');
      if (!/packets transmitted/.test(text)) throw new Error(`ping printed no summary: ${text}`);
      lost += text.split('\n').filter((l) => l.startsWith('no answer yet')).length;
    }
    return lost;
  }
}

/** Every pod pinging the next one round the ring (one pod per node). */
function ring(pods: Pod[]): [Pod, Pod][] {
  return pods.map((p, i) => [p, pods[(i + 1) % pods.length]!]);
}

/** `ip monitor route` in each namespace: counts Weft's routes deleted while it runs. */
class RouteWatch {
  readonly #procs: { proc: ChildProcess; text: string[] }[] = [];

  constructor(nss: Netns[]) {
    for (const ns of nss) {
      const proc = spawn('ip', ['-n', ns.name, 'monitor', 'route'], { stdio: ['ignore', 'pipe', 'ignore'] });
      const text: string[] = [];
      proc.stdout!.on('data', (c: Buffer) => text.push(c.toString()));
      this.#procs.push({ proc, text });
    }
  }

  /** Stops; returns the deleted Weft routes, one line each. */
  async stop(): Promise<string[]> {
    await sleep(200);
    const deleted: string[] = [];
    for (const { proc, text } of this.#procs) {
      proc.kill();
      for (const line of text.join('').split('\n')) if (line.startsWith('Deleted') && line.includes(`proto ${WEFT_RTPROT}`)) deleted.push(line);
    }
    return deleted;
  }
}

/** Waits until `nodes` all have a Weft route to `dst`; returns the milliseconds since `t0`. */
async function convergence(handles: NetlinkHandle[], dst: string, t0: number, timeoutMs = 120_000): Promise<number> {
  await until(`${dst} in every kernel`, async () => {
    const all = await Promise.all(handles.map(async (h) => (await h.routeList({ protocol: WEFT_RTPROT })).some((r) => r.dst === dst)));
    return all.every(Boolean);
  }, timeoutMs);
  return performance.now() - t0;
}

function exits(nodes: ClusterNode[]): number {
  return nodes.filter((n) => n.daemon.proc.exitCode !== null || n.daemon.proc.signalCode !== null).length;
}

/** 100 leases written back to back; how many of them every node's kernel holds once it is quiet. */
async function burst(admin: Etcd3, handles: NetlinkHandle[]): Promise<number> {
  const thirds = Array.from({ length: 100 }, (_, i) => 150 + i);
  await Promise.all(thirds.map((t) => admin.put(subnetKey(t)).value(leaseValue(t))));
  const installed = async () => {
    const counts = await Promise.all(handles.map(async (h) => {
      const have = new Set((await h.routeList({ protocol: WEFT_RTPROT })).map((r) => r.dst));
      return thirds.filter((t) => have.has(`10.244.${t}.0/24`)).length;
    }));
    return Math.min(...counts);
  };
  await until('the burst in every kernel', async () => (await installed()) === 100, 15_000).catch(() => undefined);
  return installed();
}

/** weftd SIGKILLed and restarted 10 times, round the nodes, under traffic. */
async function sigkill(c: Cluster, pods: Pod[]): Promise<{ flaps: number; subnetChanges: number; pingsLost: number }> {
  const before = await Promise.all(c.nodes.map((n) => c.subnetEnv(n)));
  const watch = new RouteWatch(c.nodes.map((n) => n.ns));
  const pinger = new Pinger(ring(pods));
  for (let i = 0; i < 10; i++) {
    const node = c.nodes[i % c.nodes.length]!;
    await c.stopWeftd(node, 'SIGKILL');
    await c.restartWeftd(node);
  }
  await sleep(1000);
  const pingsLost = await pinger.stop();
  const deleted = await watch.stop();
  const after = await Promise.all(c.nodes.map((n) => c.subnetEnv(n)));
  const subnetChanges = before.filter((env, i) => env.FLANNEL_SUBNET !== after[i]!.FLANNEL_SUBNET).length;
  for (const line of deleted) console.log(`  sigkill: route deleted: ${line}`);
  return { flaps: deleted.length, subnetChanges, pingsLost };
}

/**
 * The key of a route, neighbour or FDB entry in a monitor event, with the event's action and
 * whether the entry is Weft's (tagged route, permanent neighbour or FDB entry): the kernel makes
 * neighbour entries of its own (incomplete, stale) under the same key, which are no repair.
 */
function entryKey(e: NetlinkEvent): { key: string; action: string; weft: boolean } | undefined {
  if (e.kind === 'route') return { key: `route ${routeKey(e.route)}`, action: e.action, weft: e.route.protocol === WEFT_RTPROT };
  if (e.kind === 'neigh') return { key: `neigh ${neighKey(e.neigh)}`, action: e.action, weft: (e.neigh.state & NUD_PERMANENT) !== 0 };
  if (e.kind === 'fdb') return { key: `fdb ${fdbKey(e.fdb)}`, action: e.action, weft: (e.fdb.state & NUD_PERMANENT) !== 0 };
  return undefined;
}

/** 1,000 random deletions of Weft's entries on `node` (and its vxlan device twice); restore times. */
async function kernelChaos(node: ClusterNode, deletions = 1000): Promise<{ times: number[]; unrestored: number }> {
  // Deletions on one handle, events on another: a handle's monitor does not echo its own changes.
  const h = NetlinkHandle.open(node.ns.path);
  const watcher = NetlinkHandle.open(node.ns.path);
  // An entry is back at the first "new" of its key after the "del" of it.
  const waiters = new Map<string, { deleted: boolean; back: () => void }>();
  const mon = await watcher.monitor(['route', 'neigh'], (events) => {
    for (const e of events) {
      const k = entryKey(e);
      const w = k && waiters.get(k.key);
      if (!k || !w) continue;
      if (k.action === 'del') w.deleted = true;
      else if (w.deleted && k.weft) {
        waiters.delete(k.key);
        w.back();
      }
    }
  });
  const times: number[] = [];
  const devices: number[] = [];
  let late = 0;
  const random = fc.sample(fc.nat(1 << 30), { numRuns: deletions, seed: 17 });
  try {
    const entries = async () => {
      const vx = await h.linkByName('flannel.1');
      const [routes, neighs, fdb] = await Promise.all([h.routeList({ protocol: WEFT_RTPROT }), h.neighList({ linkIndex: vx.index }), h.fdbList({ linkIndex: vx.index })]);
      return { vx, ...ours({ routes, neighs, fdb }, { protocol: WEFT_RTPROT, devices: [vx.index] }) };
    };
    const initial = await entries();
    let cur = initial;
    const total = () => cur.routes.length + cur.neighs.length + cur.fdb.length;
    const full = total();
    for (let i = 0; i < deletions; i++) {
      if (i === Math.floor(deletions / 3) || i === Math.floor((2 * deletions) / 3)) {
        // The vxlan device itself: back when the device and all its entries are.
        const t0 = performance.now();
        await h.linkDel(cur.vx.index);
        const back = await until('the vxlan device and its entries back', async () => {
          try {
            cur = await entries();
            return total() === full;
          } catch {
            return false;
          }
        }, 10_000).then(() => true, () => false);
        if (back) {
          devices.push(performance.now() - t0);
          times.push(devices.at(-1)!);
        } else {
          late++;
        }
        cur = await entries();
      }
      const pick = random[i]! % total();
      let key: string;
      let del: () => Promise<void>;
      if (pick < cur.routes.length) {
        const r = cur.routes[pick]!;
        key = `route ${routeKey(r)}`;
        del = () => h.routeDel({ dst: r.dst, protocol: WEFT_RTPROT });
      } else if (pick < cur.routes.length + cur.neighs.length) {
        const n = cur.neighs[pick - cur.routes.length]!;
        key = `neigh ${neighKey(n)}`;
        del = () => h.neighDel({ linkIndex: n.linkIndex, ip: n.ip });
      } else {
        const f = cur.fdb[pick - cur.routes.length - cur.neighs.length]!;
        key = `fdb ${fdbKey(f)}`;
        del = () => h.fdbDel({ linkIndex: f.linkIndex, mac: f.mac, dst: f.dst });
      }
      const back = new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => {
          waiters.delete(key);
          resolve(false);
        }, 5000);
        waiters.set(key, {
          deleted: false,
          back: () => {
            clearTimeout(timer);
            resolve(true);
          },
        });
      });
      const t0 = performance.now();
      await del();
      if (await back) times.push(performance.now() - t0);
      else late++;
    }
    // Never restored: what the kernel lacks a while after the last deletion.
    await sleep(2000);
    // Keyed without the device index, which the two device deletions changed.
    const keys = (x: typeof cur) => new Set([...x.routes.map((r) => `route ${routeKey(r)}`), ...x.neighs.map((n) => `neigh ${n.ip}`), ...x.fdb.map((f) => `fdb ${f.mac} ${f.dst}`)]);
    const end = keys(await entries());
    const unrestored = [...keys(initial)].filter((k) => !end.has(k)).length;
    console.log(`  kernel_chaos: the vxlan device and all its entries back in ${devices.map((ms) => ms.toFixed(1)).join(' and ')} ms`);
    if (late > 0) console.log(`  kernel_chaos: ${late} entries took longer than 5 s (not in the percentiles)`);
    return { times, unrestored };
  } finally {
    mon.stop();
    watcher.close();
    h.close();
  }
}

/** Every entry (route, neighbour, FDB) of the good peers, with the peers they belong to, in every kernel. */
class GoodPeerWatch {
  readonly #disturbed = new Set<string>();
  readonly #stops: (() => void)[] = [];

  /** `good` maps a route destination, a neighbour IP or a VTEP MAC to the peer it belongs to. */
  static async start(handles: NetlinkHandle[], good: Map<string, string>): Promise<GoodPeerWatch> {
    const w = new GoodPeerWatch();
    for (const h of handles) {
      const mon = await h.monitor(['route', 'neigh'], (events) => {
        for (const e of events) {
          const id = e.kind === 'route' && e.action === 'del' ? e.route.dst
            : e.kind === 'neigh' && e.action === 'del' ? e.neigh.ip
              : e.kind === 'fdb' && e.action === 'del' ? e.fdb.mac : undefined;
          const peer = id && good.get(id);
          if (peer) w.#disturbed.add(peer);
        }
      });
      w.#stops.push(() => mon.stop());
    }
    return w;
  }

  stop(): Set<string> {
    for (const s of this.#stops) s();
    return this.#disturbed;
  }
}

/** The good peers' entries as a node holds them: route destination, gateway (neighbour IP), VTEP MAC → peer. */
async function goodEntries(h: NetlinkHandle, isGood: (dst: string) => boolean): Promise<Map<string, string>> {
  const vx = await h.linkByName('flannel.1');
  const routes = (await h.routeList({ protocol: WEFT_RTPROT })).filter((r) => isGood(r.dst));
  const neighs = await h.neighList({ linkIndex: vx.index });
  const good = new Map<string, string>();
  for (const r of routes) {
    good.set(r.dst, r.dst);
    if (r.gateway) good.set(r.gateway, r.dst);
    const mac = neighs.find((n) => n.ip === r.gateway)?.mac;
    if (mac) good.set(mac, r.dst);
  }
  return good;
}

/** Fuzzed lease values, keys and subnets from peers, and known fake peers turning bad (etcd). */
async function badEtcdPeers(c: Cluster, admin: Etcd3, handles: NetlinkHandle[], pods: Pod[]): Promise<{ exits: number; disturbed: number; keptBad: number }> {
  const turned = Array.from({ length: 20 }, (_, i) => 150 + i);
  const isGood = (dst: string) => !turned.some((t) => dst === `10.244.${t}.0/24`);
  const good = new Map<string, string>();
  for (const h of handles) for (const [k, v] of await goodEntries(h, isGood)) good.set(k, v);
  const watch = await GoodPeerWatch.start(handles, good);
  const pinger = new Pinger(ring(pods));
  const values = fc.sample(fc.oneof(fc.json(), fc.string(), fc.constant(leaseValue(1).replace('vxlan', 'host-gw')), fc.constant('{"PublicIP":"198.18.0.1","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"zz"}}')), { numRuns: 300, seed: 7 });
  const keys = [
    ...Array.from({ length: 200 }, (_, i) => `${PREFIX}/subnets/10.245.${i}.0-24`),
    ...fc.sample(fc.string(), { numRuns: 40, seed: 9 }).map((s) => `${PREFIX}/subnets/${s}`),
    `${PREFIX}/subnets/10.244.0.0-16`, `${PREFIX}/subnets/10.244.0.0-20`, `${PREFIX}/subnets/10.244.150.0-23`,
  ];
  await Promise.all(keys.map((k, i) => admin.put(k).value(i < 200 ? values[i]! : leaseValue(1000 + i))));
  await Promise.all(turned.map((t, i) => admin.put(subnetKey(t)).value(values[200 + i]!)));
  await sleep(3000);
  const pingsLost = await pinger.stop();
  const disturbed = watch.stop();
  // The known peers that turned bad keep their last good routes on every node.
  const keptBad = Math.min(...await Promise.all(handles.map(async (h) => {
    const have = new Set((await h.routeList({ protocol: WEFT_RTPROT })).map((r) => r.dst));
    return turned.filter((t) => have.has(`10.244.${t}.0/24`)).length;
  })));
  await Promise.all([...keys, ...turned.map(subnetKey)].map((k) => admin.delete().key(k)));
  console.log(`  bad_peers etcd: ${keys.length + turned.length} bad values; pings lost ${pingsLost}; known peers turned bad still routed on every node: ${keptBad} of ${turned.length}`);
  return { exits: exits(c.nodes), disturbed: disturbed.size + (pingsLost > 0 ? 1 : 0), keptBad };
}

/** 50 weftd started in one instant against the cluster's etcd. */
async function race(c: Cluster): Promise<{ duplicates: number; exits: number }> {
  const joined = await c.addNodes(50);
  await Promise.all(joined.map((n) => until(`weftd on ${n.name} ready or gone`, () => n.daemon.proc.exitCode !== null || /ready: the kernel holds every lease/.test(n.daemon.log()), 180_000)));
  const subnets = await Promise.all(c.nodes.map((n) => c.subnetEnv(n).then((e) => e.FLANNEL_SUBNET ?? '', () => '')));
  const held = new Map<string, number>();
  for (const s of subnets.filter(Boolean)) held.set(s, (held.get(s) ?? 0) + 1);
  const duplicates = [...held.values()].filter((k) => k > 1).length;
  const exited = exits(joined);
  for (const n of joined) if (n.daemon.proc.exitCode !== null) console.log(`  race: ${n.name} exited ${n.daemon.proc.exitCode}\n${n.daemon.log().slice(-2000)}`);
  await Promise.all(joined.map((n) => c.stopWeftd(n)));
  return { duplicates, exits: exited };
}

/** etcd stopped for the outage; then a lease written after recovery, and after a compaction. */
async function etcdOutage(c: Cluster, handles: NetlinkHandle[], pods: Pod[]): Promise<{ pingsLost: number; afterOutage: number; afterCompaction: number }> {
  const etcd = c.etcd!;
  const pinger = new Pinger(ring(pods));
  await etcd.pause();
  await sleep(OUTAGE_MS);
  await etcd.resume();
  const pingsLost = await pinger.stop();
  const admin = new Etcd3({ hosts: etcd.endpoint });
  try {
    let t0 = performance.now();
    await admin.put(subnetKey(250)).value(leaseValue(250));
    const afterOutage = await convergence(handles, '10.244.250.0/24', t0);

    // Every weftd frozen while etcd restarts (their connections die with it), a lease is written
    // and history compacted past it: each watch has to resume from a compacted revision.
    const pids = c.nodes.filter((n) => n.daemon.proc.exitCode === null).map((n) => n.daemon.proc.pid!);
    for (const pid of pids) process.kill(pid, 'SIGSTOP');
    await admin.close();
    await etcd.pause();
    await etcd.resume();
    const admin2 = new Etcd3({ hosts: etcd.endpoint });
    try {
      await admin2.put(subnetKey(251)).value(leaseValue(251));
      const rev = (await admin2.get('anything').exec()).header.revision;
      await admin2.kv.compact({ revision: rev, physical: true });
      t0 = performance.now();
      for (const pid of pids) process.kill(pid, 'SIGCONT');
      const afterCompaction = await convergence(handles, '10.244.251.0/24', t0);
      await admin2.delete().key(subnetKey(250));
      await admin2.delete().key(subnetKey(251));
      return { pingsLost, afterOutage, afterCompaction };
    } finally {
      admin2.close();
    }
  } finally {
    admin.close();
  }
}

/** A peer Node as flanneld annotates it, number `n`. */
function peerNode(n: number, annotations: Record<string, string> = {}): Record<string, unknown> {
  return flannelNode({ name: `peer-${n}`, podCIDR: `10.244.${n}.0/24`, publicIP: `198.18.1.${n}`, vtepMac: `0e:00:00:01:${hex(n >> 8)}:${hex(n & 255)}`, annotations });
}

/** Kube mode: the API server out for the outage, then 410 Gone for every watch; and fuzzed annotations. */
async function apiOutageAndBadAnnotations(): Promise<{ converge: number; pingsLost: number; exits: number; disturbed: number }> {
  // The test API server: only it can answer every request 503, break every watch and force 410 Gone.
  const c = await Cluster.start({ nodes: 3, backend: 'vxlan', mode: 'kube', testApiServer: true });
  const handles = c.nodes.map((n) => NetlinkHandle.open(n.ns.path));
  try {
    const api = c.testApi!;
    const pods = [];
    for (const n of c.nodes) pods.push(await c.addPod(n));
    for (const [a, b] of ring(pods)) await c.waitPing(a, b);

    const pinger = new Pinger(ring(pods));
    api.beforeServe = () => {
      throw new ApiError(503, 'ServiceUnavailable', 'the API server is down (bench)');
    };
    api.breakWatches();
    await sleep(OUTAGE_MS);
    api.compact();
    api.beforeServe = undefined;
    const t0 = performance.now();
    api.addNode(peerNode(200));
    const converge = await convergence(handles, '10.244.200.0/24', t0);
    const pingsLost = await pinger.stop();

    const P = FLANNEL_PREFIX;
    const good = new Map<string, string>();
    for (const h of handles) for (const [k, v] of await goodEntries(h, () => true)) good.set(k, v);
    const watch = await GoodPeerWatch.start(handles, good);
    const badPinger = new Pinger(ring(pods));
    const text = fc.sample(fc.oneof(fc.string(), fc.json(), fc.constantFrom('garbage', '', '{}', 'null', '999.1.2.3', 'fe80::1')), { numRuns: 200, seed: 11 });
    const keys = ['kube-subnet-manager', 'backend-type', 'backend-data', 'public-ip', 'public-ipv6', 'backend-v6-data'];
    for (let i = 0; i < 100; i++) {
      const annotations = { [`${P}/${keys[i % keys.length]}`]: text[i]!, [`${P}/${keys[(i + 1) % keys.length]}`]: text[100 + i]! };
      // New Nodes that are bad from the start, some with pod CIDRs overlapping a real node's.
      const node = peerNode(201 + (i % 50), annotations) as { metadata: { name: string }; spec: Record<string, unknown> };
      node.metadata.name = `bad-${i}`;
      if (i % 10 === 0) node.spec = { podCIDR: '10.244.0.0/16', podCIDRs: ['10.244.0.0/16'] };
      api.addNode(node);
    }
    // The good peer turning bad keeps its last good lease: it is not counted as a good peer here.
    api.modifyNode('peer-200', (n) => {
      ((n.metadata as { annotations: Record<string, string> }).annotations)[`${P}/public-ip`] = 'garbage';
    });
    await sleep(3000);
    const badLost = await badPinger.stop();
    const disturbed = [...watch.stop()].filter((peer) => peer !== '10.244.200.0/24');
    console.log(`  api_outage: pings lost during the outage ${pingsLost}; bad_peers kube: 101 bad Nodes, pings lost ${badLost}`);
    return { converge, pingsLost, exits: exits(c.nodes), disturbed: disturbed.length + (badLost > 0 ? 1 : 0) };
  } finally {
    for (const h of handles) h.close();
    await c.stop();
  }
}

async function main(): Promise<void> {
  if (!isRoot()) {
    console.error('bench-faults needs root: it creates network namespaces');
    process.exit(1);
  }
  const c = await Cluster.start({ nodes: 3, backend: 'vxlan', mode: 'etcd' });
  const handles = c.nodes.map((n) => NetlinkHandle.open(n.ns.path));
  const admin = new Etcd3({ hosts: c.etcd!.endpoint });
  try {
    const pods = [];
    for (const n of c.nodes) pods.push(await c.addPod(n));
    for (const [a, b] of ring(pods)) await c.waitPing(a, b);

    const burstInstalled = await burst(admin, handles);
    console.log(`burst: ${burstInstalled} of 100 leases in every node's kernel`);

    const kill = await sigkill(c, pods);
    console.log(`sigkill: 10 kills → ${kill.flaps} route deletions, ${kill.subnetChanges} subnet changes, ${kill.pingsLost} pings lost`);

    const chaos = await kernelChaos(c.nodes[0]!);
    const chaosP99 = percentile(chaos.times, 99);
    console.log(`kernel_chaos: ${chaos.times.length + chaos.unrestored} deletions → restored p50 ${percentile(chaos.times, 50).toFixed(1)} ms, p99 ${chaosP99.toFixed(1)} ms, max ${Math.max(...chaos.times).toFixed(1)} ms, ${chaos.unrestored} never restored`);

    const bad = await badEtcdPeers(c, admin, handles, pods);

    const raced = await race(c);
    console.log(`race: 50 weftd at once → ${raced.duplicates} duplicate subnets, ${raced.exits} exits`);

    admin.close();
    const outage = await etcdOutage(c, handles, pods);
    console.log(`etcd_outage: ${OUTAGE_MS / 1000} s → ${outage.pingsLost} pings lost; converged ${outage.afterOutage.toFixed(0)} ms after recovery, ${outage.afterCompaction.toFixed(0)} ms after a compaction past every watcher`);

    const kube = await apiOutageAndBadAnnotations();
    console.log(`api_outage: ${OUTAGE_MS / 1000} s then 410 Gone → converged ${kube.converge.toFixed(0)} ms`);
    console.log(`bad_peers: ${bad.exits + kube.exits} exits, ${bad.disturbed + kube.disturbed} good peers disturbed`);

    console.log([
      `burst_installed=${burstInstalled}`, `race_duplicates=${raced.duplicates}`, `race_exits=${raced.exits}`,
      `outage_pings_lost=${outage.pingsLost}`, `outage_converge_ms=${Math.max(outage.afterOutage, outage.afterCompaction).toFixed(0)}`,
      `api_outage_converge_ms=${kube.converge.toFixed(0)}`, `sigkill_route_flaps=${kill.flaps}`,
      `chaos_restore_p99_ms=${chaosP99.toFixed(1)}`, `chaos_unrestored=${chaos.unrestored}`,
      `bad_peer_exits=${bad.exits + kube.exits}`, `bad_peer_disturbed=${bad.disturbed + kube.disturbed}`,
    ].join(' '));
  } finally {
    admin.close();
    for (const h of handles) h.close();
    await c.stop();
  }
}

await main();
