/**
 * DESIGN NOTES
 *
 * The Kubernetes lease source (flanneld --kube-subnet-mgr, reference §3) on @kubernetes/client-node.
 * The cluster allocates pod CIDRs (kube-controller-manager --allocate-node-cidrs); a node's lease
 * is its Node's podCIDRs plus the annotations that say how to reach it.
 *
 * Acquire: wait for our Node and its pod CIDR (flanneld gives up after 30 s; Weft keeps waiting
 * and says so), check the CIDRs against the Network(s), and publish the annotations — only those
 * that differ, by a strategic merge patch of the `nodes/status` subresource, since flannel's RBAC
 * grants `patch` on `nodes/status` but not on `nodes`.
 *
 * API calls go over node:https with client-node's credentials (http.ts says why not its API
 * classes and Watch).
 *
 * Watch (k8s/reflector.ts, which the other watches share): one list (250 Nodes a page, read as
 * plain JSON, each Node turned into its lease as it arrives) replaces the LeaseTable, then one
 * watch from the list's resourceVersion with bookmarks. Lists go easy on the API server, as client-go's reflector does: the first asks for
 * resourceVersion=0 (any version, served from the apiserver's watch cache), a relist for no
 * older than the resourceVersion last seen (the cache again); only when that is refused (410) is
 * a consistent list read from etcd: every node relisting after an outage must not be a quorum
 * read of every Node. Watch events go into a per-Node map and are applied to the table as one
 * batch per tick, so a burst of changes to one Node costs one update and nothing can block the watch
 * callback — flanneld's fixed-depth event channel hung kube-subnet-mgr near 5k nodes
 * (flannel-io/flannel#719, #2251). Unlike flanneld, a pod CIDR change is an update (flanneld only
 * compares annotations). A watch that ends is resumed from the last resourceVersion seen
 * (bookmarks included), and so is one silent for longer than `watchSilenceMs`: a half-dead
 * connection can stay open for ever. 410 Gone, as an ERROR event
 * or an HTTP status, ends in a relist, which the table diffs against what it holds, so nothing
 * is lost and nothing is repeated. A failing watch or Node list is retried every T/2 to T
 * (ReconnectPace: T = 1 s up to 10,000 Nodes, longer in larger clusters so that all nodes
 * together stay under 10,000 attempts a second), however long the outage: the watch is live
 * within T of the API server answering again. client-node's informer waits up to 30 s, so a
 * node could miss every change for half a minute after the API server came back. Other calls
 * back off 1 s → 30 s. 401 and 403 are not retried: they need an operator, and the error names
 * the verb and resource RBAC must allow.
 *
 * Our own Node is kept out of the table. When its annotations lose ours (the Node was deleted and
 * registered again) they are published again; when its pod CIDR changes the new lease goes to
 * `onOwnLease`.
 */
import { readFile } from 'node:fs/promises';
import type { ApiAccess } from './kubeconfig.ts';
import { parseNetConfig } from '../../config/netconf.ts';
import type { NetConfig } from '../../config/netconf.ts';
import { Reflector } from '../../k8s/reflector.ts';
import { ConfigError, PeerDataError, WeftError, isRetryable } from '../../errors.ts';
import { equalCIDR, formatCIDR, tryParseIP } from '../../ip/ip.ts';
import type { CIDR } from '../../ip/ip.ts';
import type { Logger } from '../../log.ts';
import { Backoff, ReconnectPace, sleep } from '../../retry.ts';
import type { Lease, LeaseAttrs } from '../lease.ts';
import type { AcquireRequest, LeaseSource, PublishedOwn } from '../source.ts';
import type { LeaseTable } from '../table.ts';
import { DEFAULT_ANNOTATION_PREFIX, annotationKeys, nodePublicIPs, ownAnnotationChanges, ownSubnets, remoteLease } from './annotations.ts';
import type { AnnotationKeys, NodeLike } from './annotations.ts';
import { KubeApiError, kubeConfigFromFlags, kubeError } from './client.ts';
import { KubeHttp } from './http.ts';
import { resolveNodeName } from './identity.ts';
import type { KubeSourceOptions } from './options.ts';

