/**
 * The real Kubernetes control plane for tests: kube-apiserver v1.28.4 (dist/peers, see peers.ts)
 * on a real etcd, with kube-controller-manager and kube-scheduler when asked, all on this
 * machine's loopback with free ports and a throwaway PKI, and removed by stop().
 *
 * Clients are bearer tokens from a static token file: `admin` (group system:masters) and any
 * others given, each a user with groups; or a ServiceAccount's, from the TokenRequest API
 * ({@link KubeControlPlane.serviceAccountToken}). What those may do is the real RBAC, written by
 * the test (see {@link KubeControlPlane.grant}) or applied from the manifests (manifests.ts). Node namespaces reach the API
 * through {@link KubeControlPlane.socketPath} (forwardIntoNetns in netns.ts), as they did the
 * test API server. The `kubernetes` Service's endpoint is {@link ADVERTISE_ADDRESS}, an address
 * of the e2e harness's underlay.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { connect, createServer } from 'node:net';
import type { Server, Socket } from 'node:net';
import { Agent, request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeClusterPki } from './cluster-pki.ts';
import { EtcdServer, freePorts } from './etcd.ts';
import { peer } from './peers.ts';
import type { Peer } from './peers.ts';
import { until } from './until.ts';

/** Where the `kubernetes` Service's endpoint points: an address on the e2e harness's underlay. */
export const ADVERTISE_ADDRESS = '198.51.100.250';
export const SERVICE_CIDR = '10.96.0.0/16';
/** The `kubernetes` Service's cluster IP: the first of {@link SERVICE_CIDR}. */
export const KUBERNETES_SERVICE_IP = '10.96.0.1';
export const CLUSTER_CIDR = '10.244.0.0/16';

export type Obj = Record<string, unknown> & { metadata?: Record<string, unknown> };

/** A client identity of the static token file. */
export interface TokenUser {
  user: string;
  groups?: string[];
}

export interface ControlPlaneOptions {
  /** Bearer token → user, besides `admin`. */
  tokens?: Record<string, TokenUser>;
  /**
   * kube-controller-manager's controllers (its --controllers), none by default. `nodeipam` gives
   * each Node a podCIDR from {@link CLUSTER_CIDR} (/24s, and /64s of fd00:10:244::/56 with `dualStack`),
   * the first 10 s after the controller manager starts: its range allocator first lists the Nodes
   * with a poll that waits one interval (nodePollInterval, 10 s, no flag) before its first try.
   */
  controllers?: string[];
  /** Runs kube-scheduler. */
  scheduler?: boolean;
  /** IPv4 + IPv6 Service and pod ranges. */
  dualStack?: boolean;
  /** More kube-apiserver flags. */
  apiserverArgs?: string[];
}

/** A RBAC rule as a ClusterRole holds it. */
export interface PolicyRule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
  resourceNames?: string[];
}

interface Proc {
  name: string;
  proc: ChildProcess;
  log: () => string;
}

export class KubeControlPlane {
  /** `https://127.0.0.1:<port>`. */
  readonly url: string;
  readonly caFile: string;
  /** The API on a unix socket, for clients in other network namespaces. */
  readonly socketPath: string;
  readonly dir: string;
  readonly #etcd: EtcdServer;
  readonly #procs: Proc[] = [];
  readonly #servers: Server[] = [];
  /** Connections to {@link socketPath}: a client whose end never closes them must not keep stop() waiting. */
  readonly #sockets = new Set<Socket>();
  readonly #agent: Agent;

  private constructor(url: string, dir: string, etcd: EtcdServer, ca: string) {
    this.url = url;
    this.dir = dir;
    this.#etcd = etcd;
    this.caFile = join(dir, 'pki', 'ca.crt');
    this.socketPath = join(dir, 'api.sock');
    this.#agent = new Agent({ ca, keepAlive: true });
  }

