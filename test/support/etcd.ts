/**
 * A real etcd (Debian's etcd-server) for tests: loopback only, free ports, a temporary data
 * directory, stopped and removed afterwards. It can be stopped and started again on the same
 * ports and data, for tests of a datastore that goes away and comes back.
 *
 * etcd dumps the routing table over netlink as it starts (Go package init, before its first log
 * line), and such a dump waits for the kernel's RTNL lock, which the kernel holds while it destroys
 * a network namespace: 12 s here for a node namespace holding 50,000 nexthop routes, neighbour and
 * FDB entries (bench-scale removes one, then starts the next etcd). So the start budget counts only
 * the time etcd is not waiting in the kernel.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { promisify } from 'node:util';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sleep } from '../../src/retry.ts';

const execFileAsync = promisify(execFile);

/** `count` different TCP ports on 127.0.0.1 that were free a moment ago: all are held until each is picked. */
export async function freePorts(count: number): Promise<number[]> {
  const servers = Array.from({ length: count }, () => createServer());
  try {
    return await Promise.all(servers.map((srv) => new Promise<number>((resolve, reject) => {
      srv.unref();
      srv.on('error', reject);
      srv.listen(0, '127.0.0.1', () => {
        const addr = srv.address();
        if (typeof addr === 'object' && addr) resolve(addr.port);
        else reject(new Error('no port'));
      });
    })));
  } finally {
    await Promise.all(servers.map((srv) => new Promise((resolve) => srv.close(resolve))));
  }
}

/** A TCP port on 127.0.0.1 that was free a moment ago. */
export async function freePort(): Promise<number> {
  return (await freePorts(1))[0]!;
}

/** Whether a thread of process `pid` is in uninterruptible sleep: waiting for the kernel (RTNL, the disk), not running. */
export async function waitingInKernel(pid: number): Promise<boolean> {
  const tasks = await readdir(`/proc/${pid}/task`).catch(() => []);
  for (const task of tasks) {
    const stat = await readFile(`/proc/${pid}/task/${task}/stat`, 'utf8').catch(() => '');
    // The state follows the command name, which is in parentheses and may hold spaces.
    if (stat.slice(stat.lastIndexOf(')') + 2).startsWith('D')) return true;
  }
  return false;
}

/** How a start is waited for; the clock and the probes are injectable for tests. */
export interface StartWait {
  healthy: () => Promise<boolean>;
  /** Throws when the process is gone. */
  check: () => void;
  waitingInKernel: () => Promise<boolean>;
  /** Time the process may take while not waiting in the kernel. */
  budgetMs: number;
  /** Time it may take at all. */
  capMs: number;
  now?: () => number;
  pause?: (ms: number) => Promise<void>;
  /** Appended to a timeout's message (the process's log). */
  detail: () => string;
}

/** Polls every 20 ms until `healthy`; time spent waiting in the kernel is not counted against `budgetMs`. */
export async function waitForStart(wait: StartWait): Promise<void> {
  const now = wait.now ?? (() => performance.now());
  const pause = wait.pause ?? sleep;
  const started = now();
  let last = started;
  let own = 0;
  let inKernel = 0;
  for (;;) {
    wait.check();
    if (await wait.healthy()) return;
    const at = now();
    if (await wait.waitingInKernel()) inKernel += at - last;
    else own += at - last;
    last = at;
    if (own > wait.budgetMs || at - started > wait.capMs) {
      const spent = `${Math.round(own)} ms of its own, ${Math.round(inKernel)} ms waiting in the kernel`;
      throw new Error(`etcd did not become healthy: ${spent}\n${wait.detail()}`);
    }
    await pause(20);
  }
}

/** However long the kernel holds etcd, a start fails after this. */
const START_CAP_MS = 120_000;

export interface EtcdOptions {
  /** How long etcd may take to answer its health check, not counting time it waits in the kernel; default 15 s. */
  startTimeoutMs?: number;
  /** Serve clients over TLS only, requiring a client certificate signed by a throwaway CA. */
  tls?: boolean;
  /**
   * Serve clients on a unix socket instead of loopback TCP: a socket file is reachable from every
   * network namespace, so weftd processes inside node namespaces can use this etcd.
   */
  unixSocket?: boolean;
}

/** Files of a throwaway PKI: the CA, and a client certificate and key it signed. */
export interface TestPki {
  caFile: string;
  certFile: string;
  keyFile: string;
  serverCertFile: string;
  serverKeyFile: string;
}