/** The NetworkUnavailable condition flanneld sets once up (reason and message as flanneld's). */
export const NETWORK_UP_CONDITION = {
  type: 'NetworkUnavailable',
  status: 'False',
  reason: 'FlannelIsUp',
  message: 'Flannel is running on this node',
} as const;

/** A Node as the watch keeps it: our own Node, or a remote one's lease (undefined: none usable). */
type Watched = { own: NodeLike } | Lease | undefined;

/** What weftd reads of its own Node: NodeLike and the conditions. */
type OwnNode = NodeLike & { status?: { conditions?: { type?: string; status?: string; reason?: string; message?: string }[] } };

const nodePath = (name: string) => `/api/v1/nodes/${encodeURIComponent(name)}`;

/** RFC 3339 in seconds, as metav1.Time is written. */
function rfc3339(d: Date): string {
  return d.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

function sameCIDR(a: CIDR | undefined, b: CIDR | undefined): boolean {
  return a === undefined || b === undefined ? a === b : equalCIDR(a, b);
}

export class KubeLeaseSource implements LeaseSource {
  readonly name = 'kube';
  readonly #options: KubeSourceOptions;
  readonly #kc: ApiAccess;
  readonly #http: KubeHttp;
  readonly #keys: AnnotationKeys;
  readonly #log: Logger;
  readonly #delay: (ms: number, signal: AbortSignal) => Promise<void>;
  readonly #now: () => number;
  #config: NetConfig | undefined;
  #nodeName: Promise<string> | undefined;
  #own: Lease | undefined;
  #onOwnLease: ((lease: Lease) => void) | undefined;
  /** Serialises re-publications of our annotations. */
  #ownWork: Promise<void> = Promise.resolve();
  /** Nodes we warned about, with the warning: one warning per Node and problem. */
  readonly #warned = new Map<string, string>();
  readonly #closed = new AbortController();

  private constructor(options: KubeSourceOptions, kc: ApiAccess, keys: AnnotationKeys) {
    this.#options = options;
    this.#kc = kc;
    this.#http = new KubeHttp(kc);
    this.#keys = keys;
    this.#log = options.log.child({ component: 'kube' });
    this.#delay = options.delay ?? sleep;
    this.#now = options.now ?? (() => performance.now());
  }

  /** Validates the flags (ConfigError naming the flag) and builds the client; connects lazily. */
  static create(options: KubeSourceOptions): KubeLeaseSource {
    const keys = annotationKeys(options.annotationPrefix ?? DEFAULT_ANNOTATION_PREFIX);
    return new KubeLeaseSource(options, kubeConfigFromFlags(options, options.env ?? process.env), keys);
  }

  async networkConfig(signal: AbortSignal): Promise<NetConfig> {
    let text: string;
    try {
      text = await readFile(this.#options.netConfigPath, { encoding: 'utf8', signal });
    } catch (e) {
      throw new ConfigError('--net-config-path', `cannot read ${this.#options.netConfigPath}: ${(e as Error).message}`, { cause: e });
    }
    // Kube mode parses only; SubnetLen/Min/Max do not apply (pod CIDRs are authoritative).
    const cfg = parseNetConfig(text, this.#options.netConfigPath);
    this.#config = cfg;
    this.#log.info('read the network configuration', {
      file: this.#options.netConfigPath,
      network: cfg.network && formatCIDR(cfg.network),
      ipv6Network: cfg.ipv6Network && formatCIDR(cfg.ipv6Network),
      backend: cfg.backend.type,
    });
    return cfg;
  }

  /** Our Node's name, resolved once (NODE_NAME or the pod's spec.nodeName). */
  nodeName(signal: AbortSignal): Promise<string> {
    this.#nodeName ??= this.#retry('find our Node name', signal, () =>
      resolveNodeName(this.#options.env ?? process.env, async (namespace, name) => {
        try {
          return (
            await this.#http.get<{ spec?: { nodeName?: string } }>(
              `/api/v1/namespaces/${encodeURIComponent(namespace)}/pods/${encodeURIComponent(name)}`,
            )
          ).spec?.nodeName;
        } catch (e) {
          throw kubeError('get', 'pods', `${namespace}/${name}`, e);
        }
      }),
    );
    this.#nodeName.catch(() => {
      this.#nodeName = undefined;
    });
    return this.#nodeName;
  }

  /** What our Node publishes already (for interface selection and VTEP MAC reuse before acquire). */
  async published(signal: AbortSignal): Promise<PublishedOwn> {
    const name = await this.nodeName(signal);
    let node: OwnNode;
    try {
      node = await this.#retry(`get Node ${name}`, signal, () => this.#readNode(name));
    } catch (e) {
      if (e instanceof KubeApiError && e.notFound) return {};
      throw e;
    }
    const out: PublishedOwn = nodePublicIPs(this.#keys, node);
    const a = node.metadata?.annotations ?? {};
    if (a[this.#keys.subnetKubeManaged] === 'true' && a[this.#keys.backendType]) {
      const attrs: LeaseAttrs = { backendType: a[this.#keys.backendType]! };
      for (const [key, field] of [[this.#keys.backendData, 'backendData'], [this.#keys.backendV6Data, 'backendV6Data']] as const) {
        try {
          const data: unknown = JSON.parse(a[key] ?? 'null');
          if (data !== null) attrs[field] = data;
        } catch {
          this.#log.warn('ignoring our own unparseable annotation', { annotation: key });
        }
      }
      const ip = tryParseIP(a[this.#keys.backendPublicIP] ?? '');
      if (ip?.family === 4 && ip.value !== 0n) attrs.publicIP = ip;
      const ip6 = tryParseIP(a[this.#keys.backendPublicIPv6] ?? '');
      if (ip6?.family === 6) attrs.publicIPv6 = ip6;
      out.attrs = attrs;
    }
    return out;
  }

  async acquire(req: AcquireRequest, signal: AbortSignal): Promise<Lease> {
    const cfg = this.#config;
    if (!cfg) throw new WeftError('ESTATE', 'networkConfig() must succeed before acquire()');
    const name = await this.nodeName(signal);
    const backoff = new Backoff(1000, 30_000);
    let waitingFor = '';
    for (;;) {
      signal.throwIfAborted();
      let wait: string;
      try {
        const node = await this.#readNode(name);
        const subnets = ownSubnets(node, cfg);
        if (subnets) {
          await this.#publish(name, req.attrs, node);
          const lease: Lease = { peer: name, ...subnets, attrs: req.attrs };
          this.#own = lease;
          this.#log.info('acquired lease', {
            node: name,
            subnet: subnets.subnet && formatCIDR(subnets.subnet),
            ipv6Subnet: subnets.ipv6Subnet && formatCIDR(subnets.ipv6Subnet),
          });
          return lease;
        }
        wait =
          `Node ${JSON.stringify(name)} has no pod CIDR assigned yet ` +
          '(spec.podCIDR; is kube-controller-manager running with --allocate-node-cidrs?)';
      } catch (e) {
        if (e instanceof KubeApiError && e.notFound) wait = `Node ${JSON.stringify(name)} does not exist yet`;
        else if (isRetryable(e)) wait = (e as Error).message;
        else throw e;
      }
      if (wait !== waitingFor) this.#log.warn(`waiting to acquire our lease: ${wait}`);
      waitingFor = wait;
      await this.#delay(backoff.next(), signal);
    }
  }

  async #readNode(name: string): Promise<OwnNode> {
    try {
      return await this.#http.get<OwnNode>(nodePath(name));
    } catch (e) {
      throw kubeError('get', 'nodes', name, e);
    }
  }

  async #patchStatus(name: string, body: object): Promise<void> {
    try {
      await this.#http.strategicPatch(`${nodePath(name)}/status`, body);
    } catch (e) {
      throw kubeError('patch', 'nodes/status', name, e);
    }
  }

  /** Patches the annotations of `attrs` that `node` does not hold yet. */
  async #publish(name: string, attrs: LeaseAttrs, node: NodeLike): Promise<void> {
    const changes = ownAnnotationChanges(this.#keys, attrs, node.metadata?.annotations);
    if (Object.keys(changes).length === 0) {
      this.#log.debug('our annotations are current', { node: name });
      return;
    }
    await this.#patchStatus(name, { metadata: { annotations: changes } });
    this.#log.info('published our annotations', { node: name, annotations: changes });
  }

  /** Runs `fn` until it succeeds, retrying retryable errors with backoff 1 s → 30 s. */
  async #retry<T>(what: string, signal: AbortSignal, fn: () => Promise<T>): Promise<T> {
    const backoff = new Backoff(1000, 30_000);
    for (;;) {
      signal.throwIfAborted();
      try {
        return await fn();
      } catch (e) {
        if (!isRetryable(e)) throw e;
        this.#log.warn(`failed to ${what}; retrying`, { err: e });
      }
      await this.#delay(backoff.next(), signal);
    }
  }

  async watch(table: LeaseTable, signal: AbortSignal, onOwnLease?: (lease: Lease) => void): Promise<void> {
    this.#onOwnLease = onOwnLease;
    if (!this.#config) throw new WeftError('ESTATE', 'networkConfig() must succeed before watch()');
    const stop = AbortSignal.any([signal, this.#closed.signal]);
    const own = await this.nodeName(stop);
    const pace = new ReconnectPace(() => table.size + 1);
    const nodes = new Reflector<Watched>({
      http: this.#http, path: '/api/v1/nodes', resource: 'nodes', name: 'Nodes', log: this.#log,
      listPageSize: this.#options.listPageSize ?? 250, listTimeoutMs: this.#options.listTimeoutMs ?? 60_000,
      // Without a Node list a node cannot follow the cluster: a list is retried as a watch is,
      // at a pace set by the cluster's size (every node and this one).
      watchRetry: pace, listRetry: pace,
      ...(this.#options.watchSilenceMs !== undefined ? { watchSilenceMs: this.#options.watchSilenceMs } : {}),
      ...(this.#options.watchTimeoutSeconds !== undefined ? { watchTimeoutSeconds: this.#options.watchTimeoutSeconds } : {}),
      delay: this.#delay, now: this.#now,
      onRestart: () => this.#options.observer?.watchRestarted?.(),
      // Each Node is turned into its lease as it arrives: no Node object outlives its page or
      // event. An unchanged lease is the table's own object, so a relist does not hold the table
      // twice while its pages come in.
      parse: (o) => {
        const node = o as NodeLike;
        const name = node.metadata?.name ?? '';
        if (name === own) return { own: node };
        const lease = this.#remote(node, table.get(name));
        return lease && table.held(lease);
      },
      onList: (items) => {
        const leases: Lease[] = [];
        for (const v of items.values()) {
          if (v && 'own' in v) this.#onOwnNode(v.own);
          else if (v) leases.push(v);
        }
        const batch = table.replaceAll(leases);
        this.#log.info('replaced the leases with the Node list', { leases: leases.length, changed: batch.length });
      },
      onChanges: (changes) => {
        const upserts: Lease[] = [];
        const removals: string[] = [];
        for (const [name, v] of changes) {
          if (name === own) this.#onOwnNode(v && 'own' in v ? v.own : null);
          else if (v && !('own' in v)) upserts.push(v);
          else {
            removals.push(name);
            if (v === null) this.#warned.delete(name);
          }
        }
        table.apply(upserts, removals);
      },
    });
    await nodes.run(stop);
  }

  skipped(): { peer: string; reason: string }[] {
    return [...this.#warned].map(([peer, reason]) => ({ peer, reason }));
  }

  /**
   * A remote Node's lease, or undefined when unmanaged. When its data is unusable (one warning
   * per Node and problem): `last`, so a Node that was valid keeps its last good lease (and its
   * routes) until it is valid again or deleted.
   */
  #remote(node: NodeLike, last: Lease | undefined): Lease | undefined {
    const name = node.metadata?.name ?? '';
    try {
      const lease = remoteLease(node, { keys: this.#keys, config: this.#config!, own: this.#own });
      this.#warned.delete(name);
      return lease;
    } catch (e) {
      if (!(e instanceof PeerDataError)) throw e;
      if (this.#warned.get(name) !== e.message) {
        this.#warned.set(name, e.message);
        this.#log.warn(last ? 'ignoring an unusable update of a Node, keeping its last good lease' : 'skipping Node', {
          node: name,
          err: e,
        });
      }
      return last;
    }
  }

  /** Our own Node changed (or was deleted: null): keep our annotations and lease current. */
  #onOwnNode(node: NodeLike | null): void {
    const own = this.#own;
    if (!own || this.#closed.signal.aborted) return;
    if (!node) {
      this.#log.warn('our Node was deleted; the annotations are published again when it is back', { node: own.peer });
      return;
    }
    let subnets;
    try {
      subnets = ownSubnets(node, this.#config!);
    } catch (e) {
      this.#log.error('our Node has unusable pod CIDRs; keeping the current lease', { node: own.peer, err: e });
      return;
    }
    if (!subnets) return;
    if (!sameCIDR(subnets.subnet, own.subnet) || !sameCIDR(subnets.ipv6Subnet, own.ipv6Subnet)) {
      const lease: Lease = { peer: own.peer, ...subnets, attrs: own.attrs };
      this.#own = lease;
      this.#log.error('our Node has a DIFFERENT pod CIDR now; pods of the old one lose connectivity until restarted', {
        node: own.peer,
        subnet: subnets.subnet && formatCIDR(subnets.subnet),
        ipv6Subnet: subnets.ipv6Subnet && formatCIDR(subnets.ipv6Subnet),
      });
      this.#onOwnLease?.(lease);
    }
    if (Object.keys(ownAnnotationChanges(this.#keys, own.attrs, node.metadata?.annotations)).length === 0) return;
    this.#ownWork = this.#ownWork
      .then(() =>
        this.#retry(`publish the annotations of Node ${own.peer}`, this.#closed.signal, async () =>
          this.#publish(own.peer, own.attrs, await this.#readNode(own.peer)),
        ),
      )
      .catch((e: unknown) => {
        if (!this.#closed.signal.aborted) this.#log.error('failed to publish our annotations again', { node: own.peer, err: e });
      });
  }

  /**
   * Sets our Node's NetworkUnavailable condition to False (reason FlannelIsUp) unless
   * --set-node-network-unavailable=false or it already says so. Retries for `completeTimeoutMs`;
   * a failure is logged, never thrown: the data plane works without the condition.
   */
  async complete(signal: AbortSignal): Promise<void> {
    if (this.#options.setNodeNetworkUnavailable === false) return;
    const name = await this.nodeName(signal);
    const deadline = this.#now() + (this.#options.completeTimeoutMs ?? 30_000);
    const backoff = new Backoff(1000, 30_000);
    for (;;) {
      try {
        const node = await this.#readNode(name);
        const c = node.status?.conditions?.find((x) => x.type === NETWORK_UP_CONDITION.type);
        if (c?.status === 'False' && c.reason === NETWORK_UP_CONDITION.reason && c.message === NETWORK_UP_CONDITION.message) return;
        const now = rfc3339(new Date());
        await this.#patchStatus(name, {
          status: { conditions: [{ ...NETWORK_UP_CONDITION, lastHeartbeatTime: now, lastTransitionTime: now }] },
        });
        this.#log.info('set NetworkUnavailable=False on our Node', { node: name });
        return;
      } catch (e) {
        if (!isRetryable(e) || this.#now() >= deadline) {
          this.#log.error('failed to set the NetworkUnavailable condition of our Node', { node: name, err: e });
          return;
        }
      }
      await this.#delay(backoff.next(), signal);
    }
  }

  async close(): Promise<void> {
    this.#closed.abort(new WeftError('ECLOSED', 'lease source closed'));
    await this.#ownWork;
  }
}
