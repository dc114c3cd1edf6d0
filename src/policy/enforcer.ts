/**
 * weftd's network policy enforcement (issue #22, `--network-policy`): the thin shell around the
 * pure model and renderer. Loaded by weftd only when the flag is given.
 *
 * DESIGN NOTES
 *
 * - Inputs: three reflectors (k8s/reflector.ts) keep every Pod, Namespace and NetworkPolicy of
 *   the cluster. Every Pod, not only this node's: peers of a podSelector run anywhere, and a
 *   pod's addresses are what the sets hold. Objects are parsed as they arrive and only the model
 *   values are kept; an invalid one is left out, with one warning per object and reason.
 * - Pods being wired: the CNI server (in-process) reports a pod's addresses before its ADD
 *   answers ({@link PolicyEnforcer.podWired}) and the ADD waits until the rules that hold them
 *   are applied, so a new pod is never unprotected, not even until the kubelet writes its
 *   status.podIPs. Until the Pod's status lists them, the wired addresses are added to the Pod's
 *   own. A Pod the watch has not shown yet is waited for (`podWaitMs`); if it never comes, the
 *   ADD fails and the runtime tries again: closed, never open.
 * - Apply: one render of the whole model per batch of changes (by a PolicyRenderer, which works
 *   out again only what the changed objects touch), in one `nft -f` transaction that sends only
 *   the sets, maps and chains that differ (nft-script.ts, policyUpdate: a changed policy is the few
 *   rules and the sets of the groups of pods it selects); the whole table after a failure or a
 *   drift. Each apply logs (debug) its render and nft times. Changes arriving during an apply are
 *   taken by the next one. The table goes when no policy selects a pod of the node; it stays when
 *   weftd stops (the data plane outlives the agent).
 * - Repair, as the masquerade rules (masq/manager.ts): `nft monitor` reports every change to the
 *   ruleset; the table is then listed and compared with the listing taken right after our own
 *   apply (in the background, so the next change never waits for it), and loaded whole again
 *   when it differs. Every `resyncSeconds` the br_netfilter sysctls are read (and set back to 1
 *   with a warning), every 5 minutes the table is compared anyway.
 * - Requirements, checked at start with errors naming what is missing: `nft` working (the rules
 *   are nftables whatever --traffic-rules says: the table lives beside iptables' chains), and
 *   br_netfilter with net.bridge.bridge-nf-call-iptables / -ip6tables at 1, without which traffic
 *   between two pods of the node crosses cni0 unseen by the forward hook.
 */
import { ConfigError, WeftError } from '../errors.ts';
import type { IP } from '../ip/ip.ts';
import { Reflector } from '../k8s/reflector.ts';
import type { Changes } from '../k8s/reflector.ts';
import type { KubeHttp } from '../lease/kube/http.ts';
import type { Logger } from '../log.ts';
import { execRunner, mustRun, nftMonitor, procSysctl, requireNft, runWatchedChecks } from '../masq/runner.ts';
import type { Runner, RulesetWatcher, Sysctl } from '../masq/runner.ts';
import { Backoff, sleep } from '../retry.ts';
import { isInvalid, parseNamespace, parseNetworkPolicy, parsePod } from './model.ts';
import type { Invalid, Namespace, NetworkPolicy, Pod, PolicyModel } from './model.ts';
import { NFT_POLICY_TABLE, policyScript, policyUpdate } from './nft-script.ts';
import type { PolicyRuleset } from './nft-script.ts';
import { BRIDGE_NF_SYSCTLS, PolicyRenderer } from './render.ts';

/** The whole table is compared with the kernel's this often, whatever the monitor said. */
const FULL_CHECK_MS = 5 * 60_000;

/** A pod the CNI server wired: its Pod's `namespace/name` and the addresses it was given. */
export interface WiredPod {
  namespace: string;
  name: string;
  containerId: string;
  ips: readonly IP[];
}

