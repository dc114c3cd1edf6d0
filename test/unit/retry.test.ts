import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Backoff, ReconnectPace, reconnectIntervalMs } from '../../src/retry.ts';

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

test('reconnection waits stay in [T/2, T) however many attempts failed: no growth with the outage', () => {
  const draws = [0, 0.999, 0.5, ...Array.from({ length: 100 }, () => 0.999)];
  const pace = new ReconnectPace(() => 3, () => draws.shift()!);
  assert.deepEqual([pace.next(), pace.next(), pace.next()], [500, 999, 750]);
  // The hundredth failure waits no longer than the first: after any outage, within T of the return.
  const later = Array.from({ length: 100 }, () => pace.next());
  assert.ok(later.every((ms) => ms === 999), `waits after 100 failures: ${[...new Set(later)].join(', ')}`);
});

test('T is 1 s up to 10,000 nodes, then grows so the cluster makes at most 10,000 attempts a second', () => {
  assert.deepEqual([0, 1, 1000, 10_000, 20_000, 50_000].map(reconnectIntervalMs), [1000, 1000, 1000, 1000, 2000, 5000]);
  let nodes = 3;
  const pace = new ReconnectPace(() => nodes, () => 0.5);
  assert.equal(pace.next(), 750);
  // The cluster's size is read at each wait: a table that grew slows the pace at once.
  nodes = 50_000;
  assert.equal(pace.next(), 3750);
  // At most one attempt every T/2: 50,000 nodes make fewer than 20,000 attempts a second, 13,333 on average.
  assert.ok(50_000 / (reconnectIntervalMs(50_000) / 2 / 1000) <= 20_000);
});
