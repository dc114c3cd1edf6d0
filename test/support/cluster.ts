/**
 * A cluster on this machine for end-to-end tests and `make demo`: an underlay bridge in a
 * namespace of its own, N node namespaces on it each running a real bin/weftd (etcd mode against
 * a real etcd on a unix socket, or kube mode against the real control plane of control-plane.ts,
 * with nodeipam giving the Nodes their pod CIDRs), and pods wired by the real bin/weft plugin
 * with Debian's bridge + host-local, each pod in a namespace of its own.
 *
 * In kube mode weftd is the ServiceAccount kube-flannel/flannel with a token from the TokenRequest
 * API, and may do what daemonset.yaml (and the manifests of {@link ClusterOptions.rbac}) grant.
 *
 * Everything is named with the run's prefix and removed by stop(), even after failures.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Etcd3 } from 'etcd3';
import { PLUGIN_BIN, callPlugin } from './cni.ts';
import { KubeControlPlane } from './control-plane.ts';
import { EtcdServer } from './etcd.ts';
import { KubeApiServer } from './kube-apiserver.ts';
import { DelayProxy } from './delay-proxy.ts';
import { accessObjects } from './manifests.ts';
import { attachToUnderlay, createNetns, forwardIntoNetns, joinUnderlay, withMounts } from './netns.ts';
import type { Netns } from './netns.ts';
import { until } from './until.ts';

export const WEFTD_BIN = fileURLToPath(new URL('../../bin/weftd', import.meta.url));
const ETCD_PREFIX = '/coreos.com/network';
const API_PORT = 6443;

export interface ClusterOptions {
  nodes: number;
  backend: 'vxlan' | 'host-gw' | 'wireguard' | 'alloc' | 'extension';
  /** More keys of net-conf.json's Backend object, as JSON members (`"PSK":"…"`). */
  backendKeys?: string;
  /** IPv4 + IPv6 pod networks (10.244.0.0/16 and fd00:10:244::/56). */
  dualStack?: boolean;
  mode: 'etcd' | 'kube';
  /** Extra weftd flags for every node. */
  weftdArgs?: string[];
  /** Kube mode: run against the control plane before any node starts (install CRDs, create objects). */
  prepareApi?: (api: KubeControlPlane) => Promise<void>;
  /** Kube mode: manifests besides daemonset.yaml whose roles weftd gets (egress-rbac.yaml, service-proxy.yaml). */
  rbac?: string[];
  /**
   * Kube mode: the in-repo test API server (as admin) instead of the real control plane, for the
   * benchmarks of faults only it can make (a 503 storm, a forced 410); Nodes get 10.244.<n>.0/24.
   */
  testApiServer?: boolean;
  /**
   * Kube mode: the nodes reach the API server through a {@link DelayProxy} ({@link Cluster.apiDelay}),
   * with no delay until a test sets one (a slow API server, for every weftd alike).
   */
  apiDelay?: boolean;
}

/** One weftd process and what it printed. */
export interface Daemon {
  proc: ChildProcess;
  log(): string;
  exited: Promise<number | null>;
}

export interface Pod {
  node: ClusterNode;
  ns: Netns;
  id: string;
  ip: string;
  ipv6: string | undefined;
}

export interface ClusterNode {
  name: string;
  ns: Netns;
  /** The node's address on the underlay. */
  address: string;
  /** Kube mode: the Node's pod CIDRs (IPv4 first), as nodeipam gave them; empty in etcd mode. */
  podCidrs: string[];
  dir: string;
  daemon: Daemon;
}

/**
 * Runs bin/weftd in `ns` with `args` and only `env` (plus PATH), seeing `mounts` (see withMounts
 * in netns.ts) when given; stderr is kept for {@link Daemon.log}.
 */
