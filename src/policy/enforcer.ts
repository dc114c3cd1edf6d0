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
 * - Apply (nft/kept-table.ts, shared with the Service proxy): one render of the whole model per
 *   batch of changes (by a PolicyRenderer, which works
 *   out again only what the changed objects touch), in one `nft -f` transaction that sends only
 *   the sets, maps and chains that differ (nft-script.ts, policyUpdate: a changed policy is the few
 *   rules and the sets of the groups of pods it selects); the whole table after a failure or a
 *   drift. Each apply logs (debug) its render and nft times. Changes arriving during an apply are
 *   taken by the next one. The table goes when no policy selects a pod of the node; it stays when
 *   weftd stops (the data plane outlives the agent).
 * - Repair, as the masquerade rules (masq/manager.ts): the kernel reports every change to the
 *   ruleset (nft/changes.ts); the table is then listed and compared with the listing taken right after our own
 *   apply (in the background, so the next change never waits for it), and loaded whole again
 *   when it differs. Every `resyncSeconds` the br_netfilter sysctls are read (and set back to 1
 *   with a warning), every 5 minutes the table is compared anyway.
 * - Requirements: `nft` working (the rules are nftables whatever --traffic-rules says: the table
 *   lives beside iptables' chains), checked at start with an error naming it; br_netfilter with
 *   net.bridge.bridge-nf-call-iptables / -ip6tables at 1, without which traffic between two pods
 *   of the node crosses cni0 unseen by the forward hook: set where weftd can, else enforcement
 *   runs degraded for that traffic and says so (masq/bridge-netfilter.ts).
 * - Verdict logs (verdict-log.ts): with `nflog`, the NFLOG group of the logging rules is bound at
 *   start; where it cannot be (another reader holds it), enforcement goes on without them, with a
 *   warning. The meters' elements the kernel adds are no drift.
 * - Drops: every group chain's drop is counted per direction in a named counter of the table,
 *   read when weftd is scraped (drops.ts).
 */
import { WeftError } from '../errors.ts';
import type { KubeHttp } from '../lease/kube/http.ts';
import type { Logger } from '../log.ts';
import { BridgeNetfilter } from '../masq/bridge-netfilter.ts';
import { execRunner, procSysctl, requireNft, runWatchedChecks } from '../masq/runner.ts';
import type { Runner, RulesetWatcher, Sysctl } from '../masq/runner.ts';
import { nftChanges } from '../nft/changes.ts';
import { KeptTable } from '../nft/kept-table.ts';
import { requireReadBack } from '../nft/read-back.ts';
import type { PolicyModel } from './model.ts';
import { NFT_POLICY_TABLE } from './nft-script.ts';
import type { DropCounts } from './drop-counters.ts';
import { PolicyDrops } from './drops.ts';
import { PolicyRenderer } from './render.ts';
import { sampleRuleset } from './sample.ts';
import { VerdictLog } from './verdict-log.ts';
import type { VerdictLogOptions } from './verdict-log.ts';
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
  /** Reports ruleset changes; default nft/changes.ts's for this namespace when `runner` is the default. */
  watch?: RulesetWatcher;
  /** Reads and sets the br_netfilter sysctls; default /proc/sys. */
  sysctl?: Sysctl;
  /** Seconds between checks of the sysctls; default 5 (--iptables-resync). */
  resyncSeconds?: number;
  /** How long {@link PolicyEnforcer.podWired} waits for the Pod to appear in the watch; default 10 s. */
  podWaitMs?: number;
  /** Passed to the reflectors (tests). */
  watchSilenceMs?: number;
  /** Binds an NFLOG group in the node's namespace (NetlinkHandle.nflog), for verdict logs; absent: none are read. */
  nflog?: VerdictLogOptions['bind'];
  /** Called for each verdict logged (weft_policy_verdicts_total). */
  verdictCounted?: VerdictLogOptions['counted'];
}

/** Keeps `inet weft-policy` enforcing the cluster's NetworkPolicies on this node's pods. */
export class PolicyEnforcer {
  readonly #options: PolicyEnforcerOptions;
  readonly #log: Logger;
  readonly #run: Runner;
  readonly #bridgeNetfilter: BridgeNetfilter;
  /** What the rules are rendered from; the first apply waits until it is complete. */
  readonly #inputs: WatchedModel;
  /** Keeps what it worked out from one model for the next: a policy changed is rendered in milliseconds. */
  readonly #renderer = new PolicyRenderer();
  /** The table, applied by difference and repaired. */
  readonly #table: KeptTable;
  /** Reports changes to the ruleset other than the table's own (undefined: none, every check is full). */
  readonly #watcher: RulesetWatcher | undefined;
  readonly #stop = new AbortController();
  #tasks: Promise<unknown>[] = [];
  /** The model of the last render: verdict logs name its pods and policies. */
  #rendered: PolicyModel | undefined;
  readonly #verdictLog: VerdictLog | undefined;
  readonly #drops: PolicyDrops;

