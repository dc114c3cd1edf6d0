import assert from 'node:assert/strict';
import { test } from 'node:test';
import { median, percentile } from '../../../bench/support/stats.ts';

test('the median is the middle sample, or the mean of the middle two', () => {
  assert.equal(median([3, 1, 2]), 2);
  assert.equal(median([4, 1, 3, 2]), 2.5);
  assert.equal(median([7]), 7);
  assert.throws(() => median([]));
});

test('a percentile is the nearest rank', () => {
  const hundred = Array.from({ length: 100 }, (_, i) => 100 - i);
  assert.equal(percentile(hundred, 99), 99);
  assert.equal(percentile(hundred, 100), 100);
  assert.equal(percentile(hundred, 50), 50);
  assert.equal(percentile([5, 1, 4, 2, 3], 99), 5);
  assert.equal(percentile([5, 1, 4, 2, 3], 1), 1);
});
