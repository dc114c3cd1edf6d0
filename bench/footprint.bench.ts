/**
 * make bench-footprint: weftd's fixed costs, measured on the real launcher (bin/weftd) as a node
 * runs it: in a network namespace of its own, against a real etcd holding 1,000 and then 5,000
 * vxlan leases, and in kube mode against the test API server holding 5,000 Nodes (the harness is
 * bench/support/weftd.ts).
 *
 * Per run: wall time from exec to subnet.env written and to the first full reconcile done, VmHWM
 * and RssAnon from /proc/<pid>/status once converged, and, at 1,000 leases, the CPU weftd uses over
 * the 10 s after convergence (utime + stime, its waited-for children's included, from
 * /proc/<pid>/stat). Also `bin/weftd --version`. Every figure is the median of RUNS runs (default
 * 5; FOOTPRINT_RUNS overrides).
 *
 * Last line: version_ms=<> start_1000_ms=<> converge_1000_ms=<> converge_5000_ms=<>
 * hwm_5000_mb=<> anon_5000_mb=<> kube_hwm_5000_mb=<> idle_cpu_pct=<>
 *
 * Medians as bench/support/stats.ts defines them: of an even count, the mean of the middle two.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { Etcd3 } from 'etcd3';
import { EtcdServer } from '../test/support/etcd.ts';
import { WEFTD_BIN } from '../test/support/cluster.ts';
import { adminClient, cpuMs, ETCD_PREFIX, kubeRuns, NET_CONF, removeOwnLease, runWeftd, seedLeases, versionMs } from './support/weftd.ts';
import type { Run } from './support/weftd.ts';
import { median } from './support/stats.ts';

const RUNS = Number(process.env.FOOTPRINT_RUNS ?? 5);
const IDLE_MS = 10_000;

type FootprintRun = Run & { idleCpuPct?: number };

/** The CPU weftd uses over IDLE_MS, in percent of one core. */
async function idleCpuPct(pid: number): Promise<number> {
  const before = await cpuMs(pid);
  const t0 = performance.now();
  await new Promise((r) => setTimeout(r, IDLE_MS));
  return ((await cpuMs(pid)) - before) / (performance.now() - t0) * 100;
}

/** etcd mode at `leases` peers: RUNS runs, each a fresh node whose own lease is removed afterwards. */
async function etcdRuns(etcd: EtcdServer, admin: Etcd3, leases: number, idle: boolean): Promise<FootprintRun[]> {
  await seedLeases(admin, leases);
  const runs: FootprintRun[] = [];
  const dir = await mkdtemp(join(tmpdir(), 'weft-bench-fp-'));
  try {
    for (let r = 0; r < RUNS; r++) {
      let idlePct: number | undefined;
      const run = await runWeftd({
        prefix: 'fp', peers: leases,
        args: [`--etcd-endpoints=${etcd.endpoint}`, '--iface=eth0', `--subnet-file=${join(dir, `subnet-${leases}-${r}.env`)}`],
        ...(idle ? { converged: async (_ns, d) => void (idlePct = await idleCpuPct(d.proc.pid!)) } : {}),
      });
      runs.push(idlePct === undefined ? run : { ...run, idleCpuPct: idlePct });
      await removeOwnLease(admin);
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  return runs;
}

const fmt = (x: number) => x.toFixed(x < 10 ? 2 : 1);
const show = (name: string, runs: FootprintRun[]) => console.log(`${name}: ${runs.map((r) => `start ${r.startMs.toFixed(0)} ms, converged ${r.convergeMs.toFixed(0)} ms, VmHWM ${fmt(r.hwmMb)} MB, RssAnon ${fmt(r.anonMb)} MB${r.idleCpuPct === undefined ? '' : `, idle ${r.idleCpuPct.toFixed(3)} %`}`).join('\n  ')}`);

const versions: number[] = [];
await versionMs(WEFTD_BIN);
for (let r = 0; r < Math.max(RUNS, 10); r++) versions.push(await versionMs(WEFTD_BIN));
console.log(`weftd --version: ${versions.map((v) => v.toFixed(0)).join(' ')} ms`);

const etcd = await EtcdServer.start({ unixSocket: true });
const admin = adminClient(etcd.endpoint);
let r1000: FootprintRun[];
let r5000: FootprintRun[];
try {
  await admin.put(`${ETCD_PREFIX}/config`).value(NET_CONF);
  r1000 = await etcdRuns(etcd, admin, 1000, true);
  show('etcd, 1,000 leases', r1000);
  r5000 = await etcdRuns(etcd, admin, 5000, false);
  show('etcd, 5,000 leases', r5000);
} finally {
  admin.close();
  await etcd.stop();
}
const kube = await kubeRuns({ peers: 4999, runs: RUNS, prefix: 'fp' });
show('kube, 5,000 Nodes', kube);

const m = (runs: FootprintRun[], f: (r: FootprintRun) => number) => median(runs.map(f));
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
