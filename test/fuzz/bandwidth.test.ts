/**
 * runtimeConfig.bandwidth is the runtime's (the user's annotations): any JSON gives limits or the
 * plugin's code 999, never another error, and accepted limits give tbf numbers the kernel takes.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { parseBandwidth, tbfParams } from '../../src/cni/bandwidth.ts';
import { CniError } from '../../src/cni/errors.ts';

const RUNS = { numRuns: 400 };
const u32 = (x: number) => Number.isInteger(x) && x >= 0 && x < 2 ** 32;

test('runtimeConfig.bandwidth: any JSON → limits or code 999; limits → 32-bit tbf numbers', () => {
  const number = fc.oneof(fc.nat(), fc.integer(), fc.double(), fc.constant(0), fc.constant(2 ** 53), fc.nat(2 ** 40));
  const value = fc.oneof(number, fc.string(), fc.boolean(), fc.constant(null), fc.array(fc.nat(), { maxLength: 2 }), fc.constant({}));
  const fields = fc.record(
    { ingressRate: value, ingressBurst: value, egressRate: value, egressBurst: value },
    { requiredKeys: [] },
  );
  const runtimeConfig = fc.oneof(fc.record({ bandwidth: fc.oneof(fields, value) }), value, fc.constant(undefined));
  fc.assert(fc.property(runtimeConfig, (rc) => {
    let limits;
    try {
      limits = parseBandwidth(rc);
    } catch (e) {
      assert.ok(e instanceof CniError && e.cniCode === 999, String(e));
      return;
    }
    if (limits === undefined) return;
    for (const [rate, burst] of [[limits.ingressRate, limits.ingressBurst], [limits.egressRate, limits.egressBurst]] as const) {
      if (rate === 0) continue;
      const tbf = tbfParams(rate, burst, 15.625);
      assert.ok(u32(tbf.limit) && u32(tbf.buffer) && Number.isInteger(tbf.rate), JSON.stringify({ rate, burst, tbf }));
    }
  }), RUNS);
});
