import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { ifbName, mayShape, parseBandwidth, parsePsched, shapingOf, tbfParams } from '../../../src/cni/bandwidth.ts';
import { CniError } from '../../../src/cni/errors.ts';

/** This kernel's /proc/net/psched: 1000 ns per µs, 64 ns per tick, hrtimer resolution. */
const PSCHED = '000003e8 00000040 000f4240 3b9aca00\n';
const TICK = 1000 / 64;

function refused(runtimeConfig: unknown, msg: string): void {
  assert.throws(() => parseBandwidth(runtimeConfig), (e: unknown) => {
    assert.ok(e instanceof CniError);
    assert.equal(e.cniCode, 999, 'the plugin answers every failure with code 999');
    assert.equal(e.message, msg);
    return true;
  });
}

test('no limits: absent, null, or all zero', () => {
  assert.equal(parseBandwidth(undefined), undefined);
  assert.equal(parseBandwidth({}), undefined);
  assert.equal(parseBandwidth({ portMappings: [] }), undefined);
  assert.equal(parseBandwidth({ bandwidth: null }), undefined);
  assert.equal(parseBandwidth({ bandwidth: { ingressRate: 0, ingressBurst: 0, egressRate: null } }), undefined);
});

test('limits are read as Go reads the plugin\'s struct: case-insensitive keys, null as zero', () => {
  assert.deepEqual(parseBandwidth({ Bandwidth: { IngressRate: 8000, ingressburst: 800, egressRate: null } }), {
    ingressRate: 8000, ingressBurst: 800, egressRate: 0, egressBurst: 0,
  });
});

test('the plugin\'s rules, with its messages', () => {
  refused({ bandwidth: { ingressRate: 1000 } }, 'if rate is set, burst must also be set');
  refused({ bandwidth: { egressBurst: 1000 } }, 'if burst is set, rate must also be set');
  refused({ bandwidth: { egressRate: 1, egressBurst: 8 * 0xffff_ffff } }, 'burst cannot be more than 4GB');
  assert.ok(parseBandwidth({ bandwidth: { egressRate: 1, egressBurst: 8 * 0xffff_ffff - 1 } }), 'the largest burst');
  const decode = 'failed to parse network configuration: json: cannot unmarshal';
  const field = 'Go struct field BandwidthEntry.runtimeConfig.bandwidth.ingressRate of type uint64';
  refused({ bandwidth: { ingressRate: -1, ingressBurst: 5 } }, `${decode} number -1 into ${field}`);
  refused({ bandwidth: { ingressRate: 1.5, ingressBurst: 5 } }, `${decode} number 1.5 into ${field}`);
  refused({ bandwidth: { ingressRate: '1', ingressBurst: 5 } }, `${decode} string into ${field}`);
  refused({ bandwidth: [] }, `${decode} array into Go struct field .runtimeConfig.bandwidth of type main.BandwidthEntry`);
});

test('mayShape: any non-zero field, whatever its value, so DEL cleans up after bad input too', () => {
  assert.equal(mayShape(undefined), false);
  assert.equal(mayShape({ bandwidth: { ingressRate: 0 } }), false);
  assert.equal(mayShape({ bandwidth: { ingressRate: 'x' } }), true);
  assert.equal(mayShape({ bandwidth: { egressBurst: 1 } }), true);
});

test('psched: ticks per microsecond as the plugin\'s netlink library computes them', () => {
  assert.equal(parsePsched(PSCHED), TICK);
  assert.equal(parsePsched('000003e8 00000040 3b9aca00 3b9aca00'), 1000, 'a 1 GHz clock: compatibility mode');
  assert.throws(() => parsePsched('garbage'), /\/proc\/net\/psched/);
});

test('tbf numbers: bytes by integer division, 25 ms of latency in the limit, the buffer in ticks', () => {
  // 10 Mbit/s, 1 Mbit burst: 1,250,000 B/s; 125,000 B take 100,000 µs = 1,562,500 ticks.
  assert.deepEqual(tbfParams(10_000_000, 1_000_000, TICK), { rate: 1_250_000, limit: 1_250_000 * 0.025 + 125_000, buffer: 1_562_500 });
  assert.equal(tbfParams(10_000_007, 1_000_007, TICK).rate, 1_250_000);
});

test('tbf numbers wrap at 32 bits as Go\'s uint32 conversions do (containerd\'s default burst of 2^32-1 bits)', () => {
  const { buffer, limit } = tbfParams(3_000_000, 0xffff_ffff, TICK);
  const micros = Math.trunc((Math.floor(0xffff_ffff / 8) * 1e6) / 375_000);
  assert.equal(buffer, Math.trunc(micros * TICK) % 2 ** 32);
  assert.ok(micros * TICK > 2 ** 32, 'the case overflows');
  assert.equal(limit, 375_000 * 0.025 + Math.floor(0xffff_ffff / 8));
});

test('the ifb name: bwp and sha512(network + container ID), 15 characters', () => {
  const name = ifbName('cbr0', 'abc123');
  assert.equal(name, `bwp${createHash('sha512').update('cbr0abc123').digest('hex').slice(0, 12)}`);
  assert.equal(name.length, 15);
  assert.equal(shapingOf('cbr0', 'abc123', { bandwidth: { egressRate: 8, egressBurst: 8 } })?.ifb, name);
  assert.equal(shapingOf('cbr0', 'abc123', {}), undefined);
});
