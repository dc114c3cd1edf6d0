/**
 * make bench-footprint: weftd's fixed costs, measured on the real launcher (bin/weftd) as a node
 * runs it: in a network namespace of its own, against a real etcd holding 1,000 and then 5,000
 * vxlan leases, and in kube mode against the test API server holding 5,000 Nodes.
 *
 * Per run: wall time from exec to subnet.env written and to the first full reconcile done (weftd
 * logs both the moment they happen; the kernel's entry count is checked afterwards), VmHWM and
 * RssAnon from /proc/<pid>/status once converged, and, at 1,000 leases, the CPU weftd uses over the
 * 10 s after convergence (utime + stime, its waited-for children's included, from /proc/<pid>/stat). Also `bin/weftd --version`. Every
 * figure is the median of RUNS runs (default 5; FOOTPRINT_RUNS overrides).
 *
 * Last line: version_ms=<> start_1000_ms=<> converge_1000_ms=<> converge_5000_ms=<>
 * hwm_5000_mb=<> anon_5000_mb=<> kube_hwm_5000_mb=<> idle_cpu_pct=<>
 */
import { spawn, fork } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Etcd3 } from 'etcd3';
import { parseIP } from '../src/ip/ip.ts';
import { encodeLeaseValue } from '../src/lease/etcd/codec.ts';
import { EtcdServer } from '../test/support/etcd.ts';
import { KubeApiServer } from '../test/support/kube-apiserver.ts';
import { createNetns, forwardIntoNetns } from '../test/support/netns.ts';
import type { Netns } from '../test/support/netns.ts';
import { WEFTD_BIN, spawnWeftd, stopDaemon } from '../test/support/cluster.ts';
import type { Daemon } from '../test/support/cluster.ts';

const RUNS = Number(process.env.FOOTPRINT_RUNS ?? 5);
const PREFIX = '/coreos.com/network';
const NET_CONF = '{"Network":"10.0.0.0/8","Backend":{"Type":"vxlan"}}';
const IDLE_MS = 10_000;
const CLK_TCK = 100;
const hex = (n: number) => n.toString(16).padStart(2, '0');
const mac = (n: number) => `6e:00:00:${hex((n >> 16) & 255)}:${hex((n >> 8) & 255)}:${hex(n & 255)}`;
const peerIp = (n: number) => `198.18.${n >> 8}.${n & 255}`;
/** The n-th /24 of 10.0.0.0/8 from 10.1.0.0 on. */
const peerSubnet = (n: number) => `10.${(n + 256) >> 8}.${(n + 256) & 255}.0`;

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

async function procStatus(pid: number): Promise<{ hwmMb: number; anonMb: number }> {
  const text = await readFile(`/proc/${pid}/status`, 'utf8');
  const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? NaN);
  return { hwmMb: kb('VmHWM') / 1024, anonMb: kb('RssAnon') / 1024 };
}

/** CPU time of `pid` and of the children it waited for (the nft and iptables it ran), in ms. */
async function cpuMs(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const [utime, stime, cutime, cstime] = [11, 12, 13, 14].map((i) => Number(fields[i]));
  return ((utime! + stime! + cutime! + cstime!) * 1000) / CLK_TCK;
}

/** The node's external interface: eth0 with 198.51.100.1/24, up (its peer stays in the namespace). */
async function nodeNetns(): Promise<Netns> {
  const ns = await createNetns('fp');
  await ns.ip('link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth0p');
  await ns.ip('addr', 'add', '198.51.100.1/24', 'dev', 'eth0');
  await ns.ip('link', 'set', 'eth0', 'up');
  await ns.ip('link', 'set', 'eth0p', 'up');
  return ns;
}

interface Run {
  startMs: number;
  convergeMs: number;
  hwmMb: number;
  anonMb: number;
  idleCpuPct?: number;
}

