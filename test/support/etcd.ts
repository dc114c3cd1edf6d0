/**
 * A real etcd (Debian's etcd-server) for tests: loopback only, free ports, a temporary data
 * directory, stopped and removed afterwards. It can be stopped and started again on the same
 * ports and data, for tests of a datastore that goes away and comes back.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A TCP port on 127.0.0.1 that was free a moment ago. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      srv.close(() => (typeof addr === 'object' && addr ? resolve(addr.port) : reject(new Error('no port'))));
    });
  });
}

export interface EtcdOptions {
  /** How long to wait for etcd to answer its health check; default 15 s. */
  startTimeoutMs?: number;
}

export class EtcdServer {
  readonly clientPort: number;
  readonly peerPort: number;
  readonly dataDir: string;
  #proc: ChildProcess | undefined;
  #log = '';

  private constructor(clientPort: number, peerPort: number, dataDir: string) {
    this.clientPort = clientPort;
    this.peerPort = peerPort;
    this.dataDir = dataDir;
  }

  /** `http://127.0.0.1:<port>`. */
  get endpoint(): string {
    return `http://127.0.0.1:${this.clientPort}`;
  }

  /** Starts a fresh etcd and waits until it is healthy. */
  static async start(options: EtcdOptions = {}): Promise<EtcdServer> {
    const dir = await mkdtemp(join(tmpdir(), 'weft-etcd-'));
    const server = new EtcdServer(await freePort(), await freePort(), join(dir, 'data'));
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
      '--listen-client-urls', this.endpoint,
      '--advertise-client-urls', this.endpoint,
      '--listen-peer-urls', peer,
      '--initial-advertise-peer-urls', peer,
      '--initial-cluster', `weft-test=${peer}`,
      '--initial-cluster-state', 'new',
      '--log-level', 'error',
    ], { stdio: ['ignore', 'ignore', 'pipe'] });
    this.#proc = proc;
    proc.stderr?.on('data', (chunk: Buffer) => {
      this.#log = (this.#log + chunk.toString()).slice(-4000);
    });
    const deadline = Date.now() + (options.startTimeoutMs ?? 15_000);
    for (;;) {
      if (proc.exitCode !== null) throw new Error(`etcd exited with ${proc.exitCode}: ${this.#log}`);
      const healthy = await fetch(`${this.endpoint}/health`, { signal: AbortSignal.timeout(500) })
        .then(async (r) => r.ok && ((await r.json()) as { health?: string }).health === 'true')
        .catch(() => false);
      if (healthy) return;
      if (Date.now() > deadline) throw new Error(`etcd did not become healthy: ${this.#log}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /** Stops the process (SIGTERM, then SIGKILL after 5 s) and keeps the data. */
  async pause(): Promise<void> {
    const proc = this.#proc;
    if (!proc) return;
    this.#proc = undefined;
    if (proc.exitCode !== null) return;
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
