import assert from 'node:assert/strict';
import { test } from 'node:test';
import { podFate } from '../../../src/cni/kube-pods.ts';
import type { PodObject } from '../../../src/cni/kube-pods.ts';

const STATEFUL_SET = { apiVersion: 'apps/v1', kind: 'StatefulSet', name: 'db', controller: true };

test('a Pod\'s fate for its parked fixed address: finished only when its sandbox and its name can never come back', () => {
  type Extra = { reason?: string; deleting?: boolean; owner?: object; node?: string };
  const pod = (phase: string | undefined, extra: Extra = {}): PodObject => ({
    metadata: {
      name: 'p', namespace: 'default',
      ...(extra.deleting ? { deletionTimestamp: '2024-01-01T00:00:00Z' } : {}),
      ...(extra.owner ? { ownerReferences: [extra.owner] } : {}),
    },
    spec: { nodeName: extra.node ?? 'node-a' },
    status: { ...(phase ? { phase } : {}), ...(extra.reason ? { reason: extra.reason } : {}) },
  });
  const cases: [string, PodObject | null, string][] = [
    ['absent', null, 'gone'],
    ['bound to another node', pod('Running', { node: 'node-b' }), 'gone'],
    ['not yet scheduled', { ...pod('Pending'), spec: {} }, 'live'],
    ['no status yet', pod(undefined), 'live'],
    ['pending', pod('Pending'), 'live'],
    ['running (restartPolicy Always or OnFailure restarts it in place)', pod('Running'), 'live'],
    ['a Job\'s completed pod', pod('Succeeded', { owner: { kind: 'Job', name: 'j', controller: true } }), 'finished'],
    ['failed', pod('Failed'), 'finished'],
    ['evicted', pod('Failed', { reason: 'Evicted' }), 'finished'],
    ['failed while being deleted (may be re-created under its name)', pod('Failed', { deleting: true }), 'live'],
    ['a StatefulSet\'s, evicted (re-created under its name)', pod('Failed', { reason: 'Evicted', owner: STATEFUL_SET }), 'live'],
    ['a StatefulSet\'s, not as its controller', pod('Succeeded', { owner: { ...STATEFUL_SET, controller: false } }), 'finished'],
    ['an unknown phase', pod('Unknown'), 'live'],
  ];
  for (const [what, object, fate] of cases) assert.equal(podFate(object, 'node-a'), fate, what);
});