/** Starts weftd in a fresh namespace, times it to subnet.env and readiness, reads /proc, stops it. */
async function runWeftd(args: string[], env: Record<string, string>, peers: number, idle: boolean, setup?: (ns: Netns) => Promise<() => Promise<void>>): Promise<Run> {
  const ns = await nodeNetns();
  const undo = await setup?.(ns);
  let d: Daemon | undefined;
  try {
    const marks = new Map<string, number>();
    const t0 = performance.now();
    d = spawnWeftd(ns, args, env);
    d.proc.stderr!.on('data', () => {
      const log = d!.log();
      for (const [key, re] of [['env', /wrote the subnet file/], ['ready', /ready: the kernel holds every lease/]] as const) {
        if (!marks.has(key) && re.test(log)) marks.set(key, performance.now() - t0);
      }
    });
    const deadline = Date.now() + 120_000;
    while (!marks.has('ready')) {
      if (d.proc.exitCode !== null) throw new Error(`weftd exited ${d.proc.exitCode}:\n${d.log()}`);
      if (Date.now() > deadline) throw new Error(`weftd not ready after 120 s:\n${d.log()}`);
      await new Promise((r) => setTimeout(r, 5));
    }
    const routes = (await ns.ip('route', 'show', 'proto', '201')).trim().split('\n').filter(Boolean).length;
    const neighs = (await ns.ipJson('neigh', 'show', 'dev', 'flannel.1')).length;
    const fdb = (await ns.bridgeJson('fdb', 'show', 'dev', 'flannel.1')).filter((e) => e.dst !== undefined).length;
    if (routes !== peers || neighs !== peers || fdb !== peers) throw new Error(`ready with ${routes} routes, ${neighs} neighbours and ${fdb} FDB entries, expected ${peers} of each`);
    const pid = d.proc.pid!;
    let idleCpuPct: number | undefined;
    if (idle) {
      const before = await cpuMs(pid);
      const tIdle = performance.now();
      await new Promise((r) => setTimeout(r, IDLE_MS));
      idleCpuPct = ((await cpuMs(pid)) - before) / (performance.now() - tIdle) * 100;
    }
    const mem = await procStatus(pid);
    return { startMs: marks.get('env')!, convergeMs: marks.get('ready')!, ...mem, ...(idleCpuPct === undefined ? {} : { idleCpuPct }) };
  } finally {
    if (d) await stopDaemon(d);
    await undo?.();
    await ns.remove();
  }
}

async function versionMs(): Promise<number> {
  const t0 = performance.now();
  const p = spawn(WEFTD_BIN, ['--version'], { stdio: 'ignore' });
  const [code] = (await once(p, 'exit')) as [number];
  if (code !== 0) throw new Error(`weftd --version exited ${code}`);
  return performance.now() - t0;
}

