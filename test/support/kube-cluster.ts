/**
 * A real Kubernetes cluster on this machine, for tests that run what users run: the control plane of
 * control-plane.ts (etcd, kube-apiserver, kube-controller-manager with every default controller,
 * kube-scheduler) and N real nodes (kube-node.ts: containerd + runc, kubelet, kube-proxy), joined by
 * an underlay bridge (198.51.100.0/24) in a namespace of its own. Nothing is routed from this
 * machine's namespace into it.
 *
 * How the parts reach each other, as on a cluster whose control plane is one host among the nodes:
 * - nodes and pods reach the API at https://198.51.100.250:<port>, an address of the underlay held by
 *   a forwarder (forwardIntoNetns) in front of the API server's unix socket; that is also the
 *   `kubernetes` Service's endpoint, so in-cluster clients use 10.96.0.1:443 through kube-proxy;
 * - the API server reaches kubelets, pods and Services (exec, logs, the proxy subresources) through
 *   its egress selector: HTTP CONNECT over a unix socket to a relay (kube-relay.ts) that dials from
 *   the first node's network namespace;
 * - tests use `kubectl` (dist/peers) with the admin kubeconfig, {@link KubeCluster.kubeconfig}.
 *
 * No network add-on is installed unless `manifests` (or the test) applies one: nodes stay NotReady
 * until a CNI configuration appears in their /etc/cni/net.d. stop() removes everything, also after a
 * failed start.
 */
import { execFile, spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ADVERTISE_ADDRESS, CLUSTER_CIDR, KubeControlPlane } from './control-plane.ts';
import { buildPauseImage } from './kube-images.ts';
import { KubeNode } from './kube-node.ts';
import { createNetns, forwardIntoNetns, joinUnderlay, needsRootAnd } from './netns.ts';
import type { Netns } from './netns.ts';
import { peer } from './peers.ts';

const NODE = fileURLToPath(new URL('../../node_modules/.bin/node', import.meta.url));
const RELAY = fileURLToPath(new URL('./kube-relay.ts', import.meta.url));

export interface KubeClusterOptions {
  /** How many nodes start with the cluster (more with {@link KubeCluster.addNode}). */
  nodes: number;
  /** Image archives each node imports (`ctr images import`), besides the pause image. */
  images?: readonly string[];
  /** Files `kubectl apply -f` applies once the nodes have registered: a network add-on, say. */
  manifests?: readonly string[];
  /** kube-controller-manager's --controllers; default every controller enabled by default (`*`). */
  controllers?: string[];
  /** More kube-apiserver flags. */
  apiserverArgs?: string[];
  /** The kubelets' clusterDNS. */
  clusterDNS?: string[];
  /** Runs kube-proxy on each node (default true). */
  kubeProxy?: boolean;
}

/** What a node added later may differ in. */
export interface AddNodeOptions {
  /** false: a node whose administrator set none of its sysctls (IPv4 forwarding and br_netfilter's calls off). */
  sysctls?: boolean;
  /** false: a node whose mounts are private, as on a host without systemd (see KubeNodeOptions). */
  sharedMounts?: boolean;
  /** false: a node without kube-proxy, as one joining a cluster that runs without it (default: the cluster's). */
  kubeProxy?: boolean;
}

/**
 * For `test(..., { skip })`: why a real-kubelet cluster cannot run here (not root), else false; as
 * root a missing program is an error, not a skip (see needsRootAnd).
 */
export const needsKubeNodes: string | false = needsRootAnd('/usr/bin/containerd', '/usr/bin/ctr', '/usr/sbin/conntrack');

/** The egress relay's process and what it printed. */
interface Relay {
  proc: ChildProcess;
  log: () => string;
}

export class KubeCluster {
  readonly cp: KubeControlPlane;
  readonly dir: string;
  /** The admin kubeconfig (system:masters), for kubectl and the e2e suite. */
  readonly kubeconfig: string;
  /** The nodes, by their number. */
  readonly nodes: KubeNode[] = [];
  readonly #options: KubeClusterOptions;
  #egress: Relay | undefined;
  #stopForwarder: (() => Promise<void>) | undefined;
  #underlay: Netns | undefined;
  #pauseImage = '';
  #lastIndex = 0;

  private constructor(cp: KubeControlPlane, dir: string, kubeconfig: string, options: KubeClusterOptions) {
    this.cp = cp;
    this.dir = dir;
    this.kubeconfig = kubeconfig;
    this.#options = options;
  }

