/**
 * The harness the weftd benches share (bench-footprint, bench-scale): bin/weftd as a node runs it,
 * in a network namespace of its own, against a real etcd holding N vxlan leases or the test API
 * server (in a child process) holding N Nodes. A run is timed from exec to subnet.env written and
 * to the first full reconcile done (weftd logs both the moment they happen); the kernel's entry
 * count is checked afterwards, and /proc gives the memory and CPU figures.
 */
import { fork, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Etcd3 } from 'etcd3';
import { formatIP, parseIP } from '../../src/ip/ip.ts';
import { encodeLeaseValue } from '../../src/lease/etcd/codec.ts';
import { createNetns, forwardIntoNetns } from '../../test/support/netns.ts';
import type { Netns } from '../../test/support/netns.ts';
import { spawnWeftd, stopDaemon } from '../../test/support/cluster.ts';
import type { Daemon } from '../../test/support/cluster.ts';

export const ETCD_PREFIX = '/coreos.com/network';
export const NET_CONF = '{"Network":"10.0.0.0/8","Backend":{"Type":"vxlan"}}';
const CLK_TCK = 100;
const hex = (n: number) => n.toString(16).padStart(2, '0');

/** The n-th peer's VTEP MAC, public address (198.18.0.0/15) and /24 of 10.0.0.0/8 (from 10.1.0.0 on). */
export const peerMac = (n: number) => `6e:00:00:${hex((n >> 16) & 255)}:${hex((n >> 8) & 255)}:${hex(n & 255)}`;
export const peerIp = (n: number) => `198.${18 + (n >> 16)}.${(n >> 8) & 255}.${n & 255}`;
export const peerSubnet = (n: number) => `10.${(n + 256) >> 8}.${(n + 256) & 255}.0`;
/** The node's own underlay address (eth0 in {@link nodeNetns}). */
export const OWN_IP = '198.51.100.1';

/**
 * What the peers' leases are: vxlan over IPv4 (the benches' default), host-gw over IPv4, or vxlan
 * in dual stack. host-gw needs its peers on the node's own link, and dual stack an IPv6 address of
 * the node's: {@link underlayFor} adds them.
 */
export type LeaseKind = 'vxlan' | 'host-gw' | 'vxlan-dual';
export const NET_CONFS: Record<LeaseKind, string> = {
  vxlan: NET_CONF,
  'host-gw': '{"Network":"10.0.0.0/8","Backend":{"Type":"host-gw"}}',
  'vxlan-dual': '{"Network":"10.0.0.0/8","EnableIPv6":true,"IPv6Network":"fd00::/32","Backend":{"Type":"vxlan"}}',
};
/** The n-th peer's IPv6 /64 of fd00::/32 (from the 256th on, like {@link peerSubnet}) and its public IPv6 address. */
export const peerSubnet6 = (n: number) => formatIP({ family: 6, value: (0xfd00n << 112n) | (BigInt(n + 256) << 64n) });
export const peerIp6 = (n: number) => `2001:db8:2::${(n + 1).toString(16)}`;

/** What the node's underlay needs for `kind`: its peers' addresses on-link (host-gw), an IPv6 address (dual stack). */
export async function underlayFor(ns: Netns, kind: LeaseKind): Promise<void> {
  if (kind === 'host-gw') await ns.ip('addr', 'add', '198.18.255.254/15', 'dev', 'eth0');
  if (kind === 'vxlan-dual') await ns.ip('-6', 'addr', 'add', '2001:db8:1::1/64', 'dev', 'eth0', 'nodad');
}

/** The kernel entries of Weft's a node holds once converged with `peers` leases of `kind`. */
export function expectedEntries(kind: LeaseKind, peers: number): { routes: number; neighs: number; fdb: number } {
  if (kind === 'host-gw') return { routes: peers, neighs: 0, fdb: 0 };
  const families = kind === 'vxlan-dual' ? 2 : 1;
  return { routes: families * peers, neighs: families * peers, fdb: families * peers };
}

