/**
 * Interval algebra for the policy sets (render.ts): inclusive ranges of addresses or ports,
 * merged, subtracted and cut into the disjoint boxes an nftables interval set of concatenations
 * requires, and their nft text. Pure.
 */
import { bits, formatIP, lastIP } from '../ip/ip.ts';
import type { CIDR, Family, IP } from '../ip/ip.ts';

/** An inclusive range of addresses of one family, or of ports. */
export type Range = readonly [bigint, bigint];


/** Sorts and merges overlapping or adjacent ranges. */
export function merge(ranges: Range[]): Range[] {
  const sorted = [...ranges].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  const out: [bigint, bigint][] = [];
  for (const [lo, hi] of sorted) {
    const last = out.at(-1);
    if (last && lo <= last[1] + 1n) last[1] = hi > last[1] ? hi : last[1];
    else out.push([lo, hi]);
  }
  return out;
}

/** `ranges` without the addresses of `holes` (all merged). */
export function subtract(ranges: Range[], holes: Range[]): Range[] {
  const out: Range[] = [];
  for (const [lo, hi] of merge(ranges)) {
    let start = lo;
    for (const [hlo, hhi] of merge(holes)) {
      if (hhi < start || hlo > hi) continue;
      if (hlo > start) out.push([start, hlo - 1n]);
      start = hhi + 1n;
    }
    if (start <= hi) out.push([start, hi]);
  }
  return out;
}

export const cidrRange = (c: CIDR): Range => [c.ip.value, lastIP(c).value];
export const ipRange = (ip: IP): Range => [ip.value, ip.value];

/** An address range as nft reads it: one address, a prefix when it is one, else `a-b`. */
export function formatRange(f: Family, [lo, hi]: Range): string {
  const ip = (value: bigint) => formatIP({ family: f, value });
  if (lo === hi) return ip(lo);
  const size = hi - lo + 1n;
  const hostBits = size.toString(2).length - 1;
  if (size === 1n << BigInt(hostBits) && lo % size === 0n) return `${ip(lo)}/${bits(f) - hostBits}`;
  return `${ip(lo)}-${ip(hi)}`;
}

export const formatPorts = ([lo, hi]: Range) => (lo === hi ? `${lo}` : `${lo}-${hi}`);

const samePorts = (a: readonly Range[], b: readonly Range[]) =>
  a.length === b.length && a.every((r, i) => r[0] === b[i]![0] && r[1] === b[i]![1]);

const compareRanges = (a: Range, b: Range) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0);

/**
 * The union of (address range × port range) boxes as disjoint address ranges, each with its
 * merged port ranges (neighbours with equal ports merged): elements of an interval set of
 * concatenations must not overlap. Boxes of one address range are taken together (policies of
 * one group mostly share their peers), then a sweep over the range boundaries.
 */
export function disjointBoxes(boxes: readonly (readonly [Range, Range])[]): [Range, Range[]][] {
  const sorted = [...boxes].sort((a, b) => compareRanges(a[0], b[0]));
  const byRange: [Range, Range[]][] = [];
  for (const [r, p] of sorted) {
    const last = byRange.at(-1);
    if (last && compareRanges(last[0], r) === 0) last[1].push(p);
    else byRange.push([r, [p]]);
  }
  const cuts = [...new Set(byRange.flatMap(([r]) => [r[0], r[1] + 1n]))].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const out: [Range, Range[]][] = [];
  let active: [Range, Range[]][] = [];
  let next = 0;
  for (let i = 0; i + 1 < cuts.length; i++) {
    const lo = cuts[i]!;
    const hi = cuts[i + 1]! - 1n;
    while (next < byRange.length && byRange[next]![0][0] <= lo) active.push(byRange[next++]!);
    active = active.filter(([r]) => r[1] >= lo);
    if (active.length === 0) continue;
    const ports = merge(active.flatMap(([, p]) => p));
    const last = out.at(-1);
    if (last && last[0][1] + 1n === lo && samePorts(last[1], ports)) last[0] = [last[0][0], hi];
    else out.push([[lo, hi], ports]);
  }
  return out;
}