  /** The API as nodes and pods reach it. */
  get server(): string {
    return `https://${ADVERTISE_ADDRESS}:${new URL(this.cp.url).port}`;
  }

  /** Starts the control plane and `options.nodes` nodes, and applies `options.manifests`; on failure removes what it made. */
  static async start(options: KubeClusterOptions): Promise<KubeCluster> {
    const dir = await mkdtemp(join(tmpdir(), 'weft-kube-'));
    const egressConfig = join(dir, 'egress-selector.yaml');
    await writeFile(egressConfig, JSON.stringify({
      apiVersion: 'apiserver.k8s.io/v1beta1', kind: 'EgressSelectorConfiguration',
      egressSelections: [{
        name: 'cluster', connection: { proxyProtocol: 'HTTPConnect', transport: { uds: { udsName: join(dir, 'egress.sock') } } },
      }],
    }));
    let cp: KubeControlPlane;
    try {
      cp = await KubeControlPlane.start({
        controllers: options.controllers ?? ['*'], scheduler: true,
        // Kubelets by their address: a node's hostname is its own, no resolver of this machine knows it.
        apiserverArgs: [`--egress-selector-config-file=${egressConfig}`, '--kubelet-preferred-address-types=InternalIP',
          '--allow-privileged=true', ...(options.apiserverArgs ?? [])],
      });
    } catch (e) {
      await rm(dir, { recursive: true, force: true });
      throw e;
    }
    const c = new KubeCluster(cp, dir, await cp.kubeconfig(), options);
    try {
      await c.#startUnderlay();
      c.#pauseImage = await buildPauseImage(join(dir, 'pause'));
      const started = await Promise.allSettled(Array.from({ length: options.nodes }, () => c.addNode()));
      const failed = started.find((r) => r.status === 'rejected');
      if (failed) throw failed.reason;
      for (const file of options.manifests ?? []) await c.kubectl('apply', '-f', file);
      return c;
    } catch (e) {
      await c.stop();
      throw e;
    }
  }

  async #startUnderlay(): Promise<void> {
    this.#underlay = await createNetns('kul');
    await joinUnderlay(this.#underlay, []);
    await this.#underlay.ip('addr', 'add', `${ADVERTISE_ADDRESS}/24`, 'dev', 'br0');
    const port = Number(new URL(this.cp.url).port);
    this.#stopForwarder = await forwardIntoNetns(this.#underlay, port, this.cp.socketPath, ADVERTISE_ADDRESS);
  }