/** A CA, a server certificate for 127.0.0.1 and a client certificate, made with openssl in `dir`. */
export async function makePki(dir: string): Promise<TestPki> {
  await mkdir(dir, { recursive: true });
  const f = (name: string) => join(dir, name);
  const ssl = (...args: string[]) => execFileAsync('openssl', args, { cwd: dir });
  await ssl('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2',
    '-subj', '/CN=weft-test-ca', '-keyout', f('ca.key'), '-out', f('ca.crt'));
  for (const [name, ext] of [['server', 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth'], ['client', 'extendedKeyUsage=clientAuth']] as const) {
    await ssl('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-subj', `/CN=weft-test-${name}`,
      '-keyout', f(`${name}.key`), '-out', f(`${name}.csr`));
    await writeFile(f(`${name}.ext`), `${ext}\n`);
    await ssl('x509', '-req', '-in', f(`${name}.csr`), '-CA', f('ca.crt'), '-CAkey', f('ca.key'), '-CAcreateserial',
      '-days', '2', '-extfile', f(`${name}.ext`), '-out', f(`${name}.crt`));
  }
  return { caFile: f('ca.crt'), certFile: f('client.crt'), keyFile: f('client.key'), serverCertFile: f('server.crt'), serverKeyFile: f('server.key') };
}

export class EtcdServer {
  readonly clientPort: number;
  readonly peerPort: number;
  readonly dataDir: string;
  /** Where etcd answers /health over plain HTTP, whatever the client side speaks. */
  readonly metricsPort: number;
  /** The PKI when started with `tls`; clients need its CA and client certificate. */
  readonly pki: TestPki | undefined;
  readonly #unix: boolean;
  #proc: ChildProcess | undefined;
  #log = '';

  private constructor(ports: number[], dataDir: string, pki: TestPki | undefined, unix: boolean) {
    [this.clientPort, this.peerPort, this.metricsPort] = ports as [number, number, number];
    this.dataDir = dataDir;
    this.pki = pki;
    this.#unix = unix;
  }

  /** `http://127.0.0.1:<port>`, https with `tls`, or `unix://<dir>/localhost:<port>` with `unixSocket`. */
  get endpoint(): string {
    if (this.#unix) return `unix://${join(this.dataDir, '..')}/localhost:${this.clientPort}`;
    return `${this.pki ? 'https' : 'http'}://127.0.0.1:${this.clientPort}`;
  }

  /** The client URL as etcd takes it: a unix socket is named `localhost:<port>` in etcd's working directory. */
  get #listenUrl(): string {
    return this.#unix ? `unix://localhost:${this.clientPort}` : this.endpoint;
  }

  /** The value of the first line of etcd's Prometheus metrics that `series` matches (its value captured). */
  async metric(series: RegExp): Promise<number> {
    const text = await (await fetch(`http://127.0.0.1:${this.metricsPort}/metrics`)).text();
    const m = series.exec(text);
    if (!m) throw new Error(`no metric ${series} in etcd's /metrics`);
    return Number(m[1]);
  }

  /** Starts a fresh etcd and waits until it is healthy. */
  static async start(options: EtcdOptions = {}): Promise<EtcdServer> {
    const dir = await mkdtemp(join(tmpdir(), 'weft-etcd-'));
    const pki = options.tls ? await makePki(join(dir, 'pki')) : undefined;
    const server = new EtcdServer(await freePorts(3), join(dir, 'data'), pki, options.unixSocket ?? false);
    try {
      await server.resume(options);
    } catch (e) {
      await server.stop();
      throw e;
    }
    return server;
  }

  /** Starts etcd again on the same ports and data after {@link pause}. */
  async resume(options: EtcdOptions = {}): Promise<void> {
    if (this.#proc) return;
    const peer = `http://127.0.0.1:${this.peerPort}`;
    const proc = spawn('etcd', [
      '--name', 'weft-test',
      '--data-dir', this.dataDir,
      '--listen-client-urls', this.#listenUrl,
      '--advertise-client-urls', this.#listenUrl,
      '--listen-peer-urls', peer,
      '--initial-advertise-peer-urls', peer,
      '--initial-cluster', `weft-test=${peer}`,
      '--initial-cluster-state', 'new',
      '--listen-metrics-urls', `http://127.0.0.1:${this.metricsPort}`,
      ...(this.pki ? ['--cert-file', this.pki.serverCertFile, '--key-file', this.pki.serverKeyFile,
        '--trusted-ca-file', this.pki.caFile, '--client-cert-auth'] : []),
      // Lets a client ping as often as every 500 ms (keepalive tests); the default is 5 s.
      '--grpc-keepalive-min-time', '500ms',
      '--log-level', 'error',
    ], { stdio: ['ignore', 'ignore', 'pipe'], cwd: join(this.dataDir, '..') });
    this.#proc = proc;
    proc.stderr?.on('data', (chunk: Buffer) => {
      this.#log = (this.#log + chunk.toString()).slice(-4000);
    });
    await waitForStart({
      healthy: () => fetch(`http://127.0.0.1:${this.metricsPort}/health`, { signal: AbortSignal.timeout(500) })
        .then(async (r) => r.ok && ((await r.json()) as { health?: string }).health === 'true')
        .catch(() => false),
      check: () => {
        if (proc.exitCode !== null) throw new Error(`etcd exited with ${proc.exitCode}: ${this.#log}`);
      },
      waitingInKernel: () => waitingInKernel(proc.pid!),
      budgetMs: options.startTimeoutMs ?? 15_000,
      capMs: START_CAP_MS,
      detail: () => this.#log,
    });
  }

  /** Stops the process (SIGTERM, then SIGKILL after 5 s) and keeps the data. */
  async pause(): Promise<void> {
    const proc = this.#proc;
    if (!proc) return;
    this.#proc = undefined;
    // Killed by a signal (Ctrl-C reaches the whole process group), it has a signalCode and no
    // exitCode, and its exit event is gone: waiting for it would leave nothing to wake us.
    if (proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise((resolve) => proc.once('exit', resolve));
    proc.kill('SIGTERM');
    const timer = setTimeout(() => proc.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(timer);
  }

  /** Stops etcd and removes its data. Idempotent. */
  async stop(): Promise<void> {
    await this.pause();
    await rm(join(this.dataDir, '..'), { recursive: true, force: true });
  }
}
