/**
 * {@link TrafficRules}: weftd's keeper of the masquerade and forward rules (issue #7, reference §6).
 *
 * DESIGN NOTES
 *
 * - Driver choice: `auto` takes nftables when `nft` works here, else iptables; but iptables when
 *   forward rules are wanted and an iptables FORWARD policy is DROP (Docker sets it): an nftables
 *   accept in another table cannot override that drop. An explicit choice that does not work here
 *   is a ConfigError. The choice and its reason are logged once.
 * - Start: switches forwarding on where it is off (a read-only /proc/sys is fine when the host has
 *   it on already), applies the wanted set in one transaction, which also recycles rules of an old
 *   network/subnet and adopts flanneld's set of the same driver (rules.ts explains how), and only
 *   then removes the other driver's sets (Weft's and flanneld's: the nftables tables `inet weft`,
 *   `ip flannel-ipv4`, `ip6 flannel-ipv6`, or the FLANNEL-* chains and their jumps). Removed
 *   first, a node taken over from flanneld (iptables) had no masquerade until weftd's table came,
 *   and a pod's connection opened then never got a reply. Side by side for a moment, the two sets
 *   agree, and NAT keeps the first chain that masquerades.
 * - Resync: compares the node with the wanted set, re-applies the whole set when anything differs
 *   and warns with what differed; the other driver's sets are removed again if they reappear;
 *   forwarding switched off by something else is switched back on (flanneld sets it once, at
 *   start). Unlike flanneld's nftables mode, nftables is resynced too. With iptables (as
 *   flanneld) the resync runs every `resyncSeconds`. With nftables, the kernel reports every
 *   change to the ruleset (iptables-nft's too; nft/changes.ts) and the resync runs when one comes; every
 *   `resyncSeconds` only the forwarding sysctls are read, and the whole resync runs every
 *   {@link WATCHED_RESYNC_MS} as a safety net. Comparing the rules means running nft or
 *   iptables-save, which cost ~0.4% of a core every 5 s; an idle node now runs nothing. If the
 *   monitor dies, the resync falls back to running every `resyncSeconds`.
 * - Rules stay when weftd exits (`stop()` or the signal only end the loop), so pods keep working
 *   across a restart; {@link TrafficRules.cleanup} removes them.
 * - A failed apply leaves the previous set of that transaction (nftables: the whole table;
 *   iptables: one transaction per family, so an IPv6 failure can follow an applied IPv4 set); the
 *   error names the command and its stderr, and the loop tries again next period.
 */
import { ConfigError, WeftError } from '../errors.ts';
import { formatCIDR } from '../ip/ip.ts';
import type { Family } from '../ip/ip.ts';
import type { Logger } from '../log.ts';
import { IptablesDriver, NftablesDriver } from './drivers.ts';
import type { Driver, DriverName } from './drivers.ts';
import { wantedRules } from './rules.ts';
import type { TrafficNetworks, WantedRules } from './rules.ts';
import { nftChanges } from '../nft/changes.ts';
import { execRunner, procSysctl, runWatchedChecks } from './runner.ts';
import type { Runner, RulesetWatcher, Sysctl } from './runner.ts';

/** With nftables watched, the whole resync still runs this often, for what no event reports. */
export const WATCHED_RESYNC_MS = 5 * 60_000;

export interface TrafficRulesOptions {
  /** Which rules engine: `auto` (default) prefers nftables when `nft` works here, else iptables. */
  driver?: 'auto' | DriverName;
  /** `--ip-masq`: install the masquerade rules. Default false, as flanneld. */
  ipMasq?: boolean;
  /** `--iptables-forward-rules`: install the forward-accept rules. Default true. */
  forwardRules?: boolean;
  /** `--ip-masq-fully-random-disable`: never use fully-random source ports. Default false. */
  fullyRandomDisable?: boolean;
  /** `--iptables-resync`: seconds between checks of the rules. Default 5. */
  resyncSeconds?: number;
  /** Manage IPv4 rules and forwarding. Default true. */
  enableIPv4?: boolean;
  /** Manage IPv6 rules and forwarding. Default false. */
  enableIPv6?: boolean;
  /** Runs nft/iptables; default spawns them in this process's namespace. */
  runner?: Runner;
  /**
   * Reports changes to the ruleset while nftables is in use. Default: nft/changes.ts's for this
   * process's namespace when `runner` is the default one, else none (every resync polls); a test
   * with a runner bound to another namespace passes `nftChanges(<that namespace's path>)`.
   */
  watch?: RulesetWatcher;
  /** Reads and sets sysctls; default /proc/sys of this process's namespace. */
  sysctl?: Sysctl;
  log: Logger;
  /** Waits between resyncs (injectable for tests); default a timer. */
  delay?: (ms: number, signal: AbortSignal) => Promise<void>;
}

