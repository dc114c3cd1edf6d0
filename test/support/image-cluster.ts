/**
 * Nodes for the image (dist/weft-<version>.tar) as daemonset.yaml runs it: network namespaces on
 * one underlay, each with a file system root of its own under a temporary directory and the
 * DaemonSet's pod (test/support/kubelet.ts), against the test API server in kube mode with the
 * service account allowed exactly what the manifest's ClusterRole allows.
 *
 * Processes on a node outside a container (the runtime's CNI plugins, this checkout's bin/weftd)
 * see the node's /run/flannel (subnet.env, weftd's sockets), /var/lib/cni (host-local's store) and
 * /opt/cni/bin (the runtime's CNI_PATH) where a node keeps them: they run in a mount namespace of
 * their own with those bound (withMounts), so these three mount points exist on this machine.
 */
import { execFile } from 'node:child_process';
import { copyFile, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { spawnWeftd, stopDaemon } from './cluster.ts';
import type { Daemon } from './cluster.ts';
import { DEBIAN_CNI_DIR, addList } from './cni.ts';
import type { ConfList } from './cni.ts';
import { KubeApiServer } from './kube-apiserver.ts';
import { FLANNEL_PREFIX } from './kube-nodes.ts';
import { PodmanPod, grantOf, readDaemonSet } from './kubelet.ts';
import type { DaemonSetManifest, KubeletNode } from './kubelet.ts';
import { attachToUnderlay, createNetns, forwardIntoNetns, isRoot, joinUnderlay } from './netns.ts';
import type { Netns } from './netns.ts';
import { until } from './until.ts';

const run = promisify(execFile);
const ROOT = new URL('../../', import.meta.url);
export const VERSION = (JSON.parse(await readFile(new URL('package.json', ROOT), 'utf8')) as { version: string }).version;
/** What `make image` saves. */
export const IMAGE_ARCHIVE = new URL(`dist/weft-${VERSION}.tar`, ROOT).pathname;
/** The DaemonSet's weftd container. */
export const MAIN = 'kube-weft';
const API_PORT = 6443;
const WEFTD_TOKEN = 'weftd';
const NODE_MOUNTS = ['/run/flannel', '/var/lib/cni', '/opt/cni/bin'];

/** For `test(..., { skip })`: why the image cannot run here, else false. */
export const needsImage: string | false = !isRoot() ? 'needs root: creates network namespaces and runs containers'
  : !(existsSync('/usr/bin/podman') && existsSync('/usr/sbin/runc')) ? 'needs podman and runc (make deps installs them)'
    : !existsSync(IMAGE_ARCHIVE) ? `needs ${IMAGE_ARCHIVE} (make image builds it)` : false;

/** One node: its namespace, its file system root, and the DaemonSet's pod on it. */
export interface ImageNode extends KubeletNode {
  pod: PodmanPod;
  /** This checkout's bin/weftd, when it runs the node instead of the image. */
  direct?: Daemon;
}

/** A pod namespace wired through a node's installed plugin. */
export interface ImagePod { ns: Netns; ip: string; id: string }

export class ImageCluster {
  readonly manifest: DaemonSetManifest;
  readonly api: KubeApiServer;
  readonly dir: string;
  readonly nodes: ImageNode[] = [];
  readonly pods: ImagePod[] = [];
  readonly #namespaces: Netns[] = [];
  readonly #forwarders: (() => Promise<void>)[] = [];

  private constructor(manifest: DaemonSetManifest, api: KubeApiServer, dir: string) {
    this.manifest = manifest;
    this.api = api;
    this.dir = dir;
  }

  /** Loads the image archive into podman and makes `count` nodes; on failure, removes what it made. */
  static async start(count: number): Promise<ImageCluster> {
    await run('podman', ['load', '--quiet', '--input', IMAGE_ARCHIVE]);
    const manifest = readDaemonSet(await readFile(new URL('daemonset.yaml', ROOT), 'utf8'));
    const user = `system:serviceaccount:${manifest.namespace}:${manifest.pod.serviceAccountName}`;
    const api = await KubeApiServer.start({ tokens: { admin: { user: 'admin', allow: '*' }, [WEFTD_TOKEN]: { user, allow: grantOf(manifest.rules) } } });
    const c = new ImageCluster(manifest, api, await mkdtemp(join(tmpdir(), 'weft-image-')));
    try {
      for (const at of NODE_MOUNTS) await mkdir(at, { recursive: true });
      const underlay = await c.#netns('iul');
      await joinUnderlay(underlay, []);
      for (let index = 1; index <= count; index++) await c.#addNode(underlay, index);
      return c;
    } catch (e) {
      await c.stop();
      throw e;
    }
  }

  async #addNode(underlay: Netns, index: number): Promise<void> {
    const name = `node-${index}`;
    const ns = await this.#netns(`in${index}`);
    await attachToUnderlay(underlay, ns, index, {});
    // A node's default route: the manifest gives no --iface, so weftd picks the interface it uses.
    await ns.ip('route', 'add', 'default', 'via', '198.51.100.254', 'dev', 'eth0');
    this.api.addNode({ metadata: { name }, spec: { podCIDR: `10.244.${index}.0/24`, podCIDRs: [`10.244.${index}.0/24`] } });
    this.#forwarders.push(await forwardIntoNetns(ns, API_PORT, this.api.socketPath));
    const root = join(this.dir, name);
    // What a node has before Weft: the reference plugins and the kernel's modules directory.
    await mkdir(join(root, 'opt/cni/bin'), { recursive: true });
    for (const plugin of ['bridge', 'host-local', 'portmap', 'loopback']) await copyFile(join(DEBIAN_CNI_DIR, plugin), join(root, 'opt/cni/bin', plugin));
    await mkdir(join(root, 'lib/modules'), { recursive: true });
    await writeFile(join(root, 'lib/modules/modules.dep'), `${name}\n`);
    const node = { name, ns, address: `198.51.100.${index}`, root } as ImageNode;
    node.pod = new PodmanPod(this.manifest, node, { host: '127.0.0.1', port: API_PORT, token: WEFTD_TOKEN, caFile: this.api.caFile });
    this.nodes.push(node);
  }

  async #netns(tag: string): Promise<Netns> {
    const ns = await createNetns(tag);
    this.#namespaces.push(ns);
    return ns;
  }

  /** The node's directories bound where the node keeps them, for its processes outside containers. */
  async nodeMounts(n: ImageNode): Promise<Record<string, string>> {
    const mounts = Object.fromEntries(NODE_MOUNTS.map((at) => [at, n.pod.hostPath(at)]));
    for (const from of Object.values(mounts)) await mkdir(from, { recursive: true });
    return mounts;
  }

  /** Starts this checkout's bin/weftd on `n` with the manifest's args, files and lease, as a node runs it outside a container. */
  async startDirect(n: ImageNode): Promise<Daemon> {
    const cfg = join(n.root, 'direct');
    await mkdir(cfg, { recursive: true });
    await writeFile(join(cfg, 'net-conf.json'), this.manifest.configMaps.get('kube-flannel-cfg')!['net-conf.json']!);
    const args = [...n.pod.container(MAIN).args ?? [], `--kubeconfig-file=${await this.api.kubeconfig(WEFTD_TOKEN)}`,
      `--kube-api-url=https://127.0.0.1:${API_PORT}`, `--net-config-path=${join(cfg, 'net-conf.json')}`];
    n.direct = spawnWeftd(n.ns, args, { NODE_NAME: n.name }, await this.nodeMounts(n));
    return n.direct;
  }

  /** Waits until bin/weftd on `n` is ready. */
  async directReady(n: ImageNode): Promise<void> {
    await until(`bin/weftd on ${n.name} ready`, () => {
      if (n.direct!.proc.exitCode !== null) throw new Error(`bin/weftd on ${n.name} exited ${n.direct!.proc.exitCode}`);
      return /ready: the kernel holds every lease/.test(n.direct!.log());
    }, 60_000);
  }

  /** Waits until the readiness probe of the weftd container on `n` answers 200. */
  async containerReady(n: ImageNode): Promise<void> {
    await until(`the readiness probe of ${n.name} answering 200`, async () => (await n.pod.probe(MAIN, 'readinessProbe')).status === 200, 60_000);
  }

  /** subnet.env of `n`. */
  async subnetEnv(n: ImageNode): Promise<string> {
    return readFile(join(n.pod.hostPath('/run/flannel'), 'subnet.env'), 'utf8');
  }

  /** flannel's annotations on `n`'s Node. */
  annotations(n: ImageNode): Record<string, string> {
    const node = this.api.node(n.name) as unknown as { metadata: { annotations?: Record<string, string> } } | undefined;
    return Object.fromEntries(Object.entries(node?.metadata.annotations ?? {}).filter(([k]) => k.startsWith(FLANNEL_PREFIX)));
  }

  /** A pod on `n`, as its runtime adds one: the node's conflist, plugin by plugin, from the node's /opt/cni/bin. */
  async addPod(n: ImageNode): Promise<ImagePod> {
    const ns = await this.#netns(`ip${this.pods.length + 1}`);
    const id = `image-pod-${this.pods.length + 1}`;
    const list = JSON.parse(await readFile(join(n.pod.hostPath('/etc/cni/net.d'), '10-weft.conflist'), 'utf8')) as ConfList;
    const bin = '/opt/cni/bin';
    const result = await addList(list, n.ns, { containerId: id, ifname: 'eth0', netns: ns.path, path: bin, mounts: await this.nodeMounts(n) },
      Object.fromEntries(list.plugins.map((p) => [p.type as string, join(bin, p.type as string)])));
    const pod = { ns, id, ip: (result.ips as { address: string }[])[0]!.address.split('/')[0]! };
    this.pods.push(pod);
    return pod;
  }

  /** Every node's weftd log: the container's, or bin/weftd's when it runs the node. */
  async logs(): Promise<string> {
    return (await Promise.all(this.nodes.map(async (n) => `--- ${n.name}\n${n.direct ? n.direct.log() : await n.pod.logs(MAIN)}`))).join('\n');
  }

  /** Removes everything: weftd processes and containers, forwarders, namespaces, the API server, files. */
  async stop(): Promise<void> {
    for (const n of this.nodes) {
      if (n.direct) await stopDaemon(n.direct);
      await n.pod.remove();
    }
    await Promise.all(this.#forwarders.splice(0).map((stop) => stop()));
    for (const ns of this.#namespaces.splice(0).reverse()) await ns.remove();
    await this.api.stop();
    await rm(this.dir, { recursive: true, force: true });
  }
}

