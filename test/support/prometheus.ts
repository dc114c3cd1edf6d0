/**
 * A real Prometheus (Debian's `prometheus`) scraping the weftds of a cluster (cluster.ts), for the
 * e2e test of weft-dashboard.json and weft-alerts.yaml and for bench-dashboard. It runs in a
 * namespace of its own on the cluster's underlay (198.51.100.200, a monitoring host beside the
 * nodes), so it reaches every node's --healthz-port as a cluster's Prometheus would; its
 * config and storage live in a temporary directory. The test process, in the root namespace,
 * asks its HTTP API through curl inside that namespace.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Etcd3 } from 'etcd3';
import { Cluster } from './cluster.ts';
import { attachToUnderlay, createNetns } from './netns.ts';
import type { Netns } from './netns.ts';
import { until } from './until.ts';

const ROOT = resolve(import.meta.dirname, '../..');
export const ALERTS_FILE = join(ROOT, 'weft-alerts.yaml');
export const DASHBOARD_FILE = join(ROOT, 'weft-dashboard.json');
/** weftd's --healthz-port on every node, as daemonset.yaml sets it. */
export const METRICS_PORT = 8081;
/** The monitoring host's index on the underlay (198.51.100.<n>), clear of the nodes'. */
const HOST_INDEX = 200;
/** Prometheus's port in its own namespace, where nothing else listens. */
const PORT = 9090;

/** One series of an instant query: its labels and its value (a string, as the API gives it: "NaN" too). */
export interface Sample {
  metric: Record<string, string>;
  value: [number, string];
}

/** Each panel's queries in weft-dashboard.json, with its title. */
export function dashboardQueries(file = DASHBOARD_FILE): { panel: string; expr: string }[] {
  const dashboard = JSON.parse(readFileSync(file, 'utf8')) as { panels: { title: string; targets?: { expr: string }[] }[] };
  return dashboard.panels.flatMap((p) => (p.targets ?? []).map((t) => ({ panel: p.title, expr: t.expr })));
}

/**
 * `expr` as Grafana sends it with every node selected: `$instance` (multi-value, All = `.+`) and
 * `$__rate_interval`, which Grafana makes at least four scrape intervals; a minute covers that
 * at any scrape interval up to 15 s.
 */
export function grafanaExpr(expr: string, rateInterval = '1m'): string {
  return expr.replaceAll('$instance', '.+').replaceAll('$__rate_interval', rateInterval);
}

export class Prometheus {
  readonly ns: Netns;
  readonly #dir: string;
  readonly #proc: ChildProcess;
  #log = '';

