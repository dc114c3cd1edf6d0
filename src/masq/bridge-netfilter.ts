/**
 * br_netfilter's two sysctls, which make traffic bridged across cni0 (between two pods of one
 * node) pass the IP hooks and conntrack: network policy needs it to see that traffic, the Service
 * proxy to see the replies of a same-node endpoint, which would otherwise bypass the reverse
 * translation. One check, shared by both.
 */
import { ConfigError } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { Runner, Sysctl } from './runner.ts';

/** The sysctls (in the node's namespace) that must be 1 for bridged traffic to pass the IP hooks. */
export const BRIDGE_NF_SYSCTLS = ['net.bridge.bridge-nf-call-iptables', 'net.bridge.bridge-nf-call-ip6tables'] as const;

export interface BridgeNetfilterOptions {
  sysctl: Sysctl;
  /** Runs `modprobe br_netfilter` when the sysctls are absent. */
  run: Runner;
  log: Logger;
  /** The flag that needs them: the ConfigError's field. */
  flag: string;
  /** Who needs them, starting the log lines: `network policy`. */
  what: string;
  /** What goes wrong without them, a clause: `traffic between two pods of this node would pass unchecked`. */
  without: string;
}

/**
 * Sets the br_netfilter sysctls to 1 where they are not, loading the module first when they are
 * absent. With `starting`, what cannot be done is a ConfigError naming the sysctl and a change is
 * logged as info; later it is logged as an error, and a sysctl found switched off as a warning.
 * Idempotent: nothing is written or logged when both are 1.
 */
export async function ensureBridgeNetfilter(o: BridgeNetfilterOptions, starting: boolean): Promise<void> {
  const fail = (why: string, cause: unknown) => {
    if (starting) throw new ConfigError(o.flag, why, { cause });
    o.log.error(`${o.what}: ${why}`);
  };
  let modprobe: string | undefined;
  for (const key of BRIDGE_NF_SYSCTLS) {
    let value: string;
    try {
      value = await o.sysctl.read(key);
    } catch (first) {
      modprobe ??= await loadModule(o);
      try {
        value = await o.sysctl.read(key);
      } catch (e) {
        fail(`${key} cannot be read (${(first as Error).message}) and br_netfilter could not be loaded (modprobe br_netfilter: `
          + `${modprobe}): ${o.without}`, e);
        continue;
      }
    }
    if (value === '1') continue;
    try {
      await o.sysctl.write(key, '1');
    } catch (e) {
      fail(`${key} is ${value} and could not be set to 1 (${(e as Error).message}): ${o.without}; `
        + 'set it on the host or give weftd a writable /proc/sys', e);
      continue;
    }
    if (starting) o.log.info(`${o.what}: set ${key}=1 (was ${value}); otherwise ${o.without}`);
    else o.log.warn(`${o.what}: ${key} was switched to ${value}; set it back to 1`);
  }
}

/** Runs `modprobe br_netfilter`; what it said (`loaded` when it succeeded, logged). */
async function loadModule(o: BridgeNetfilterOptions): Promise<string> {
  const r = await o.run(['modprobe', 'br_netfilter']);
  if (r.code !== 0) return (r.stderr.trim() || `exit code ${r.code}`).split('\n')[0]!;
  o.log.info(`${o.what}: loaded the kernel module br_netfilter (its sysctls were absent)`);
  return 'loaded';
}
