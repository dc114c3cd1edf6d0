/**
 * A real etcd cluster of three members (Debian's etcd-server) for fault tests: each member in a
 * network namespace of its own, all on one underlay bridge (198.51.100.11-13, in a namespace of
 * its own too), so that nftables in a member's namespace can cut it from its peers or drop the
 * SYNs of its clients. Each member also serves clients on a unix socket, which the test process
 * (in the root namespace) and in-process lease sources reach without any route. Everything is
 * removed by {@link EtcdCluster.close}.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Etcd3 } from 'etcd3';
import { attachToUnderlay, createNetns } from './netns.ts';
import type { Netns } from './netns.ts';
import { until } from './until.ts';

const CLIENT_PORT = 2379;
const PEER_PORT = 2380;
/** The nftables table the fault helpers add in a member's namespace. */
const FAULT_TABLE = 'weftfault';

export interface Member {
  name: string;
  ns: Netns;
  /** The member's address on the underlay. */
  ip: string;
  dir: string;
  proc: ChildProcess | undefined;
  log: string;
}

export class EtcdCluster {
  readonly underlay: Netns;
  readonly members: Member[];
  readonly #dir: string;
  readonly #token: string;

  private constructor(underlay: Netns, members: Member[], dir: string) {
    this.underlay = underlay;
    this.members = members;
    this.#dir = dir;
    this.#token = `${underlay.name}-etcd`;
  }

  /** Starts three members and waits until the cluster answers a quorum read through each. */
  static async start(): Promise<EtcdCluster> {
    const dir = await mkdtemp(join(tmpdir(), 'weft-etcd-cluster-'));
    const underlay = await createNetns('etcd-ul');
    const members: Member[] = [];
    const cluster = new EtcdCluster(underlay, members, dir);
    try {
      await underlay.ip('link', 'add', 'br0', 'type', 'bridge');
      await underlay.ip('link', 'set', 'br0', 'up');
      for (let i = 1; i <= 3; i++) {
        const ns = await createNetns(`etcd${i}`);
        members.push({ name: `m${i}`, ns, ip: `198.51.100.${10 + i}`, dir: join(dir, `m${i}`), proc: undefined, log: '' });
        await attachToUnderlay(underlay, ns, 10 + i);
        await mkdir(members[i - 1]!.dir, { recursive: true });
      }
      for (const m of members) cluster.#spawn(m, 'new');
      for (const m of members) await cluster.waitHealthy(m);
    } catch (e) {
      await cluster.close();
      throw e;
    }
    return cluster;
  }

  /** What weftd in a namespace on the underlay is given: `http://<member>:2379`, in member order. */
  get endpoints(): string[] {
    return this.members.map((m) => `http://${m.ip}:${CLIENT_PORT}`);
  }

  /** The member's unix socket, as an endpoint for clients in any namespace. */
  unixEndpoint(m: Member): string {
    return `unix://${m.dir}/localhost:${CLIENT_PORT}`;
  }

  /** An etcd3 client of `m` alone (through its unix socket). */
  admin(m: Member, auth?: { username: string; password: string }): Etcd3 {
    return new Etcd3({ hosts: this.unixEndpoint(m), ...(auth ? { auth } : {}), grpcOptions: { 'grpc.max_receive_message_length': 64 << 20 } });
  }