export async function procStatus(pid: number): Promise<{ hwmMb: number; anonMb: number }> {
  const text = await readFile(`/proc/${pid}/status`, 'utf8');
  const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? NaN);
  return { hwmMb: kb('VmHWM') / 1024, anonMb: kb('RssAnon') / 1024 };
}

/** CPU time of `pid` and of the children it waited for (the nft and iptables it ran), in ms. */
export async function cpuMs(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const [utime, stime, cutime, cstime] = [11, 12, 13, 14].map((i) => Number(fields[i]));
  return ((utime! + stime! + cutime! + cstime!) * 1000) / CLK_TCK;
}

/** The node's external interface: eth0 with 198.51.100.1/24, up (its peer stays in the namespace). */
export async function nodeNetns(prefix: string): Promise<Netns> {
  const ns = await createNetns(prefix);
  await ns.ip('link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth0p');
  await ns.ip('addr', 'add', `${OWN_IP}/24`, 'dev', 'eth0');
  await ns.ip('link', 'set', 'eth0', 'up');
  await ns.ip('link', 'set', 'eth0p', 'up');
  return ns;
}

export interface Run {
  startMs: number;
  convergeMs: number;
  /** CPU weftd used from exec to converged. */
  cpuMs: number;
  hwmMb: number;
  anonMb: number;
  /** weftd's log (stderr) until it was stopped. */
  log: string;
  /** VmHWM once converged (hwmMb is read after `converged` ran). */
  convergedHwmMb: number;
  /** VmRSS every 100 ms from exec on: [ms since exec, MB]. */
  rss: [number, number][];
}

export interface RunOptions {
  /** Namespace name prefix. */
  prefix: string;
  args: string[];
  env?: Record<string, string>;
  /** Remote leases the kernel must hold an entry of each kind for, once converged. */
  peers: number;
  /** The entries it must hold instead, when not one route, neighbour and FDB entry per peer. */
  expect?: { routes: number; neighs: number; fdb: number };
  /** Set up around the namespace before weftd starts (e.g. a forwarder); returns its undo. */
  setup?: (ns: Netns) => Promise<() => Promise<void>>;
  /** Runs once converged, before the memory is read and weftd stopped. */
  converged?: (ns: Netns, d: Daemon) => Promise<void>;
  deadlineMs?: number;
}

/** How many routes of Weft's (both families), neighbours and FDB entries with a remote on its vxlan devices the node's kernel holds. */
export async function kernelEntries(ns: Netns): Promise<{ routes: number; neighs: number; fdb: number }> {
  const lines = async (...cmd: [string, ...string[]]) => (await ns.exec(...cmd).catch(() => '')).split('\n').filter(Boolean);
  const routes = (await lines('ip', '-4', 'route', 'show', 'proto', '201')).length + (await lines('ip', '-6', 'route', 'show', 'proto', '201')).length;
  let neighs = 0;
  let fdb = 0;
  for (const dev of ['flannel.1', 'flannel-v6.1']) {
    neighs += (await lines('ip', 'neigh', 'show', 'dev', dev, 'nud', 'permanent')).length;
    fdb += (await lines('bridge', 'fdb', 'show', 'dev', dev)).filter((l) => l.includes(' dst ')).length;
  }
  return { routes, neighs, fdb };
}

