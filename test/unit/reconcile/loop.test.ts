import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { NetlinkHandle } from '../../../src/netlink/handle.ts';
import type { NetlinkEvent } from '../../../src/netlink/monitor.ts';
import { DesiredState } from '../../../src/reconcile/desired.ts';
import { Reconciler, RESYNC_PERIOD_MAX_MS, resyncPeriodMs } from '../../../src/reconcile/loop.ts';
import type { PassInfo } from '../../../src/reconcile/loop.ts';
import { WEFT_RTPROT } from '../../../src/reconcile/state.ts';
import { until } from '../../support/until.ts';

/** A kernel that holds nothing and accepts everything; `failDumps` makes every dump throw. */
function fakeKernel() {
  const k = {
    failDumps: false,
    listener: undefined as ((events: NetlinkEvent[]) => void) | undefined,
    handle: {
      monitor: async (_groups: unknown, listener: (events: NetlinkEvent[]) => void) => {
        k.listener = listener;
        return { stop: () => {} };
      },
      routeEach: async () => {
        if (k.failDumps) throw new Error('dump failed');
      },
      neighEach: async () => {},
      fdbEach: async () => {},
      nexthopEach: async () => {},
      batch: async (ops: unknown[]) => ops.map(() => null),
    } as unknown as NetlinkHandle,
  };
  return k;
}

test('an onError callback that throws does not stop the loop', async () => {
  const k = fakeKernel();
  const passes: PassInfo[] = [];
  const loop = new Reconciler({
    handle: k.handle, desired: new DesiredState(), ownership: () => ({ protocol: WEFT_RTPROT, devices: [] }), resyncPeriodMs: 3_600_000,
    onPass: (p) => passes.push(p),
    onError: () => {
      throw new Error('the logger broke');
    },
  });
  await loop.start();
  try {
    k.failDumps = true;
    loop.trigger('failing');
    await loop.idle();
    k.failDumps = false;
    loop.trigger('after the failure');
    await until('the next pass', () => passes.some((p) => p.reasons.includes('after the failure')), 2000);
  } finally {
    loop.stop();
  }
});

test('a device of ours deleted: no pass runs with its old index; resume() after the rebuild runs the full pass', async () => {
  const k = fakeKernel();
  const passes: PassInfo[] = [];
  const gone: string[] = [];
  let devices = [7];
  const loop = new Reconciler({
    handle: k.handle, desired: new DesiredState(), ownership: () => ({ protocol: WEFT_RTPROT, devices }), resyncPeriodMs: 3_600_000,
    onPass: (p) => passes.push(p),
    onDeviceGone: (why) => gone.push(why),
  });
  await loop.start();
  try {
    const before = passes.length;
    k.listener!([
      { kind: 'neigh', action: 'del', neigh: { family: 4, linkIndex: 7, ip: '10.244.2.0', mac: '6e:00:00:00:00:02', state: 0x80 } },
      { kind: 'link', action: 'del', link: { index: 7, name: 'flannel.1' } },
    ] as NetlinkEvent[]);
    loop.trigger('a lease batch');
    await loop.idle();
    assert.deepEqual(gone, ['device flannel.1 deleted']);
    assert.equal(passes.length, before, 'nothing ran against the deleted device');
    devices = [8];
    loop.resume('device recreated');
    await loop.idle();
    assert.equal(passes.length, before + 1);
    assert.equal(passes.at(-1)!.kind, 'full');
    assert.ok(passes.at(-1)!.reasons.includes('device recreated') && passes.at(-1)!.reasons.includes('a lease batch'));
  } finally {
    loop.stop();
  }
});

test('the periodic pass adapts to what a full pass costs: the configured period at least, 100 times the last pass, 15 minutes at most', () => {
  assert.equal(resyncPeriodMs(30_000, 12), 30_000, 'a cheap pass keeps --resync-period');
  assert.equal(resyncPeriodMs(30_000, 2_200), 220_000);
  assert.equal(resyncPeriodMs(30_000, 60_000), RESYNC_PERIOD_MAX_MS);
  assert.equal(resyncPeriodMs(3_600_000, 60_000), 3_600_000, 'never below what was configured');
});

test('a full pass says when the next periodic one comes', async () => {
  const k = fakeKernel();
  const passes: PassInfo[] = [];
  const loop = new Reconciler({ handle: k.handle, desired: new DesiredState(), ownership: () => ({ protocol: WEFT_RTPROT, devices: [] }), resyncPeriodMs: 45_000, onPass: (p) => passes.push(p) });
  try {
    await loop.start();
    assert.equal(passes[0]!.kind, 'full');
    assert.equal(passes[0]!.nextResyncMs, resyncPeriodMs(45_000, passes[0]!.durationMs));
  } finally {
    loop.stop();
  }
});

test('side state (wireguard peers): run in every full pass, its report in the pass, and polled; not after stop()', async () => {
  const k = fakeKernel();
  const passes: PassInfo[] = [];
  let runs = 0;
  const loop = new Reconciler({
    handle: k.handle, desired: new DesiredState(), ownership: () => ({ protocol: WEFT_RTPROT, devices: [] }), resyncPeriodMs: 3_600_000,
    onPass: (p) => passes.push(p),
    sides: [{
      name: 'peers', pollMs: 20,
      reconcile: async () => ({ ops: [`set peer ${++runs}`], failures: runs === 2 ? [new Error('refused')] : [] }),
    }],
  });
  await loop.start();
  try {
    assert.deepEqual(passes[0]!.side, { ops: ['set peer 1'], failures: [] });
    await until('a poll', () => passes.some((p) => p.reasons.includes('poll of peers')), 2000);
    assert.equal(passes[1]!.side!.failures[0]!.message, 'refused');
  } finally {
    loop.stop();
  }
  const after = runs;
  await new Promise((r) => setTimeout(r, 100));
  assert.equal(runs, after, 'no poll after stop()');
});