  /** Starts the API server's egress relay (kube-relay.ts) in `ns`, and waits until it listens. */
  async #relay(ns: Netns): Promise<void> {
    const proc = spawn('nsenter', [`--net=${ns.path}`, '--', NODE, RELAY, join(this.dir, 'egress.sock')],
      { stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    proc.stderr!.on('data', (c: Buffer) => (err = (err + c.toString()).slice(-4000)));
    this.#egress = { proc, log: () => err };
    const [first] = await Promise.race([once(proc.stdout!, 'data'), once(proc, 'exit').then(() => [undefined])]);
    if (String(first).trim() !== 'ready') throw new Error(`kube-relay in ${ns.name} did not start: ${err}`);
  }

  /**
   * Adds node `node-<n>` (the next number): its namespaces, containerd with the pause image and the
   * cluster's images, kubelet and kube-proxy; resolves once its Node object is registered.
   */
  async addNode(options: AddNodeOptions = {}): Promise<KubeNode> {
    if (!this.#underlay) throw new Error('the cluster has no underlay');
    const index = ++this.#lastIndex;
    const name = `node-${index}`;
    const dir = join(this.dir, name);
    await mkdir(dir, { recursive: true });
    const node = await KubeNode.create({
      name, index, dir, underlay: this.#underlay, pkiDir: join(this.cp.dir, 'pki'), server: this.server, clusterCidr: CLUSTER_CIDR,
      ...(this.#options.clusterDNS ? { clusterDNS: this.#options.clusterDNS } : {}),
      ...(options.sysctls === false ? { sysctls: false } : {}), ...(options.sharedMounts === false ? { sharedMounts: false } : {}),
      ...((options.kubeProxy ?? this.#options.kubeProxy) === false ? { kubeProxy: false } : {}),
    });
    this.nodes.push(node);
    this.nodes.sort((a, b) => a.index - b.index);
    await node.importImages([this.#pauseImage, ...(this.#options.images ?? [])]);
    await node.startKubelet(this.cp.caFile);
    if (index === 1) await this.#relay(node.ns);
    await this.waitFor(`Node ${name} registered`,
      async () => (await this.kubectl('get', 'nodes', '-o', 'name')).includes(`node/${name}\n`), 120_000);
    return node;
  }

  /** Deletes `node`'s Node object and stops it; not node 1, from whose namespace the API server reaches the cluster. */
  async removeNode(node: KubeNode): Promise<void> {
    if (node.index === 1) throw new Error('node 1 carries the API server\'s egress relay and stays with the cluster');
    await this.kubectl('delete', 'node', node.name, '--ignore-not-found', '--wait=false');
    await node.stop();
    this.nodes.splice(this.nodes.indexOf(node), 1);
  }

  /**
   * Runs kubectl with the admin kubeconfig; resolves with stdout, rejects with its exit and output.
   * `input` goes to its standard input (`apply -f -`).
   */
  async kubectl(...args: (string | { input: string })[]): Promise<string> {
    const input = args.find((a): a is { input: string } => typeof a === 'object')?.input;
    const argv = args.filter((a): a is string => typeof a === 'string');
    const proc = spawn(peer('kubectl'), [`--kubeconfig=${this.kubeconfig}`, ...argv], { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    proc.stdout.on('data', (c: Buffer) => (out += c.toString()));
    proc.stderr.on('data', (c: Buffer) => (err += c.toString()));
    proc.stdin.end(input ?? '');
    const [code] = await once(proc, 'close') as [number | null];
    if (code !== 0) {
      throw Object.assign(new Error(`kubectl ${argv.join(' ')} exited ${code}: ${err}${out}`), { stdout: out, stderr: err, code });
    }
    return out;
  }

  /**
   * Writes a kubeconfig at `file` for service account `namespace/name` (a token the API issues, at
   * {@link server}), for a process that runs outside a pod as that account; returns `file`.
   */
  async serviceAccountKubeconfig(namespace: string, name: string, file: string): Promise<string> {
    const token = (await this.kubectl('create', 'token', name, '-n', namespace, '--duration=2h')).trim();
    await writeFile(file, JSON.stringify({
      apiVersion: 'v1', kind: 'Config', 'current-context': name,
      clusters: [{ name: 'cluster', cluster: { server: this.server, 'certificate-authority': this.cp.caFile } }],
      users: [{ name, user: { token } }], contexts: [{ name, context: { cluster: 'cluster', user: name } }],
    }));
    return file;
  }

  /** kubectl's JSON output of `get <args>`. */
  async getJson<T = Record<string, unknown>>(...args: string[]): Promise<T> {
    return JSON.parse(await this.kubectl('get', ...args, '-o', 'json')) as T;
  }

  /**
   * Waits until `cond` holds, checking every 200 ms, failing after `timeoutMs` with the cluster's
   * logs (or after a daemon of a node exited).
   */
  async waitFor(what: string, cond: () => Promise<boolean>, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      for (const n of this.nodes) n.check();
      if (await cond().catch(() => false)) return;
      if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}\n${this.logs()}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  /** The tail of every component's log. */
  logs(): string {
    return [this.cp.logs(), ...this.nodes.map((n) => n.logs()), `--- egress relay\n${this.#egress?.log() ?? ''}`].join('\n');
  }

  /** Stops and removes everything: nodes (their processes, cgroups, namespaces), relays, the control plane, files. Idempotent. */
  async stop(): Promise<void> {
    const errors: unknown[] = [];
    const attempt = async (fn: () => Promise<unknown>): Promise<void> => {
      await fn().catch((e: unknown) => errors.push(e));
    };
    await Promise.all(this.nodes.map((n) => attempt(() => n.stop())));
    const relay = this.#egress?.proc;
    if (relay && relay.exitCode === null && relay.signalCode === null) {
      await attempt(async () => {
        const exited = once(relay, 'exit');
        relay.kill('SIGTERM');
        await exited;
      });
    }
    if (this.#stopForwarder) await attempt(this.#stopForwarder);
    if (this.#underlay) await attempt(() => this.#underlay!.remove());
    await attempt(() => this.cp.stop());
    await attempt(() => rm(this.dir, { recursive: true, force: true }));
    if (errors.length) throw new AggregateError(errors, `the cluster was not removed cleanly: ${errors.map(String).join('; ')}`);
  }
}