/** Starts weftd in a fresh namespace, times it to subnet.env and readiness, reads /proc, stops it. */
export async function runWeftd(o: RunOptions): Promise<Run> {
  const ns = await nodeNetns(o.prefix);
  const undo = await o.setup?.(ns);
  let d: Daemon | undefined;
  try {
    const marks = new Map<string, number>();
    const t0 = performance.now();
    d = spawnWeftd(ns, o.args, o.env ?? {});
    const rss: [number, number][] = [];
    const pid0 = d.proc.pid!;
    const sampler = setInterval(() => void readFile(`/proc/${pid0}/status`, 'utf8').then((t) => {
      rss.push([performance.now() - t0, Number(/^VmRSS:\s+(\d+)/m.exec(t)?.[1] ?? 0) / 1024]);
    }, () => {}), 100);
    d.proc.stderr!.on('data', () => {
      const log = d!.log();
      for (const [key, re] of [['env', /wrote the subnet file/], ['ready', /ready: the kernel holds every lease/]] as const) {
        if (!marks.has(key) && re.test(log)) marks.set(key, performance.now() - t0);
      }
    });
    const deadlineMs = o.deadlineMs ?? 120_000;
    const deadline = Date.now() + deadlineMs;
    while (!marks.has('ready')) {
      if (d.proc.exitCode !== null) throw new Error(`weftd exited ${d.proc.exitCode}:\n${d.log()}`);
      if (Date.now() > deadline) throw new Error(`weftd not ready after ${deadlineMs / 1000} s:\n${d.log().slice(-4000)}`);
      await new Promise((r) => setTimeout(r, 5));
    }
    const pid = d.proc.pid!;
    // `ip netns exec` execs weftd in place, so the child's PID is weftd's.
    const cpu = await cpuMs(pid);
    const convergedHwmMb = (await procStatus(pid)).hwmMb;
    const have = await kernelEntries(ns);
    const want = o.expect ?? { routes: o.peers, neighs: o.peers, fdb: o.peers };
    if (have.routes !== want.routes || have.neighs !== want.neighs || have.fdb !== want.fdb) {
      throw new Error(`ready with ${have.routes} routes, ${have.neighs} neighbours and ${have.fdb} FDB entries, expected ${want.routes}, ${want.neighs} and ${want.fdb}`);
    }
    await o.converged?.(ns, d);
    const mem = await procStatus(pid);
    clearInterval(sampler);
    return { startMs: marks.get('env')!, convergeMs: marks.get('ready')!, cpuMs: cpu, ...mem, log: d.log(), convergedHwmMb, rss };
  } finally {
    if (d) await stopDaemon(d);
    await undo?.();
    await ns.remove();
  }
}

/** `bin/weftd --version`, exec to exit. */
export async function versionMs(bin: string): Promise<number> {
  const t0 = performance.now();
  const p = spawn(bin, ['--version'], { stdio: 'ignore' });
  const [code] = (await once(p, 'exit')) as [number];
  if (code !== 0) throw new Error(`weftd --version exited ${code}`);
  return performance.now() - t0;
}

/** The benches' own etcd client (etcd3), which reads a listing of 50,000 leases (~9 MB) in one answer. */
export function adminClient(endpoint: string): Etcd3 {
  return new Etcd3({ hosts: endpoint, grpcOptions: { 'grpc.max_receive_message_length': 64 << 20 } });
}

/** The etcd value of the n-th peer's lease. */
export function peerLeaseValue(n: number, kind: LeaseKind = 'vxlan'): string {
  const publicIP = parseIP(peerIp(n), 'ip');
  if (kind === 'host-gw') return encodeLeaseValue({ publicIP, backendType: 'host-gw' });
  const data = { VNI: 1, VtepMAC: peerMac(n) };
  if (kind === 'vxlan') return encodeLeaseValue({ publicIP, backendType: 'vxlan', backendData: data });
  return encodeLeaseValue({ publicIP, publicIPv6: parseIP(peerIp6(n), 'ip'), backendType: 'vxlan', backendData: data, backendV6Data: { VNI: 1, VtepMAC: peerMac(n + 0x800000) } });
}

/** The etcd key of the n-th peer's lease. */
export const peerLeaseKey = (n: number, kind: LeaseKind = 'vxlan') => `${ETCD_PREFIX}/subnets/${peerSubnet(n)}-24${kind === 'vxlan-dual' ? `&${peerSubnet6(n)}-64` : ''}`;

/** Puts peers 0..leases-1 into etcd (those not there yet), 100 per transaction. */
export async function seedLeases(admin: Etcd3, leases: number, kind: LeaseKind = 'vxlan'): Promise<void> {
  const have = (await admin.getAll().prefix(`${ETCD_PREFIX}/subnets/`).keys()).length;
  for (let i = have; i < leases; i += 100) {
    const ops = [];
    for (let j = i; j < Math.min(leases, i + 100); j++) ops.push(admin.put(peerLeaseKey(j, kind)).value(peerLeaseValue(j, kind)));
    await admin.if(`${ETCD_PREFIX}/config`, 'Create', '>', 0).then(...ops).commit();
  }
}