export interface PolicyEnforcerOptions {
  http: KubeHttp;
  /** This node's name: the rules enforce the policies of its pods. */
  node: string;
  log: Logger;
  /** Runs nft; default spawns it in this process's namespace. */
  runner?: Runner;
  /** Reports ruleset changes; default `nft monitor` when `runner` is the default. */
  watch?: RulesetWatcher;
  /** Reads and sets the br_netfilter sysctls; default /proc/sys. */
  sysctl?: Sysctl;
  /** Seconds between checks of the sysctls; default 5 (--iptables-resync). */
  resyncSeconds?: number;
  /** How long {@link PolicyEnforcer.podWired} waits for the Pod to appear in the watch; default 10 s. */
  podWaitMs?: number;
  /** Passed to the reflectors (tests). */
  watchSilenceMs?: number;
}

/** A stored object: its model value, or why it is left out. */
type Stored<T> = T | Invalid;

/**
 * The pods of the model: each valid Pod, with the addresses the CNI server wired on this node
 * added while its status does not list them yet. Pure.
 */
export function modelPods(pods: Iterable<Stored<Pod>>, wired: Iterable<WiredPod>): Pod[] {
  const extra = new Map<string, IP[]>();
  for (const w of wired) extra.set(`${w.namespace}/${w.name}`, [...(extra.get(`${w.namespace}/${w.name}`) ?? []), ...w.ips]);
  const out: Pod[] = [];
  for (const p of pods) {
    if (isInvalid(p)) continue;
    const add = extra.get(`${p.namespace}/${p.name}`)?.filter((ip) => !p.ips.some((have) => have.value === ip.value && have.family === ip.family));
    out.push(add && add.length > 0 ? { ...p, ips: [...p.ips, ...add] } : p);
  }
  return out;
}

/** Keeps `inet weft-policy` enforcing the cluster's NetworkPolicies on this node's pods. */
export class PolicyEnforcer {
  readonly #o: PolicyEnforcerOptions;
  readonly #log: Logger;
  readonly #run: Runner;
  readonly #sysctl: Sysctl;
  readonly #pods = new Map<string, Stored<Pod>>();
  readonly #namespaces = new Map<string, Stored<Namespace>>();
  readonly #policies = new Map<string, Stored<NetworkPolicy>>();
  /** By container ID. */
  readonly #wired = new Map<string, WiredPod>();
  /** `key` → the reason last warned about, so a bad object is reported once per problem. */
  readonly #warned = new Map<string, string>();
  /** Resources listed at least once; the first apply waits for all three. */
  readonly #listed = new Set<string>();
  /** Waiters for the Pod of a wired container to appear. */
  readonly #podWaiters = new Set<() => void>();
  /** Keeps what it worked out from one model for the next: a policy changed is rendered in milliseconds. */
  readonly #renderer = new PolicyRenderer();
  /** What was last applied; undefined: no table, or unknown (the next apply loads it whole). */
  #applied: PolicyRuleset | undefined;
  #appliedKnown = false;
  /** The listing right after our last apply (undefined: no table). */
  #golden: string | undefined;
  /** Applies sent, so a listing taken across one is not mistaken for drift. */
  #applies = 0;
  /** The apply {@link #golden} was listed after (-1: none yet, or being listed). */
  #goldenOf = -1;
  #goldenTask: Promise<void> | undefined;
  /** Bumped by every change; an apply covers the generation it started with. */
  #generation = 0;
  #appliedGeneration = -1;
  #applyWaiters: { generation: number; resolve: () => void; reject: (e: unknown) => void }[] = [];
  #applying: Promise<void> | undefined;
  #again = false;
  #failure: unknown;
  readonly #stop = new AbortController();
  #tasks: Promise<unknown>[] = [];
  #synced: { promise: Promise<void>; resolve: () => void; reject: (e: unknown) => void };

  constructor(o: PolicyEnforcerOptions) {
    this.#o = o;
    this.#log = o.log;
    this.#run = o.runner ?? execRunner();
    this.#sysctl = o.sysctl ?? procSysctl;
    this.#synced = Promise.withResolvers<void>();
    this.#synced.promise.catch(() => {});
  }

