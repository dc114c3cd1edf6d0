/**
 * weftd's network policy enforcement (issue #22, `--network-policy`): the thin shell around the
 * pure model and renderer. Loaded by weftd only when the flag is given.
 *
 * DESIGN NOTES
 *
 * - Inputs: watched-model.ts keeps every Pod, Namespace and NetworkPolicy of the cluster, and
 *   the addresses of pods the CNI server is wiring. The CNI server (in-process) reports a pod's
 *   addresses before its ADD answers ({@link PolicyEnforcer.podWired}) and the ADD waits until
 *   the rules that hold them are applied, so a new pod is never unprotected, not even until the
 *   kubelet writes its status.podIPs.
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
import type { KubeHttp } from '../lease/kube/http.ts';
import type { Logger } from '../log.ts';
import { execRunner, mustRun, nftMonitor, procSysctl, requireNft, runWatchedChecks } from '../masq/runner.ts';
import type { Runner, RulesetWatcher, Sysctl } from '../masq/runner.ts';
import { Backoff, sleep } from '../retry.ts';
import { NFT_POLICY_TABLE, policyScript, policyUpdate } from './nft-script.ts';
import type { PolicyRuleset } from './nft-script.ts';
import { BRIDGE_NF_SYSCTLS, PolicyRenderer } from './render.ts';
import { WatchedModel } from './watched-model.ts';
import type { WiredPod } from './watched-model.ts';

/** The whole table is compared with the kernel's this often, whatever the monitor said. */
const FULL_CHECK_MS = 5 * 60_000;

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

/** Keeps `inet weft-policy` enforcing the cluster's NetworkPolicies on this node's pods. */
export class PolicyEnforcer {
  readonly #options: PolicyEnforcerOptions;
  readonly #log: Logger;
  readonly #run: Runner;
  readonly #sysctl: Sysctl;
  /** What the rules are rendered from; the first apply waits until it is complete. */
  readonly #inputs: WatchedModel;
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

  constructor(options: PolicyEnforcerOptions) {
    this.#options = options;
    this.#log = options.log;
    this.#run = options.runner ?? execRunner();
    this.#sysctl = options.sysctl ?? procSysctl;
    this.#inputs = new WatchedModel({
      http: options.http, log: options.log,
      onChange: () => {
        this.#bump();
        this.#kick();
      },
      ...(options.podWaitMs !== undefined ? { podWaitMs: options.podWaitMs } : {}),
      ...(options.watchSilenceMs ? { watchSilenceMs: options.watchSilenceMs } : {}),
    });
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
    const watches = this.#inputs.watch(stop).map((w) => w.catch((e: unknown) => {
      // 401/403: enforcement cannot go on; the rules in place stay, and weftd says why.
      this.#log.error('network policy: a watch stopped for good; the rules in place stay as they are', { err: e });
      this.#synced.reject(e);
    }));
    this.#tasks = [...watches, this.#repairLoop(stop)];
    stop.addEventListener('abort', () => this.#synced.reject(new WeftError('ESTOPPED', 'network policy enforcement stopped')), {
      once: true,
    });
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
    this.#inputs.wire(pod);
    try {
      await this.#inputs.waitForPod(pod);
      await this.#synced.promise;
      await this.#appliedThrough(this.#bump());
    } catch (e) {
      this.#inputs.unwire(pod.containerId);
      throw e;
    }
  }

  /** The CNI server unwired a container: its addresses are no longer added to its Pod's. */
  podUnwired(containerId: string): void {
    if (!this.#inputs.unwire(containerId)) return;
    this.#bump();
    this.#kick();
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

  /** Starts an apply unless one runs (which then runs once more). */
  #kick(): void {
    if (!this.#inputs.complete || this.#stop.signal.aborted) return;
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
      this.#log.debug('network policy: listed the applied rules for the repair', {
        list_ms: Math.round(performance.now() - started),
        bytes: listing?.length ?? 0,
      });
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
    const next = this.#renderer.render(this.#inputs.model(), this.#options.node);
    const script = this.#appliedKnown ? policyUpdate(this.#applied, next) : policyScript(next);
    if (script === '') return false;
    const had = this.#applied !== undefined;
    this.#applies++;
    const rendered = performance.now();
    await mustRun(this.#run, `apply nftables table inet ${NFT_POLICY_TABLE}`, ['nft', '-f', '-'], script);
    this.#log.debug('network policy: rules applied', {
      render_ms: Math.round(rendered - started),
      nft_ms: Math.round(performance.now() - rendered),
      bytes: script.length,
      whole: !this.#appliedKnown,
    });
    this.#applied = next;
    this.#appliedKnown = true;
    if (!next && had) this.#log.info(`network policy: no policy selects a pod of this node; table inet ${NFT_POLICY_TABLE} removed`);
    else if (next && !had)
      this.#log.info(`network policy: enforcing in table inet ${NFT_POLICY_TABLE}`, { policies: this.#inputs.policyCount });
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
    const watcher = this.#options.watch ?? (this.#options.runner ? undefined : nftMonitor());
    await runWatchedChecks({
      periodMs: (this.#options.resyncSeconds ?? 5) * 1000, fullEveryMs: FULL_CHECK_MS, what: 'the network policy rules', log: this.#log,
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
        const why =
          `${key} cannot be read (${(e as Error).message}): br_netfilter is not loaded (modprobe br_netfilter), ` +
          'so traffic between two pods of this node would pass unchecked';
        if (starting) throw new ConfigError('--network-policy', why, { cause: e });
        this.#log.error(`network policy: ${why}`);
        continue;
      }
      if (value === '1') continue;
      try {
        await this.#sysctl.write(key, '1');
      } catch (e) {
        const why =
          `${key} is ${value} and could not be set to 1 (${(e as Error).message}): ` +
          'traffic between two pods of this node would pass unchecked; set it on the host or give weftd a writable /proc/sys';
        if (starting) throw new ConfigError('--network-policy', why, { cause: e });
        this.#log.error(`network policy: ${why}`);
        continue;
      }
      if (starting) {
        this.#log.info(`network policy: set ${key}=1 (was ${value}) so the forward hook sees traffic between pods of this node`);
      }
      else this.#log.warn(`network policy: ${key} was switched to ${value}; set it back to 1`);
    }
  }
}
