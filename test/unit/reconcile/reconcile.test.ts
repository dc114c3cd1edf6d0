import assert from 'node:assert/strict';
import { test } from 'node:test';
import { NetlinkError } from '../../../src/errors.ts';
import { failureCounts } from '../../../src/reconcile/reconcile.ts';

test('the failures of a pass are counted by operation and errno, for one log line', () => {
  const failures = [
    ...Array.from({ length: 3 }, (_, i) => new NetlinkError('replace neighbour', 'ENODEV', `10.244.${i}.0 dev #7`)),
    new NetlinkError('replace route', 'ENODEV', '10.244.1.0/24 dev #7'),
    new NetlinkError('replace neighbour', 'EINVAL', '10.244.9.0 dev #7'),
  ];
  assert.equal(failureCounts(failures), 'replace neighbour ENODEV ×3, replace route ENODEV ×1, replace neighbour EINVAL ×1');
  assert.equal(failureCounts([]), '');
});
