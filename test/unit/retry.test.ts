import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Backoff } from '../../src/retry.ts';

test('backoff has full jitter: each delay is drawn from [0, cap), the cap doubling up to the maximum', () => {
  const draws = [0, 0.5, 0.999, 0.25, 0.75, 0.5];
  const b = new Backoff(100, 1000, () => draws.shift()!);
  assert.deepEqual([b.next(), b.next(), b.next(), b.next(), b.next(), b.next()], [0, 100, 399, 200, 750, 500]);
  b.reset();
  assert.equal(new Backoff(100, 1000, () => 0.5).next(), 50);
});

test('nodes retrying after the same outage do not retry in lockstep', () => {
  // 1,000 nodes, each with its own random source, all failing at once: their third retry.
  const third = Array.from({ length: 1000 }, () => {
    const b = new Backoff(1000, 30_000);
    b.next();
    b.next();
    return b.next();
  });
  const distinct = new Set(third.map((ms) => Math.floor(ms / 100)));
  assert.ok(distinct.size >= 35, `third retries fall into ${distinct.size} of 40 100-ms slots`);
  assert.ok(third.every((ms) => ms >= 0 && ms < 4000));
});
