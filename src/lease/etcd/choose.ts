/**
 * Which subnet this node should hold (flannel's tryAcquireLease, reference §2), as a pure
 * decision over one listing of the registry, so every rule is testable without etcd:
 *
 * 1. a lease already carrying our public IPv4 address is ours again, if it still fits the
 *    configuration; one that no longer fits is deleted first;
 * 2. otherwise the subnet recorded in subnet.env by an earlier run, if it fits and nobody holds
 *    it (each family on its own, so a still-free IPv4 subnet is kept even if the IPv6 one went);
 * 3. otherwise a random pick among the first 100 free subnets of the range, so that nodes
 *    starting together rarely collide (a collision is a lost transaction: list and choose again).
 */
import { compareIP, containsCIDR, firstFreeSubnets, formatCIDR, overlaps } from '../../ip/ip.ts';
import type { CIDR, IP } from '../../ip/ip.ts';
import type { NetConfig } from '../../config/netconf.ts';

/** One key of the registry as listed. */
export interface RegistryEntry {
  key: string;
  subnet: CIDR;
  ipv6Subnet?: CIDR;
  /** Undefined when the value did not decode. */
  publicIP?: IP;
  modRevision: string;
}

export type Choice =
  | { kind: 'reuse'; entry: RegistryEntry; reason: string }
  | { kind: 'delete'; entry: RegistryEntry; reason: string }
  | { kind: 'create'; subnet: CIDR; ipv6Subnet?: CIDR; reason: string }
  | { kind: 'exhausted'; reason: string };

export interface ChooseInput {
  config: NetConfig;
  entries: readonly RegistryEntry[];
  publicIP?: IP;
  previous?: { subnet?: CIDR; ipv6Subnet?: CIDR };
  /** Uniform in [0, 1); Math.random by default. */
  random?: () => number;
}

/** How many free subnets the random pick chooses among. */
export const PICK_AMONG = 100;

function fits(c: CIDR | undefined, min: IP | undefined, max: IP | undefined, len: number): c is CIDR {
  return c !== undefined && min !== undefined && max !== undefined
    && c.ip.family === min.family && c.prefix === len
    && compareIP(c.ip, min) >= 0 && compareIP(c.ip, max) <= 0;
}

function fitsV4(cfg: NetConfig, c: CIDR | undefined): c is CIDR {
  return fits(c, cfg.subnetMin, cfg.subnetMax, cfg.subnetLen) && (cfg.network === undefined || containsCIDR(cfg.network, c));
}

function fitsV6(cfg: NetConfig, c: CIDR | undefined): c is CIDR {
  return fits(c, cfg.ipv6SubnetMin, cfg.ipv6SubnetMax, cfg.ipv6SubnetLen)
    && (cfg.ipv6Network === undefined || containsCIDR(cfg.ipv6Network, c));
}

/** Whether an existing lease matches the configuration: right ranges, and IPv6 exactly when enabled. */
export function compatible(cfg: NetConfig, e: Pick<RegistryEntry, 'subnet' | 'ipv6Subnet'>): boolean {
  if (!fitsV4(cfg, e.subnet)) return false;
  return cfg.enableIPv6 ? fitsV6(cfg, e.ipv6Subnet) : e.ipv6Subnet === undefined;
}

function free(c: CIDR, taken: readonly CIDR[]): boolean {
  return !taken.some((t) => overlaps(t, c));
}

function pickRandom(min: IP, max: IP, len: number, taken: readonly CIDR[], random: () => number): CIDR | undefined {
  const candidates = firstFreeSubnets(min, max, len, taken, PICK_AMONG);
  return candidates[Math.floor(random() * candidates.length)];
}

export function chooseLease(input: ChooseInput): Choice {
  const { config: cfg, entries } = input;
  const random = input.random ?? Math.random;
  const publicIP = input.publicIP;
  if (publicIP) {
    const mine = entries.find((e) => e.publicIP !== undefined && compareIP(e.publicIP, publicIP) === 0);
    if (mine) {
      return compatible(cfg, mine)
        ? { kind: 'reuse', entry: mine, reason: `lease ${mine.key} already carries our public IP` }
        : { kind: 'delete', entry: mine, reason: `lease ${mine.key} carries our public IP but does not fit the network configuration` };
    }
  }
  const reasons: string[] = [];
  const subnet = pickFamily(4, cfg, input.previous?.subnet, entries.map((e) => e.subnet), random, reasons);
  if (typeof subnet === 'string') return { kind: 'exhausted', reason: subnet };
  if (!cfg.enableIPv6) return { kind: 'create', subnet, reason: reasons.join('; ') };
  const taken6 = entries.flatMap((e) => (e.ipv6Subnet ? [e.ipv6Subnet] : []));
  const ipv6Subnet = pickFamily(6, cfg, input.previous?.ipv6Subnet, taken6, random, reasons);
  if (typeof ipv6Subnet === 'string') return { kind: 'exhausted', reason: ipv6Subnet };
  return { kind: 'create', subnet, ipv6Subnet, reason: reasons.join('; ') };
}

/** One family's subnet: the previous one if it fits and is free, else a random free one; a string says why none. */
function pickFamily(
  family: 4 | 6,
  cfg: NetConfig,
  previous: CIDR | undefined,
  taken: readonly CIDR[],
  random: () => number,
  reasons: string[],
): CIDR | string {
  const v4 = family === 4;
  if ((v4 ? fitsV4(cfg, previous) : fitsV6(cfg, previous)) && free(previous!, taken)) {
    reasons.push(`${formatCIDR(previous!)} from the subnet file is still free`);
    return previous!;
  }
  const [min, max, len, network] = v4
    ? [cfg.subnetMin!, cfg.subnetMax!, cfg.subnetLen, cfg.network!]
    : [cfg.ipv6SubnetMin!, cfg.ipv6SubnetMax!, cfg.ipv6SubnetLen, cfg.ipv6Network!];
  const picked = pickRandom(min, max, len, taken, random);
  const what = v4 ? '' : 'IPv6 ';
  if (!picked) {
    const field = v4 ? '' : 'IPv6';
    return (
      `out of ${what}subnets: all of ${formatCIDR(network)} in /${len} blocks between ${field}SubnetMin and ${field}SubnetMax ` +
      `are taken; leases held: ${taken.length}`
    );
  }
  reasons.push(`${formatCIDR(picked)} picked at random among the first ${PICK_AMONG} free ${what}subnets`);
  return picked;
}