/** What {@link TrafficRules.prepare} found: the driver, why, and whether it can randomise ports fully. */
interface Prepared {
  driver: Driver;
  why: string;
  fullyRandom: boolean;
}

function describe(n: TrafficNetworks | undefined): string {
  if (!n) return 'none';
  const parts: string[] = [];
  if (n.network) parts.push(`network=${formatCIDR(n.network)}`);
  if (n.subnet) parts.push(`subnet=${formatCIDR(n.subnet)}`);
  if (n.ipv6Network) parts.push(`ipv6Network=${formatCIDR(n.ipv6Network)}`);
  if (n.ipv6Subnet) parts.push(`ipv6Subnet=${formatCIDR(n.ipv6Subnet)}`);
  return parts.join(' ') || 'none';
}

export class TrafficRules {
  readonly #opts: TrafficRulesOptions;
  readonly #log: Logger;
  readonly #drivers: Record<DriverName, Driver>;
  /** Watches the nftables ruleset for the nftables driver's checks (undefined: every check is full). */
  readonly #watcher: RulesetWatcher | undefined;
  readonly #iptables: IptablesDriver;
  #driver: Driver | undefined;
  #want: WantedRules | undefined;
  /** Whether the driver not chosen works here (its leftovers are then looked for at each resync). */
  #otherWorks = false;
  #loop: AbortController | undefined;
  #loopDone: Promise<void> | undefined;
  /** A {@link prepare} not yet taken by {@link start}. */
  #prepared: Promise<Prepared> | undefined;

  constructor(opts: TrafficRulesOptions) {
    this.#opts = opts;
    this.#log = opts.log.child({ component: 'traffic-rules' });
    const run = opts.runner ?? execRunner();
    this.#watcher = opts.watch ?? (opts.runner ? undefined : nftChanges());
    this.#iptables = new IptablesDriver(run);
    this.#drivers = { nftables: new NftablesDriver(run, this.#watcher?.quiet), iptables: this.#iptables };
  }

  /** The driver in use after {@link start}. */
  get driver(): DriverName | undefined {
    return this.#driver?.name;
  }

  /**
   * What {@link start} does before it knows the networks: chooses the driver, switches forwarding
   * on and sees whether the other driver works. Call it as soon as the configuration is known, so
   * the nft/iptables processes run while the lease is being acquired; the next {@link start} takes
   * its result (or its error) instead of doing the same again.
   */
  prepare(): void {
    const p = this.#doPrepare();
    // Awaited by start(); until then a failure must not count as unhandled.
    p.catch(() => {});
    this.#prepared = p;
  }

