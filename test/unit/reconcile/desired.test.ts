import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Operation } from '../../../src/netlink/specs.ts';
import { DesiredState, NEXTHOP_ID_BASE } from '../../../src/reconcile/desired.ts';
import { WEFT_RTPROT } from '../../../src/reconcile/state.ts';
import type { KernelState } from '../../../src/reconcile/state.ts';

const VX = 5;

function peer(n: number, mac = `6e:00:00:00:00:0${n}`, subnet = n): KernelState {
  return {
    routes: [{ family: 4, dst: `10.244.${subnet}.0/24`, gateway: `10.244.${subnet}.0`, linkIndex: VX, table: 254, protocol: WEFT_RTPROT, scope: 0, type: 1, metric: 0, onlink: true }],
    neighs: [{ family: 4, linkIndex: VX, ip: `10.244.${subnet}.0`, mac, state: 0x80 }],
    fdb: [{ linkIndex: VX, mac, dst: `198.51.100.${n}`, state: 0x80, flags: 2 }],
  };
}

const summary = (ops: Operation[]) => ops.map((o) => {
  if ('route' in o) return `${o.op} ${o.route.dst}`;
  if ('neigh' in o) return `${o.op} ${o.neigh.ip}${'mac' in o.neigh ? ` ${o.neigh.mac}` : ''}`;
  if ('fdb' in o) return `${o.op} ${o.fdb.mac} ${o.fdb.dst}`;
  return o.op;
});

test('a new owner: its entries replaced, L2 before the route', () => {
  const d = new DesiredState();
  assert.deepEqual(summary(d.set('a', peer(2))), ['neighReplace 10.244.2.0 6e:00:00:00:00:02', 'fdbReplace 6e:00:00:00:00:02 198.51.100.2', 'routeReplace 10.244.2.0/24']);
  assert.equal(d.all().routes.length, 1);
});

test('a changed owner: new entries written, entries it no longer wants deleted after', () => {
  const d = new DesiredState();
  d.set('a', peer(2));
  assert.deepEqual(summary(d.set('a', peer(2, '6e:00:00:00:00:99'))), [
    'neighReplace 10.244.2.0 6e:00:00:00:00:99', 'fdbReplace 6e:00:00:00:00:99 198.51.100.2', 'routeReplace 10.244.2.0/24',
    'fdbDel 6e:00:00:00:00:02 198.51.100.2',
  ]);
});

test('a removed owner: deletes, route first', () => {
  const d = new DesiredState();
  d.set('a', peer(2));
  d.set('b', peer(3));
  assert.deepEqual(summary(d.set('a', undefined)), ['routeDel 10.244.2.0/24', 'neighDel 10.244.2.0', 'fdbDel 6e:00:00:00:00:02 198.51.100.2']);
  assert.equal(d.size, 1);
  assert.deepEqual(d.all().routes.map((r) => r.dst), ['10.244.3.0/24']);
});

test('two owners of one key: the last set wins; when it leaves, the other one is written back, nothing deleted', () => {
  const d = new DesiredState();
  d.set('a', peer(2, '6e:00:00:00:00:0a', 9));
  d.set('b', peer(3, '6e:00:00:00:00:0b', 9));
  assert.deepEqual(d.all().neighs.map((n) => n.mac), ['6e:00:00:00:00:0b']);
  const ops = summary(d.set('b', undefined));
  assert.ok(ops.includes('neighReplace 10.244.9.0 6e:00:00:00:00:0a'), ops.join(', '));
  assert.ok(!ops.some((o) => o.startsWith('routeDel') || o.startsWith('neighDel')), ops.join(', '));
  assert.ok(ops.includes('fdbDel 6e:00:00:00:00:0b 198.51.100.3'), 'b\'s own FDB entry goes');
});

test('put() changes the desired state like set() without operations; later sets start from it', () => {
  const d = new DesiredState();
  d.put('a', peer(2, '6e:00:00:00:00:0a', 9));
  d.put('b', peer(3, '6e:00:00:00:00:0b', 9));
  d.put('c', peer(4));
  d.put('c', peer(4, '6e:00:00:00:00:44'));
  assert.deepEqual(d.all().neighs.map((n) => n.mac), ['6e:00:00:00:00:0b', '6e:00:00:00:00:44']);
  d.put('b', undefined);
  assert.deepEqual(d.all().neighs.map((n) => n.mac), ['6e:00:00:00:00:0a', '6e:00:00:00:00:44'], 'a wins its key back');
  assert.deepEqual(summary(d.set('c', undefined)), ['routeDel 10.244.4.0/24', 'neighDel 10.244.4.0', 'fdbDel 6e:00:00:00:00:44 198.51.100.4']);
  assert.equal(d.size, 1);
});

test('with nexthop objects: a gatewayed route goes through a nexthop of its own, written before it and deleted after it', () => {
  const d = new DesiredState();
  d.useNexthops([], WEFT_RTPROT);
  const ops = d.set('a', peer(2));
  const nh = ops.find((o) => o.op === 'nexthopReplace');
  const route = ops.find((o) => o.op === 'routeReplace');
  assert.ok(nh && nh.op === 'nexthopReplace' && route && route.op === 'routeReplace');
  assert.deepEqual(nh.nexthop, { id: NEXTHOP_ID_BASE, gateway: '10.244.2.0', linkIndex: VX, onlink: true, protocol: WEFT_RTPROT });
  assert.equal(route.route.nhid, NEXTHOP_ID_BASE);
  assert.equal(route.route.gateway, undefined, 'the route names no gateway of its own');
  assert.ok(ops.indexOf(nh) < ops.indexOf(route));
  assert.equal(d.nexthop(NEXTHOP_ID_BASE)?.gateway, '10.244.2.0');
  assert.deepEqual(d.set('a', undefined).map((o) => o.op), ['routeDel', 'nexthopDel', 'neighDel', 'fdbDel']);
  assert.equal(d.nexthop(NEXTHOP_ID_BASE), undefined);
});

test('nexthop ids: ours in the kernel adopted by next hop, others never handed out, a freed id not reused', () => {
  const d = new DesiredState();
  const base = NEXTHOP_ID_BASE;
  d.useNexthops([
    { id: base + 7, family: 4, gateway: '10.244.3.0', linkIndex: VX, onlink: true, protocol: WEFT_RTPROT },
    { id: base + 8, family: 4, gateway: '198.51.100.9', linkIndex: 2, onlink: false, protocol: 0 },
  ], WEFT_RTPROT);
  d.put('b', peer(3));
  assert.equal(d.all().routes[0]!.nhid, base + 7, 'adopted');
  d.put('c', peer(4));
  assert.equal(d.of('c')!.routes[0]!.nhid, base + 9, 'after the largest of ours, past the foreign one');
  d.put('c', undefined);
  d.put('c', peer(4));
  assert.equal(d.of('c')!.routes[0]!.nhid, base + 10, 'a released id is not handed out again');
  const blackhole: KernelState = { routes: [{ family: 4, dst: '10.244.1.0/24', table: 254, protocol: WEFT_RTPROT, scope: 0, type: 6, metric: 0xffffffff, onlink: false }], neighs: [], fdb: [] };
  d.put('own', blackhole);
  assert.equal(d.of('own')!.routes[0]!.nhid, undefined, 'a route without a gateway keeps its form');
  const late = new DesiredState();
  late.put('a', peer(2));
  assert.throws(() => late.useNexthops([], WEFT_RTPROT), /before the first/);
});
