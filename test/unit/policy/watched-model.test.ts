import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseIP } from '../../../src/ip/ip.ts';
import { isInvalid, parsePod } from '../../../src/policy/model.ts';
import { modelPods } from '../../../src/policy/watched-model.ts';
import { podObject } from '../../support/netpol-cluster.ts';

test("a wired pod's addresses are added to its Pod's until its status lists them", () => {
  const pending = podObject('x/a') as { status: Record<string, unknown> };
  pending.status = { phase: 'Pending' };
  const pod = parsePod(pending);
  const other = parsePod(podObject('x/b'));
  const bad = parsePod({ metadata: { name: 'bad' } });
  assert.ok(!isInvalid(pod) && !isInvalid(other) && isInvalid(bad));
  const wired = { namespace: 'x', name: 'a', containerId: 'c1', ips: [parseIP('10.244.1.11', 'ip'), parseIP('fd00:10:244:1::11', 'ip')] };
  const [a, b, ...rest] = modelPods([pod, other, bad], [wired]);
  assert.deepEqual(a!.ips, wired.ips);
  assert.deepEqual(b, other, 'other pods as they are');
  assert.equal(rest.length, 0, 'invalid pods left out');
  const reported = parsePod(podObject('x/a'));
  assert.ok(!isInvalid(reported));
  assert.deepEqual(modelPods([reported], [wired])[0]!.ips, [parseIP('10.244.1.11', 'ip'), parseIP('fd00:10:244:1::11', 'ip')], 'an address the status lists is not added twice');
});
