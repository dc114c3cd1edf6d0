/**
 * An EgressGateway's pool of egress IPs (EIPs). Each family's list holds addresses, ranges
 * `first-last` and CIDRs; the pool is indexed without expanding them (an IPv6 /64 is fine).
 * With both families the Nth IPv4 and the Nth IPv6 address form EIP N, so dual stack hands out
 * pairs and the longer list's tail is not used; with one family EIP N is its Nth address.
 */
import { compareIP, formatIP, lastIP, tryParseIP } from '../ip/ip.ts';
import type { Family, IP } from '../ip/ip.ts';

/** One EIP: its index in the pool and its address of each family the pool has. */
export interface Eip {
  index: bigint;
  ipv4?: string;
  ipv6?: string;
}

interface Range {
  first: bigint;
  last: bigint;
}

/** One family's addresses in the order given. */
class AddressList {
  readonly family: Family;
  readonly size: bigint;
  readonly #ranges: Range[];

  constructor(family: Family, ranges: Range[]) {
    this.family = family;
    this.#ranges = ranges;
    this.size = ranges.reduce((n, r) => n + r.last - r.first + 1n, 0n);
  }

  at(index: bigint): string {
    let i = index;
    for (const r of this.#ranges) {
      const n = r.last - r.first + 1n;
      if (i < n) return formatIP({ family: this.family, value: r.first + i });
      i -= n;
    }
    throw new RangeError(`EIP index ${index} is outside the pool`);
  }

  indexOf(ip: IP): bigint | undefined {
    let base = 0n;
    for (const r of this.#ranges) {
      if (ip.family === this.family && ip.value >= r.first && ip.value <= r.last) return base + ip.value - r.first;
      base += r.last - r.first + 1n;
    }
    return undefined;
  }
}

/** A parsed pool; build it with {@link parsePool}. */
export class EipPool {
  /** The number of EIPs (pairs, with both families). */
  readonly size: bigint;
  readonly #v4: AddressList | undefined;
  readonly #v6: AddressList | undefined;

  constructor(v4: AddressList | undefined, v6: AddressList | undefined) {
    this.#v4 = v4;
    this.#v6 = v6;
    const sizes = [v4?.size, v6?.size].filter((s): s is bigint => s !== undefined);
    this.size = sizes.length === 0 ? 0n : sizes.reduce((a, b) => (a < b ? a : b));
  }

  /** EIP `index` (0 ≤ index < size). */
  eip(index: bigint): Eip {
    if (index < 0n || index >= this.size) throw new RangeError(`EIP index ${index} is outside the pool`);
    return { index, ...(this.#v4 ? { ipv4: this.#v4.at(index) } : {}), ...(this.#v6 ? { ipv6: this.#v6.at(index) } : {}) };
  }

  /**
   * The EIP holding the given addresses (either may be absent), or why there is none: an address
   * outside the pool, or two addresses of different EIPs.
   */
  find(ipv4: string | undefined, ipv6: string | undefined): bigint | string {
    let found: bigint | undefined;
    for (const [text, list, family] of [[ipv4, this.#v4, 4], [ipv6, this.#v6, 6]] as const) {
      if (text === undefined) continue;
      const ip = tryParseIP(text);
      const i = ip && ip.family === family ? list?.indexOf(ip) : undefined;
      if (i === undefined || i >= this.size) return `${text} is not in the pool`;
      if (found !== undefined && found !== i) {
        return `${ipv4} and ${ipv6} are not one EIP (the pool pairs the Nth IPv4 with the Nth IPv6 address)`;
      }
      found = i;
    }
    if (found === undefined) return 'no address given';
    return found;
  }
}

/** Parses one entry: an address, `first-last` or a CIDR, of `family`; a message on error. */
function parseEntry(text: string, family: Family, field: string): Range | string {
  const bad = (why: string) => `${field}: ${JSON.stringify(text)} ${why}`;
  const ofFamily = (s: string): IP | string => {
    const ip = tryParseIP(s.trim());
    if (!ip) return bad('is not an address, a range first-last or a CIDR');
    return ip.family === family ? ip : bad(`is not IPv${family}`);
  };
  const dash = text.indexOf('-');
  const slash = text.indexOf('/');
  if (dash >= 0) {
    const first = ofFamily(text.slice(0, dash));
    const last = ofFamily(text.slice(dash + 1));
    if (typeof first === 'string') return first;
    if (typeof last === 'string') return last;
    if (compareIP(first, last) > 0) return bad('ends before it starts');
    return { first: first.value, last: last.value };
  }
  if (slash >= 0) {
    const ip = ofFamily(text.slice(0, slash));
    if (typeof ip === 'string') return ip;
    const prefix = text.slice(slash + 1);
    const max = family === 4 ? 32 : 128;
    if (!/^\d+$/.test(prefix) || Number(prefix) > max) return bad(`has a prefix length outside 0-${max}`);
    const bitsLeft = BigInt(max - Number(prefix));
    const network = (ip.value >> bitsLeft) << bitsLeft;
    if (network !== ip.value) return bad('has host bits set');
    return { first: network, last: lastIP({ ip, prefix: Number(prefix) }).value };
  }
  const ip = ofFamily(text);
  return typeof ip === 'string' ? ip : { first: ip.value, last: ip.value };
}

/**
 * Parses a pool's IPv4 and IPv6 entries; returns a message naming the bad entry instead of
 * throwing. Overlapping entries are refused (an address would be two EIPs).
 */
export function parsePool(pool: { ipv4?: readonly string[]; ipv6?: readonly string[] }, field = 'spec.eipPool'): EipPool | string {
  const lists: (AddressList | undefined)[] = [];
  for (const family of [4, 6] as const) {
    const entries = (family === 4 ? pool.ipv4 : pool.ipv6) ?? [];
    const ranges: Range[] = [];
    for (const [i, text] of entries.entries()) {
      const r = parseEntry(text, family, `${field}.ipv${family}[${i}]`);
      if (typeof r === 'string') return r;
      const clash = ranges.findIndex((o) => r.first <= o.last && o.first <= r.last);
      if (clash >= 0) return `${field}.ipv${family}[${i}]: ${JSON.stringify(text)} overlaps ${JSON.stringify(entries[clash])}`;
      ranges.push(r);
    }
    lists.push(ranges.length > 0 ? new AddressList(family, ranges) : undefined);
  }
  return new EipPool(lists[0], lists[1]);
}
