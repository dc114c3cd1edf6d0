/**
 * A kubelet's part, played with podman: runs the pod template of a DaemonSet from daemonset.yaml
 * on a node of the e2e harness (a network namespace) exactly as the manifest says: init
 * containers to completion, then the containers, with hostNetwork as the node's namespace, the
 * manifest's command, args, environment (fieldRefs resolved), capabilities, memory limit,
 * volumes (hostPath with its type, configMap projected as files, the service account's token),
 * mount propagation, probes and termination grace period.
 *
 * The nodes share this machine's file system, so every hostPath `P` of node `n` is `<n.root>P`,
 * except the runtime's network namespace directory (/run/netns), which is the machine's: the
 * pods' namespaces are created there, as a runtime on a real node creates them in its own.
 */
import { execFile } from 'node:child_process';
import { mkdir, open, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { parseAllDocuments } from 'yaml';
import type { Netns } from './netns.ts';

const run = promisify(execFile);

export interface EnvVar { name: string; value?: string; valueFrom?: { fieldRef?: { fieldPath: string } } }
export interface VolumeMount { name: string; mountPath: string; readOnly?: boolean; mountPropagation?: string }
export interface HttpProbe { httpGet: { path: string; port: number; host?: string }; periodSeconds?: number; timeoutSeconds?: number; failureThreshold?: number }
export interface Container {
  name: string;
  image: string;
  command?: string[];
  args?: string[];
  env?: EnvVar[];
  volumeMounts?: VolumeMount[];
  securityContext?: { privileged?: boolean; capabilities?: { add?: string[]; drop?: string[] } };
  resources?: { limits?: { memory?: string } };
  livenessProbe?: HttpProbe;
  readinessProbe?: HttpProbe;
}
export interface Volume {
  name: string;
  hostPath?: { path: string; type?: string };
  configMap?: { name: string };
}
export interface PodSpec {
  hostNetwork?: boolean;
  serviceAccountName?: string;
  terminationGracePeriodSeconds?: number;
  initContainers?: Container[];
  containers: Container[];
  volumes: Volume[];
}
export interface PolicyRule { apiGroups: string[]; resources: string[]; verbs: string[] }
interface Manifest { kind: string; metadata: { name: string; namespace?: string }; data?: Record<string, string>; rules?: PolicyRule[]; spec?: { template: { spec: PodSpec } } }

/** The objects of a manifest that a node's kubelet and an RBAC check need. */
export interface DaemonSetManifest {
  name: string;
  namespace: string;
  pod: PodSpec;
  configMaps: Map<string, Record<string, string>>;
  /** The rules of every ClusterRole in the file. */
  rules: PolicyRule[];
}

/** Reads the DaemonSet (the first in `yamlText`), its namespace's ConfigMaps and the ClusterRoles' rules. */
export function readDaemonSet(yamlText: string): DaemonSetManifest {
  const objects = parseAllDocuments(yamlText).map((d) => d.toJS() as Manifest | null).filter((o): o is Manifest => o !== null);
  const ds = objects.find((o) => o.kind === 'DaemonSet');
  if (!ds?.spec) throw new Error('the manifest has no DaemonSet');
  const namespace = ds.metadata.namespace ?? 'default';
  const configMaps = new Map(objects.filter((o) => o.kind === 'ConfigMap' && o.metadata.namespace === namespace).map((o) => [o.metadata.name, o.data ?? {}]));
  const rules = objects.filter((o) => o.kind === 'ClusterRole').flatMap((o) => o.rules ?? []);
  return { name: ds.metadata.name, namespace, pod: ds.spec.template.spec, configMaps, rules };
}

/**
 * RBAC rules as the test API server's grant entries (`<verb> <resource>[.<group>][/<sub>]`), so
 * the service account can do exactly what the ClusterRole allows.
 */
export function grantOf(rules: readonly PolicyRule[]): string[] {
  return rules.flatMap((r) => r.apiGroups.flatMap((g) => r.resources.flatMap((res) => {
    const [plural, sub] = res.split('/') as [string, string | undefined];
    return r.verbs.map((v) => `${v} ${plural}${g ? `.${g}` : ''}${sub ? `/${sub}` : ''}`);
  })));
}

/** containerd's default capabilities, which a container that is not privileged starts with. */
export const RUNTIME_DEFAULT_CAPS = ['CHOWN', 'DAC_OVERRIDE', 'FSETID', 'FOWNER', 'MKNOD', 'NET_RAW', 'SETGID', 'SETUID', 'SETFCAP', 'SETPCAP', 'NET_BIND_SERVICE', 'SYS_CHROOT', 'KILL', 'AUDIT_WRITE'];

/** The node a pod runs on. */
export interface KubeletNode {
  name: string;
  ns: Netns;
  /** The node's address: a hostNetwork pod's IP, which the probes ask. */
  address: string;
  /** Where this node's host file system paths live. */
  root: string;
}

/** How a pod reaches the API server: what the kubelet injects into its containers. */
export interface ApiAccess { host: string; port: number; token: string; caFile: string }

/** The answer to one probe. */
export interface ProbeAnswer { status: number; ms: number }

/** Paths shared by every node of this machine, as explained at the top. */
const MACHINE_PATHS = new Set(['/run/netns']);

/** podman needs explicit limits at or below the shell's: root here lacks CAP_SYS_RESOURCE. */
export const PODMAN_ULIMITS = ['--ulimit', 'nofile=16384:16384', '--ulimit', 'nproc=4096:4096'];

/** A pod of the DaemonSet on one node. */
export class PodmanPod {
  readonly manifest: DaemonSetManifest;
  readonly node: KubeletNode;
  readonly podName: string;
  readonly #api: ApiAccess;
  readonly #dir: string;
  readonly #created = new Set<string>();

  constructor(manifest: DaemonSetManifest, node: KubeletNode, api: ApiAccess) {
    this.manifest = manifest;
    this.node = node;
    this.#api = api;
    this.podName = `${manifest.name}-${node.name}`;
    this.#dir = join(node.root, 'var/lib/kubelet/pods', this.podName);
  }

  /** The manifest's container `name` (main or init). */
  container(name: string): Container {
    const c = [...(this.manifest.pod.initContainers ?? []), ...this.manifest.pod.containers].find((x) => x.name === name);
    if (!c) throw new Error(`the pod template has no container ${name}`);
    return c;
  }

  /** The podman container's name for the manifest's container `name`. */
  id(name: string): string {
    return `${this.node.ns.name}-${name}`;
  }

  /** Where hostPath `path` of this node is on this machine. */
  hostPath(path: string): string {
    return MACHINE_PATHS.has(path) ? path : join(this.node.root, path);
  }

  /** Runs every init container to completion; throws with its output when one fails. */
  async runInitContainers(): Promise<void> {
    for (const c of this.manifest.pod.initContainers ?? []) {
      const args = await this.#runArgs(c);
      this.#created.add(this.id(c.name));
      try {
        await run('podman', ['run', '--rm', ...args], { maxBuffer: 16 << 20 });
      } catch (e) {
        const err = e as { stdout?: string; stderr?: string };
        throw new Error(`init container ${c.name} on ${this.node.name} failed: ${err.stdout ?? ''}${err.stderr ?? ''}`, { cause: e });
      }
    }
  }

  /** Creates the container `name` (not started): a new one, replacing a stopped one, as the kubelet does on a restart. */
  async create(name: string): Promise<void> {
    const args = await this.#runArgs(this.container(name));
    this.#created.add(this.id(name));
    await run('podman', ['create', '--replace', ...args]);
  }

  /** Starts the container `name` made by {@link create}. */
  async start(name: string): Promise<void> {
    await run('podman', ['start', this.id(name)]);
  }

  /** The kubelet's two steps for a container: {@link create}, then {@link start}. */
  async createAndStart(name: string): Promise<void> {
    await this.create(name);
    await this.start(name);
  }

  /**
   * Stops container `name` as the kubelet does: SIGTERM, SIGKILL after the pod's grace period
   * (default 30 s). Resolves with its exit code (137 when killed) and how long it took.
   */
  async stop(name: string): Promise<{ code: number; ms: number }> {
    const grace = this.manifest.pod.terminationGracePeriodSeconds ?? 30;
    const started = performance.now();
    await run('podman', ['stop', '--time', String(grace), this.id(name)]);
    const ms = performance.now() - started;
    const code = Number((await run('podman', ['inspect', '--format', '{{.State.ExitCode}}', this.id(name)])).stdout.trim());
    return { code, ms };
  }

  /** Whether container `name` is running. */
  async running(name: string): Promise<boolean> {
    const out = await run('podman', ['inspect', '--format', '{{.State.Running}}', this.id(name)]).catch(() => ({ stdout: 'false' }));
    return out.stdout.trim() === 'true';
  }

  /** `kubectl exec` into container `name`; resolves with stdout, or rejects with the exit code and output. */
  async exec(name: string, ...cmd: string[]): Promise<string> {
    return (await run('podman', ['exec', this.id(name), ...cmd], { maxBuffer: 16 << 20 })).stdout;
  }

  /** What container `name` printed (`kubectl logs`). */
  async logs(name: string): Promise<string> {
    const out = await run('podman', ['logs', this.id(name)], { maxBuffer: 64 << 20 }).catch((e: Error) => ({ stdout: '', stderr: e.message }));
    return `${out.stdout}${out.stderr}`;
  }

  /** One HTTP probe of container `name` as the kubelet sends it: to the pod's IP, within timeoutSeconds (default 1). */
  async probe(name: string, kind: 'livenessProbe' | 'readinessProbe'): Promise<ProbeAnswer> {
    const p = this.container(name)[kind];
    if (!p) throw new Error(`container ${name} has no ${kind}`);
    const url = `http://${p.httpGet.host ?? this.node.address}:${p.httpGet.port}${p.httpGet.path}`;
    const started = performance.now();
    const code = await this.node.ns.exec('curl', '-s', '-o', '/dev/null', '-w', '%{http_code}', '--max-time', String(p.timeoutSeconds ?? 1), url).catch(() => '000');
    return { status: Number(code), ms: performance.now() - started };
  }

  /** Removes the containers this pod started (not what they left on the node). */
  async remove(): Promise<void> {
    for (const id of this.#created) await run('podman', ['rm', '--force', '--ignore', '--time', '0', id]).catch(() => undefined);
    this.#created.clear();
  }

  async #runArgs(c: Container): Promise<string[]> {
    const spec = this.manifest.pod;
    const args = ['--name', this.id(c.name), '--runtime', 'runc', ...PODMAN_ULIMITS,
      // kubelet's default when the pod names no seccomp profile.
      '--security-opt', 'seccomp=unconfined'];
    // Never podman's default network, which adds a bridge and rules to this machine's namespace.
    if (!spec.hostNetwork) throw new Error('only hostNetwork pods run here: their network is the node namespace');
    args.push('--network', `ns:${this.node.ns.path}`);
    if (c.securityContext?.privileged) args.push('--privileged');
    else {
      const drop = new Set(c.securityContext?.capabilities?.drop ?? []);
      const caps = [...RUNTIME_DEFAULT_CAPS.filter((x) => !drop.has(x)), ...(c.securityContext?.capabilities?.add ?? [])];
      args.push('--cap-drop=all', `--cap-add=${caps.join(',')}`);
    }
    if (c.resources?.limits?.memory) args.push('--memory', memoryBytes(c.resources.limits.memory));
    for (const e of this.#env(c)) args.push('--env', e);
    for (const m of c.volumeMounts ?? []) args.push('--volume', await this.#volume(m));
    if (spec.serviceAccountName) args.push('--volume', `${await this.#serviceAccount()}:/var/run/secrets/kubernetes.io/serviceaccount:ro`);
    if (c.command) args.push('--entrypoint', JSON.stringify(c.command));
    args.push(c.image, ...(c.args ?? []));
    return args;
  }

  #env(c: Container): string[] {
    const fields: Record<string, string> = { 'spec.nodeName': this.node.name, 'metadata.name': this.podName, 'metadata.namespace': this.manifest.namespace };
    const env = (c.env ?? []).map((e) => {
      const path = e.valueFrom?.fieldRef?.fieldPath;
      const value = path === undefined ? e.value ?? '' : fields[path];
      if (value === undefined) throw new Error(`env ${e.name}: fieldRef ${path} is not one this kubelet knows`);
      return `${e.name}=${value}`;
    });
    return [...env, `KUBERNETES_SERVICE_HOST=${this.#api.host}`, `KUBERNETES_SERVICE_PORT=${this.#api.port}`];
  }

  async #volume(m: VolumeMount): Promise<string> {
    const v = this.manifest.pod.volumes.find((x) => x.name === m.name);
    if (!v) throw new Error(`volumeMount ${m.name} names no volume`);
    let source: string;
    let readOnly = m.readOnly ?? false;
    if (v.hostPath) {
      source = this.hostPath(v.hostPath.path);
      // No type: the kubelet checks nothing and containerd creates a missing directory.
      const type = v.hostPath.type ?? '';
      if (type === 'DirectoryOrCreate' || type === '') await mkdir(source, { recursive: true });
      else if (type === 'FileOrCreate') await mkdir(join(source, '..'), { recursive: true }).then(() => open(source, 'a')).then((f) => f.close());
      else throw new Error(`volume ${v.name}: hostPath type ${type} is not one this kubelet knows`);
    } else if (v.configMap) {
      const data = this.manifest.configMaps.get(v.configMap.name);
      if (!data) throw new Error(`configMap ${v.configMap.name} is not in the manifest`);
      source = join(this.#dir, 'volumes/configmap', v.name);
      await mkdir(source, { recursive: true });
      for (const [key, text] of Object.entries(data)) await writeFile(join(source, key), text);
      readOnly = true;
    } else {
      throw new Error(`volume ${v.name}: only hostPath and configMap volumes are known here`);
    }
    // The kubelet's propagation modes: None is private, HostToContainer is rslave.
    const propagation = m.mountPropagation === 'HostToContainer' ? 'rslave' : m.mountPropagation === 'Bidirectional' ? 'rshared' : 'rprivate';
    return `${source}:${m.mountPath}:${readOnly ? 'ro' : 'rw'},${propagation}`;
  }

  async #serviceAccount(): Promise<string> {
    const dir = join(this.#dir, 'volumes/serviceaccount');
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, 'token'), this.#api.token);
    await writeFile(join(dir, 'namespace'), this.manifest.namespace);
    await writeFile(join(dir, 'ca.crt'), await readFile(this.#api.caFile));
    return dir;
  }
}

/** A Kubernetes memory quantity (`256Mi`, `1Gi`, `128M`, bytes) in bytes, for podman --memory. */
export function memoryBytes(q: string): string {
  const m = /^(\d+)(Ki|Mi|Gi|K|M|G)?$/.exec(q);
  if (!m) throw new Error(`memory quantity ${q} is not one this kubelet reads`);
  const unit: Record<string, number> = { Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3, K: 1e3, M: 1e6, G: 1e9 };
  return String(Number(m[1]) * (m[2] ? unit[m[2]]! : 1));
}