/** Removes the lease of the node that ran (so the next run is a new node joining, not a restart). */
export async function removeOwnLease(admin: Etcd3): Promise<void> {
  const all = await admin.getAll().prefix(`${ETCD_PREFIX}/subnets/`).strings();
  for (const [k, v] of Object.entries(all)) if (v.includes(`"${OWN_IP}"`)) await admin.delete().key(k);
}

/** The n-th Node: node-0 is ours (no annotations yet), every other one an annotated vxlan peer. */
export function kubeNode(n: number): Record<string, unknown> {
  const own = n === 0;
  const cidr = `${peerSubnet(n)}/24`;
  const P = 'flannel.alpha.coreos.com';
  return {
    metadata: {
      name: `node-${n}`,
      labels: { 'kubernetes.io/hostname': `node-${n}`, 'kubernetes.io/os': 'linux' },
      annotations: own ? {} : {
        [`${P}/kube-subnet-manager`]: 'true', [`${P}/backend-type`]: 'vxlan', [`${P}/public-ip`]: peerIp(n),
        [`${P}/backend-data`]: `{"VNI":1,"VtepMAC":"${peerMac(n)}"}`,
      },
    },
    spec: { podCIDR: cidr, podCIDRs: [cidr] },
    status: {
      addresses: [{ type: 'InternalIP', address: own ? OWN_IP : peerIp(n) }, { type: 'Hostname', address: `node-${n}` }],
      conditions: [{ type: 'Ready', status: 'True', reason: 'KubeletReady', lastHeartbeatTime: '2026-01-01T00:00:00Z', lastTransitionTime: '2026-01-01T00:00:00Z' }],
      nodeInfo: { kubeletVersion: 'v1.33.1', containerRuntimeVersion: 'containerd://2.0.5', kernelVersion: '6.12.0', osImage: 'Debian GNU/Linux 13', architecture: 'amd64', operatingSystem: 'linux' },
    },
  };
}

/** The test API server holding `nodes` Nodes ({@link kubeNode}), in a child process of its own. */
export async function startKubeChild(nodes: number): Promise<{ kubeconfig: string; socketPath: string; stop(): void }> {
  const child = fork(new URL('./kube-child.ts', import.meta.url), [String(nodes)], { stdio: 'inherit' });
  const [ready] = (await once(child, 'message')) as [{ kubeconfig: string; socketPath: string }];
  return { ...ready, stop: () => child.disconnect() };
}

/**
 * kube mode: `runs` runs of weftd as node-0 against the test API server holding node-0 and
 * `peers` annotated peer Nodes.
 */
export async function kubeRuns(o: { peers: number; runs: number; prefix: string; env?: Record<string, string>; deadlineMs?: number }): Promise<Run[]> {
  const api = await startKubeChild(o.peers + 1);
  const dir = await mkdtemp(join(tmpdir(), `weft-bench-${o.prefix}-kube-`));
  try {
    const netConfigPath = join(dir, 'net-conf.json');
    await writeFile(netConfigPath, NET_CONF);
    const runs: Run[] = [];
    for (let r = 0; r < o.runs; r++) {
      runs.push(await runWeftd({
        prefix: o.prefix, peers: o.peers, env: { NODE_NAME: 'node-0', ...o.env }, ...(o.deadlineMs ? { deadlineMs: o.deadlineMs } : {}),
        args: ['--kube-subnet-mgr', '--kube-api-url=https://127.0.0.1:6443', `--kubeconfig-file=${api.kubeconfig}`,
          `--net-config-path=${netConfigPath}`, '--iface=eth0', `--subnet-file=${join(dir, `subnet-${r}.env`)}`],
        setup: (ns) => forwardIntoNetns(ns, 6443, api.socketPath),
      }));
    }
    return runs;
  } finally {
    api.stop();
    await rm(dir, { recursive: true, force: true });
  }
}
