import assert from 'node:assert/strict';
import { test } from 'node:test';
import { decodePeerMessage, encodePeerMessage } from '../../../src/egress/peer-wire.ts';
import type { PeerMessage } from '../../../src/egress/peer-wire.ts';

test('peer wire: signed messages round-trip; another key, a changed byte or any other bytes are dropped', () => {
  const key = Buffer.from('0123456789abcdef0123');
  const messages: PeerMessage[] = [
    { type: 'ping', from: 'node-1', boot: 'b1', seq: 7, apiFresh: true },
    { type: 'ack', from: 'node-2', to: 'node-1', boot: 'b1', seq: 7 },
  ];
  for (const m of messages) {
    const datagram = encodePeerMessage(key, m);
    assert.deepEqual(decodePeerMessage(key, datagram), m);
    assert.equal(decodePeerMessage(Buffer.from('another key of 16+ bytes'), datagram), undefined);
    const changed = Buffer.from(datagram);
    changed[changed.length - 3]! ^= 1;
    assert.equal(decodePeerMessage(key, changed), undefined);
  }
  const signed = (v: unknown) => encodePeerMessage(key, v as PeerMessage);
  for (const v of [null, 1, { type: 'ping', from: 'a', boot: 'b', seq: 1 }, { type: 'ack', from: 'a', boot: 'b', seq: 1 }, { type: 'x' }]) {
    assert.equal(decodePeerMessage(key, signed(v)), undefined, JSON.stringify(v));
  }
});
