/**
 * br_netfilter's two sysctls, which make traffic bridged across cni0 (between two pods of one
 * node) pass the IP hooks and conntrack: network policy needs it to see that traffic, the Service
 * proxy to see the replies of a same-node endpoint, which would otherwise bypass the reverse
 * translation. One check, shared by both.
 *
 * Setting them is the node's preparation (daemonset.yaml's privileged node-prep init container
 * loads the module and writes them); weftd's own container is unprivileged and its /proc/sys
 * read-only, so weftd sets them only where it can. Where it cannot, it degrades rather than stops:
 * a weftd exiting over them would leave the node without pod networking, and every pod without
 * its routes, for the sake of the traffic of two pods of one node. What is lost is said as an
 * error (code EBRNETFILTER, counted in weft_errors_total) when found and whenever it changes, and
 * `weftctl doctor` names it; what comes back is said once.
 */
import { WeftError } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { Runner, Sysctl } from './runner.ts';

/** The sysctls (in the node's namespace) that must be 1 for bridged traffic to pass the IP hooks. */
export const BRIDGE_NF_SYSCTLS = ['net.bridge.bridge-nf-call-iptables', 'net.bridge.bridge-nf-call-ip6tables'] as const;

export interface BridgeNetfilterOptions {
  sysctl: Sysctl;
  /** Runs `modprobe br_netfilter` when the sysctls are absent. */
  run: Runner;
  log: Logger;
  /** Who needs them, starting the log lines: `network policy`. */
  what: string;
  /** What goes wrong without them, a clause: `traffic between two pods of this node would pass unchecked`. */
  without: string;
}

export class BridgeNetfilter {
  readonly #o: BridgeNetfilterOptions;
  /** What was wrong at the last check; undefined when both sysctls were 1. */
  #problem: string | undefined;
  #checked = false;

  constructor(o: BridgeNetfilterOptions) {
    this.#o = o;
  }

  /** What is wrong now (both sysctls not at 1, and why they could not be set); undefined when nothing. */
  get problem(): string | undefined {
    return this.#problem;
  }

  /**
   * Sets the sysctls to 1 where they are not, loading the module first when they are absent (at
   * the first check only: a module that would not load will not load later either, and a spawn
   * every few seconds is what an idle weftd must not cost). Never throws.
   */
  async ensure(): Promise<void> {
    const o = this.#o;
    const first = !this.#checked;
    this.#checked = true;
    const problems: string[] = [];
    let modprobe: string | undefined;
    for (const key of BRIDGE_NF_SYSCTLS) {
      let value: string;
      try {
        value = await o.sysctl.read(key);
      } catch (absent) {
        if (first) modprobe ??= await this.#loadModule();
        try {
          value = await o.sysctl.read(key);
        } catch {
          const loading = modprobe === undefined ? ''
            : modprobe === 'loaded' ? ' even with br_netfilter loaded'
              : ` and br_netfilter could not be loaded (modprobe br_netfilter: ${modprobe})`;
          problems.push(`${key} cannot be read (${(absent as Error).message})${loading}`);
          continue;
        }
      }
      if (value === '1') continue;
      try {
        await o.sysctl.write(key, '1');
      } catch (e) {
        problems.push(`${key} is ${value} and could not be set to 1 (${(e as Error).message})`);
        continue;
      }
      if (first) o.log.info(`${o.what}: set ${key}=1 (was ${value}); otherwise ${o.without}`);
      else o.log.warn(`${o.what}: ${key} was switched to ${value}; set it back to 1`);
    }
    this.#report(problems.length > 0 ? problems.join('; ') : undefined);
  }

  #report(now: string | undefined): void {
    const o = this.#o;
    if (now !== undefined && now !== this.#problem) {
      const why = `${now}: ${o.without}; set it on the host (daemonset.yaml's node-prep init container does) `
        + 'or give weftd a writable /proc/sys';
      o.log.error(`${o.what}: degraded, the rest goes on`, { err: new WeftError('EBRNETFILTER', why) });
    } else if (now === undefined && this.#problem !== undefined) {
      o.log.info(`${o.what}: br_netfilter's calls are on again; no longer degraded`);
    }
    this.#problem = now;
  }

  /** Runs `modprobe br_netfilter`; what it said (`loaded` when it succeeded, logged). */
  async #loadModule(): Promise<string> {
    const o = this.#o;
    const r = await o.run(['modprobe', 'br_netfilter']);
    if (r.code !== 0) return (r.stderr.trim() || `exit code ${r.code}`).split('\n')[0]!;
    o.log.info(`${o.what}: loaded the kernel module br_netfilter (its sysctls were absent)`);
    return 'loaded';
  }
}