export function spawnWeftd(ns: Netns, args: readonly string[], env: Record<string, string> = {}, mounts?: Record<string, string>): Daemon {
  const argv = ['netns', 'exec', ns.name, WEFTD_BIN, ...args];
  const [file, fileArgs] = mounts ? withMounts(mounts, 'ip', argv) : ['ip', argv];
  const proc = spawn(file, fileArgs, { env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
  let text = '';
  proc.stderr!.on('data', (c: Buffer) => (text += c.toString()));
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  return { proc, log: () => text, exited };
}

/** The children of every thread of process `pid` (none when it is gone). */
/** The processes `pid` started that still run. */
export function childrenOf(pid: number): number[] {
  try {
    return readdirSync(`/proc/${pid}/task`).flatMap((tid) =>
      readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').split(' ').filter(Boolean).map(Number));
  } catch {
    return [];
  }
}

/**
 * Kills `d` as a crash would (SIGKILL) and its children with it, as its container's end would
 * on a node: left here they would live on (`nft monitor` waits for a ruleset change that never
 * comes in a namespace being removed) and keep the namespace.
 */
function killDaemon(d: Daemon): void {
  const children = childrenOf(d.proc.pid!);
  d.proc.kill('SIGKILL');
  for (const child of children) {
    try {
      process.kill(child, 'SIGKILL');
    } catch {
      // Gone already.
    }
  }
}

/** Stops `d` with `signal` (SIGKILL after 10 s); resolves with its exit code (null if killed). */
export async function stopDaemon(d: Daemon, signal: NodeJS.Signals = 'SIGTERM'): Promise<number | null> {
  if (d.proc.exitCode !== null || d.proc.signalCode !== null) return d.proc.exitCode;
  if (signal === 'SIGKILL') killDaemon(d);
  else d.proc.kill(signal);
  const timer = setTimeout(() => killDaemon(d), 10_000);
  try {
    return await d.exited;
  } finally {
    clearTimeout(timer);
  }
}

export class Cluster {
  readonly o: ClusterOptions;
  readonly dir: string;
  readonly nodes: ClusterNode[] = [];
  readonly pods: Pod[] = [];
  underlay: Netns | undefined;
  etcd: EtcdServer | undefined;
  /** Kube mode: the real control plane. */
  api: KubeControlPlane | undefined;
  /** Kube mode with {@link ClusterOptions.testApiServer}: the test API server. */
  testApi: KubeApiServer | undefined;
  /** Kube mode with {@link ClusterOptions.apiDelay}: what the nodes reach the API server through. */
  apiDelay: DelayProxy | undefined;
  readonly #forwarders: (() => Promise<void>)[] = [];
  /** Kube mode: each node's forwarder to the API server, by node name. */
  readonly #apiForwarders = new Map<string, () => Promise<void>>();
  readonly #namespaces: Netns[] = [];
  #pods = 0;

  private constructor(o: ClusterOptions, dir: string) {
    this.o = o;
    this.dir = dir;
  }

  get netConf(): string {
    const v6 = this.o.dualStack ? ',"EnableIPv6":true,"IPv6Network":"fd00:10:244::/56"' : '';
    const keys = this.o.backendKeys ? `,${this.o.backendKeys}` : '';
    return `{"Network":"10.244.0.0/16"${v6},"Backend":{"Type":"${this.o.backend}"${keys}}}`;
  }

  /** Builds the cluster and waits until every weftd is ready. On failure, removes what it made. */
  static async start(o: ClusterOptions): Promise<Cluster> {
    const c = new Cluster(o, await mkdtemp(join(tmpdir(), 'weft-cluster-')));
    try {
      await c.#start();
      return c;
    } catch (e) {
      await c.stop();
      throw e;
    }
  }

  async #start(): Promise<void> {
    if (this.o.mode === 'etcd') {
      this.etcd = await EtcdServer.start({ unixSocket: true });
      const admin = new Etcd3({ hosts: this.etcd.endpoint });
      try {
        await admin.put(`${ETCD_PREFIX}/config`).value(this.netConf);
      } finally {
        admin.close();
      }
    } else if (this.o.testApiServer) {
      this.testApi = await KubeApiServer.start();
      await writeFile(join(this.dir, 'net-conf.json'), this.netConf);
      await writeFile(this.#kubeconfig, await readFile(await this.testApi.kubeconfig(), 'utf8'));
    } else {
      // nodeipam only: the Nodes' pod CIDRs come from the cluster, as --allocate-node-cidrs gives them.
      this.api = await KubeControlPlane.start({ controllers: ['nodeipam'], dualStack: this.o.dualStack ?? false });
      for (const o of await accessObjects(['daemonset.yaml', ...(this.o.rbac ?? [])])) await this.api.apply(o);
      await this.o.prepareApi?.(this.api);
      await writeFile(join(this.dir, 'net-conf.json'), this.netConf);
      const token = await this.api.serviceAccountToken('kube-flannel', 'flannel');
      await writeFile(this.#kubeconfig, await readFile(await this.api.kubeconfig(token), 'utf8'));
    }
    if (this.o.apiDelay) {
      this.apiDelay = await DelayProxy.start(join(this.dir, 'api-delay.sock'), (this.api ?? this.testApi)!.socketPath, 0);
    }
    this.underlay = await this.#netns('ul');
    await joinUnderlay(this.underlay, []);
    for (let i = 0; i < this.o.nodes; i++) await this.#addNode();
    for (const n of this.nodes) await this.waitReady(n);
  }

  /** One more node: a namespace on the underlay (and a Node object in kube mode) and its weftd. */
  async #addNode(): Promise<ClusterNode> {
    const node = await this.#prepareNode();
    node.daemon = this.#weftd(node);
    return node;
  }

  /**
   * A node's namespace on the underlay, directory (and in kube mode its Node, registered as a
   * kubelet does, with the pod CIDRs nodeipam gave it); no weftd yet.
   */
  async #prepareNode(): Promise<ClusterNode> {
    const index = this.nodes.length + 1;
    const name = `node-${index}`;
    const ns = await this.#netns(`n${index}`);
    await attachToUnderlay(this.underlay!, ns, index, { ipv6: this.o.dualStack ?? false });
    const dir = join(this.dir, name);
    await mkdir(dir, { recursive: true });
    let podCidrs: string[] = [];
    if (this.api) {
      await this.api.addNode(name);
      podCidrs = await this.api.podCidrs(name);
    } else if (this.testApi) {
      podCidrs = [`10.244.${index}.0/24`, ...(this.o.dualStack ? [`fd00:10:244:${index}::/64`] : [])];
      this.testApi.addNode({ metadata: { name }, spec: { podCIDR: podCidrs[0], podCIDRs: podCidrs } });
    }
    if (this.o.mode === 'kube') await this.rejoinApi({ name, ns });
    const node: ClusterNode = { name, ns, address: `198.51.100.${index}`, podCidrs, dir, daemon: undefined as unknown as Daemon };
    this.nodes.push(node);
    return node;
  }

  /**
   * Adds `k` nodes whose weftds all start in the same instant (a rollout, a power cut ending);
   * returns without waiting for them: see {@link waitReady}.
   */
  async addNodes(k: number): Promise<ClusterNode[]> {
    const nodes: ClusterNode[] = [];
    for (let i = 0; i < k; i++) nodes.push(await this.#prepareNode());
    for (const node of nodes) node.daemon = this.#weftd(node);
    return nodes;
  }

  /** Adds a node to the running cluster and waits until its weftd is ready. */
  async addNode(): Promise<ClusterNode> {
    const node = await this.#addNode();
    await this.waitReady(node);
    return node;
  }

  async #netns(tag: string): Promise<Netns> {
    const ns = await createNetns(tag);
    this.#namespaces.push(ns);
    return ns;
  }

  /** The weftd command line of `node`. */
  args(node: ClusterNode): string[] {
    const source = this.etcd
      ? [`--etcd-endpoints=${this.etcd.endpoint}`]
      : ['--kube-subnet-mgr', `--kube-api-url=https://127.0.0.1:${API_PORT}`, `--net-config-path=${join(this.dir, 'net-conf.json')}`];
    return [...source, '--iface=eth0', `--subnet-file=${join(node.dir, 'subnet.env')}`, ...(this.o.weftdArgs ?? [])];
  }

  #weftd(node: ClusterNode, extra: readonly string[] = []): Daemon {
    const args = [...this.args(node), ...extra];
    if (this.o.mode === 'kube') args.push(`--kubeconfig-file=${this.#kubeconfig}`);
    // The nodes share this machine's file system: each keeps its own WireGuard key.
    return spawnWeftd(node.ns, args, { NODE_NAME: node.name, WIREGUARD_KEY_FILE: join(node.dir, 'wgkey') });
  }

  get #kubeconfig(): string {
    return join(this.dir, 'kubeconfig.json');
  }

  /** Waits for `node`'s weftd to say it is ready (its first full reconcile is done). */
  async waitReady(node: ClusterNode, timeoutMs = 30_000): Promise<void> {
    await until(`weftd on ${node.name} ready`, () => {
      if (node.daemon.proc.exitCode !== null) throw new Error(`weftd on ${node.name} exited ${node.daemon.proc.exitCode}\n${node.daemon.log()}`);
      return /ready: the kernel holds every lease/.test(node.daemon.log());
    }, timeoutMs, node.daemon.log);
  }

  /** Stops `node`'s weftd with `signal` (SIGKILL after 10 s); resolves with its exit code. */
  async stopWeftd(node: ClusterNode, signal: NodeJS.Signals = 'SIGTERM'): Promise<number | null> {
    return stopDaemon(node.daemon, signal);
  }

  /** Kube mode: cuts `node` from the API server only (its forwarder stops; its links stay up). */
  async cutFromApi(node: ClusterNode): Promise<void> {
    await this.#apiForwarders.get(node.name)?.();
  }

  /** Kube mode: joins `node` to the API server again after {@link cutFromApi}. */
  async rejoinApi(node: Pick<ClusterNode, 'name' | 'ns'>): Promise<void> {
    const stop = await forwardIntoNetns(node.ns, API_PORT, this.apiDelay?.path ?? (this.api ?? this.testApi)!.socketPath);
    this.#forwarders.push(stop);
    this.#apiForwarders.set(node.name, stop);
  }

  /** Starts `node`'s weftd again (after stopWeftd), with `extra` flags after the others, and waits until it is ready. */
  async restartWeftd(node: ClusterNode, extra: readonly string[] = []): Promise<void> {
    node.daemon = this.#weftd(node, extra);
    await this.waitReady(node);
  }

  /** subnet.env of `node` as a map. */
  async subnetEnv(node: ClusterNode): Promise<Record<string, string>> {
    const text = await readFile(join(node.dir, 'subnet.env'), 'utf8');
    return Object.fromEntries(text.trim().split('\n').map((l) => l.split('=') as [string, string]));
  }

  /** The CNI config of `node`'s pods: flannel's conflist entry, with this node's files. */
  cniConfig(node: ClusterNode): Record<string, unknown> {
    return {
      cniVersion: '1.0.0', name: 'cbr0', type: 'flannel',
      subnetFile: join(node.dir, 'subnet.env'), dataDir: join(node.dir, 'cni'),
      delegate: { hairpinMode: true, isDefaultGateway: true },
      // host-local's store is per node here (the nodes share this machine's file system).
      ipam: { dataDir: join(node.dir, 'ipam') },
    };
  }

  /**
   * A pod on `node` through the native plugin's ADD (weftd's CNI server, or the fallback);
   * `k8s` names its Pod in CNI_ARGS, as the kubelet's runtime does.
   */
  async addPod(node: ClusterNode, k8s?: { namespace: string; name: string }): Promise<Pod> {
    const ns = await this.#netns(`pod${++this.#pods}`);
    const id = `pod-${this.#pods}`;
    const env = k8s ? { CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${k8s.namespace};K8S_POD_NAME=${k8s.name};K8S_POD_INFRA_CONTAINER_ID=${id}` } : undefined;
    const r = await callPlugin(PLUGIN_BIN, node.ns, { command: 'ADD', containerId: id, ifname: 'eth0', netns: ns.path, ...(env ? { env } : {}) }, this.cniConfig(node));
    if (r.code !== 0 || !r.json) throw new Error(`weft ADD on ${node.name} failed: ${r.stdout}${r.stderr}`);
    const ips = (r.json.ips as { address: string }[]).map((i) => i.address.split('/')[0]!);
    const pod: Pod = { node, ns, id, ip: ips.find((a) => !a.includes(':'))!, ipv6: ips.find((a) => a.includes(':')) };
    this.pods.push(pod);
    return pod;
  }

  /** Removes `pod`: the plugin's DEL, then its namespace. */
  async removePod(pod: Pod): Promise<void> {
    const r = await callPlugin(PLUGIN_BIN, pod.node.ns, { command: 'DEL', containerId: pod.id, ifname: 'eth0', netns: pod.ns.path }, this.cniConfig(pod.node));
    if (r.code !== 0) throw new Error(`weft DEL on ${pod.node.name} failed: ${r.stdout}${r.stderr}`);
    this.pods.splice(this.pods.indexOf(pod), 1);
    this.#namespaces.splice(this.#namespaces.indexOf(pod.ns), 1);
    await pod.ns.remove();
  }

  /** Whether one ping from `from` reaches `to` (IPv4, or IPv6 with `v6`). */
  async ping(from: Pod, to: Pod, v6 = false): Promise<boolean> {
    const target = v6 ? to.ipv6 : to.ip;
    if (!target) throw new Error(`pod ${to.id} has no IPv${v6 ? 6 : 4} address`);
    return from.ns.exec('ping', '-c', '1', '-W', '1', target).then(() => true, () => false);
  }

  /** Waits until `from` reaches `to`. */
  async waitPing(from: Pod, to: Pod, v6 = false, timeoutMs = 20_000): Promise<void> {
    await until(`${from.id} on ${from.node.name} reaching ${to.id} on ${to.node.name}${v6 ? ' over IPv6' : ''}`, () => this.ping(from, to, v6), timeoutMs, () => this.nodes.map((n) => `--- ${n.name}\n${n.daemon.log()}`).join('\n'));
  }

  /** Removes everything: pods (CNI DEL), weftd processes, namespaces, servers, files. */
  async stop(): Promise<void> {
    for (const pod of this.pods.splice(0)) {
      await callPlugin(PLUGIN_BIN, pod.node.ns, { command: 'DEL', containerId: pod.id, ifname: 'eth0', netns: pod.ns.path }, this.cniConfig(pod.node)).catch(() => undefined);
    }
    await Promise.all(this.nodes.map((n) => this.stopWeftd(n).catch(() => null)));
    await Promise.all(this.#forwarders.splice(0).map((stop) => stop()));
    await this.apiDelay?.close();
    for (const ns of this.#namespaces.splice(0).reverse()) await ns.remove();
    await this.etcd?.stop();
    await this.api?.stop();
    await this.testApi?.stop();
    await rm(this.dir, { recursive: true, force: true });
  }
}