  constructor(options: PolicyEnforcerOptions) {
    this.#options = options;
    this.#log = options.log;
    this.#run = options.runner ?? execRunner();
    this.#bridgeNetfilter = new BridgeNetfilter({
      sysctl: options.sysctl ?? procSysctl, run: this.#run, log: this.#log, what: 'network policy',
      without: 'traffic between two pods of this node would pass unchecked',
    });
    this.#inputs = new WatchedModel({
      http: options.http, log: options.log,
      onChange: () => {
        this.#table.bump();
        this.#table.kick();
      },
      ...(options.podWaitMs !== undefined ? { podWaitMs: options.podWaitMs } : {}),
      ...(options.watchSilenceMs ? { watchSilenceMs: options.watchSilenceMs } : {}),
    });
    this.#watcher = options.watch ?? (options.runner ? undefined : nftChanges());
    this.#table = new KeptTable({
      table: `inet ${NFT_POLICY_TABLE}`, what: 'network policy', log: this.#log, run: this.#run,
      ...(this.#watcher?.quiet ? { quiet: this.#watcher.quiet } : {}),
      render: () => this.#renderer.render((this.#rendered = this.#inputs.model()), this.#options.node),
      ready: () => this.#inputs.complete,
      applied: (before, now, { whole }) => {
        if (whole) this.#drops.restarted();
        if (!now && before) this.#log.info(`network policy: no policy selects a pod of this node; table inet ${NFT_POLICY_TABLE} removed`);
        else if (now && !before) {
          this.#log.info(`network policy: enforcing in table inet ${NFT_POLICY_TABLE}`, { policies: this.#inputs.policyCount });
        }
      },
    });
    this.#drops = new PolicyDrops({ run: this.#run, log: this.#log });
    this.#verdictLog = options.nflog && new VerdictLog({
      log: this.#log, bind: options.nflog, target: (prefix) => this.#renderer.verdictTarget(prefix), model: () => this.#rendered,
      ...(options.verdictCounted ? { counted: options.verdictCounted } : {}),
    });
  }

  /** Packets dropped by the rules since weftd started, by direction (weft_policy_drops_total); never rejects. */
  drops(): Promise<DropCounts> {
    return this.#drops.totals();
  }

  /** The model of the last render (weftctl trace reads it); undefined before the first. */
  model(): PolicyModel | undefined {
    return this.#rendered;
  }

  /**
   * Checks what enforcement needs (nft, reading back the rules enforcement writes, see
   * nft/read-back.ts: a ConfigError naming it; br_netfilter: degraded without), then starts the
   * watches and the repair loop in the background and resolves. {@link synced} says when the
   * first rules are in place. `signal` (or {@link stop}) ends everything.
   */
  async start(signal: AbortSignal): Promise<void> {
    await requireNft(this.#run, '--network-policy', 'network policy');
    const sample = sampleRuleset(this.#options.node);
    if (sample) {
      const table = `inet ${NFT_POLICY_TABLE}`;
      await requireReadBack({ run: this.#run, flag: '--network-policy', what: 'network policy', table, sample });
    }
    await this.#bridgeNetfilter.ensure();
    await this.#verdictLog?.start().catch((e: unknown) => {
      this.#log.warn('network policy: verdict logs off, enforcement goes on', { err: e });
    });
    const stop = AbortSignal.any([signal, this.#stop.signal]);
    const watches = this.#inputs.watch(stop).map((w) => w.catch((e: unknown) => {
      // 401/403: enforcement cannot go on; the rules in place stay, and weftd says why.
      this.#log.error('network policy: a watch stopped for good; the rules in place stay as they are', { err: e });
      this.#table.fail(e);
    }));
    this.#tasks = [...watches, this.#repairLoop(stop)];
    stop.addEventListener('abort', () => this.#table.fail(new WeftError('ESTOPPED', 'network policy enforcement stopped')), {
      once: true,
    });
  }

  /** Resolves once the first rules (or none) enforcing every listed object are applied. */
  synced(): Promise<void> {
    return this.#table.synced();
  }

  /** Ends the watches and the repair loop; the table stays. */
  async stop(): Promise<void> {
    this.#stop.abort();
    this.#verdictLog?.stop();
    // First the table: a repair check waiting for an apply that keeps failing ends with it.
    await this.#table.stop();
    await Promise.all(this.#tasks);
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
      await this.#table.synced();
      await this.#table.appliedThrough(this.#table.bump());
    } catch (e) {
      this.#inputs.unwire(pod.containerId);
      throw e;
    }
  }

  /** The CNI server unwired a container: its addresses are no longer added to its Pod's. */
  podUnwired(containerId: string): void {
    if (!this.#inputs.unwire(containerId)) return;
    this.#table.bump();
    this.#table.kick();
  }

  async #repairLoop(signal: AbortSignal): Promise<void> {
    const watcher = this.#watcher;
    await runWatchedChecks({
      periodMs: (this.#options.resyncSeconds ?? 5) * 1000, fullEveryMs: FULL_CHECK_MS, what: 'the network policy rules', log: this.#log,
      ...(watcher ? { watcher } : {}),
    }, signal, async (full) => {
      await this.#bridgeNetfilter.ensure();
      if (full) await this.#table.check();
    });
  }
}
