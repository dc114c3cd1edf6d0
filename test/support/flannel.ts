/**
 * Mixed clusters of the real flanneld v0.20.2 and weftd on this machine, for the interop tests.
 * Nodes are namespaces on an underlay bridge, as in cluster.ts: node A runs flanneld and its pods
 * are wired by flannel's own CNI plugin (v1.1.2, delegating to Debian's bridge + host-local); node B
 * runs weftd and its pods are wired by Weft's plugin. etcd mode uses one real etcd, kube mode the
 * real kube-apiserver with nodeipam giving each Node its podCIDR: one {@link InteropBed} per file.
 *
 * Both agents run inside their node's namespace only (`ip netns exec`), so what flanneld writes
 * there stays there: its FLANNEL-FWD chain, `iptables -P FORWARD ACCEPT`, with --ip-masq its
 * FLANNEL-POSTRTG chain; the bridge plugin adds its CNI-* masquerade chains beside them. Both
 * identify as flannel's ServiceAccount with daemonset.yaml's ClusterRole (flannel's rules and the
 * reads network policy adds). stop() removes everything, even after failures: processes by PID,
 * namespaces, Node objects, etcd keys, files.
 */
import { execFile, spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { promisify } from 'node:util';
import { loadAllYaml } from '@kubernetes/client-node';
import { Etcd3 } from 'etcd3';
import { spawnWeftd, stopDaemon } from './cluster.ts';
import type { Daemon } from './cluster.ts';
import { DEBIAN_CNI_DIR, PLUGIN_BIN, callPlugin } from './cni.ts';
import { KubeControlPlane } from './control-plane.ts';
import type { Obj, PolicyRule } from './control-plane.ts';
import { EtcdServer } from './etcd.ts';
import { FLANNEL_PREFIX } from './kube-nodes.ts';
import { attachToUnderlay, createNetns, forwardIntoNetns, joinUnderlay } from './netns.ts';
import type { Netns } from './netns.ts';
import { peer } from './peers.ts';
import { until } from './until.ts';

const run = promisify(execFile);
const ETCD_PREFIX = '/coreos.com/network';
const API_PORT = 6443;
const SERVICE_ACCOUNT = 'system:serviceaccount:kube-flannel:flannel';
/** The network name of the conflist: host-local's directory under ipam.dataDir. */
const NETWORK = 'cbr0';

/** The etcd and the control plane one test file shares, each started when first asked for. */
export class InteropBed {
  #etcd: Promise<EtcdServer> | undefined;
  #controlPlane: Promise<KubeControlPlane> | undefined;

  /** A real etcd on a unix socket (reachable from every namespace). */
  etcd(): Promise<EtcdServer> {
    this.#etcd ??= EtcdServer.start({ unixSocket: true });
    return this.#etcd;
  }

  /**
   * kube-apiserver v1.28.4 with kube-controller-manager's nodeipam, and flannel's ServiceAccount
   * granted daemonset.yaml's ClusterRole. Call early to start it while other tests run.
   */
  controlPlane(): Promise<KubeControlPlane> {
    this.#controlPlane ??= (async () => {
      const cp = await KubeControlPlane.start({ tokens: { flannel: { user: SERVICE_ACCOUNT } }, controllers: ['nodeipam'] });
      try {
        await cp.grant('flannel', SERVICE_ACCOUNT, await manifestRules());
        return cp;
      } catch (e) {
        await cp.stop();
        throw e;
      }
    })();
    // Awaited by whoever uses it; a failure must not go unhandled meanwhile.
    this.#controlPlane.catch(() => undefined);
    return this.#controlPlane;
  }

  /** Stops what was started. */
  async stop(): Promise<void> {
    await Promise.all([this.#etcd, this.#controlPlane].map(async (started) => (await started?.catch(() => undefined))?.stop()));
  }
}

/** The rules of daemonset.yaml's ClusterRole `flannel`. */
async function manifestRules(): Promise<PolicyRule[]> {
  const docs = loadAllYaml(await readFile(new URL('../../daemonset.yaml', import.meta.url), 'utf8')) as Obj[];
  const role = docs.find((d) => d.kind === 'ClusterRole' && d.metadata?.name === 'flannel');
  if (!role) throw new Error('daemonset.yaml has no ClusterRole flannel');
  return role.rules as PolicyRule[];
}

/** The agent running a node. */
export type Agent = 'flanneld' | 'weftd';

/** How a {@link MixedCluster} is made. */
export interface InteropOptions {
  bed: InteropBed;
  mode: 'etcd' | 'kube';
  backend: 'vxlan' | 'host-gw';
  /** --ip-masq for both agents (flannel's manifest runs flanneld with it). */
  ipMasq: boolean;
}

/** A node of a {@link MixedCluster}: its namespace on the underlay, its files and the agent running it. */
export interface InteropNode {
  /** The Node's name in kube mode. */
  name: string;
  ns: Netns;
  /** The node's address on the underlay. */
  address: string;
  dir: string;
  agent: Agent;
  daemon: Daemon;
}

/** A pod: a namespace of its own, wired into its node by a CNI plugin. */
export interface InteropPod {
  node: InteropNode;
  ns: Netns;
  /** The container ID the runtime gave the plugin. */
  id: string;
  ip: string;
  /** The host end of the pod's veth, from the plugin's result. */
  hostVeth: string;
  /** Which plugin wired it: a release of flannel's (its file name in dist/peers), or Weft's (`weft`). */
  by: string;
}

/** What a pod holds on its node, as the reference plugins and flannel's plugin leave it. */
export interface PodFootprint {
  /** host-local's file for the pod's address. */
  address: boolean;
  /** The host end of its veth. */
  veth: boolean;
  /** flannel's per-container state file in dataDir. */
  state: boolean;
  /** The bridge plugin's masquerade chain for the container (delegates with ipMasq). */
  masq: boolean;
}

let clusters = 0;

/**
 * Two nodes on one underlay: A started with flanneld, B with weftd, each with its own files
 * (subnet.env, flannel's dataDir, host-local's store) as a node has them.
 */
export class MixedCluster {
  readonly o: InteropOptions;
  readonly dir: string;
  readonly nodes: InteropNode[] = [];
  readonly #tag = `c${++clusters}`;
  readonly #namespaces: Netns[] = [];
  readonly #forwarders: (() => Promise<void>)[] = [];
  #etcd: EtcdServer | undefined;
  #cp: KubeControlPlane | undefined;
  #pods = 0;

  private constructor(o: InteropOptions, dir: string) {
    this.o = o;
    this.dir = dir;
  }

  /** net-conf.json (or etcd's config key) of this cluster. */
  get netConf(): string {
    return `{"Network":"10.244.0.0/16","Backend":{"Type":"${this.o.backend}"}}`;
  }

  /** Node A (flanneld) and node B (weftd), each ready. On failure, removes what it made. */
  static async start(o: InteropOptions): Promise<MixedCluster> {
    const c = new MixedCluster(o, await mkdtemp(join(tmpdir(), 'weft-interop-')));
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
      this.#etcd = await this.o.bed.etcd();
      await this.#etcdAdmin(async (admin) => admin.put(`${ETCD_PREFIX}/config`).value(this.netConf));
    } else {
      this.#cp = await this.o.bed.controlPlane();
      await writeFile(join(this.dir, 'net-conf.json'), this.netConf);
      await writeFile(this.#kubeconfig, await readFile(await this.#cp.kubeconfig('flannel', `https://127.0.0.1:${API_PORT}`), 'utf8'));
    }
    const underlay = await this.#netns('ul');
    await joinUnderlay(underlay, []);
    for (const agent of ['flanneld', 'weftd'] as const) {
      const index = this.nodes.length + 1;
      const ns = await this.#netns(`n${index}`);
      await attachToUnderlay(underlay, ns, index);
      const dir = join(this.dir, `node-${index}`);
      await mkdir(dir);
      const name = `${this.o.backend}-${this.#tag}-${index}`;
      if (this.#cp) {
        // flanneld v0.20.2 panics on a Node without any annotation: a kubelet's Node always has some.
        await this.#cp.addNode(name, { metadata: { annotations: { 'volumes.kubernetes.io/controller-managed-attach-detach': 'true' } } });
        this.#forwarders.push(await forwardIntoNetns(ns, API_PORT, this.#cp.socketPath));
      }
      this.nodes.push({ name, ns, address: `198.51.100.${index}`, dir, agent, daemon: undefined as unknown as Daemon });
    }
    for (const node of this.nodes) if (this.#cp) await this.#cp.podCidrs(node.name);
    for (const node of this.nodes) await this.startAgent(node, node.agent);
  }

  async #netns(tag: string): Promise<Netns> {
    const ns = await createNetns(tag);
    this.#namespaces.push(ns);
    return ns;
  }

  async #etcdAdmin<T>(fn: (admin: Etcd3) => Promise<T>): Promise<T> {
    const admin = new Etcd3({ hosts: this.#etcd!.endpoint });
    try {
      return await fn(admin);
    } finally {
      admin.close();
    }
  }

  get #kubeconfig(): string {
    return join(this.dir, 'kubeconfig.json');
  }

  /** subnet.env of `node`: both agents are given the same one. */
  subnetFile(node: InteropNode): string {
    return join(node.dir, 'subnet.env');
  }

  /** The flags flanneld and weftd share, as a DaemonSet gives them. */
  args(node: InteropNode): string[] {
    const source = this.#cp
      ? ['--kube-subnet-mgr', `--kube-api-url=https://127.0.0.1:${API_PORT}`, `--kubeconfig-file=${this.#kubeconfig}`,
        `--net-config-path=${join(this.dir, 'net-conf.json')}`]
      : [`--etcd-endpoints=${this.#etcd!.endpoint}`];
    return [...source, '--iface=eth0', `--subnet-file=${this.subnetFile(node)}`, ...(this.o.ipMasq ? ['--ip-masq'] : [])];
  }

  /** Starts `agent` on `node` and waits until it is up: weftd ready, flanneld running its backend. */
  async startAgent(node: InteropNode, agent: Agent): Promise<void> {
    node.agent = agent;
    node.daemon = agent === 'weftd'
      ? spawnWeftd(node.ns, this.args(node), { NODE_NAME: node.name })
      : spawnFlanneld(node.ns, this.args(node), node.name);
    const ready = agent === 'weftd' ? /ready: the kernel holds every lease/ : /Running backend/;
    await until(`${agent} on ${node.name} up`, () => {
      const code = node.daemon.proc.exitCode;
      if (code !== null) throw new Error(`${agent} on ${node.name} exited ${code}\n${node.daemon.log()}`);
      return ready.test(node.daemon.log());
    }, 60_000, () => this.logs());
  }

  /** Stops `node`'s agent with SIGTERM (SIGKILL after 10 s); resolves with its exit code (null if killed). */
  async stopAgent(node: InteropNode): Promise<number | null> {
    return stopDaemon(node.daemon);
  }

  /** Every agent's log, for a failure's message. */
  logs(): string {
    return this.nodes.map((n) => `--- ${n.agent} on ${n.name}\n${n.daemon?.log() ?? ''}`).join('\n');
  }

  /** subnet.env of `node`, as written. */
  async subnetEnv(node: InteropNode): Promise<string> {
    return readFile(this.subnetFile(node), 'utf8');
  }

  /**
   * The lease of `node` as peers read it: etcd mode, its subnet key and value; kube mode, its
   * podCIDR and flannel's annotations on its Node.
   */
  async lease(node: InteropNode): Promise<{ subnet: string; attrs: string }> {
    if (this.#cp) {
      const n = (await this.#cp.node(node.name))!;
      const annotations = Object.entries((n.metadata!.annotations ?? {}) as Record<string, string>)
        .filter(([k]) => k.startsWith(`${FLANNEL_PREFIX}/`)).sort(([a], [b]) => a.localeCompare(b));
      return { subnet: String((n.spec as { podCIDR?: string }).podCIDR), attrs: JSON.stringify(Object.fromEntries(annotations)) };
    }
    const all = await this.#etcdAdmin((admin) => admin.getAll().prefix(`${ETCD_PREFIX}/subnets/`).strings());
    const found = Object.entries(all).filter(([, v]) => (JSON.parse(v) as { PublicIP?: string }).PublicIP === node.address);
    if (found.length !== 1) throw new Error(`${found.length} leases carry ${node.address}: ${JSON.stringify(all)}`);
    const [key, attrs] = found[0]!;
    return { subnet: key.slice(`${ETCD_PREFIX}/subnets/`.length).replace('-', '/'), attrs };
  }

  /** The CNI config of `node`'s pods: flannel's conflist entry, with this node's files. */
  cniConfig(node: InteropNode): Record<string, unknown> {
    return {
      cniVersion: '1.0.0', name: NETWORK, type: 'flannel', subnetFile: this.subnetFile(node), dataDir: join(node.dir, 'cni'),
      delegate: { hairpinMode: true, isDefaultGateway: true },
      // host-local's store is per node here (the nodes share this machine's file system).
      ipam: { dataDir: join(node.dir, 'ipam') },
    };
  }

  /**
   * A pod on `node`, wired through `plugin`: a release of flannel's (`peer('flannel-cni-v1.1.2')`) or
   * Weft's (PLUGIN_BIN, the native plugin, as a runtime runs it).
   */
  async wirePod(node: InteropNode, plugin: string): Promise<InteropPod> {
    const n = ++this.#pods;
    const ns = await this.#netns(`pod${n}`);
    const id = `${this.#tag}-pod-${String(n).padStart(2, '0')}`;
    const by = plugin === PLUGIN_BIN ? 'weft' : basename(plugin);
    const call = { command: 'ADD', containerId: id, ifname: 'eth0', netns: ns.path, path: DEBIAN_CNI_DIR };
    const r = await callPlugin(plugin, node.ns, call, this.cniConfig(node));
    if (r.code !== 0 || !r.json) throw new Error(`${by} ADD on ${node.name} failed: ${r.stdout}${r.stderr}`);
    const ips = r.json.ips as { address: string }[];
    const host = (r.json.interfaces as { name: string; sandbox?: string }[]).find((i) => !i.sandbox && i.name !== 'cni0');
    if (!host) throw new Error(`${by} ADD on ${node.name} named no host veth: ${r.stdout}`);
    return { node, ns, id, ip: ips[0]!.address.split('/')[0]!, hostVeth: host.name, by };
  }

  /** CNI DEL of `pod` through `plugin` (a path), run on the pod's node; throws with the reply on failure. */
  async delPod(pod: InteropPod, plugin: string): Promise<void> {
    const call = { command: 'DEL', containerId: pod.id, ifname: 'eth0', netns: pod.ns.path, path: DEBIAN_CNI_DIR };
    const r = await callPlugin(plugin, pod.node.ns, call, this.cniConfig(pod.node));
    if (r.code !== 0) throw new Error(`DEL of ${pod.id} through ${plugin} failed: ${r.stdout}${r.stderr}`);
  }

  /** What `pod` holds on its node now. */
  async footprint(pod: InteropPod): Promise<PodFootprint> {
    const links = await pod.node.ns.ipJson<{ ifname: string }[]>('link', 'show');
    const nat = await pod.node.ns.exec('iptables-save', '-t', 'nat');
    return {
      address: existsSync(join(pod.node.dir, 'ipam', NETWORK, pod.ip)),
      veth: links.some((l) => l.ifname === pod.hostVeth),
      state: existsSync(join(pod.node.dir, 'cni', pod.id)),
      masq: nat.includes(pod.id),
    };
  }

  /** Whether one ping from `from` reaches `to`. */
  async ping(from: InteropPod, to: InteropPod): Promise<boolean> {
    return from.ns.exec('ping', '-n', '-c', '1', '-W', '1', to.ip).then(() => true, () => false);
  }

  /** Waits until `from` reaches `to`. */
  async waitPing(from: InteropPod, to: InteropPod, timeoutMs = 30_000): Promise<void> {
    const what = `${from.id} (${from.ip}, by ${from.by}) reaching ${to.id} (${to.ip}, by ${to.by})`;
    await until(what, () => this.ping(from, to), timeoutMs, () => this.logs());
  }

  /** Removes everything: agents, forwarders, namespaces, the Nodes or the etcd keys, files. */
  async stop(): Promise<void> {
    await Promise.all(this.nodes.map((n) => (n.daemon ? stopDaemon(n.daemon).catch(() => null) : null)));
    await Promise.all(this.#forwarders.splice(0).map((stop) => stop()));
    for (const ns of this.#namespaces.splice(0).reverse()) await ns.remove();
    if (this.#cp) for (const n of this.nodes) await this.#cp.remove(`/api/v1/nodes/${n.name}`).catch(() => undefined);
    if (this.#etcd) await this.#etcdAdmin(async (admin) => admin.delete().prefix(`${ETCD_PREFIX}/`)).catch(() => undefined);
    await rm(this.dir, { recursive: true, force: true });
  }
}

/**
 * Runs flanneld v0.20.2 in `ns` with `args`, and NODE_NAME (its kube mode's way to find its Node
 * without a Pod); what it prints is kept for {@link Daemon.log}.
 */
export function spawnFlanneld(ns: Netns, args: readonly string[], nodeName: string): Daemon {
  const env = { PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin', NODE_NAME: nodeName };
  const proc = spawn('ip', ['netns', 'exec', ns.name, peer('flanneld'), ...args], { env, stdio: ['ignore', 'ignore', 'pipe'] });
  let text = '';
  proc.stderr!.on('data', (c: Buffer) => (text += c.toString()));
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  return { proc, log: () => text, exited };
}

/**
 * What flanneld would have left in this machine's own namespace if it escaped its node's: its
 * flannel.1 link, its chains (FLANNEL-FWD, FLANNEL-POSTRTG) or its rules' comments. Empty when
 * it kept to its namespace.
 */
export async function rootNamespaceTraces(): Promise<string[]> {
  const links = JSON.parse((await run('ip', ['-j', 'link', 'show'])).stdout) as { ifname: string }[];
  const ruleset = (await run('nft', ['list', 'ruleset'])).stdout;
  return [
    ...links.filter((l) => l.ifname.startsWith('flannel.')).map((l) => `link ${l.ifname}`),
    ...ruleset.split('\n').filter((l) => /FLANNEL-(FWD|POSTRTG)|flanneld (masq|forward)/.test(l)).map((l) => `nft: ${l.trim()}`),
  ];
}

/**
 * A monitor (`nft monitor`, `ip monitor ...`) running in a namespace, its lines kept: what changed
 * there, in order, while something else ran.
 */
export class NsMonitor {
  readonly #proc: ChildProcess;
  readonly #exited: Promise<unknown>;
  #text = '';

  private constructor(proc: ChildProcess) {
    this.#proc = proc;
    this.#exited = once(proc, 'exit');
    proc.stdout!.on('data', (c: Buffer) => (this.#text += c.toString()));
  }

  /**
   * Starts `argv` in `ns` and returns once it reports what `poke` changes (a line matching
   * `poked`): from then on, every change is seen.
   */
  static async start(ns: Netns, argv: string[], poke: () => Promise<unknown>, poked: RegExp): Promise<NsMonitor> {
    const m = new NsMonitor(spawn('ip', ['netns', 'exec', ns.name, ...argv], { stdio: ['ignore', 'pipe', 'ignore'] }));
    try {
      await until(`${argv.join(' ')} in ${ns.name} listening`, async () => {
        if (m.#proc.exitCode !== null) throw new Error(`${argv.join(' ')} exited ${m.#proc.exitCode}`);
        await poke();
        return poked.test(m.#text);
      }, 20_000);
      return m;
    } catch (e) {
      await m.stop();
      throw e;
    }
  }

  /** The lines seen so far. */
  lines(): string[] {
    return this.#text.split('\n').filter(Boolean);
  }

  /** Stops the monitor (by its PID); idempotent. */
  async stop(): Promise<void> {
    if (this.#proc.exitCode !== null || this.#proc.signalCode !== null) return;
    this.#proc.kill('SIGTERM');
    await this.#exited;
  }
}