  async #doPrepare(): Promise<Prepared> {
    const { driver, why } = await this.#choose();
    const [fullyRandom, forwarding] = await Promise.all([
      // Fully random ports are a property of the masquerade rules: without --ip-masq, no probe.
      this.#opts.fullyRandomDisable || !this.#opts.ipMasq ? false : driver.fullyRandomSupported(),
      this.#ensureForwarding(),
      this.#checkBridgeNetfilter(),
      this.#probeOther(driver),
    ]);
    for (const was of forwarding) this.#log.info('switched forwarding on', was);
    return { driver, why, fullyRandom };
  }

  /**
   * Chooses the driver, switches forwarding on (both of which a {@link prepare} call may have done
   * already), installs the rules for `current`, removes the other driver's rules and resolves; then
   * resyncs every `resyncSeconds` until `signal` aborts or {@link stop} is called.
   * `previous` (the old subnet.env's values) is only logged: the apply replaces Weft's chains or
   * table whole, so an old network's rules go with it.
   */
  async start(current: TrafficNetworks, opts: { previous?: TrafficNetworks; signal?: AbortSignal } = {}): Promise<void> {
    // A resync of the old set must not run alongside (or after) this apply.
    await this.stop();
    const v4 = this.#opts.enableIPv4 ?? true;
    const v6 = this.#opts.enableIPv6 ?? false;
    const nets: TrafficNetworks = {};
    if (v4 && current.network) nets.network = current.network;
    if (v4 && current.subnet) nets.subnet = current.subnet;
    if (v6 && current.ipv6Network) nets.ipv6Network = current.ipv6Network;
    if (v6 && current.ipv6Subnet) nets.ipv6Subnet = current.ipv6Subnet;

    const prepared = this.#prepared ?? this.#doPrepare();
    this.#prepared = undefined;
    const { driver, why, fullyRandom } = await prepared;
    const want = wantedRules(nets, { ipMasq: this.#opts.ipMasq ?? false, forwardRules: this.#opts.forwardRules ?? true, fullyRandom });

    const prev = describe(opts.previous);
    if (opts.previous && prev !== describe(nets)) {
      this.#log.info('network or subnet changed; recycling traffic rules', { previous: prev, current: describe(nets) });
    }
    await driver.apply(want);
    this.#driver = driver;
    this.#want = want;
    await this.#removeOther(driver);
    this.#log.info(`traffic rules installed with ${driver.name}`, {
      driver: driver.name,
      why,
      fullyRandom,
      ipMasq: !!(want.v4?.masq ?? want.v6?.masq),
      forward: !!(want.v4?.forward ?? want.v6?.forward),
      networks: describe(nets),
    });

    this.#stopLoop();
    const ctl = new AbortController();
    this.#loop = ctl;
    const signal = opts.signal ? AbortSignal.any([opts.signal, ctl.signal]) : ctl.signal;
    this.#loopDone = this.#resyncLoop(signal);
  }

  /**
   * One resync: switches forwarding back on if something switched it off, restores the wanted set
   * if the node differs from it and removes the other driver's rules if present. Returns what
   * differed (empty when nothing did).
   */
  async resync(): Promise<string[]> {
    const found = await this.#resync();
    this.lastCheck = { at: new Date(), drift: found };
    return found;
  }

  /** The last {@link resync}: when, and what differed (weftd's admin socket). */
  lastCheck: { at: Date; drift: string[] } | undefined;

  async #resync(): Promise<string[]> {
    const driver = this.#driver;
    const want = this.#want;
    if (!driver || !want) return [];
    const forwarding = await this.#checkForwarding();
    const drift = await driver.drift(want);
    if (drift.length > 0) {
      await driver.apply(want);
      this.#log.warn('traffic rules drifted; restored', { driver: driver.name, drift: drift.join('; ') });
    }
    const other = this.#other(driver);
    if (this.#otherWorks && (await other.present())) {
      await other.remove();
      drift.push(`${other.name} rules present`);
      this.#log.warn(`removed ${other.name} traffic rules left beside ${driver.name}`, { driver: driver.name });
    }
    return [...forwarding, ...drift];
  }

  /**
   * Switches forwarding back on if something switched it off; returns what it changed. Never
   * throws: forwarding that cannot be switched back on must not keep the rules from being restored.
   */
  async #checkForwarding(): Promise<string[]> {
    return this.#ensureForwarding().then(
      (changed) => changed.map(({ sysctl, was }) => {
        this.#log.warn('forwarding was switched off; switched it back on', { sysctl, was });
        return `${sysctl}=${was}`;
      }),
      (e: unknown) => {
        this.#log.error('forwarding is off and could not be switched back on', { err: e });
        return [];
      },
    );
  }

  /** Ends the resync loop; the rules stay. Resolves when the loop has ended. */
  async stop(): Promise<void> {
    const done = this.#loopDone;
    this.#stopLoop();
    await done;
  }

  /** Ends the loop and removes the rules of both drivers (Weft's and flanneld's); idempotent. */
  async cleanup(): Promise<void> {
    await this.stop();
    for (const d of [this.#drivers.nftables, this.#drivers.iptables]) {
      if ((await d.unavailable()) === undefined) await d.remove();
    }
    this.#driver = undefined;
    this.#want = undefined;
    this.#log.info('traffic rules removed');
  }

  #stopLoop(): void {
    this.#loop?.abort();
    this.#loop = undefined;
    this.#loopDone = undefined;
  }

  async #resyncLoop(signal: AbortSignal): Promise<void> {
    const watcher = this.#driver?.name === 'nftables' ? this.#watcher : undefined;
    await runWatchedChecks({
      periodMs: (this.#opts.resyncSeconds ?? 5) * 1000, fullEveryMs: WATCHED_RESYNC_MS, what: 'the traffic rules', log: this.#log,
      ...(watcher ? { watcher } : {}), ...(this.#opts.delay ? { delay: this.#opts.delay } : {}),
    }, signal, async (full) => {
      if (full) await this.resync();
      else await this.#checkForwarding();
    });
  }

  /**
   * flanneld (iptables mode) exits when br_netfilter is not loaded. Pod traffic between nodes is
   * routed and does not need it, but kube-proxy's rules then miss traffic between pods on one
   * bridge (a Service backed by a pod on the same node): say so, and go on.
   */
  async #checkBridgeNetfilter(): Promise<void> {
    const sysctl = this.#opts.sysctl ?? procSysctl;
    for (const family of this.#families()) {
      const key = `net.bridge.bridge-nf-call-${family === 4 ? 'iptables' : 'ip6tables'}`;
      const value = await sysctl.read(key).catch(() => undefined);
      if (value === '1') continue;
      this.#log.warn(value === undefined
        ? 'br_netfilter is not loaded: Services reached from a pod on the same node as their backend may fail (modprobe br_netfilter)'
        : `${key} is ${value}: Services reached from a pod on the same node as their backend may fail`, { sysctl: key });
    }
  }

  #forwardingKeys(): string[] {
    return this.#families().map((f) => (f === 4 ? 'net.ipv4.ip_forward' : 'net.ipv6.conf.all.forwarding'));
  }

  /**
   * Switches forwarding on where it is off (pods are cut off from other nodes without it); returns
   * what it changed. Read first and written only when off, so a read-only /proc/sys (a container
   * that is not privileged) is fine as long as the host has forwarding on.
   */
  async #ensureForwarding(): Promise<{ sysctl: string; was: string }[]> {
    const sysctl = this.#opts.sysctl ?? procSysctl;
    const changed: { sysctl: string; was: string }[] = [];
    for (const key of this.#forwardingKeys()) {
      const was = await sysctl.read(key);
      if (was === '1') continue;
      try {
        await sysctl.write(key, '1');
      } catch (e) {
        throw new WeftError(
          'EFORWARDING',
          `${key} is ${was} and could not be set to 1 (${(e as Error).message}): pods cannot reach other nodes; ` +
            'set it on the host or give weftd a writable /proc/sys',
          { cause: e },
        );
      }
      changed.push({ sysctl: key, was });
    }
    return changed;
  }

  #families(): Family[] {
    return [...((this.#opts.enableIPv4 ?? true) ? [4 as const] : []), ...(this.#opts.enableIPv6 ? [6 as const] : [])];
  }

  #other(d: Driver): Driver {
    return d.name === 'nftables' ? this.#drivers.iptables : this.#drivers.nftables;
  }

  /** Sees whether the driver not chosen works here, so that its rules can be looked for. */
  async #probeOther(driver: Driver): Promise<void> {
    this.#otherWorks = (await this.#other(driver).unavailable()) === undefined;
  }

  /** Removes the other driver's rules (Weft's or flanneld's) when present: once `driver`'s are in. */
  async #removeOther(driver: Driver): Promise<void> {
    const other = this.#other(driver);
    if (!this.#otherWorks || !(await other.present())) return;
    await other.remove();
    this.#log.info(`removed ${other.name} traffic rules (Weft's or flanneld's) after installing ${driver.name}`);
  }

  async #choose(): Promise<{ driver: Driver; why: string }> {
    const pref = this.#opts.driver ?? 'auto';
    if (pref !== 'auto') {
      const d = this.#drivers[pref];
      const no = await d.unavailable();
      if (no !== undefined) throw new ConfigError('--traffic-rules', `${pref} does not work here: ${no}`);
      return { driver: d, why: 'configured' };
    }
    const [noNft, noIpt] = await Promise.all([this.#drivers.nftables.unavailable(), this.#drivers.iptables.unavailable()]);
    if (noNft === undefined && noIpt === undefined && (this.#opts.forwardRules ?? true)) {
      for (const family of this.#families()) {
        if (await this.#iptables.forwardDrops(family)) {
          return {
            driver: this.#drivers.iptables,
            why: `auto: the IPv${family} iptables FORWARD policy is DROP, which only FLANNEL-FWD's accepts can let pod traffic through`,
          };
        }
      }
    }
    if (noNft === undefined) return { driver: this.#drivers.nftables, why: 'auto: nft works here' };
    if (noIpt === undefined) return { driver: this.#drivers.iptables, why: `auto: nftables unavailable (${noNft})` };
    throw new ConfigError('--traffic-rules', `neither nftables (${noNft}) nor iptables (${noIpt}) works here`);
  }
}
