/**
 * The Service proxy's conntrack cleanup (issue #39 item 2) on a real kernel and the real
 * kube-apiserver: a UDP flow from one source port follows its Service's endpoint when the only
 * one is replaced (test/support/udp-stale.ts).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { needsRoot } from '../support/netns.ts';
import { udpStaleRun } from '../support/udp-stale.ts';

test('a UDP flow reusing its source port leaves a replaced endpoint once the change is applied', { skip: needsRoot }, async () => {
  const r = await udpStaleRun();
  const detail = `${JSON.stringify({ ...r, log: undefined })}\n${r.log}`;
  assert.equal(r.stale, 0, `packets sent after the change reached the removed endpoint: ${detail}`);
  assert.ok(r.onNew > 0, `the flow reached the new endpoint: ${detail}`);
  assert.equal(r.onNew, r.sentAfter, `every packet sent after the change reached the new endpoint: ${detail}`);
});
