/**
 * The extension backend (flannel's `extension`): the operator's commands are the data plane.
 * PreStartupCommand runs before the lease is taken and its output is published as the lease's
 * backend data (a JSON string); PostStartupCommand runs once the lease is known, with NETWORK,
 * SUBNET, IPV6SUBNET, PUBLIC_IP and PUBLIC_IPV6; SubnetAddCommand and SubnetRemoveCommand run for
 * each other node's lease as it comes and goes, with SUBNET and PUBLIC_IP, the node's backend
 * data on standard input (commands.ts runs them as flanneld does).
 *
 * What a command did is state outside the kernel's view, so the reconciler keeps it like
 * wireguard's peers (reconcile/side.ts): each lease plans the add it wants; a pass starts the adds
 * not yet done (or done for another lease of that node), the removes of nodes gone, and the
 * post-startup command until it succeeds. A command that fails is logged with its exit status
 * and retried at the next pass or poll; it never stops weftd. The pre-startup command must
 * succeed before anything is published: it is retried, with backoff, until it does.
 *
 * The commands run in the background, not inside the pass: at 1,000 leases a 100 ms command made
 * a pass of 100 s, during which no route was repaired. A node's commands run one after another,
 * so its add and a later remove never cross; {@link EXTENSION_CONCURRENCY} nodes' run at once.
 * Each command's outcome is logged as it ends.
 */
import type { ExtensionConfig } from '../../config/netconf.ts';
import { CommandError, ConfigError } from '../../errors.ts';
import { formatCIDR, formatIP, parseIP } from '../../ip/ip.ts';
import type { Lease, LeaseAttrs } from '../../lease/lease.ts';
import type { SideKind, SideReport } from '../../reconcile/side.ts';
import { Backoff, sleep } from '../../retry.ts';
import { WEFT_RTPROT } from '../../reconcile/state.ts';
import type { Ownership } from '../../reconcile/state.ts';
import type { Backend, BackendDeps } from '../backend.ts';
import type { Plan, SideEntry } from '../plan.ts';
import { OUTPUT_KEEP_BYTES, describeOutput, runCommand } from './commands.ts';
import { Lanes } from './lanes.ts';
import type { ExtensionSubnet } from './subnet.ts';

/** How often failed commands are retried between lease events. */
export const EXTENSION_POLL_MS = 5_000;
/** Nodes whose commands run at once; one node's run one after another. */
export const EXTENSION_CONCURRENCY = 8;
const PRE_STARTUP_BACKOFF_MS = { initial: 1_000, max: 30_000 };

const same = (a: ExtensionSubnet, b: ExtensionSubnet) => a.subnet === b.subnet && a.publicIP === b.publicIP && a.data === b.data;

export class ExtensionBackend implements Backend {
  readonly type = 'extension';
  readonly #deps: BackendDeps;
  readonly #cfg: ExtensionConfig;
  /** The adds that succeeded, by node: what a remove runs with. */
  readonly #applied = new Map<string, ExtensionSubnet>();
  #own: Lease | undefined;
  #attrs: LeaseAttrs | undefined;
  /** The own lease the post-startup command last succeeded for. */
  #postDoneFor: string | undefined;
  /** The post-startup command while it runs. */
  #post: Promise<void> | undefined;
  /** Each node's subnet as the last pass wanted it: what its commands bring it to. */
  #want = new Map<string, ExtensionSubnet>();
  readonly #lanes = new Lanes(EXTENSION_CONCURRENCY, (peer) => this.#converge(peer));

  constructor(deps: BackendDeps) {
    if (deps.config.backend.type !== 'extension') {
      throw new ConfigError('Backend.Type', `expected extension, got ${deps.config.backend.type}`);
    }
    this.#deps = deps;
    this.#cfg = deps.config.backend;
  }

  get mtu(): number {
    return this.#deps.ext.mtu;
  }

  async setup(): Promise<LeaseAttrs> {
    const { ext } = this.#deps;
    // flannel publishes the interface's own addresses here, not --public-ip.
    const attrs: LeaseAttrs = { backendType: 'extension' };
    if (ext.ifaceAddr) attrs.publicIP = parseIP(ext.ifaceAddr, '--iface');
    if (ext.ifaceAddr6) attrs.publicIPv6 = parseIP(ext.ifaceAddr6, '--iface');
    if (this.#cfg.preStartupCommand) attrs.backendData = await this.#preStartup();
    else this.#deps.log.info('no PreStartupCommand: publishing no backend data');
    this.#attrs = attrs;
    return attrs;
  }

  async #preStartup(): Promise<string> {
    const { log, signal } = this.#deps;
    const backoff = new Backoff(PRE_STARTUP_BACKOFF_MS.initial, PRE_STARTUP_BACKOFF_MS.max);
    for (;;) {
      try {
        const command = this.#cfg.preStartupCommand;
        const output = await runCommand('PreStartupCommand', command, {}, '', signal ? { signal } : {});
        if (output.dropped > 0) {
          const why = `its output is over ${OUTPUT_KEEP_BYTES} bytes, too long for backend data`;
          throw new CommandError('PreStartupCommand', command, why, '');
        }
        log.info('ran PreStartupCommand', { output: output.text });
        return output.text;
      } catch (e) {
        const wait = backoff.next();
        log.error('PreStartupCommand failed; nothing is published until it succeeds', { err: e, retryInMs: wait });
        await sleep(wait, signal);
      }
    }
  }