  private constructor(ns: Netns, dir: string, proc: ChildProcess) {
    this.ns = ns;
    this.#dir = dir;
    this.#proc = proc;
    proc.stderr!.on('data', (c: Buffer) => (this.#log += c.toString()));
  }

  /**
   * Starts Prometheus on `underlay`, scraping `targets` (host:port) every `scrapeSeconds` as job
   * `weft`, evaluating `ruleFiles` as often, and waits until it answers /-/ready.
   */
  static async start(underlay: Netns, targets: readonly string[], ruleFiles: readonly string[], scrapeSeconds = 1): Promise<Prometheus> {
    const ns = await createNetns('prom');
    let dir: string | undefined;
    let prometheus: Prometheus | undefined;
    try {
      await attachToUnderlay(underlay, ns, HOST_INDEX, { sysctls: false });
      dir = await mkdtemp(join(tmpdir(), 'weft-prometheus-'));
      const config = {
        global: { scrape_interval: `${scrapeSeconds}s`, evaluation_interval: `${scrapeSeconds}s` },
        rule_files: ruleFiles,
        scrape_configs: [{ job_name: 'weft', static_configs: [{ targets }] }],
      };
      await writeFile(join(dir, 'prometheus.yml'), JSON.stringify(config));
      const proc = spawn('ip', [
        'netns', 'exec', ns.name, 'prometheus', `--config.file=${join(dir, 'prometheus.yml')}`,
        `--storage.tsdb.path=${join(dir, 'data')}`, `--web.listen-address=127.0.0.1:${PORT}`, '--log.level=warn',
      ], { stdio: ['ignore', 'ignore', 'pipe'] });
      prometheus = new Prometheus(ns, dir, proc);
      const started = prometheus;
      await until('prometheus ready', async () => {
        if (proc.exitCode !== null) throw new Error(`prometheus exited ${proc.exitCode}\n${started.log()}`);
        return ns.exec('curl', '-sf', `http://127.0.0.1:${PORT}/-/ready`).then(() => true, () => false);
      }, 30_000, () => started.log());
      return prometheus;
    } catch (e) {
      if (prometheus) await prometheus.stop();
      else {
        await ns.remove();
        if (dir) await rm(dir, { recursive: true, force: true });
      }
      throw e;
    }
  }

  log(): string {
    return this.#log;
  }

  /** GET /api/v1/<path> with `params`; the `data` of a successful answer. */
  async api<T>(path: string, params: Record<string, string> = {}): Promise<T> {
    const args = Object.entries(params).flatMap(([k, v]) => ['--data-urlencode', `${k}=${v}`]);
    const body = JSON.parse(await this.ns.exec('curl', '-s', '--get', ...args, `http://127.0.0.1:${PORT}/api/v1/${path}`)) as
      { status: string; data: T; error?: string };
    if (body.status !== 'success') throw new Error(`prometheus ${path} ${JSON.stringify(params)}: ${body.error}`);
    return body.data;
  }

  /** An instant query's series (a vector; a scalar comes back as one series without labels). */
  async query(expr: string): Promise<Sample[]> {
    const data = await this.api<{ resultType: string; result: Sample[] | [number, string] }>('query', { query: expr });
    return data.resultType === 'scalar' ? [{ metric: {}, value: data.result as [number, string] }] : (data.result as Sample[]);
  }

  /** Stops Prometheus (SIGKILL after 10 s) and removes its namespace and files. */
  async stop(): Promise<void> {
    if (this.#proc.exitCode === null && this.#proc.signalCode === null) {
      const exited = new Promise((r) => this.#proc.once('exit', r));
      this.#proc.kill('SIGTERM');
      const timer = setTimeout(() => this.#proc.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(timer);
    }
    await this.ns.remove();
    await rm(this.#dir, { recursive: true, force: true });
  }
}

/** Whether `samples` hold a number (not NaN): a panel that draws something. */
export function drawsSomething(samples: readonly Sample[]): boolean {
  return samples.some((s) => !Number.isNaN(Number(s.value[1])));
}

/**
 * A three-node vxlan cluster (etcd mode) whose weftds serve /metrics on {@link METRICS_PORT},
 * scraped every second by Prometheus with weft-alerts.yaml loaded, once every target is up with
 * two samples (what rate() needs) and the cluster has lived what the dashboard reports: a peer
 * lease that is not JSON (every node logs EPEERDATA) and a route of node-1 deleted behind its back
 * (node-1 repairs it). Runs `fn`, then removes everything, even when it fails.
 */
export async function withScrapedCluster<T>(fn: (cluster: Cluster, prometheus: Prometheus) => Promise<T>): Promise<T> {
  const cluster = await Cluster.start({ nodes: 3, backend: 'vxlan', mode: 'etcd', weftdArgs: [`--healthz-port=${METRICS_PORT}`] });
  let prometheus: Prometheus | undefined;
  try {
    const targets = cluster.nodes.map((n) => `${n.address}:${METRICS_PORT}`);
    prometheus = await Prometheus.start(cluster.underlay!, targets, [ALERTS_FILE]);
    const p = prometheus;
    const detail = () => `${p.log()}\n${cluster.nodes.map((n) => `--- ${n.name}\n${n.daemon.log()}`).join('\n')}`;
    await until('every weftd scraped twice and up', async () => {
      const up = await p.query('count_over_time(up{job="weft"}[1m]) >= 2 and up{job="weft"} == 1');
      return up.length === targets.length;
    }, 30_000, detail);

    const etcd = new Etcd3({ hosts: cluster.etcd!.endpoint });
    try {
      await etcd.put('/coreos.com/network/subnets/10.244.250.0-24').value('not a lease');
    } finally {
      etcd.close();
    }
    const node1 = cluster.nodes[0]!;
    const routes = async () => (await node1.ns.ipJson<{ dst: string }[]>('route', 'show', 'proto', '201')).map((r) => r.dst);
    const [route] = await routes();
    if (!route) throw new Error(`node-1 has no route of weft's\n${node1.daemon.log()}`);
    await node1.ns.ip('route', 'del', route, 'proto', '201');
    await until(`node-1 putting back ${route}`, async () => (await routes()).includes(route), 30_000, detail);
    // A counter is born at its first increment, so increase() needs two samples of it to draw.
    await until('prometheus seeing the repair, and the bad lease twice on every node', async () => {
      const repaired = await p.query(`weft_repairs_total{instance="${targets[0]}"} > 0`);
      const errors = await p.query('count_over_time(weft_errors_total{kind="EPEERDATA"}[1m]) >= 2');
      return repaired.length === 1 && errors.length === targets.length;
    }, 30_000, detail);
    return await fn(cluster, p);
  } finally {
    await prometheus?.stop();
    await cluster.stop();
  }
}