  #spawn(m: Member, state: 'new' | 'existing'): void {
    const peers = this.members.map((p) => `${p.name}=http://${p.ip}:${PEER_PORT}`).join(',');
    const args = [
      'netns', 'exec', m.ns.name, 'etcd',
      '--name', m.name,
      '--data-dir', join(m.dir, 'data'),
      '--listen-client-urls', `http://${m.ip}:${CLIENT_PORT},unix://localhost:${CLIENT_PORT}`,
      '--advertise-client-urls', `http://${m.ip}:${CLIENT_PORT}`,
      '--listen-peer-urls', `http://${m.ip}:${PEER_PORT}`,
      '--initial-advertise-peer-urls', `http://${m.ip}:${PEER_PORT}`,
      '--initial-cluster', peers,
      '--initial-cluster-state', state,
      '--initial-cluster-token', this.#token,
      '--heartbeat-interval', '100',
      '--election-timeout', '1000',
      '--grpc-keepalive-min-time', '500ms',
      '--log-level', 'error',
    ];
    // The unix socket is named relative to etcd's working directory.
    const proc = spawn('ip', args, { stdio: ['ignore', 'ignore', 'pipe'], cwd: m.dir });
    m.proc = proc;
    m.log = '';
    proc.stderr!.on('data', (chunk: Buffer) => {
      m.log = (m.log + chunk.toString()).slice(-4000);
    });
  }

  /** Waits until `m` answers a quorum read (or, with auth on, refuses it). */
  async waitHealthy(m: Member, timeoutMs = 30_000): Promise<void> {
    const client = this.admin(m);
    try {
      await until(`etcd member ${m.name} to answer`, async () => {
        if (m.proc && m.proc.exitCode !== null) throw new Error(`etcd ${m.name} exited with ${m.proc.exitCode}: ${m.log}`);
        // With auth on, a refusal of the anonymous read is an answer too.
        return client.get('health').options({ deadline: Date.now() + 1000 }).then(() => true, (e: Error) => /user name is empty|permission denied|invalid auth token/.test(e.message));
      }, timeoutMs, () => m.log);
    } finally {
      client.close();
    }
  }

  /** Stops `m` (SIGTERM, SIGKILL after 5 s), keeping its data. */
  async stop(m: Member): Promise<void> {
    const proc = m.proc;
    m.proc = undefined;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise((resolve) => proc.once('exit', resolve));
    proc.kill('SIGTERM');
    const timer = setTimeout(() => proc.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(timer);
  }

  /** Stops `m` and starts it again on its data; resolves once it answers. */
  async restart(m: Member): Promise<void> {
    await this.stop(m);
    this.#spawn(m, 'existing');
    await this.waitHealthy(m);
  }

  /** Applies an nftables script in `m`'s namespace. */
  async #nftScript(m: Member, script: string): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      const child = spawn('ip', ['netns', 'exec', m.ns.name, 'nft', '-f', '-'], { stdio: ['pipe', 'ignore', 'pipe'] });
      let err = '';
      child.stderr!.on('data', (c: Buffer) => (err += c.toString()));
      child.on('error', reject);
      child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`nft in ${m.ns.name} exited ${code}: ${err}`))));
      child.stdin!.end(script);
    });
  }

  /** Cuts `m` from the other members (both directions); its clients still reach it. */
  async partition(m: Member): Promise<void> {
    const others = this.members.filter((p) => p !== m).map((p) => p.ip).join(', ');
    await this.#nftScript(m, `table inet ${FAULT_TABLE} {
  chain input { type filter hook input priority 0; ip saddr { ${others} } drop; }
  chain output { type filter hook output priority 0; ip daddr { ${others} } drop; }
}
`);
  }

  /** `m` drops every SYN to its client port: a client connecting waits for the kernel to give up. */
  async dropSyns(m: Member): Promise<void> {
    await this.#nftScript(m, `table inet ${FAULT_TABLE} {
  chain input { type filter hook input priority 0; tcp dport ${CLIENT_PORT} tcp flags & (syn | ack) == syn drop; }
}
`);
  }

  /** Removes the faults of {@link partition} and {@link dropSyns}. */
  async heal(m: Member): Promise<void> {
    await this.#nftScript(m, `delete table inet ${FAULT_TABLE}\n`);
  }

  /** Stops every member and removes the namespaces and data. Idempotent. */
  async close(): Promise<void> {
    for (const m of this.members) await this.stop(m);
    for (const m of this.members) await m.ns.remove();
    await this.underlay.remove();
    await rm(this.#dir, { recursive: true, force: true });
  }
}