  static async start(o: ControlPlaneOptions = {}): Promise<KubeControlPlane> {
    const dir = await mkdtemp(join(tmpdir(), 'weft-k8s-'));
    let etcd: EtcdServer | undefined;
    let cp: KubeControlPlane | undefined;
    try {
      await makeClusterPki(join(dir, 'pki'), ['127.0.0.1', ADVERTISE_ADDRESS, KUBERNETES_SERVICE_IP]);
      etcd = await EtcdServer.start();
      const [port] = await freePorts(1);
      cp = new KubeControlPlane(`https://127.0.0.1:${port}`, dir, etcd, await readFile(join(dir, 'pki', 'ca.crt'), 'utf8'));
      await cp.#start(port!, o);
      return cp;
    } catch (e) {
      if (cp) await cp.stop();
      else {
        await etcd?.stop();
        await rm(dir, { recursive: true, force: true });
      }
      throw e;
    }
  }

  async #start(port: number, o: ControlPlaneOptions): Promise<void> {
    const pki = (f: string) => join(this.dir, 'pki', f);
    const tokens = { admin: { user: 'admin', groups: ['system:masters'] }, ...o.tokens };
    await writeFile(join(this.dir, 'tokens.csv'), Object.entries(tokens)
      .map(([token, u]) => `${token},${u.user},${u.user}${u.groups?.length ? `,"${u.groups.join(',')}"` : ''}`).join('\n') + '\n');
    const serviceCidr = o.dualStack ? `${SERVICE_CIDR},fd00:10:96::/112` : SERVICE_CIDR;
    const clusterCidr = o.dualStack ? `${CLUSTER_CIDR},fd00:10:244::/56` : CLUSTER_CIDR;
    this.#spawn('kube-apiserver', [
      `--etcd-servers=${this.#etcd.endpoint}`, '--bind-address=127.0.0.1', `--secure-port=${port}`,
      `--advertise-address=${ADVERTISE_ADDRESS}`, `--service-cluster-ip-range=${serviceCidr}`,
      `--tls-cert-file=${pki('apiserver.crt')}`, `--tls-private-key-file=${pki('apiserver.key')}`, `--client-ca-file=${pki('ca.crt')}`,
      `--token-auth-file=${join(this.dir, 'tokens.csv')}`, '--authorization-mode=Node,RBAC',
      `--service-account-key-file=${pki('sa.pub')}`, `--service-account-signing-key-file=${pki('sa.key')}`,
      '--service-account-issuer=https://kubernetes.default.svc.cluster.local',
      `--kubelet-client-certificate=${pki('admin.crt')}`, `--kubelet-client-key=${pki('admin.key')}`,
      '--enable-priority-and-fairness=false', '--profiling=false', '--v=1', ...(o.apiserverArgs ?? []),
    ]);
    await until('kube-apiserver ready', async () => {
      this.#check();
      return (await this.#fetch('/readyz').catch(() => undefined))?.status === 200;
    }, 60_000, () => this.logs());
    const unix = createServer((c) => {
      this.#sockets.add(c);
      c.on('close', () => this.#sockets.delete(c));
      const t = connect(port, '127.0.0.1');
      c.pipe(t).pipe(c);
      // Either end closing (or failing) ends the other once what it holds is written, then closes it:
      // a piped socket whose peer went away is paused, and would never see its own end. stop() destroys
      // whatever is still open.
      for (const [from, to] of [[c, t], [t, c]] as const) {
        from.on('close', () => to.end(() => to.destroy()));
        from.on('error', () => undefined);
      }
    });
    unix.listen(this.socketPath);
    await once(unix, 'listening');
    this.#servers.push(unix);
    const kubeconfig = await this.kubeconfig();
    if (o.controllers?.length) {
      this.#spawn('kube-controller-manager', [
        `--kubeconfig=${kubeconfig}`, '--bind-address=127.0.0.1', '--secure-port=0', `--controllers=${o.controllers.join(',')}`,
        '--allocate-node-cidrs', `--cluster-cidr=${clusterCidr}`, `--service-cluster-ip-range=${serviceCidr}`,
        ...(o.dualStack ? ['--node-cidr-mask-size-ipv4=24', '--node-cidr-mask-size-ipv6=64'] : ['--node-cidr-mask-size=24']),
        `--root-ca-file=${pki('ca.crt')}`, `--service-account-private-key-file=${pki('sa.key')}`,
        '--leader-elect=false', '--profiling=false', '--v=1',
      ]);
    }
    if (o.scheduler) {
      this.#spawn('kube-scheduler', [
        `--kubeconfig=${kubeconfig}`, '--bind-address=127.0.0.1', '--secure-port=0', '--leader-elect=false', '--v=1',
      ]);
    }
  }

  #spawn(name: Peer, args: string[]): void {
    const proc = spawn(peer(name), args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let text = '';
    proc.stderr!.on('data', (c: Buffer) => (text = (text + c.toString()).slice(-8000)));
    this.#procs.push({ name, proc, log: () => text });
  }

  /** Throws, with its log, when a control plane process has exited. */
  #check(): void {
    const dead = this.#procs.find((p) => p.proc.exitCode !== null);
    if (dead) throw new Error(`${dead.name} exited ${dead.proc.exitCode}:\n${dead.log()}`);
  }

  /** The tail of every process's log, for a failure's message. */
  logs(): string {
    return this.#procs.map((p) => `--- ${p.name}\n${p.log()}`).join('\n');
  }

  /** Writes a kubeconfig for `token` (default `admin`) at `server` (default {@link url}); returns its path. */
  async kubeconfig(token = 'admin', server = this.url): Promise<string> {
    // Named by a digest: a ServiceAccount's token is longer than a file name may be.
    const file = join(this.dir, `kubeconfig-${createHash('sha256').update(`${token} ${server}`).digest('hex').slice(0, 16)}.json`);
    await writeFile(file, JSON.stringify({
      apiVersion: 'v1', kind: 'Config', 'current-context': 'test',
      clusters: [{ name: 'test', cluster: { server, 'certificate-authority': this.caFile } }],
      users: [{ name: 'test', user: { token } }],
      contexts: [{ name: 'test', context: { cluster: 'test', user: 'test' } }],
    }));
    return file;
  }

  async #fetch(path: string, init: { method?: string; body?: unknown; contentType?: string } = {}): Promise<{ status: number; body: Obj }> {
    const text = init.body === undefined ? undefined : JSON.stringify(init.body);
    return new Promise((resolve, reject) => {
      const req = request(new URL(path, this.url), {
        method: init.method ?? 'GET', agent: this.#agent,
        headers: {
          authorization: 'Bearer admin', accept: 'application/json',
          ...(text !== undefined
            ? { 'content-type': init.contentType ?? 'application/json', 'content-length': Buffer.byteLength(text) }
            : {}),
        },
      }, (res) => {
        let data = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (data += c));
        res.on('end', () => {
          let body: Obj;
          try {
            body = data.startsWith('{') ? JSON.parse(data) as Obj : { text: data };
          } catch {
            body = { text: data };
          }
          resolve({ status: res.statusCode ?? 0, body });
        });
      });
      req.on('error', reject);
      req.end(text);
    });
  }

  /**
   * An admin request to `path`; returns the body, throws on a status of 400 or more with the
   * server's message (and `status` and the Status `body` on the error), except a 404 for GET, which gives undefined.
   */
  async request(method: string, path: string, body?: unknown, contentType?: string): Promise<Obj | undefined> {
    const r = await this.#fetch(path, { method, body, ...(contentType ? { contentType } : {}) });
    if (r.status === 404 && method === 'GET') return undefined;
    if (r.status >= 400) {
      const message = `${method} ${path}: ${r.status} ${String(r.body.message ?? r.body.text ?? '')}`;
      throw Object.assign(new Error(message), { status: r.status, body: r.body });
    }
    return r.body;
  }

  /** Creates `obj` at the collection `path` (`/api/v1/nodes`); returns it as stored. */
  async create(path: string, obj: Obj): Promise<Obj> {
    return (await this.request('POST', path, obj))!;
  }

  /** Runs `call` (requests of this API, say) on every one of `items`, `width` at a time: for benchmarks that fill the API. */
  async each<T>(items: readonly T[], call: (item: T) => Promise<unknown>, width = 16): Promise<void> {
    let next = 0;
    await Promise.all(Array.from({ length: width }, async () => {
      while (next < items.length) await call(items[next++]!);
    }));
  }

  /** Creates `obj` unless an object of its name exists there; returns what is stored. */
  async ensure(path: string, obj: Obj): Promise<Obj> {
    const name = String(obj.metadata?.name);
    return (await this.request('GET', `${path}/${name}`)) ?? this.create(path, obj);
  }

  /** Reads, changes through `edit` and writes back the object at `path`, again on a conflict; returns it as stored. */
  async modify(path: string, edit: (o: Obj) => void, subresource = ''): Promise<Obj> {
    for (;;) {
      const o = await this.request('GET', path);
      if (!o) throw new Error(`GET ${path}: not found`);
      edit(o);
      try {
        return (await this.request('PUT', `${path}${subresource}`, o))!;
      } catch (e) {
        if ((e as { status?: number }).status !== 409) throw e;
      }
    }
  }

  /** A JSON merge patch of the object at `path` (`/status` appended for the status). */
  async mergePatch(path: string, patch: Obj): Promise<Obj> {
    return (await this.request('PATCH', path, patch, 'application/merge-patch+json'))!;
  }

  /** Deletes the object at `path` at once (grace period 0); a missing one is no error. */
  async remove(path: string): Promise<void> {
    const r = await this.#fetch(path, { method: 'DELETE', body: { kind: 'DeleteOptions', apiVersion: 'v1', gracePeriodSeconds: 0 } });
    if (r.status >= 400 && r.status !== 404) throw new Error(`DELETE ${path}: ${r.status} ${String(r.body.message ?? '')}`);
  }

  /**
   * Every change since `resourceVersion` to the objects at collection `path` (narrowed by
   * `fieldSelector`), oldest first: a watch from that version replays them from the API server's
   * watch cache, and ends after a second.
   */
  async changes(path: string, resourceVersion: string, fieldSelector = ''): Promise<{ type: string; object: Obj }[]> {
    const query = new URLSearchParams({ watch: '1', resourceVersion, timeoutSeconds: '1', ...(fieldSelector ? { fieldSelector } : {}) });
    const r = await this.#fetch(`${path}?${query}`);
    if (r.status !== 200) throw new Error(`watch ${path}: ${r.status} ${String(r.body.message ?? r.body.text ?? '')}`);
    // One event parses as itself, several (a line each) do not.
    const text = typeof r.body.text === 'string' ? r.body.text : JSON.stringify(r.body);
    return text.split('\n').filter(Boolean).map((l) => JSON.parse(l) as { type: string; object: Obj });
  }

  /** Node `name`, or undefined. */
  async node(name: string): Promise<Obj | undefined> {
    return this.request('GET', `/api/v1/nodes/${name}`);
  }

  /** Registers Node `name` as a kubelet would before its first status (no podCIDR: nodeipam gives it). */
  async addNode(name: string, extra: Obj = {}): Promise<Obj> {
    return this.create('/api/v1/nodes', { apiVersion: 'v1', kind: 'Node', ...extra, metadata: { name, ...extra.metadata } });
  }

  /** Waits until nodeipam has given Node `name` its podCIDR(s); returns them. */
  async podCidrs(name: string, timeoutMs = 30_000): Promise<string[]> {
    let cidrs: string[] = [];
    await until(`a podCIDR for Node ${name}`, async () => {
      const spec = (await this.node(name))?.spec as { podCIDRs?: string[] } | undefined;
      cidrs = spec?.podCIDRs ?? [];
      return cidrs.length > 0;
    }, timeoutMs, () => this.logs());
    return cidrs;
  }

  /** Namespace `name` (created when missing) and its `default` ServiceAccount, which Pods need to be admitted. */
  async namespace(name: string): Promise<void> {
    await this.ensure('/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name } });
    const sa = { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'default' } };
    await this.ensure(`/api/v1/namespaces/${name}/serviceaccounts`, sa);
  }

  /**
   * Pod `namespace/name` bound to `nodeName` (no scheduler), with status `podIP` (or `podIPs`, one
   * per family) when given, as its kubelet would report it; its namespace is created when missing.
   */
  async addPod(namespace: string, name: string, nodeName: string,
    extra: { labels?: Record<string, string>; podIP?: string; podIPs?: string[] } = {}): Promise<Obj> {
    await this.namespace(namespace);
    const path = `/api/v1/namespaces/${namespace}/pods`;
    const pod = await this.create(path, {
      apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace, ...(extra.labels ? { labels: extra.labels } : {}) },
      spec: { nodeName, automountServiceAccountToken: false, containers: [{ name: 'main', image: 'weft' }] },
    });
    const ips = extra.podIPs ?? (extra.podIP ? [extra.podIP] : []);
    if (ips.length === 0) return pod;
    return this.mergePatch(`${path}/${name}/status`, { status: { phase: 'Running', podIP: ips[0], podIPs: ips.map((ip) => ({ ip })) } });
  }

  /**
   * Gives user or service account `subject` (`system:serviceaccount:<ns>:<name>` for one) the
   * `rules` through a ClusterRole and ClusterRoleBinding named `name`.
   */
  async grant(name: string, subject: string, rules: PolicyRule[]): Promise<void> {
    const rbac = '/apis/rbac.authorization.k8s.io/v1';
    await this.create(`${rbac}/clusterroles`, {
      apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole', metadata: { name }, rules,
    });
    const sa = /^system:serviceaccount:([^:]+):(.+)$/.exec(subject);
    const who = sa
      ? { kind: 'ServiceAccount', name: sa[2], namespace: sa[1] }
      : { kind: 'User', apiGroup: 'rbac.authorization.k8s.io', name: subject };
    await this.create(`${rbac}/clusterrolebindings`, {
      apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRoleBinding', metadata: { name },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name }, subjects: [who],
    });
  }

  /**
   * Creates manifest object `obj` (any kind whose plural is its kind's, lower-cased, plus `s` or
   * `y` → `ies`) unless one of its name exists; returns what is stored.
   */
  async apply(obj: Obj): Promise<Obj> {
    const [group, version] = String(obj.apiVersion).includes('/') ? String(obj.apiVersion).split('/') : ['', String(obj.apiVersion)];
    const kind = String(obj.kind).toLowerCase();
    const plural = kind.endsWith('y') ? `${kind.slice(0, -1)}ies` : `${kind}s`;
    const namespace = obj.metadata?.namespace ? `/namespaces/${String(obj.metadata.namespace)}` : '';
    return this.ensure(`${group ? `/apis/${group}` : '/api'}/${version}${namespace}/${plural}`, obj);
  }

  /**
   * Creates CustomResourceDefinitions `crds` and waits until the API server serves each
   * (its Established condition), as `kubectl wait --for condition=established` does.
   */
  async installCrds(crds: Obj[]): Promise<void> {
    for (const crd of crds) await this.apply(crd);
    for (const crd of crds) {
      const path = `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${String(crd.metadata?.name)}`;
      await until(`CRD ${String(crd.metadata?.name)} established`, async () => {
        const conditions = ((await this.request('GET', path))?.status as { conditions?: Obj[] } | undefined)?.conditions ?? [];
        return conditions.some((c) => c.type === 'Established' && c.status === 'True');
      }, 30_000, () => this.logs());
    }
  }

  /** A token of ServiceAccount `namespace/name` (the TokenRequest API, as the kubelet gets a pod's), valid a day. */
  async serviceAccountToken(namespace: string, name: string): Promise<string> {
    const r = await this.create(`/api/v1/namespaces/${namespace}/serviceaccounts/${name}/token`, {
      apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: { expirationSeconds: 86_400 },
    });
    return String((r.status as { token: string }).token);
  }

  /** Freezes kube-apiserver (SIGSTOP): every request, watch and connection hangs, as in a stall, until {@link resume}. */
  pause(): void {
    this.#apiserver().kill('SIGSTOP');
  }

  /** Lets kube-apiserver run again after {@link pause}. */
  resume(): void {
    this.#apiserver().kill('SIGCONT');
  }

  #apiserver(): ChildProcess {
    return this.#procs.find((p) => p.name === 'kube-apiserver')!.proc;
  }

  /** Stops every process (SIGTERM, SIGKILL after 5 s), etcd, and removes the files. Idempotent. */
  async stop(): Promise<void> {
    this.#agent.destroy();
    for (const c of this.#sockets) c.destroy();
    for (const s of this.#servers.splice(0)) await new Promise((resolve) => s.close(resolve));
    await Promise.all(this.#procs.splice(0).reverse().map(async ({ proc }) => {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      const exited = once(proc, 'exit');
      // One left paused would take SIGTERM only once continued.
      proc.kill('SIGCONT');
      proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    }));
    await this.#etcd.stop();
    await rm(this.dir, { recursive: true, force: true });
  }
}
