import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatCIDR, parseCIDR, parseIP } from '../../../src/ip/ip.ts';
import type { Lease } from '../../../src/lease/lease.ts';
import { LeaseTable } from '../../../src/lease/table.ts';
import type { LeaseEvent } from '../../../src/lease/table.ts';

function lease(peer: string, subnet: string, publicIP = '198.51.100.2', mac = '6e:00:00:00:00:01'): Lease {
  return {
    peer,
    subnet: parseCIDR(subnet, 'subnet'),
    attrs: { publicIP: parseIP(publicIP, 'ip'), backendType: 'vxlan', backendData: { VNI: 1, VtepMAC: mac } },
  };
}

function summary(batch: readonly LeaseEvent[]): string[] {
  return batch.map((e) => `${e.type} ${e.lease.peer}${e.previous ? ' (replaces)' : ''}`).sort();
}

test('first snapshot: every lease added, table synced', () => {
  const t = new LeaseTable();
  assert.equal(t.synced, false);
  const batch = t.replaceAll([lease('a', '10.244.1.0/24'), lease('b', '10.244.2.0/24')]);
  assert.deepEqual(summary(batch), ['added a', 'added b']);
  assert.equal(t.synced, true);
  assert.equal(t.size, 2);
});

test('a relist equal to what is held yields no events and calls no listener', () => {
  const t = new LeaseTable();
  t.replaceAll([lease('a', '10.244.1.0/24')]);
  let calls = 0;
  t.subscribe(() => calls++);
  assert.deepEqual(t.replaceAll([lease('a', '10.244.1.0/24')]), []);
  assert.equal(calls, 0);
});

test('an empty first listing still tells the listeners (a node alone in its cluster); later empty ones do not', () => {
  const t = new LeaseTable();
  const batches: number[] = [];
  t.subscribe((b) => batches.push(b.length));
  t.replaceAll([]);
  assert.equal(t.synced, true);
  assert.deepEqual(batches, [0]);
  t.replaceAll([]);
  t.apply([]);
  assert.deepEqual(batches, [0]);
});

test('a relist diffs: gone peers removed with their last attrs, changed ones replaced', () => {
  const t = new LeaseTable();
  t.replaceAll([lease('a', '10.244.1.0/24'), lease('b', '10.244.2.0/24', '198.51.100.3')]);
  const seen: LeaseEvent[][] = [];
  t.subscribe((b) => seen.push([...b]));
  const batch = t.replaceAll([lease('a', '10.244.1.0/24', '198.51.100.2', '6e:00:00:00:00:09'), lease('c', '10.244.3.0/24')]);
  assert.deepEqual(summary(batch), ['added a (replaces)', 'added c', 'removed b']);
  const removed = batch.find((e) => e.type === 'removed')!;
  assert.equal(removed.lease.attrs.publicIP?.value, parseIP('198.51.100.3', 'ip').value);
  assert.equal(seen.length, 1);
  assert.deepEqual(t.leases().map((l) => l.peer).sort(), ['a', 'c']);
});

test('watch changes: a subnet change of the same peer is one added event carrying the previous lease', () => {
  const t = new LeaseTable();
  t.replaceAll([lease('node-1', '10.244.1.0/24')]);
  const [e, ...rest] = t.apply([lease('node-1', '10.244.7.0/24')]);
  assert.equal(rest.length, 0);
  assert.equal(e?.type, 'added');
  assert.equal(e?.previous?.subnet && formatCIDR(e.previous.subnet), '10.244.1.0/24');
});

test('removing an unknown peer or re-adding an identical lease is no event', () => {
  const t = new LeaseTable();
  t.replaceAll([lease('a', '10.244.1.0/24')]);
  assert.deepEqual(t.apply([lease('a', '10.244.1.0/24')], ['zzz']), []);
  assert.deepEqual(summary(t.apply([], ['a'])), ['removed a']);
  assert.equal(t.size, 0);
});

test('backend type compares case-insensitively; backend data by value', () => {
  const t = new LeaseTable();
  t.replaceAll([lease('a', '10.244.1.0/24')]);
  const same = lease('a', '10.244.1.0/24');
  same.attrs.backendType = 'VXLAN';
  same.attrs.backendData = { VNI: 1, VtepMAC: '6e:00:00:00:00:01' };
  assert.deepEqual(t.apply([same]), []);
});

test('an unsubscribed listener is not called', () => {
  const t = new LeaseTable();
  let calls = 0;
  const off = t.subscribe(() => calls++);
  t.apply([lease('a', '10.244.1.0/24')]);
  off();
  t.apply([lease('b', '10.244.2.0/24')]);
  assert.equal(calls, 1);
});

test('held(): the table\'s own lease for an equal one, the given lease for a changed or unknown peer', () => {
  const t = new LeaseTable();
  const a = lease('a', '10.244.1.0/24');
  t.replaceAll([a]);
  assert.equal(t.held(lease('a', '10.244.1.0/24')), a);
  const moved = lease('a', '10.244.9.0/24');
  assert.equal(t.held(moved), moved);
  const b = lease('b', '10.244.2.0/24');
  assert.equal(t.held(b), b);
});