  /**
   * Checks what enforcement needs (nft, br_netfilter; a ConfigError naming the missing part),
   * then starts the watches and the repair loop in the background and resolves. {@link synced}
   * says when the first rules are in place. `signal` (or {@link stop}) ends everything.
   */
  async start(signal: AbortSignal): Promise<void> {
    await requireNft(this.#run, '--network-policy', 'network policy');
    await this.#ensureBridgeNetfilter(true);
    const stop = AbortSignal.any([signal, this.#stop.signal]);
    const reflect = <T>(path: string, resource: string, store: Map<string, Stored<T>>, parse: (o: unknown) => Stored<T>) => new Reflector<Stored<T>>({
      http: this.#o.http, path, resource, log: this.#log, parse,
      ...(this.#o.watchSilenceMs ? { watchSilenceMs: this.#o.watchSilenceMs } : {}),
      onList: (items) => {
        store.clear();
        for (const [k, v] of items) store.set(k, v);
        this.#listed.add(resource);
        this.#changed(resource, items);
      },
      onChanges: (changes: Changes<Stored<T>>) => {
        for (const [k, v] of changes) {
          if (v === null) store.delete(k);
          else store.set(k, v);
        }
        this.#changed(resource, changes);
      },
    }).run(stop);
    const watches = [
      reflect('/api/v1/pods', 'pods', this.#pods, parsePod),
      reflect('/api/v1/namespaces', 'namespaces', this.#namespaces, parseNamespace),
      reflect('/apis/networking.k8s.io/v1/networkpolicies', 'networkpolicies', this.#policies, parseNetworkPolicy),
    ].map((w) => w.catch((e: unknown) => {
      // 401/403: enforcement cannot go on; the rules in place stay, and weftd says why.
      this.#log.error('network policy: a watch stopped for good; the rules in place stay as they are', { err: e });
      this.#synced.reject(e);
    }));
    this.#tasks = [...watches, this.#repairLoop(stop)];
    stop.addEventListener('abort', () => this.#synced.reject(new WeftError('ESTOPPED', 'network policy enforcement stopped')), { once: true });
  }

  /** Resolves once the first rules (or none) enforcing every listed object are applied. */
  synced(): Promise<void> {
    return this.#synced.promise;
  }

  /** Ends the watches and the repair loop; the table stays. */
  async stop(): Promise<void> {
    this.#stop.abort();
    await Promise.all(this.#tasks);
    await this.#applying;
    await this.#goldenTask;
  }

  /**
   * The CNI server wired `pod`: resolves once rules that count its addresses are applied.
   * Rejects when its Pod does not appear in the watch within `podWaitMs` or the rules cannot be
   * applied (the ADD then fails, and the pod never runs unprotected).
   */
  async podWired(pod: WiredPod): Promise<void> {
    const key = `${pod.namespace}/${pod.name}`;
    this.#wired.set(pod.containerId, pod);
    try {
      await this.#waitForPod(key);
      await this.#synced.promise;
      await this.#appliedThrough(this.#bump());
    } catch (e) {
      this.#wired.delete(pod.containerId);
      throw e;
    }
  }

  /** The CNI server unwired a container: its addresses are no longer added to its Pod's. */
  podUnwired(containerId: string): void {
    if (!this.#wired.delete(containerId)) return;
    this.#bump();
    this.#kick();
  }

  async #waitForPod(key: string): Promise<void> {
    const ms = this.#o.podWaitMs ?? 10_000;
    const deadline = Date.now() + ms;
    while (!this.#pods.has(key)) {
      if (Date.now() >= deadline) throw new WeftError('ENETPOL', `network policy: Pod ${key} has not appeared in the watch of Pods within ${ms} ms, so which policies select it is unknown; not starting it unprotected`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(done, Math.max(1, deadline - Date.now()));
        function done() {
          clearTimeout(t);
          resolve();
        }
        this.#podWaiters.add(done);
      });
    }
  }

  #bump(): number {
    return ++this.#generation;
  }

  /** Resolves once an apply covering `generation` is done; rejects with its failure. */
  #appliedThrough(generation: number): Promise<void> {
    if (this.#appliedGeneration >= generation) return Promise.resolve();
    const w = Promise.withResolvers<void>();
    this.#applyWaiters.push({ generation, resolve: w.resolve, reject: w.reject });
    this.#kick();
    return w.promise;
  }

  #changed(resource: string, items: Map<string, unknown>): void {
    for (const [key, v] of items) {
      const id = `${resource} ${key}`;
      if (v !== null && isInvalid(v as object)) {
        const why = (v as Invalid).invalid;
        if (this.#warned.get(id) !== why) this.#log.warn(`network policy: ignoring an invalid object of ${resource}`, { object: key, reason: why });
        this.#warned.set(id, why);
      } else {
        this.#warned.delete(id);
      }
    }
    if (resource === 'pods') {
      for (const done of this.#podWaiters) done();
      this.#podWaiters.clear();
      this.#forgetReported();
    }
    this.#bump();
    this.#kick();
  }

  /** Wired addresses the Pod's status now lists (or of a Pod gone) need no adding any more. */
  #forgetReported(): void {
    for (const [id, w] of this.#wired) {
      const pod = this.#pods.get(`${w.namespace}/${w.name}`);
      if (pod && !isInvalid(pod) && w.ips.every((ip) => pod.ips.some((have) => have.value === ip.value))) this.#wired.delete(id);
    }
  }

  #model(): PolicyModel {
    const valid = <T extends object>(m: Map<string, Stored<T>>) => [...m.values()].filter((v): v is T => !isInvalid(v));
    return { policies: valid(this.#policies), pods: modelPods(this.#pods.values(), this.#wired.values()), namespaces: valid(this.#namespaces) };
  }

  /** Starts an apply unless one runs (which then runs once more). */
  #kick(): void {
    if (this.#listed.size < 3 || this.#stop.signal.aborted) return;
    if (this.#applying) {
      this.#again = true;
      return;
    }
    this.#applying = this.#applyLoop().finally(() => {
      this.#applying = undefined;
    });
  }

  async #applyLoop(): Promise<void> {
    const backoff = new Backoff(500, 10_000);
    do {
      this.#again = false;
      const generation = this.#generation;
      try {
        const loaded = await this.#apply();
        backoff.reset();
        this.#failure = undefined;
        this.#appliedGeneration = generation;
        this.#synced.resolve();
        const waiting = this.#applyWaiters;
        this.#applyWaiters = waiting.filter((w) => w.generation > generation);
        for (const w of waiting) if (w.generation <= generation) w.resolve();
        if (loaded) this.#takeGolden();
      } catch (e) {
        this.#appliedKnown = false;
        if (String(e) !== String(this.#failure)) this.#log.error('network policy: failed to apply the rules; trying again', { err: e });
        this.#failure = e;
        for (const w of this.#applyWaiters.splice(0)) w.reject(e);
        this.#again = true;
        await sleep(backoff.next(), this.#stop.signal).catch(() => {});
      }
    } while (this.#again && !this.#stop.signal.aborted);
  }

  /**
   * Lists what the repair compares with, in the background: a large table takes hundreds of
   * milliseconds to list, and the next change must not wait for it. A listing that an apply
   * overtook is dropped; until one stands, the repair compares nothing.
   */
  #takeGolden(): void {
    const applies = this.#applies;
    this.#goldenOf = -1;
    if (!this.#applied) {
      this.#golden = undefined;
      this.#goldenOf = applies;
      return;
    }
    const started = performance.now();
    this.#goldenTask = this.#list().then((listing) => {
      if (applies !== this.#applies) return;
      this.#golden = listing;
      this.#goldenOf = applies;
      this.#log.debug('network policy: listed the applied rules for the repair', { list_ms: Math.round(performance.now() - started), bytes: listing?.length ?? 0 });
    }, (e: unknown) => {
      if (applies !== this.#applies) return;
      // Without a listing the repair cannot tell drift until the next change, which then loads
      // the table whole (and lists it again); reloading now could loop while nft cannot list.
      this.#log.error('network policy: failed to list the applied rules; the repair is blind until the next change', { err: e });
      this.#appliedKnown = false;
    });
  }

  /**
   * Renders the model and sends what differs from the loaded rules (all of it when unknown);
   * returns whether anything was sent.
   */
  async #apply(): Promise<boolean> {
    const started = performance.now();
    const next = this.#renderer.render(this.#model(), this.#o.node);
    const script = this.#appliedKnown ? policyUpdate(this.#applied, next) : policyScript(next);
    if (script === '') return false;
    const had = this.#applied !== undefined;
    this.#applies++;
    const rendered = performance.now();
    await mustRun(this.#run, `apply nftables table inet ${NFT_POLICY_TABLE}`, ['nft', '-f', '-'], script);
    this.#log.debug('network policy: rules applied', { render_ms: Math.round(rendered - started), nft_ms: Math.round(performance.now() - rendered), bytes: script.length, whole: !this.#appliedKnown });
    this.#applied = next;
    this.#appliedKnown = true;
    if (!next && had) this.#log.info(`network policy: no policy selects a pod of this node; table inet ${NFT_POLICY_TABLE} removed`);
    else if (next && !had) this.#log.info(`network policy: enforcing in table inet ${NFT_POLICY_TABLE}`, { policies: this.#policies.size });
    return true;
  }

  /** `nft list table inet weft-policy`, or undefined when it does not exist. */
  async #list(): Promise<string | undefined> {
    const argv = ['nft', 'list', 'table', 'inet', NFT_POLICY_TABLE];
    const r = await this.#run(argv);
    if (r.code === 0) return r.stdout;
    if (/No such file or directory/i.test(r.stderr)) return undefined;
    return mustRun(this.#run, `list nftables table inet ${NFT_POLICY_TABLE}`, argv);
  }

  /** Compares the table with the listing of our last apply; loads it whole again when they differ. */
  async #checkTable(): Promise<void> {
    if (!this.#appliedKnown || this.#applying || this.#goldenOf !== this.#applies) return;
    const applies = this.#applies;
    const listing = await this.#list();
    // An apply since (or still listing its own result) makes this listing no evidence of drift.
    if (this.#applying || !this.#appliedKnown || applies !== this.#applies) return;
    if (listing === this.#golden) return;
    this.#log.warn(`network policy: table inet ${NFT_POLICY_TABLE} was changed by something else; loading it again`, {
      state: listing === undefined ? 'missing' : this.#golden === undefined ? 'present, wanted absent' : 'altered',
    });
    this.#appliedKnown = false;
    this.#bump();
    this.#kick();
  }

  async #repairLoop(signal: AbortSignal): Promise<void> {
    const watcher = this.#o.watch ?? (this.#o.runner ? undefined : nftMonitor());
    await runWatchedChecks({
      periodMs: (this.#o.resyncSeconds ?? 5) * 1000, fullEveryMs: FULL_CHECK_MS, what: 'the network policy rules', log: this.#log,
      ...(watcher ? { watcher } : {}),
    }, signal, async (full) => {
      await this.#ensureBridgeNetfilter(false);
      if (full) await this.#checkTable();
    });
  }

  /**
   * Sets the br_netfilter sysctls to 1 where they are not. At start, a missing module or a
   * read-only /proc/sys is a ConfigError naming the sysctl; later, an error in the log.
   */
  async #ensureBridgeNetfilter(starting: boolean): Promise<void> {
    for (const key of BRIDGE_NF_SYSCTLS) {
      let value: string;
      try {
        value = await this.#sysctl.read(key);
      } catch (e) {
        const why = `${key} cannot be read (${(e as Error).message}): br_netfilter is not loaded (modprobe br_netfilter), so traffic between two pods of this node would pass unchecked`;
        if (starting) throw new ConfigError('--network-policy', why, { cause: e });
        this.#log.error(`network policy: ${why}`);
        continue;
      }
      if (value === '1') continue;
      try {
        await this.#sysctl.write(key, '1');
      } catch (e) {
        const why = `${key} is ${value} and could not be set to 1 (${(e as Error).message}): traffic between two pods of this node would pass unchecked; set it on the host or give weftd a writable /proc/sys`;
        if (starting) throw new ConfigError('--network-policy', why, { cause: e });
        this.#log.error(`network policy: ${why}`);
        continue;
      }
      if (starting) this.#log.info(`network policy: set ${key}=1 (was ${value}) so the forward hook sees traffic between pods of this node`);
      else this.#log.warn(`network policy: ${key} was switched to ${value}; set it back to 1`);
    }
  }
}
