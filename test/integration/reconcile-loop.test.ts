import assert from 'node:assert/strict';
import { test } from 'node:test';
import { NetlinkHandle } from '../../src/netlink/index.ts';
import { DesiredState } from '../../src/reconcile/desired.ts';
import { Reconciler } from '../../src/reconcile/loop.ts';
import type { PassInfo } from '../../src/reconcile/loop.ts';
import { WEFT_RTPROT } from '../../src/reconcile/state.ts';
import type { KernelState } from '../../src/reconcile/state.ts';
import { needsRoot, vxlanNode, withNetns } from '../support/netns.ts';
import { until } from '../support/until.ts';

/** Repairs come from kernel events; the periodic resync is far longer than this. */
const REPAIR_MS = 3000;

function peers(vx: number, ns: number[]): KernelState {
  return {
    routes: ns.map((n) => ({ family: 4, dst: `10.244.${n}.0/24`, gateway: `10.244.${n}.0`, linkIndex: vx, table: 254, protocol: WEFT_RTPROT, scope: 0, type: 1, metric: 0, onlink: true }) as const),
    neighs: ns.map((n) => ({ family: 4, linkIndex: vx, ip: `10.244.${n}.0`, mac: `6e:00:00:00:00:0${n}`, state: 0x80 }) as const),
    fdb: ns.map((n) => ({ linkIndex: vx, mac: `6e:00:00:00:00:0${n}`, dst: `198.51.100.${n}`, state: 0x80, flags: 2 })),
  };
}

test('the loop repairs hand-deleted routes, neighbours and FDB entries from kernel events alone', { skip: needsRoot }, async () => {
  await withNetns(['loop'], async (ns) => {
    await vxlanNode(ns!, '198.51.100.1/24');
    const h = NetlinkHandle.open(ns!.path);
    const passes: PassInfo[] = [];
    const gone: string[] = [];
    try {
      const vx = (await h.linkByName('flannel.1')).index;
      const desired = new DesiredState();
      desired.set('peers', peers(vx, [2, 3]));
      const loop = new Reconciler({
        handle: h,
        desired,
        ownership: () => ({ protocol: WEFT_RTPROT, devices: [vx] }),
        resyncPeriodMs: 3_600_000,
        onPass: (p) => passes.push(p),
        onDeviceGone: (why) => gone.push(why),
      });
      await loop.start();
      try {
        assert.deepEqual(passes[0]?.reasons, ['start-up']);
        assert.equal(passes[0]?.ops.length, 6);
        const routes = () => ns!.ip('route', 'show', 'proto', String(WEFT_RTPROT));
        await ns!.ip('route', 'del', '10.244.2.0/24');
        await until('route repair', async () => /10\.244\.2\.0\/24/.test(await routes()), REPAIR_MS);
        await ns!.ip('neigh', 'del', '10.244.3.0', 'dev', 'flannel.1');
        await until('neighbour repair', async () => /10\.244\.3\.0 lladdr/.test(await ns!.ip('neigh', 'show', 'dev', 'flannel.1')), REPAIR_MS);
        await ns!.exec('bridge', 'fdb', 'del', '6e:00:00:00:00:02', 'dev', 'flannel.1', 'dst', '198.51.100.2', 'self');
        await until('fdb repair', async () => /6e:00:00:00:00:02 dst 198\.51\.100\.2/.test(await ns!.exec('bridge', 'fdb', 'show', 'dev', 'flannel.1')), REPAIR_MS);
        await ns!.ip('route', 'add', '10.244.9.0/24', 'via', '198.51.100.9', 'proto', String(WEFT_RTPROT));
        await until('unwanted tagged route removed', async () => !/10\.244\.9\.0/.test(await routes()), REPAIR_MS);
        assert.ok(passes.some((p) => p.kind === 'fast' && p.reasons.includes('route 10.244.2.0/24 deleted')), 'repaired by a fast pass');

        // A trigger from a pass's own callback (as a lease source would) still gets its pass.
        const before = passes.length;
        const followUp = new Promise<void>((resolve) => {
          const check = setInterval(() => {
            if (passes.some((p) => p.reasons.includes('follow-up'))) {
              clearInterval(check);
              resolve();
            }
          }, 5);
        });
        loop.trigger('first');
        await new Promise<void>((resolve) => {
          const check = setInterval(() => {
            if (passes.length > before) {
              clearInterval(check);
              loop.trigger('follow-up');
              resolve();
            }
          }, 0);
        });
        await followUp;

        desired.set('peers', peers(vx, [3]));
        for (let i = 0; i < 10; i++) loop.trigger('lease batch');
        await loop.idle();
        assert.ok(passes.filter((p) => p.reasons.includes('lease batch')).length <= 2, 'ten triggers coalesce into at most two passes');
        assert.doesNotMatch(await routes(), /10\.244\.2\.0/);

        // The fast path: one owner's change applied without a dump, its leftovers deleted.
        loop.update('node-4', peers(vx, [4]), 'lease added');
        await loop.idle();
        assert.match(await routes(), /10\.244\.4\.0\/24 via 10\.244\.4\.0 dev flannel\.1/);
        assert.equal(passes.at(-1)?.kind, 'fast');
        assert.equal(passes.at(-1)?.ops.length, 3);
        loop.update('node-4', undefined, 'lease removed');
        await loop.idle();
        assert.doesNotMatch(await routes(), /10\.244\.4\.0/);
        assert.doesNotMatch(await ns!.ip('neigh', 'show', 'dev', 'flannel.1'), /10\.244\.4\.0/);
        assert.match(await routes(), /10\.244\.3\.0\/24/, 'other owners untouched');

        await ns!.ip('link', 'del', 'flannel.1');
        await until('device loss reported', async () => gone.length > 0, REPAIR_MS);
      } finally {
        loop.stop();
      }
    } finally {
      h.close();
    }
  });
});
