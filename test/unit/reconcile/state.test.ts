import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Fdb, Neigh, Route } from '../../../src/netlink/records.ts';
import { diff, ours, WEFT_RTPROT } from '../../../src/reconcile/state.ts';
import type { KernelState } from '../../../src/reconcile/state.ts';

const VX = 5;

function peer(n: number, mac = `6e:00:00:00:00:0${n}`): KernelState {
  const route: Route = {
    family: 4, dst: `10.244.${n}.0/24`, gateway: `10.244.${n}.0`, linkIndex: VX, table: 254,
    protocol: WEFT_RTPROT, scope: 0, type: 1, metric: 0, onlink: true,
  };
  const neigh: Neigh = { family: 4, linkIndex: VX, ip: `10.244.${n}.0`, mac, state: 0x80 };
  const fdb: Fdb = { linkIndex: VX, mac, dst: `198.51.100.${n}`, state: 0x80, flags: 2 };
  return { routes: [route], neighs: [neigh], fdb: [fdb] };
}

function merge(...states: KernelState[]): KernelState {
  return {
    routes: states.flatMap((s) => s.routes),
    neighs: states.flatMap((s) => s.neighs),
    fdb: states.flatMap((s) => s.fdb),
  };
}

const empty: KernelState = { routes: [], neighs: [], fdb: [] };

test('in line: nothing to do', () => {
  const s = merge(peer(2), peer(3));
  assert.deepEqual(diff(s, structuredClone(s)), []);
});

test('cold start: every entry replaced, neighbour and FDB before the route as in flannel', () => {
  const ops = diff(merge(peer(2)), empty);
  assert.deepEqual(ops.map((o) => o.op), ['neighReplace', 'fdbReplace', 'routeReplace']);
});

test('a peer that left: its entries are deleted after all replaces, its route first', () => {
  const ops = diff(merge(peer(2), peer(4)), merge(peer(2), peer(3)));
  assert.deepEqual(ops.map((o) => o.op), ['neighReplace', 'fdbReplace', 'routeReplace', 'routeDel', 'neighDel', 'fdbDel']);
  const del = ops.find((o) => o.op === 'routeDel');
  assert.equal(del?.op === 'routeDel' && del.route.dst, '10.244.3.0/24');
});

test('a new VTEP MAC: neighbour replaced in place, new FDB entry added, the old one deleted', () => {
  const ops = diff(peer(2, '6e:00:00:00:00:99'), peer(2));
  assert.deepEqual(ops.map((o) => o.op), ['neighReplace', 'fdbReplace', 'fdbDel']);
});

test('a changed route is replaced, not deleted and re-added', () => {
  const want = peer(2);
  const have = structuredClone(want);
  have.routes[0]!.gateway = '10.244.9.9';
  assert.deepEqual(diff(want, have).map((o) => o.op), ['routeReplace']);
});

test('ours(): routes by protocol tag, neighbours and FDB by device and permanence', () => {
  const mine = peer(2);
  const foreign: KernelState = {
    routes: [{ ...mine.routes[0]!, protocol: 3 }],
    neighs: [{ ...mine.neighs[0]!, linkIndex: 9 }, { ...mine.neighs[0]!, ip: '10.244.2.7', state: 0x02 }],
    fdb: [{ ...mine.fdb[0]!, linkIndex: 9 }, { ...mine.fdb[0]!, dst: '', mac: '33:33:00:00:00:01' }],
  };
  assert.deepEqual(ours(merge(mine, foreign), { protocol: WEFT_RTPROT, devices: [VX] }), mine);
});

test('nexthop objects: missing ones written before the routes, stray ones of ours deleted after them, a classic route under a wanted key replaced', () => {
  const nh = (id: number, gateway: string) => ({ id, family: 4 as const, gateway, linkIndex: VX, onlink: true, protocol: WEFT_RTPROT });
  const viaNh = (n: number, id: number): Route => ({ ...peer(n).routes[0]!, nhid: id });
  const desired: KernelState = { ...merge(peer(2), peer(3)), routes: [viaNh(2, 10), viaNh(3, 11)], nexthops: [nh(10, '10.244.2.0'), nh(11, '10.244.3.0')] };
  // Held: nexthop 10 and its route as wanted, peer 3's route in its classic form (flanneld's or
  // an older Weft's), and a nexthop 12 of ours nothing wants.
  const observed: KernelState = { ...merge(peer(2), peer(3)), routes: [viaNh(2, 10), peer(3).routes[0]!], nexthops: [nh(10, '10.244.2.0'), nh(12, '10.244.9.0')] };
  const ops = diff(desired, observed);
  assert.deepEqual(ops.map((o) => o.op), ['nexthopReplace', 'routeReplace', 'nexthopDel']);
  assert.deepEqual(ops.map((o) => ('nexthop' in o ? o.nexthop.id : 'route' in o ? o.route.nhid : undefined)), [11, 11, 12]);
  assert.deepEqual(diff(desired, { ...observed, routes: desired.routes, nexthops: [nh(10, '10.244.2.0'), nh(11, '10.244.3.0')] }), []);
  assert.deepEqual(diff(desired, { ...observed, routes: desired.routes, nexthops: [nh(10, '10.244.2.0'), nh(11, '10.244.7.0')] }).map((o) => o.op), ['nexthopReplace'], 'a nexthop of ours changed under its id is rewritten');
});

test('more routes under a wanted key (appended by someone): those not as wanted are deleted, a lone one is only overwritten', () => {
  const want = peer(2);
  const other = (gateway: string): Route => ({ ...want.routes[0]!, gateway });
  const dels = (ops: ReturnType<typeof diff>) => ops.flatMap((o) => (o.op === 'routeDel' ? [o.route.gateway] : []));
  const withWanted = diff(want, { ...want, routes: [other('10.244.9.1'), want.routes[0]!, other('10.244.9.2')] });
  assert.deepEqual(withWanted.map((o) => o.op), ['routeDel', 'routeDel'], 'the wanted one is held: nothing replaced');
  assert.deepEqual(dels(withWanted), ['10.244.9.1', '10.244.9.2']);
  const without = diff(want, { ...want, routes: [other('10.244.9.1'), other('10.244.9.2')] });
  assert.deepEqual(without.map((o) => o.op), ['routeReplace', 'routeDel', 'routeDel']);
  assert.deepEqual(dels(without), ['10.244.9.1', '10.244.9.2']);
  assert.deepEqual(diff(want, { ...want, routes: [other('10.244.9.1')] }).map((o) => o.op), ['routeReplace']);
});
