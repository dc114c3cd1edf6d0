/**
 * The hand-written protobuf codec of the etcd client: what it writes reads back, int64s of the
 * whole range survive (etcd lease IDs use all 63 bits), unknown fields of every wire type are
 * skipped, and a truncated message is an error rather than a silently short record.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { Reader, Writer, readKeyValue, readRangeResponse, readWatchResponse } from '../../../../src/lease/etcd/proto.ts';

test('varints of the whole int64 range round-trip, negative ones as ten bytes', () => {
  fc.assert(fc.property(fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }), (v) => {
    const r = new Reader(new Writer().int(1, v).int(2, 7).finish());
    const fields: [number, string][] = [];
    for (let f = r.next(); f; f = r.next()) fields.push([f[0], r.int64()]);
    assert.deepEqual(fields, v === 0n ? [[2, '7']] : [[1, v.toString()], [2, '7']]);
  }));
  assert.equal(new Writer().int(1, -1n).finish().length, 11);
});

test('a KeyValue reads back what was written, with UTF-8 text and fields it does not know skipped', () => {
  const kv = new Writer()
    .bytes(1, '/coreos.com/network/subnets/10.244.1.0-24')
    .int(2, 5).int(3, 9).int(4, 2)
    .bytes(5, '{"PublicIP":"198.51.100.1","note":"é"}')
    .int(6, '7587869876540000001')
    .bytes(99, Buffer.from([1, 2, 3]))
    .finish();
  // A fixed64 and a fixed32 field of a newer etcd, appended.
  const extra = Buffer.concat([kv, Buffer.from([(100 << 3 | 1) & 0x7f | 0x80, 100 >> 4, 1, 2, 3, 4, 5, 6, 7, 8]), Buffer.from([(101 << 3 | 5) & 0x7f | 0x80, 101 >> 4, 1, 2, 3, 4])]);
  assert.deepEqual(readKeyValue(new Reader(extra)), {
    key: '/coreos.com/network/subnets/10.244.1.0-24', value: '{"PublicIP":"198.51.100.1","note":"é"}', modRevision: '9', lease: '7587869876540000001',
  });
});

test('a range response: header revision, every kv, more', () => {
  const kv = (k: string) => new Writer().bytes(1, k).int(3, 4).bytes(5, 'v');
  const res = new Writer().bytes(1, new Writer().int(1, 77).int(3, 42)).bytes(2, kv('/a')).bytes(2, kv('/b')).int(3, true).finish();
  const r = readRangeResponse(new Reader(res));
  assert.equal(r.revision, '42');
  assert.deepEqual(r.kvs.map((k) => k.key), ['/a', '/b']);
  assert.equal(r.more, true);
});

test('a watch response: put and delete events, cancellation with the compacted revision', () => {
  const ev = (type: number, k: string) => new Writer().int(1, type).bytes(2, new Writer().bytes(1, k).int(3, 12));
  const events = readWatchResponse(new Reader(new Writer().bytes(1, new Writer().int(3, 12)).int(2, 0).bytes(11, ev(0, '/p')).bytes(11, ev(1, '/d')).finish()));
  assert.deepEqual(events.events.map((e) => [e.type, e.kv.key]), [['put', '/p'], ['delete', '/d']]);
  const cancelled = readWatchResponse(new Reader(new Writer().int(4, true).int(5, 30).bytes(6, 'mvcc: required revision has been compacted').finish()));
  assert.equal(cancelled.canceled, true);
  assert.equal(cancelled.compactRevision, '30');
  assert.equal(cancelled.cancelReason, 'mvcc: required revision has been compacted');
});

test('a truncated message is an error, wherever it is cut', () => {
  const whole = new Writer().bytes(1, '/coreos.com/network/subnets/10.244.1.0-24').int(3, 300).bytes(5, 'value').finish();
  for (let cut = 1; cut < whole.length; cut++) {
    const part = whole.subarray(0, cut);
    let threw = false;
    try {
      readKeyValue(new Reader(part));
    } catch (e) {
      threw = /truncated/.test((e as Error).message);
    }
    // Two cuts fall between fields (after the key's 43 bytes, after the revision's 3): the part
    // is then a valid shorter message.
    const boundary = cut === 43 || cut === 46;
    assert.equal(threw, !boundary, `cut at ${cut}`);
  }
});
