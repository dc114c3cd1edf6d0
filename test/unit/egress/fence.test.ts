import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Claim, KERNEL_SLACK_MS, WRITE_MARGIN_MS } from '../../../src/egress/fence.ts';

test('claim: nothing may be held before a heartbeat renewal, nor after its deadline or a release', () => {
  let now = 10_000;
  const claim = new Claim(4000, () => now);
  assert.equal(claim.lifetimeS(), 0, 'no renewal yet');
  assert.equal(claim.holding(), false);
  assert.equal(claim.nextWrite(), undefined);
  claim.renewed(now);
  assert.equal(claim.deadline(), now + 4000 - KERNEL_SLACK_MS);
  assert.equal(claim.holding(), true);
  claim.renewed(now - 2000);
  assert.equal(claim.deadline(), now + 4000 - KERNEL_SLACK_MS, 'an older renewal answered late changes nothing');
  now = claim.deadline()!;
  assert.equal(claim.holding(), false);
  assert.equal(claim.lifetimeS(), 0);
  claim.renewed(now);
  claim.release();
  assert.equal(claim.holding(), false);
  assert.equal(claim.lifetimeS(), 0);
});

test('claim: a term is an unbroken span of holding: the first renewal starts one, and so does each after a lapse or a release', () => {
  let now = 10_000;
  const claim = new Claim(4000, () => now);
  assert.equal(claim.term, 0);
  claim.renewed(now);
  assert.equal(claim.term, 1);
  now += 1000;
  claim.renewed(now);
  claim.renewed(now - 500);
  assert.equal(claim.term, 1, 'renewals while holding, or older ones answered late, start none');
  now += 4000 - KERNEL_SLACK_MS;
  assert.equal(claim.holding(), false);
  claim.renewed(now - 100);
  assert.equal(claim.term, 2, 'the claim had lapsed');
  claim.release();
  claim.renewed(now);
  assert.equal(claim.term, 3, 'after a release');
});

test('claim: a write is planned whole seconds before the deadline, not floored from when the renewal was answered', () => {
  let now = 0;
  const claim = new Claim(3000, () => now);
  claim.renewed(0);
  const deadline = 3000 - KERNEL_SLACK_MS;
  // Answered 100 ms after it was sent: flooring what is left then would end the lifetime most of a second early.
  now = 100;
  const plan = claim.nextWrite()!;
  assert.ok(plan.at >= now, 'not in the past');
  assert.equal(plan.at + plan.lifetimeS * 1000, deadline - WRITE_MARGIN_MS);
  now = plan.at;
  assert.equal(claim.lifetimeS(), plan.lifetimeS, 'written then, it gets the planned seconds');
  // Less than a whole second left: nothing can be written until the next renewal.
  now = deadline - 900;
  assert.equal(claim.nextWrite(), undefined);
});

test('claim: whatever the timing, an EIP written with the lifetime is gone before the controller can move it', () => {
  for (const liveness of [2000, 3000, 5000, 10_000]) {
    for (let delay = 0; delay <= liveness; delay += 37) {
      let now = 1000 + delay;
      const claim = new Claim(liveness, () => now);
      claim.renewed(1000);
      for (const at of [now, claim.nextWrite()?.at]) {
        if (at === undefined) continue;
        now = at;
        const s = claim.lifetimeS();
        if (s > 0) {
          assert.ok(at + s * 1000 + KERNEL_SLACK_MS <= 1000 + liveness, `liveness ${liveness}, written ${at - 1000} ms after sending`);
        }
      }
    }
  }
});
