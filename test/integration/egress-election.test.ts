import assert from 'node:assert/strict';
import { test } from 'node:test';
import { forcedOverlap } from '../support/election-overlap.ts';

test('egress election: a leader paused with SIGSTOP past its deadline writes nothing once resumed, and its successor waits out the lease', async () => {
  const leaseMs = 1200;
  const r = await forcedOverlap({ leaseMs, deadlineMs: 800, retryMs: 200, pauseMs: 2000 });
  const firstB = r.writers.indexOf('b');
  assert.ok(firstB > 0 && r.writers.slice(0, firstB).every((w) => w === 'a'), r.writers.join(' '));
  assert.deepEqual(r.writers.slice(firstB).filter((w) => w !== 'b'), [], 'a wrote after b took over');
  assert.equal(r.overlapMs, 0);
  assert.ok(r.takeoverMs >= leaseMs, `b took over ${Math.round(r.takeoverMs)} ms after a's last renewal, before the lease duration`);
  assert.equal(r.aOut.split('\n').filter((l) => l === 'leading').length, 1, 'a did not lead again');
});

test('egress election: a successor whose own lease duration is shorter waits out the holder\'s advertised one (a rollout)', async () => {
  // The holder advertises 4 s and acts until 3 s after its last renewal; the successor's own
  // duration would let it take over after 1.2 s, while the holder may still act.
  const r = await forcedOverlap({ leaseMs: 4000, deadlineMs: 3000, retryMs: 200, pauseMs: 6000, b: { leaseMs: 1200, deadlineMs: 800 } });
  assert.ok(r.takeoverMs >= 4000, `b took over ${Math.round(r.takeoverMs)} ms after a's last renewal, before a's lease duration`);
  assert.equal(r.overlapMs, 0);
  assert.deepEqual(r.writers.slice(r.writers.indexOf('b')).filter((w) => w !== 'b'), [], 'a wrote after b took over');
});
