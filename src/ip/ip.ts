/**
 * IPv4 and IPv6 addresses and CIDRs as immutable values. Both families hold their address as a
 * bigint (IPv4 in the low 32 bits), so one set of arithmetic serves both. Text follows Go's
 * net package, which flannel's wire formats come from: dotted quads without leading zeros,
 * RFC 5952 IPv6 (lower case, the longest run of two or more zero groups as `::`, IPv4-mapped
 * addresses as `::ffff:a.b.c.d`), and CIDRs
 * with host bits masked as net.ParseCIDR does (`10.244.1.1/24` is `10.244.1.0/24`).
 */
import { ConfigError } from '../errors.ts';

export type Family = 4 | 6;

export interface IP {
  readonly family: Family;
  readonly value: bigint;
}

export interface CIDR {
  /** The network address (host bits zero). */
  readonly ip: IP;
  readonly prefix: number;
}

export function bits(family: Family): number {
  return family === 4 ? 32 : 128;
}

/**
 * Dotted-quad text as Go's net.ParseIP reads it: four decimal octets of at most three digits, no
 * leading zeros (they would be octal elsewhere), nothing else. Read character by character into
 * a number, made a bigint once: it runs for every address of every lease.
 */
function v4(text: string): bigint | undefined {
  let value = 0;
  let octet = 0;
  let digits = 0;
  let dots = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 46) {
      if (digits === 0 || ++dots > 3) return undefined;
      value = value * 256 + octet;
      octet = 0;
      digits = 0;
    } else if (c >= 48 && c <= 57) {
      if (digits > 0 && octet === 0) return undefined;
      octet = octet * 10 + (c - 48);
      if (++digits > 3 || octet > 255) return undefined;
    } else {
      return undefined;
    }
  }
  if (dots !== 3 || digits === 0) return undefined;
  return BigInt(value * 256 + octet);
}

function v6(text: string): bigint | undefined {
  if (!/^[0-9a-fA-F:.]+$/.test(text)) return undefined;
  const halves = text.split('::');
  if (halves.length > 2) return undefined;
  const groups = (s: string): bigint[] | undefined => {
    if (s === '') return [];
    const out: bigint[] = [];
    const parts = s.split(':');
    for (let i = 0; i < parts.length; i++) {
      const p = parts[i]!;
      if (i === parts.length - 1 && p.includes('.')) {
        const embedded = v4(p);
        if (embedded === undefined) return undefined;
        out.push(embedded >> 16n, embedded & 0xffffn);
      } else if (/^[0-9a-fA-F]{1,4}$/.test(p)) {
        out.push(BigInt(`0x${p}`));
      } else {
        return undefined;
      }
    }
    return out;
  };
  const head = groups(halves[0]!);
  const tail = halves.length === 2 ? groups(halves[1]!) : [];
  if (!head || !tail) return undefined;
  const missing = 8 - head.length - tail.length;
  if (halves.length === 2 ? missing < 1 : missing !== 0) return undefined;
  let value = 0n;
  for (const g of [...head, ...Array<bigint>(halves.length === 2 ? missing : 0).fill(0n), ...tail]) value = (value << 16n) | g;
  return value;
}

/** Parses an address, or returns undefined. */
export function tryParseIP(text: string): IP | undefined {
  const a = v4(text);
  if (a !== undefined) return { family: 4, value: a };
  const b = text.includes(':') ? v6(text) : undefined;
  return b === undefined ? undefined : { family: 6, value: b };
}

/** Parses an address; `field` names the setting in the error. */
export function parseIP(text: string, field: string): IP {
  const ip = typeof text === 'string' ? tryParseIP(text) : undefined;
  if (!ip) throw new ConfigError(field, `not an IP address: ${JSON.stringify(text)}`);
  return ip;
}

/**
 * Text of an address. Built with join(), which makes one flat string: a template's pieces stay
 * linked as a tree of V8 cons strings once the text is 13 characters or more (~200 bytes more for
 * every held address like `198.18.100.200`).
 */
export function formatIP(ip: IP): string {
  if (ip.family === 4) {
    const v = Number(ip.value);
    return [v >>> 24, (v >>> 16) & 255, (v >>> 8) & 255, v & 255].join('.');
  }
  if (ip.value >> 32n === 0xffffn) return ['::ffff', formatIP({ family: 4, value: ip.value & 0xffffffffn })].join(':');
  const groups: number[] = [];
  for (let i = 7; i >= 0; i--) groups.push(Number((ip.value >> BigInt(i * 16)) & 0xffffn));
  // RFC 5952: compress the longest run of two or more zero groups, the first on ties.
  let bestStart = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = (g: number[]) => g.map((x) => x.toString(16)).join(':');
  if (bestStart < 0) return hex(groups);
  return [hex(groups.slice(0, bestStart)), hex(groups.slice(bestStart + bestLen))].join('::');
}

/** The network masks by family and prefix length, made once. */
const MASKS: Record<Family, bigint[]> = { 4: [], 6: [] };

