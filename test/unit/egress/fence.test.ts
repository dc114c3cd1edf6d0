import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Claim, KERNEL_SLACK_MS } from '../../../src/egress/fence.ts';

test('claim: nothing may be held before a heartbeat renewal, nor after its window or a release', () => {
  let now = 10_000;
  const claim = new Claim(3000, () => now);
  assert.equal(claim.lifetimeS(), 0, 'no renewal yet');
  claim.renewed(now);
  // 3000 - 250 of slack: 2 whole seconds, which end before the controller can move the EIP.
  assert.equal(claim.lifetimeS(), 2);
  now += 1000;
  assert.equal(claim.lifetimeS(), 1);
  now += 1000;
  assert.equal(claim.lifetimeS(), 0, 'a lifetime of 1 s would outlast sent + liveness timeout with the kernel\'s slack');
  claim.renewed(now - 100);
  assert.equal(claim.lifetimeS(), 2);
  claim.renewed(now - 2000);
  assert.equal(claim.lifetimeS(), 2, 'an older renewal answered late changes nothing');
  claim.release();
  assert.equal(claim.lifetimeS(), 0);
});

test('claim: whatever the timing, an EIP given the lifetime is gone before the controller can move it', () => {
  for (const liveness of [2000, 3000, 10_000]) {
    for (let delay = 0; delay <= liveness; delay += 37) {
      const sent = 1000;
      const claim = new Claim(liveness, () => sent + delay);
      claim.renewed(sent);
      const s = claim.lifetimeS();
      if (s > 0) assert.ok(sent + delay + s * 1000 + KERNEL_SLACK_MS <= sent + liveness, `liveness ${liveness}, renewed ${delay} ms after sending`);
    }
  }
});
