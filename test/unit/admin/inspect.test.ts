import assert from 'node:assert/strict';
import { test } from 'node:test';
import { kernelDiff, peerKernelState, peerRows } from '../../../src/admin/inspect.ts';
import { parseCIDR, parseIP } from '../../../src/ip/ip.ts';
import type { Lease } from '../../../src/lease/lease.ts';
import { NTF_SELF, NUD_PERMANENT, RT_SCOPE_UNIVERSE, RT_TABLE_MAIN, RTN_UNICAST } from '../../../src/netlink/records.ts';
import type { Route } from '../../../src/netlink/records.ts';
import { WEFT_RTPROT } from '../../../src/reconcile/state.ts';
import type { KernelState } from '../../../src/reconcile/state.ts';

const DEV = 5;
const dev = (i: number) => (i === DEV ? 'flannel.1' : `#${i}`);

function route(dst: string, gateway: string): Route {
  return { family: 4, dst, gateway, linkIndex: DEV, table: RT_TABLE_MAIN, protocol: WEFT_RTPROT, scope: RT_SCOPE_UNIVERSE, type: RTN_UNICAST, metric: 0, onlink: true };
}

/** What vxlan wants for a peer: route, neighbour, FDB entry. */
function peer(n: number): KernelState {
  const mac = `0a:00:00:00:00:0${n}`;
  return {
    routes: [route(`10.244.${n}.0/24`, `10.244.${n}.0`)],
    neighs: [{ family: 4, linkIndex: DEV, ip: `10.244.${n}.0`, mac, state: NUD_PERMANENT }],
    fdb: [{ linkIndex: DEV, mac, dst: `198.51.100.${n}`, state: NUD_PERMANENT, flags: NTF_SELF }],
  };
}

function merge(...s: KernelState[]): KernelState {
  return { routes: s.flatMap((x) => x.routes), neighs: s.flatMap((x) => x.neighs), fdb: s.flatMap((x) => x.fdb) };
}

test('a peer whose entries are all present is ok; each missing or different entry is named', () => {
  const held = merge(peer(2), peer(3));
  assert.deepEqual(peerKernelState(peer(2), held), ['ok']);
  assert.deepEqual(peerKernelState(peer(2), { ...held, fdb: held.fdb.slice(1) }), ['missing FDB']);
  assert.deepEqual(peerKernelState(peer(2), { ...held, neighs: held.neighs.slice(1), routes: held.routes.slice(1) }), ['missing route', 'missing neighbour']);
  const moved = { ...held, routes: [route('10.244.2.0/24', '10.244.9.0'), held.routes[1]!], neighs: [{ ...held.neighs[0]!, mac: '0a:ff:00:00:00:00' }, held.neighs[1]!] };
  assert.deepEqual(peerKernelState(peer(2), moved), ['stale route', 'stale neighbour']);
  assert.deepEqual(peerKernelState(undefined, held), ['not programmed']);
});

test('the kernel diff: + what is missing, - what is held beyond the desired state, as iproute2 prints them', () => {
  const desired = merge(peer(2), peer(3));
  const observed = merge(peer(2), peer(4));
  observed.fdb = observed.fdb.filter((f) => f.dst !== '198.51.100.2');
  const d = kernelDiff(desired, observed, dev);
  assert.equal(d.desired, 6);
  assert.equal(d.present, 5);
  assert.deepEqual(d.missing.sort(), [
    'fdb 0a:00:00:00:00:02 dst 198.51.100.2 dev flannel.1', 'fdb 0a:00:00:00:00:03 dst 198.51.100.3 dev flannel.1',
    'neigh 10.244.3.0 lladdr 0a:00:00:00:00:03 dev flannel.1', 'route 10.244.3.0/24 via 10.244.3.0 dev flannel.1 onlink',
  ]);
  assert.deepEqual(d.extra.sort(), [
    'fdb 0a:00:00:00:00:04 dst 198.51.100.4 dev flannel.1', 'neigh 10.244.4.0 lladdr 0a:00:00:00:00:04 dev flannel.1', 'route 10.244.4.0/24 via 10.244.4.0 dev flannel.1 onlink',
  ]);
  assert.deepEqual(kernelDiff(desired, desired, dev), { desired: 6, present: 6, missing: [], extra: [] });
});

test('peer rows carry the lease, its VTEP MAC, its kernel state and its age', () => {
  const lease: Lease = { peer: 'n2', subnet: parseCIDR('10.244.2.0/24', 's'), attrs: { publicIP: parseIP('198.51.100.2', 'p'), backendType: 'vxlan', backendData: { VNI: 1, VtepMAC: '0A:00:00:00:00:02' } } };
  const rows = peerRows([lease], new Map([['n2', peer(2)]]), merge(peer(2)), new Map([['n2', 1000]]), 61_000);
  assert.deepEqual(rows, [{ peer: 'n2', subnet: '10.244.2.0/24', publicIP: '198.51.100.2', vtepMac: '0a:00:00:00:00:02', kernel: ['ok'], ageMs: 60_000 }]);
});