/** etcd mode at `leases` peers: RUNS runs, each a fresh node whose own lease is removed afterwards. */
async function etcdRuns(etcd: EtcdServer, admin: Etcd3, leases: number, idle: boolean): Promise<Run[]> {
  const have = (await admin.getAll().prefix(`${PREFIX}/subnets/`).keys()).length;
  for (let i = have; i < leases; i += 100) {
    const ops = [];
    for (let j = i; j < Math.min(leases, i + 100); j++) {
      const value = encodeLeaseValue({ publicIP: parseIP(peerIp(j), 'ip'), backendType: 'vxlan', backendData: { VNI: 1, VtepMAC: mac(j) } });
      ops.push(admin.put(`${PREFIX}/subnets/${peerSubnet(j)}-24`).value(value));
    }
    await admin.if(`${PREFIX}/config`, 'Create', '>', 0).then(...ops).commit();
  }
  const runs: Run[] = [];
  const dir = await mkdtemp(join(tmpdir(), 'weft-bench-fp-'));
  try {
    for (let r = 0; r < RUNS; r++) {
      const subnetFile = join(dir, `subnet-${leases}-${r}.env`);
      runs.push(await runWeftd([`--etcd-endpoints=${etcd.endpoint}`, '--iface=eth0', `--subnet-file=${subnetFile}`], {}, leases, idle));
      // The next run is a new node joining, not this one restarting.
      const own = (await admin.getAll().prefix(`${PREFIX}/subnets/`).strings());
      for (const [k, v] of Object.entries(own)) if (v.includes('"198.51.100.1"')) await admin.delete().key(k);
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  return runs;
}

function kubeNode(n: number, own: boolean): Record<string, unknown> {
  const cidr = `${peerSubnet(n)}/24`;
  const P = 'flannel.alpha.coreos.com';
  return {
    metadata: {
      name: `node-${n}`,
      labels: { 'kubernetes.io/hostname': `node-${n}`, 'kubernetes.io/os': 'linux' },
      annotations: own ? {} : {
        [`${P}/kube-subnet-manager`]: 'true', [`${P}/backend-type`]: 'vxlan', [`${P}/public-ip`]: peerIp(n),
        [`${P}/backend-data`]: `{"VNI":1,"VtepMAC":"${mac(n)}"}`,
      },
    },
    spec: { podCIDR: cidr, podCIDRs: [cidr] },
    status: {
      addresses: [{ type: 'InternalIP', address: own ? '198.51.100.1' : peerIp(n) }, { type: 'Hostname', address: `node-${n}` }],
      conditions: [{ type: 'Ready', status: 'True', reason: 'KubeletReady', lastHeartbeatTime: '2026-01-01T00:00:00Z', lastTransitionTime: '2026-01-01T00:00:00Z' }],
      nodeInfo: { kubeletVersion: 'v1.33.1', containerRuntimeVersion: 'containerd://2.0.5', kernelVersion: '6.12.0', osImage: 'Debian GNU/Linux 13', architecture: 'amd64', operatingSystem: 'linux' },
    },
  };
}

/** kube mode at `nodes` Nodes (ours is node-0): the API server runs in a child process. */
async function kubeRuns(nodes: number): Promise<Run[]> {
  const child = fork(import.meta.filename, ['serve-kube', String(nodes)], { stdio: 'inherit' });
  const dir = await mkdtemp(join(tmpdir(), 'weft-bench-fp-kube-'));
  try {
    const [ready] = (await once(child, 'message')) as [{ kubeconfig: string; socketPath: string }];
    const netConfigPath = join(dir, 'net-conf.json');
    await writeFile(netConfigPath, NET_CONF);
    const runs: Run[] = [];
    for (let r = 0; r < RUNS; r++) {
      const args = ['--kube-subnet-mgr', '--kube-api-url=https://127.0.0.1:6443', `--kubeconfig-file=${ready.kubeconfig}`,
        `--net-config-path=${netConfigPath}`, '--iface=eth0', `--subnet-file=${join(dir, `subnet-${r}.env`)}`];
      runs.push(await runWeftd(args, { NODE_NAME: 'node-0' }, nodes - 1, false, (ns) => forwardIntoNetns(ns, 6443, ready.socketPath)));
    }
    return runs;
  } finally {
    child.disconnect();
    await rm(dir, { recursive: true, force: true });
  }
}

if (process.argv[2] === 'serve-kube') {
  const nodes = Number(process.argv[3]);
  const api = await KubeApiServer.start();
  for (let n = 0; n < nodes; n++) api.addNode(kubeNode(n, n === 0));
  process.send!({ kubeconfig: await api.kubeconfig(), socketPath: api.socketPath });
  process.on('disconnect', () => void api.stop().then(() => process.exit(0)));
} else {
  const fmt = (x: number) => x.toFixed(x < 10 ? 2 : 1);
  const show = (name: string, runs: Run[]) => console.log(`${name}: ${runs.map((r) => `start ${r.startMs.toFixed(0)} ms, converged ${r.convergeMs.toFixed(0)} ms, VmHWM ${fmt(r.hwmMb)} MB, RssAnon ${fmt(r.anonMb)} MB${r.idleCpuPct === undefined ? '' : `, idle ${r.idleCpuPct.toFixed(3)} %`}`).join('\n  ')}`);

  const versions: number[] = [];
  await versionMs();
  for (let r = 0; r < Math.max(RUNS, 10); r++) versions.push(await versionMs());
  console.log(`weftd --version: ${versions.map((v) => v.toFixed(0)).join(' ')} ms`);

  const etcd = await EtcdServer.start({ unixSocket: true });
  const admin = new Etcd3({ hosts: etcd.endpoint });
  let r1000: Run[];
  let r5000: Run[];
  try {
    await admin.put(`${PREFIX}/config`).value(NET_CONF);
    r1000 = await etcdRuns(etcd, admin, 1000, true);
    show('etcd, 1,000 leases', r1000);
    r5000 = await etcdRuns(etcd, admin, 5000, false);
    show('etcd, 5,000 leases', r5000);
  } finally {
    admin.close();
    await etcd.stop();
  }
  const kube = await kubeRuns(5000);
  show('kube, 5,000 Nodes', kube);

  const m = (runs: Run[], f: (r: Run) => number) => median(runs.map(f));
  console.log([
    `version_ms=${median(versions).toFixed(0)}`,
    `start_1000_ms=${m(r1000, (r) => r.startMs).toFixed(0)}`,
    `converge_1000_ms=${m(r1000, (r) => r.convergeMs).toFixed(0)}`,
    `converge_5000_ms=${m(r5000, (r) => r.convergeMs).toFixed(0)}`,
    `hwm_5000_mb=${m(r5000, (r) => r.hwmMb).toFixed(1)}`,
    `anon_5000_mb=${m(r5000, (r) => r.anonMb).toFixed(1)}`,
    `kube_hwm_5000_mb=${m(kube, (r) => r.hwmMb).toFixed(1)}`,
    `idle_cpu_pct=${m(r1000, (r) => r.idleCpuPct!).toFixed(3)}`,
  ].join(' '));
}
