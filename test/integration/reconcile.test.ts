import assert from 'node:assert/strict';
import { test } from 'node:test';
import { NetlinkHandle } from '../../src/netlink/index.ts';
import type { Fdb, Neigh, Route } from '../../src/netlink/index.ts';
import { reconcileOnce } from '../../src/reconcile/reconcile.ts';
import { wantedState, WEFT_RTPROT } from '../../src/reconcile/state.ts';
import type { KernelState, Ownership } from '../../src/reconcile/state.ts';
import { needsRoot, vxlanNode, withNetns } from '../support/netns.ts';

function peers(vx: number, ns: number[]): KernelState {
  const routes: Route[] = [];
  const neighs: Neigh[] = [];
  const fdb: Fdb[] = [];
  for (const n of ns) {
    const mac = `6e:00:00:00:00:${n.toString(16).padStart(2, '0')}`;
    routes.push({ family: 4, dst: `10.244.${n}.0/24`, gateway: `10.244.${n}.0`, linkIndex: vx, table: 254, protocol: WEFT_RTPROT, scope: 0, type: 1, metric: 0, onlink: true });
    neighs.push({ family: 4, linkIndex: vx, ip: `10.244.${n}.0`, mac, state: 0x80 });
    fdb.push({ linkIndex: vx, mac, dst: `198.51.100.${n}`, state: 0x80, flags: 2 });
  }
  return { routes, neighs, fdb };
}

test('a reconcile pass programs the flannel entries, repairs tampering, removes stale peers and leaves foreign entries', { skip: needsRoot }, async () => {
  await withNetns(['rec'], async (ns) => {
    await vxlanNode(ns!, '198.51.100.1/24');
    // Not Weft's: a route in the pod range without the tag, and a permanent neighbour elsewhere.
    await ns!.ip('route', 'add', '10.244.200.0/24', 'via', '198.51.100.9', 'dev', 'eth0');
    await ns!.ip('neigh', 'add', '198.51.100.9', 'lladdr', '02:00:00:00:00:09', 'dev', 'eth0', 'nud', 'permanent');
    const foreignRoutes = await ns!.ip('route', 'show', 'proto', 'boot');
    const h = NetlinkHandle.open(ns!.path);
    try {
      const vx = (await h.linkByName('flannel.1')).index;
      const own: Ownership = { protocol: WEFT_RTPROT, devices: [vx] };
      const first = await reconcileOnce(h, wantedState(peers(vx, [2, 3, 4])), own);
      assert.equal(first.ops.length, 9);
      assert.deepEqual(first.failures, []);
      assert.match(await ns!.ip('route'), /^10\.244\.3\.0\/24 via 10\.244\.3\.0 dev flannel\.1 proto 201 onlink $/m);
      assert.match(await ns!.ip('neigh', 'show', 'dev', 'flannel.1'), /^10\.244\.3\.0 lladdr 6e:00:00:00:00:03 PERMANENT $/m);
      assert.match(await ns!.exec('bridge', 'fdb', 'show', 'dev', 'flannel.1'), /^6e:00:00:00:00:03 dst 198\.51\.100\.3 self permanent$/m);
      assert.deepEqual((await reconcileOnce(h, wantedState(peers(vx, [2, 3, 4])), own)).ops, [], 'a second pass finds nothing to do');

      await ns!.ip('route', 'del', '10.244.2.0/24');
      await ns!.ip('neigh', 'del', '10.244.3.0', 'dev', 'flannel.1');
      await ns!.exec('bridge', 'fdb', 'del', '6e:00:00:00:00:04', 'dev', 'flannel.1', 'dst', '198.51.100.4', 'self');
      const repair = await reconcileOnce(h, wantedState(peers(vx, [2, 3, 4])), own);
      assert.deepEqual(repair.ops.map((o) => o.op).sort(), ['fdbReplace', 'neighReplace', 'routeReplace']);
      assert.match(await ns!.ip('route'), /^10\.244\.2\.0\/24 via 10\.244\.2\.0 dev flannel\.1/m);

      const shrink = await reconcileOnce(h, wantedState(peers(vx, [2])), own);
      assert.deepEqual(shrink.failures, []);
      assert.deepEqual(shrink.ops.map((o) => o.op), ['routeDel', 'routeDel', 'neighDel', 'neighDel', 'fdbDel', 'fdbDel']);
      assert.doesNotMatch(await ns!.ip('route'), /10\.244\.[34]\.0/);
      assert.doesNotMatch(await ns!.ip('neigh', 'show', 'dev', 'flannel.1'), /10\.244\.[34]\.0/);
      assert.equal(await ns!.ip('route', 'show', 'proto', 'boot'), foreignRoutes);
      assert.match(await ns!.ip('neigh', 'show', 'dev', 'eth0'), /198\.51\.100\.9 lladdr 02:00:00:00:00:09 PERMANENT/);
    } finally {
      h.close();
    }
  });
});