function mask(family: Family, prefix: number): bigint {
  const known = MASKS[family][prefix];
  if (known !== undefined) return known;
  const n = BigInt(bits(family));
  return (MASKS[family][prefix] = ((1n << n) - 1n) ^ ((1n << (n - BigInt(prefix))) - 1n));
}

/** The CIDR of `ip`/`prefix` with host bits cleared. */
export function cidrOf(ip: IP, prefix: number): CIDR {
  return { ip: { family: ip.family, value: ip.value & mask(ip.family, prefix) }, prefix };
}

/** Parses `a.b.c.d/n` or `x::/n`, masking host bits; `field` names the setting in the error. */
export function parseCIDR(text: string, field: string): CIDR {
  const bad = () => new ConfigError(field, `not a CIDR: ${JSON.stringify(text)}`);
  if (typeof text !== 'string') throw bad();
  const slash = text.indexOf('/');
  if (slash < 0) throw bad();
  const ip = tryParseIP(text.slice(0, slash));
  const len = text.slice(slash + 1);
  if (!ip || !/^(0|[1-9]\d{0,2})$/.test(len) || Number(len) > bits(ip.family)) throw bad();
  return cidrOf(ip, Number(len));
}

/** Text of a CIDR, one flat string (see {@link formatIP}). */
export function formatCIDR(c: CIDR): string {
  return [formatIP(c.ip), c.prefix].join('/');
}

export function compareIP(a: IP, b: IP): number {
  if (a.family !== b.family) return a.family - b.family;
  return a.value < b.value ? -1 : a.value > b.value ? 1 : 0;
}

export function equalIP(a: IP, b: IP): boolean {
  return a.family === b.family && a.value === b.value;
}

export function equalCIDR(a: CIDR, b: CIDR): boolean {
  return a.prefix === b.prefix && equalIP(a.ip, b.ip);
}

/** Number of addresses in the CIDR. */
export function size(c: CIDR): bigint {
  return 1n << BigInt(bits(c.ip.family) - c.prefix);
}

/** The last address of the CIDR. */
export function lastIP(c: CIDR): IP {
  return { family: c.ip.family, value: c.ip.value + size(c) - 1n };
}

/** `ip` + `n`, or undefined past the end of the address space. */
export function addIP(ip: IP, n: bigint): IP | undefined {
  const value = ip.value + n;
  if (value < 0n || value >= 1n << BigInt(bits(ip.family))) return undefined;
  return { family: ip.family, value };
}

export function nextIP(ip: IP): IP | undefined {
  return addIP(ip, 1n);
}

/** The network address + 1, which flannel gives the bridge as gateway (FLANNEL_SUBNET). */
export function gatewayOf(c: CIDR): IP {
  return { family: c.ip.family, value: c.ip.value + 1n };
}

/** The subnet of the same size right after `c`, or undefined past the end. */
export function nextSubnet(c: CIDR): CIDR | undefined {
  const ip = addIP(c.ip, size(c));
  return ip ? { ip, prefix: c.prefix } : undefined;
}

export function contains(c: CIDR, ip: IP): boolean {
  return ip.family === c.ip.family && (ip.value & mask(c.ip.family, c.prefix)) === c.ip.value;
}

export function containsCIDR(outer: CIDR, inner: CIDR): boolean {
  return inner.prefix >= outer.prefix && contains(outer, inner.ip);
}

export function overlaps(a: CIDR, b: CIDR): boolean {
  return containsCIDR(a, b) || containsCIDR(b, a);
}

/** Subnets of length `prefix` from `min` to `max` inclusive, `min` aligned to `prefix`. */
export function* subnetsIn(min: IP, max: IP, prefix: number): Generator<CIDR> {
  for (let c: CIDR | undefined = cidrOf(min, prefix); c && compareIP(c.ip, max) <= 0; c = nextSubnet(c)) yield c;
}

/**
 * The first `n` subnets of length `prefix` in [min, max] that overlap none of `taken`. Walks the
 * range once against the taken set sorted by address, skipping each taken block whole, so a
 * large IPv6 range with thousands of leases costs O(taken log taken + n).
 */
export function firstFreeSubnets(min: IP, max: IP, prefix: number, taken: readonly CIDR[], n: number): CIDR[] {
  const blocks = taken
    .filter((t) => t.ip.family === min.family)
    .map((t) => ({ start: t.ip.value, end: lastIP(t).value }))
    .sort((a, b) => (a.start < b.start ? -1 : a.start > b.start ? 1 : 0));
  const free: CIDR[] = [];
  let i = 0;
  for (let c: CIDR | undefined = cidrOf(min, prefix); c && free.length < n && c.ip.value <= max.value; ) {
    const start = c.ip.value;
    const end = lastIP(c).value;
    while (i < blocks.length && blocks[i]!.end < start) i++;
    const block = blocks[i];
    if (block && block.start <= end) {
      // Overlaps: jump to the first aligned subnet after this block.
      const step = size(c);
      const after = block.end + 1n;
      const aligned = ((after + step - 1n) / step) * step;
      c = aligned < 1n << BigInt(bits(min.family)) ? { ip: { family: min.family, value: aligned }, prefix } : undefined;
      continue;
    }
    free.push(c);
    c = nextSubnet(c);
  }
  return free;
}
