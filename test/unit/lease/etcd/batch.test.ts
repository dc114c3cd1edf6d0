import assert from 'node:assert/strict';
import { test } from 'node:test';
import { watchBatch } from '../../../../src/lease/etcd/batch.ts';
import type { WatchEvent } from '../../../../src/lease/etcd/client.ts';

const put = (key: string, value: string): WatchEvent => ({ type: 'put', kv: { key, value, modRevision: '1', lease: '0' } });
const del = (key: string): WatchEvent => ({ type: 'delete', kv: { key, value: '', modRevision: '1', lease: '0' } });

test('the last event of each key wins: a put after a delete is a put, a delete after puts a removal', () => {
  const b = watchBatch([put('a', '1'), del('a'), put('a', '2'), put('b', '1'), put('b', '2'), del('b'), put('c', '3')]);
  assert.deepEqual([...b.puts], [['a', '2'], ['c', '3']]);
  assert.deepEqual(b.removals, ['b']);
  assert.equal(b.own, undefined);
});

test('our own key is taken out: deleted, overwritten with another value, or rewritten with ours (nothing to say)', () => {
  const own = { key: 'mine', value: 'v' };
  assert.deepEqual(watchBatch([put('mine', 'v'), del('mine')], own), { puts: new Map(), removals: [], own: { deleted: true } });
  assert.deepEqual(watchBatch([put('mine', 'x'), put('b', '1')], own), { puts: new Map([['b', '1']]), removals: [], own: { overwrittenWith: 'x' } });
  assert.deepEqual(watchBatch([del('mine'), put('mine', 'v')], own), { puts: new Map(), removals: [] });
});

test('no events, no change', () => {
  assert.deepEqual(watchBatch([]), { puts: new Map(), removals: [] });
});
