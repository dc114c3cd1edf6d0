import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseCIDR } from '../../../src/ip/ip.ts';
import { cidrRange, disjointBoxes, formatRange, merge, subtract } from '../../../src/policy/ranges.ts';
import type { Range } from '../../../src/policy/ranges.ts';

const r = (lo: number, hi: number): Range => [BigInt(lo), BigInt(hi)];

test('merge sorts and joins overlapping and adjacent ranges', () => {
  assert.deepEqual(merge([r(10, 20), r(1, 3), r(4, 5), r(15, 30), r(40, 40)]), [r(1, 5), r(10, 30), r(40, 40)]);
});

test('subtract cuts holes out, at the edges and inside', () => {
  assert.deepEqual(subtract([r(0, 100)], [r(0, 9), r(50, 59), r(95, 200)]), [r(10, 49), r(60, 94)]);
  assert.deepEqual(subtract([r(0, 10)], [r(0, 10)]), []);
});

test('formatRange writes one address, a prefix when the range is one, else a-b', () => {
  assert.equal(formatRange(4, cidrRange(parseCIDR('10.1.0.0/16', 'test'))), '10.1.0.0/16');
  assert.equal(formatRange(4, cidrRange(parseCIDR('10.1.2.3/32', 'test'))), '10.1.2.3');
  assert.equal(formatRange(4, [cidrRange(parseCIDR('10.0.0.1/32', 'test'))[0], cidrRange(parseCIDR('10.0.0.6/32', 'test'))[0]]), '10.0.0.1-10.0.0.6');
  assert.equal(formatRange(6, cidrRange(parseCIDR('fd00::/64', 'test'))), 'fd00::/64');
});

test('disjointBoxes: overlapping boxes become disjoint address ranges covering the same union', () => {
  const boxes: [Range, Range][] = [[r(0, 9), r(80, 80)], [r(5, 14), r(443, 443)], [r(15, 20), r(443, 443)]];
  assert.deepEqual(disjointBoxes(boxes), [[r(0, 4), [r(80, 80)]], [r(5, 9), [r(80, 80), r(443, 443)]], [r(10, 20), [r(443, 443)]]]);
  const covers = (addr: number, port: number, out: [Range, Range[]][]) => out.some(([a, ps]) => BigInt(addr) >= a[0] && BigInt(addr) <= a[1] && ps.some(([lo, hi]) => BigInt(port) >= lo && BigInt(port) <= hi));
  for (let addr = 0; addr <= 22; addr++) {
    for (const port of [80, 443, 8080]) {
      const want = boxes.some(([a, p]) => BigInt(addr) >= a[0] && BigInt(addr) <= a[1] && BigInt(port) >= p[0] && BigInt(port) <= p[1]);
      assert.equal(covers(addr, port, disjointBoxes(boxes)), want, `${addr} port ${port}`);
    }
  }
});