  async configure(own: Lease): Promise<void> {
    this.#own = own;
  }

  ownership(): Ownership {
    return { protocol: WEFT_RTPROT, devices: [] };
  }

  async plan(_own: Lease, remote: Lease): Promise<Plan> {
    const empty = { routes: [], neighs: [], fdb: [] };
    if (remote.attrs.backendType.toLowerCase() !== 'extension') {
      const type = JSON.stringify(remote.attrs.backendType);
      return { state: empty, warnings: [`ignoring peer ${remote.peer}: backend type ${type}, this node runs extension`] };
    }
    const data = remote.attrs.backendData ?? '';
    if (typeof data !== 'string') {
      const why = 'its backend data is not a JSON string, as an extension node publishes';
      return { state: empty, warnings: [`ignoring peer ${remote.peer}: ${why}`] };
    }
    const entry: ExtensionSubnet = {
      peer: remote.peer,
      subnet: remote.subnet ? formatCIDR(remote.subnet) : '',
      publicIP: remote.attrs.publicIP ? formatIP(remote.attrs.publicIP) : '',
      data,
    };
    return { state: empty, warnings: [], side: [entry] };
  }

  drifted(): undefined {
    return undefined;
  }

  async repair(): Promise<void> {}

  sides(wanted: () => Iterable<readonly SideEntry[]>): SideKind[] {
    return [{ name: 'extension commands', pollMs: EXTENSION_POLL_MS, reconcile: async () => this.#reconcile(wanted()) }];
  }

  /** Resolves once no command runs or waits to run. */
  async settled(): Promise<void> {
    while (this.#post || this.#lanes.busy) {
      await this.#post;
      await this.#lanes.idle();
    }
  }

  /** Runs one command; its outcome is logged, a failure retried at the next pass or poll. */
  async #run(what: string, command: string, vars: Record<string, string>, stdin: string): Promise<boolean> {
    const { log, signal } = this.#deps;
    try {
      const output = await runCommand(what, command, vars, stdin, signal ? { signal } : {});
      log.info(`ran ${what}`, { command, ...(output.text ? { output: describeOutput(output) } : {}) });
      return true;
    } catch (e) {
      if (!signal?.aborted) log.warn(`${what} failed; the next pass or poll retries it`, { err: e });
      return false;
    }
  }

  /** Starts the commands that bring the node in line with `all`; they run in the background. */
  #reconcile(all: Iterable<readonly SideEntry[]>): SideReport {
    if (!this.#post) this.#post = this.#postStartup()?.finally(() => (this.#post = undefined));
    const want = new Map<string, ExtensionSubnet>();
    for (const list of all) for (const e of list) if ('subnet' in e && 'data' in e) want.set(e.peer, e);
    this.#want = want;
    for (const peer of new Set([...this.#applied.keys(), ...want.keys()])) {
      const done = this.#applied.get(peer);
      const next = want.get(peer);
      if (!(done && next && same(done, next))) this.#lanes.ask(peer);
    }
    return { ops: [], failures: [] };
  }

  /** The post-startup command, when it has not succeeded for the own lease as it is. */
  #postStartup(): Promise<void> | undefined {
    const own = this.#own;
    const cfg = this.#cfg;
    if (!own || !cfg.postStartupCommand) return undefined;
    const key = `${own.subnet ? formatCIDR(own.subnet) : ''} ${own.ipv6Subnet ? formatCIDR(own.ipv6Subnet) : ''}`;
    if (this.#postDoneFor === key) return undefined;
    const { config } = this.#deps;
    const attrs = this.#attrs;
    return this.#run('PostStartupCommand', cfg.postStartupCommand, {
      NETWORK: config.network ? formatCIDR(config.network) : '',
      SUBNET: own.subnet ? formatCIDR(own.subnet) : '',
      IPV6SUBNET: own.ipv6Subnet ? formatCIDR(own.ipv6Subnet) : '',
      PUBLIC_IP: attrs?.publicIP ? formatIP(attrs.publicIP) : '',
      PUBLIC_IPV6: attrs?.publicIPv6 ? formatIP(attrs.publicIPv6) : '',
    }, '').then((ok) => {
      if (ok) this.#postDoneFor = key;
    });
  }

  /**
   * Brings one node's commands in line with what is wanted now: the remove of what its add was
   * given when it left or its subnet changed, then the add; stops at a failure.
   */
  async #converge(peer: string): Promise<void> {
    const cfg = this.#cfg;
    const vars = (e: ExtensionSubnet) => ({ SUBNET: e.subnet, PUBLIC_IP: e.publicIP });
    for (;;) {
      const done = this.#applied.get(peer);
      const next = this.#want.get(peer);
      if (done && next?.subnet !== done.subnet) {
        if (cfg.subnetRemoveCommand && !(await this.#run('SubnetRemoveCommand', cfg.subnetRemoveCommand, vars(done), done.data))) return;
        this.#applied.delete(peer);
      } else if (next && !(done && same(done, next))) {
        if (cfg.subnetAddCommand && !(await this.#run('SubnetAddCommand', cfg.subnetAddCommand, vars(next), next.data))) return;
        this.#applied.set(peer, next);
      } else {
        return;
      }
    }
  }
}
