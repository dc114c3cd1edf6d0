/**
 * One real Kubernetes node on this machine, for kube-cluster.ts: a network namespace on the underlay
 * (198.51.100.<index>), and a mount and UTS namespace of its own, where containerd (Debian's, with
 * runc), kubelet v1.28.4 and kube-proxy v1.28.4 (iptables mode) run as a node runs them.
 *
 * Two kubelets on one machine must not share their files: inside the node's mount namespace every
 * path of {@link NODE_PATHS} is a directory of the node's own (the mount points exist on the machine;
 * what is bound there is seen by the node's processes only), and the hostname is the node's name.
 * A `sleep` holds the namespaces; the daemons join them with `nsenter --target <it> --mount --uts
 * --net=/run/netns/<ns>` (not `ip netns exec`, which remounts /sys and hides the cgroup mounts), in
 * the node's own cgroups (kube-cgroups.ts), which stop() empties by PID.
 */
import { execFile, spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { copyFile, mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { DEBIAN_CNI_DIR } from './cni.ts';
import { NodeCgroups } from './kube-cgroups.ts';
import { PAUSE_IMAGE } from './kube-images.ts';
import { clientKubeconfig } from './kube-pki.ts';
import { holdKubeletSysctls, releaseKubeletSysctls } from './kube-sysctls.ts';
import { RUN_PREFIX, attachToUnderlay, createNetns } from './netns.ts';
import type { Netns } from './netns.ts';
import { peer } from './peers.ts';
import { until } from './until.ts';

const run = promisify(execFile);

/** The machine paths each node has a directory of its own at. */
export const NODE_PATHS = ['/var/lib/kubelet', '/var/log/pods', '/var/log/containers', '/run/containerd', '/var/lib/containerd',
  '/run/netns', '/etc/cni/net.d', '/opt/cni/bin', '/run/flannel', '/var/lib/cni', '/lib/modules'] as const;

/** The reference plugins a node has before its network add-on: containerd's CRI calls loopback itself. */
const BASE_CNI_PLUGINS = ['bridge', 'host-local', 'portmap', 'loopback'];

export interface KubeNodeOptions {
  /** The Node's name and hostname. */
  name: string;
  /** 1-based: the node's underlay address is 198.51.100.<index>. */
  index: number;
  /** The node's files on this machine. */
  dir: string;
  underlay: Netns;
  /** The cluster PKI (control-plane.ts), for the kubelet's and kube-proxy's client certificates. */
  pkiDir: string;
  /** The API as nodes reach it: https://198.51.100.250:<port>. */
  server: string;
  /** The pod network kube-proxy treats as the cluster's (--cluster-cidr). */
  clusterCidr: string;
  /** The kubelet's clusterDNS (the resolver pods with dnsPolicy ClusterFirst are given). */
  clusterDNS?: string[];
  /** false: a node whose administrator set none of setNodeSysctls (netns.ts): IPv4 forwarding and br_netfilter's calls off. */
  sysctls?: boolean;
  /** Runs kube-proxy (default true). */
  kubeProxy?: boolean;
  /**
   * false: the node's mounts stay private to it, as on a host without systemd, so no mount made
   * under a hostPath reaches a container's HostToContainer volume. Default true (shared).
   */
  sharedMounts?: boolean;
}

interface Daemon {
  name: string;
  proc: ChildProcess;
  log: () => string;
}

/** A node's daemons and namespaces. */
export class KubeNode {
  readonly name: string;
  readonly index: number;
  /** The node's InternalIP on the underlay. */
  readonly address: string;
  readonly dir: string;
  readonly ns: Netns;
  readonly cgroups: NodeCgroups;
  readonly #options: KubeNodeOptions;
  readonly #daemons: Daemon[] = [];
  #holder: ChildProcess | undefined;
  #sysctlHolder: string | undefined;

  private constructor(options: KubeNodeOptions, ns: Netns) {
    this.#options = options;
    this.name = options.name;
    this.index = options.index;
    this.address = `198.51.100.${options.index}`;
    this.dir = options.dir;
    this.ns = ns;
    this.cgroups = new NodeCgroups(`${RUN_PREFIX}-${options.name}`);
  }

  /** Makes the node and starts containerd; {@link startKubelet} follows once its images are in. On failure, removes it. */
  static async create(options: KubeNodeOptions): Promise<KubeNode> {
    const ns = await createNetns(options.name);
    const node = new KubeNode(options, ns);
    try {
      await attachToUnderlay(options.underlay, ns, options.index, { sysctls: options.sysctls !== false });
      // As on a host where br_netfilter was never loaded its calls are off (this kernel has it built in).
      if (options.sysctls === false) {
        const off = ['net.ipv4.ip_forward=0', 'net.bridge.bridge-nf-call-iptables=0', 'net.bridge.bridge-nf-call-ip6tables=0'];
        await ns.exec('sysctl', '-q', '-w', ...off);
      }
      // A node's default route: daemonset.yaml gives weftd no --iface, so it takes the default route's interface.
      await ns.ip('route', 'add', 'default', 'via', '198.51.100.254', 'dev', 'eth0');
      await node.#prepareFiles();
      await node.cgroups.create();
      await node.#startHolder();
      await node.#startContainerd();
      return node;
    } catch (e) {
      await node.stop();
      throw e;
    }
  }

  /** Where the node's path `path` (one of {@link NODE_PATHS} or below) is on this machine. */
  hostPath(path: string): string {
    const base = NODE_PATHS.find((p) => path === p || path.startsWith(`${p}/`));
    if (!base) throw new Error(`${path} is the machine's, not a node's own`);
    return join(this.dir, 'fs', path);
  }

  async #prepareFiles(): Promise<void> {
    for (const p of NODE_PATHS) {
      await mkdir(p, { recursive: true });
      await mkdir(this.hostPath(p), { recursive: true });
    }
    for (const plugin of BASE_CNI_PLUGINS) await copyFile(join(DEBIAN_CNI_DIR, plugin), join(this.hostPath('/opt/cni/bin'), plugin));
    await writeFile(join(this.hostPath('/lib/modules'), 'modules.dep'), `${this.name}\n`);
  }

  /** `sh` that joins the runtime cgroup, then execs `file args`. */
  async #inCgroup(file: string, args: readonly string[]): Promise<[string, string[]]> {
    return ['sh', ['-c', 'echo $$ > "$0" && exec "$@"', await this.cgroups.runtimeProcs(), file, ...args]];
  }

  /** The command line running `file args` in the node's network, mount and UTS namespaces. */
  nsenter(file: string, args: readonly string[]): [string, string[]] {
    if (!this.#holder?.pid) throw new Error(`node ${this.name} has no namespaces`);
    return ['nsenter', [`--target=${this.#holder.pid}`, '--mount', '--uts', `--net=${this.ns.path}`, '--', file, ...args]];
  }

  /** Runs a command as a process of the node; returns stdout. */
  async exec(file: string, ...args: string[]): Promise<string> {
    const [cmd, argv] = this.nsenter(file, args);
    return (await run(cmd, argv, { maxBuffer: 64 << 20 })).stdout;
  }

  async #startHolder(): Promise<void> {
    const binds = NODE_PATHS.flatMap((p) => [this.hostPath(p), p]);
    // Shared, as systemd makes a node's mounts: the pods' network namespaces containerd mounts in
    // /run/netns reach weftd's container through its HostToContainer volume only from a shared mount.
    const share = this.#options.sharedMounts === false ? '' : 'mount --make-rshared / && ';
    const script = 'h=$1; shift; while [ $# -gt 0 ]; do mount --bind "$1" "$2" || exit 1; shift 2; done; ' +
      `${share}hostname "$h" && echo ready && exec sleep infinity`;
    const [file, args] = await this.#inCgroup('unshare',
      ['--mount', '--uts', '--propagation', 'slave', 'sh', '-c', script, 'sh', this.name, ...binds]);
    const holder = spawn(file, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    this.#holder = holder;
    let err = '';
    holder.stderr!.on('data', (c: Buffer) => (err += c.toString()));
    const [first] = await Promise.race([once(holder.stdout!, 'data'), once(holder, 'exit').then(() => [undefined])]);
    if (String(first).trim() !== 'ready') throw new Error(`the namespaces of node ${this.name} were not made: ${err}`);
  }

  /**
   * Starts `file args` as a process of the node, outside any container (in its namespaces and
   * cgroups, so stop() ends it too), with only `env` (and PATH) in its environment.
   */
  async spawn(file: string, args: readonly string[], env: Record<string, string> = {}): Promise<ChildProcess> {
    const [cmd, argv] = await this.#inCgroup(...this.nsenter(file, args));
    return spawn(cmd, argv, { stdio: ['ignore', 'pipe', 'pipe'], env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...env } });
  }

  async #spawn(name: string, file: string, args: readonly string[]): Promise<Daemon> {
    const proc = await this.spawn(file, args);
    let text = '';
    const keep = (c: Buffer): void => void (text = (text + c.toString()).slice(-20_000));
    proc.stdout!.on('data', keep);
    proc.stderr!.on('data', keep);
    const daemon = { name, proc, log: () => text };
    this.#daemons.push(daemon);
    return daemon;
  }

  /** Throws, with its log, when a daemon of the node has exited. */
  check(): void {
    const dead = this.#daemons.find((d) => d.proc.exitCode !== null || d.proc.signalCode !== null);
    if (dead) throw new Error(`${dead.name} on ${this.name} exited ${dead.proc.exitCode ?? dead.proc.signalCode}:\n${dead.log()}`);
  }

  async #startContainerd(): Promise<void> {
    const config = join(this.dir, 'containerd.toml');
    // restrict_oom_score_adj: root here lacks CAP_SYS_RESOURCE, so no container may get a lower score than containerd's.
    await writeFile(config, `version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "${PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
`);
    await this.#spawn('containerd', 'containerd', ['--config', config]);
    await until(`containerd on ${this.name} serving`, async () => {
      this.check();
      return this.ctr('version').then(() => true, () => false);
    }, 60_000, () => this.logs());
  }

  /**
   * `ctr -n k8s.io <args>` as a process of the node (`ctr run` mounts the image's snapshot itself,
   * whose paths are the node's); returns stdout.
   */
  async ctr(...args: string[]): Promise<string> {
    return this.exec('ctr', '--namespace', 'k8s.io', ...args);
  }

  /** Imports image archives (OCI or docker) into the node's containerd, for the kubelet's pods. */
  async importImages(archives: readonly string[]): Promise<void> {
    for (const archive of archives) await this.ctr('images', 'import', archive);
  }

  /** Starts the kubelet, and kube-proxy unless the options say not to ({@link startKubeProxy} then starts it later). */
  async startKubelet(caFile: string): Promise<void> {
    const o = this.#options;
    const identity = { name: `kubelet-${this.name}`, user: `system:node:${this.name}`, groups: ['system:nodes'] };
    const kubeconfig = await clientKubeconfig(o.pkiDir, identity, o.server, join(this.dir, 'kubelet.kubeconfig'));
    const config = join(this.dir, 'kubelet.json');
    await writeFile(config, JSON.stringify({
      apiVersion: 'kubelet.config.k8s.io/v1beta1', kind: 'KubeletConfiguration',
      address: this.address, readOnlyPort: 0, healthzBindAddress: '127.0.0.1',
      authentication: { anonymous: { enabled: false }, webhook: { enabled: true }, x509: { clientCAFile: caFile } },
      authorization: { mode: 'Webhook' },
      cgroupDriver: 'cgroupfs', cgroupRoot: this.cgroups.root,
      containerRuntimeEndpoint: 'unix:///run/containerd/containerd.sock',
      clusterDomain: 'cluster.local', ...(o.clusterDNS ? { clusterDNS: o.clusterDNS } : {}),
      // No registry is reachable: images are imported, and a collection would delete them for good.
      imageGCHighThresholdPercent: 100, imageGCLowThresholdPercent: 99,
      // The machine's disk and memory are shared with whatever else runs here: only a node out of both evicts.
      evictionHard: { 'memory.available': '1Mi', 'nodefs.available': '1%', 'imagefs.available': '1%', 'nodefs.inodesFree': '1%' },
      failSwapOn: false, serializeImagePulls: false, rotateCertificates: false,
    }));
    this.#sysctlHolder = `${process.pid}-${this.cgroups.root.slice(1)}`;
    await holdKubeletSysctls(this.#sysctlHolder);
    await this.#spawn('kubelet', peer('kubelet'), [`--config=${config}`, `--kubeconfig=${kubeconfig}`, `--hostname-override=${this.name}`,
      `--node-ip=${this.address}`, '--v=1']);
    if (o.kubeProxy !== false) await this.startKubeProxy();
  }

  /** Starts kube-proxy in iptables mode. */
  async startKubeProxy(): Promise<void> {
    const o = this.#options;
    const proxyConfig = await clientKubeconfig(o.pkiDir, { name: `kube-proxy-${this.name}`, user: 'system:kube-proxy' },
      o.server, join(this.dir, 'kube-proxy.kubeconfig'));
    // conntrack limits and timeouts 0: left as the kernel has them (nf_conntrack_max is the machine's, not the namespace's).
    await this.#spawn('kube-proxy', peer('kube-proxy'), [`--kubeconfig=${proxyConfig}`, `--hostname-override=${this.name}`,
      `--bind-address=${this.address}`, `--cluster-cidr=${o.clusterCidr}`, '--proxy-mode=iptables',
      '--conntrack-max-per-core=0', '--conntrack-min=0', '--conntrack-tcp-timeout-established=0', '--conntrack-tcp-timeout-close-wait=0',
      '--metrics-bind-address=127.0.0.1:10249', '--v=1']);
  }

  /**
   * Stops kube-proxy (SIGTERM) and runs `kube-proxy --cleanup` on the node, as an administrator
   * removing it does (its DaemonSet deleted, then the cleanup on each node). The cleanup exits 1
   * here whatever it did (no ipset program, no IPVS module), so what counts is checked instead:
   * its iptables chains are gone.
   */
  async removeKubeProxy(): Promise<void> {
    const proxy = this.#daemons.find((d) => d.name === 'kube-proxy');
    if (proxy) {
      this.#daemons.splice(this.#daemons.indexOf(proxy), 1);
      if (proxy.proc.exitCode === null && proxy.proc.signalCode === null) {
        const exited = once(proxy.proc, 'exit');
        proxy.proc.kill('SIGTERM');
        await exited;
      }
    }
    const cleanup = await this.exec(peer('kube-proxy'), '--cleanup').then(() => '', (e: Error) => e.message);
    const left = (await this.exec('iptables-save')).split('\n').filter((l) => /^:KUBE-(SERVICES|NODEPORTS|POSTROUTING|SVC-|SEP-)/.test(l));
    if (left.length) throw new Error(`kube-proxy --cleanup on ${this.name} left ${left.join(' ')}: ${cleanup}`);
  }

  /** The tail of each daemon's log, for a failure's message. */
  logs(): string {
    return this.#daemons.map((d) => `--- ${this.name} ${d.name}\n${d.log()}`).join('\n');
  }

  /**
   * Stops the node: kube-proxy and kubelet (SIGTERM), then every process left in its cgroups
   * (containers, shims, containerd, the namespace holder) by PID; removes its cgroups and network
   * namespace and gives the kubelet's sysctls back. Its files stay for the cluster to remove. Idempotent.
   */
  async stop(): Promise<void> {
    for (const d of [...this.#daemons].reverse().filter((x) => x.name !== 'containerd')) {
      if (d.proc.exitCode !== null || d.proc.signalCode !== null) continue;
      const exited = once(d.proc, 'exit');
      d.proc.kill('SIGTERM');
      const timer = setTimeout(() => d.proc.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(timer);
    }
    try {
      await this.cgroups.destroy();
    } finally {
      if (this.#sysctlHolder) await releaseKubeletSysctls(this.#sysctlHolder);
      await this.ns.remove();
    }
  }
}
