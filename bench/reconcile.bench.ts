/**
 * make bench-reconcile: 5,000 remote leases into an empty node namespace through plan() and one
 * reconcile pass (vxlan and host-gw), against `ip -batch` + `bridge -batch` of the same entries;
 * then, with the reconcile loop running, one new lease at a time (event latency, 50 samples),
 * 500 hand deletions (repair latency), and an idle resync.
 *
 * Last line: cold_ratio=<vxlan> cold_ms=<> hostgw_cold_ratio=<> event_p99_ms=<> repair_p99_ms=<> resync_ms=<>
 *
 * Medians and percentiles as bench/support/stats.ts defines them: the median of an even count is
 * the mean of the middle two, a percentile is the nearest rank.
 */
import { execFile } from 'node:child_process';
import { rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { promisify } from 'node:util';
import { planHostGw, planVxlan } from '../src/backend/plan.ts';
import type { PlanInput } from '../src/backend/plan.ts';
import { parseCIDR, parseIP } from '../src/ip/ip.ts';
import type { Lease } from '../src/lease/lease.ts';
import { NetlinkHandle } from '../src/netlink/index.ts';
import { DesiredState } from '../src/reconcile/desired.ts';
import { Reconciler } from '../src/reconcile/loop.ts';
import type { PassInfo } from '../src/reconcile/loop.ts';
import { reconcileOnce } from '../src/reconcile/reconcile.ts';
import { wantedState, WEFT_RTPROT } from '../src/reconcile/state.ts';
import type { KernelState, Ownership } from '../src/reconcile/state.ts';
import { isRoot, vxlanNode, withNetns } from '../test/support/netns.ts';
import type { Netns } from '../test/support/netns.ts';
import { median, percentile } from './support/stats.ts';

const run = promisify(execFile);
const LEASES = 5000;
const hex = (n: number) => n.toString(16).padStart(2, '0');

function lease(i: number, type: string): Lease {
  return {
    peer: `node-${i}`,
    subnet: parseCIDR(`10.${128 + (i >> 8)}.${i & 255}.0/24`, 's'),
    attrs: {
      publicIP: parseIP(`198.18.${i >> 8}.${(i & 255) % 254 + 1}`, 'p'),
      backendType: type,
      backendData: { VNI: 1, VtepMAC: `0e:00:00:00:${hex((i >> 8) & 255)}:${hex(i & 255)}` },
    },
  };
}

const own: Lease = { peer: 'self', subnet: parseCIDR('10.127.0.0/24', 's'), attrs: { backendType: 'vxlan' } };

interface Ctx {
  h: NetlinkHandle;
  input: PlanInput;
  own: Ownership;
}

async function context(ns: Netns, type: 'vxlan' | 'host-gw', count: number): Promise<Ctx> {
  const h = NetlinkHandle.open(ns.path);
  const ext = await h.linkByName('eth0');
  const vx = await h.linkByName('flannel.1');
  const remotes = Array.from({ length: count }, (_, i) => lease(i, type));
  const input: PlanInput = { own, remotes, enabled: [4], extIndex: ext.index };
  if (type === 'vxlan') input.vxlan = { 4: { index: vx.index, mac: vx.mac } };
  return { h, input, own: { protocol: WEFT_RTPROT, devices: type === 'vxlan' ? [vx.index] : [] } };
}

function plan(type: 'vxlan' | 'host-gw', input: PlanInput): KernelState {
  return (type === 'vxlan' ? planVxlan(input) : planHostGw(input)).state;
}

async function weftCold(type: 'vxlan' | 'host-gw'): Promise<number> {
  return withNetns([`rc-${type}`], async (ns) => {
    await vxlanNode(ns!, '198.18.255.254/15', '10.127.0.0/32');
    const ctx = await context(ns!, type, LEASES);
    try {
      const t0 = performance.now();
      const pass = await reconcileOnce(ctx.h, wantedState(plan(type, ctx.input)), ctx.own);
      const ms = performance.now() - t0;
      if (pass.failures.length > 0) throw pass.failures[0];
      return ms;
    } finally {
      ctx.h.close();
    }
  });
}

async function ipCold(type: 'vxlan' | 'host-gw'): Promise<number> {
  return withNetns([`ri-${type}`], async (ns) => {
    await vxlanNode(ns!, '198.18.255.254/15', '10.127.0.0/32');
    const ipLines: string[] = [];
    const brLines: string[] = [];
    for (let i = 0; i < LEASES; i++) {
      const net = `10.${128 + (i >> 8)}.${i & 255}`;
      const mac = `0e:00:00:00:${hex((i >> 8) & 255)}:${hex(i & 255)}`;
      const pub = `198.18.${i >> 8}.${(i & 255) % 254 + 1}`;
      if (type === 'vxlan') {
        ipLines.push(`neigh replace ${net}.0 lladdr ${mac} dev flannel.1 nud permanent`);
        brLines.push(`fdb replace ${mac} dev flannel.1 dst ${pub} self permanent`);
        ipLines.push(`route replace ${net}.0/24 via ${net}.0 dev flannel.1 onlink proto ${WEFT_RTPROT}`);
      } else {
        ipLines.push(`route replace ${net}.0/24 via ${pub} dev eth0 proto ${WEFT_RTPROT}`);
      }
    }
    const ipFile = join(tmpdir(), `${ns!.name}.ip`);
    const brFile = join(tmpdir(), `${ns!.name}.br`);
    await writeFile(ipFile, ipLines.join('\n') + '\n');
    await writeFile(brFile, brLines.join('\n') + '\n');
    try {
      const t0 = performance.now();
      await run('ip', ['-n', ns!.name, '-batch', ipFile]);
      if (brLines.length > 0) await run('bridge', ['-n', ns!.name, '-batch', brFile]);
      return performance.now() - t0;
    } finally {
      await rm(ipFile, { force: true });
      await rm(brFile, { force: true });
    }
  });
}

const settle = () => new Promise((r) => setTimeout(r, 1000));

async function loopFigures(): Promise<{ eventP99: number; repairP99: number; resync: number }> {
  return withNetns(['rl'], async (ns) => {
    await vxlanNode(ns!, '198.18.255.254/15', '10.127.0.0/32');
    const ctx = await context(ns!, 'vxlan', LEASES + 50);
    const all = ctx.input.remotes;
    const planOne = (lease: Lease) => planVxlan({ ...ctx.input, remotes: [lease] }).state;
    const desired = new DesiredState();
    for (const lease of all.slice(0, LEASES)) desired.set(lease.peer, planOne(lease));
    let waiter: ((p: PassInfo) => void) | undefined;
    const loop = new Reconciler({
      handle: ctx.h,
      desired,
      ownership: () => ctx.own,
      resyncPeriodMs: 3_600_000,
      onPass: (p) => waiter?.(p),
    });
    const other = NetlinkHandle.open(ns!.path);
    try {
      await loop.start();
      const nextPass = () => new Promise<PassInfo>((resolve) => (waiter = resolve));

      const events: number[] = [];
      for (let i = 0; i < 50; i++) {
        const done = nextPass();
        const t0 = performance.now();
        const lease = all[LEASES + i]!;
        loop.update(lease.peer, planOne(lease), 'lease added');
        await done;
        events.push(performance.now() - t0);
      }

      const repairs: number[] = [];
      const routes = desired.all().routes;
      for (let i = 0; i < 500; i++) {
        const r = routes[(i * 7) % routes.length]!;
        const done = nextPass();
        // The clock starts before the delete is sent: the repair can begin before the delete's
        // own answer is back, and that time counts.
        const t0 = performance.now();
        await other.routeDel({ dst: r.dst, protocol: WEFT_RTPROT });
        const pass = await done;
        if (!pass.ops.some((o) => o.op === 'routeReplace' && o.route.dst === r.dst)) throw new Error(`pass did not repair ${r.dst}`);
        repairs.push(performance.now() - t0);
      }

      const resyncs: number[] = [];
      for (let i = 0; i < 5; i++) {
        const t0 = performance.now();
        const pass = await reconcileOnce(ctx.h, desired.wanted(), ctx.own);
        resyncs.push(performance.now() - t0);
        if (pass.ops.length > 0) throw new Error(`idle resync found ${pass.ops.length} operations`);
      }
      return { eventP99: percentile(events, 99), repairP99: percentile(repairs, 99), resync: median(resyncs) };
    } finally {
      loop.stop();
      other.close();
      ctx.h.close();
    }
  });
}

async function main(): Promise<void> {
  if (!isRoot()) {
    console.error('bench-reconcile needs root: it creates network namespaces');
    process.exit(1);
  }
  const cold: Record<string, { weft: number[]; ip: number[] }> = { vxlan: { weft: [], ip: [] }, 'host-gw': { weft: [], ip: [] } };
  for (let round = 0; round < 3; round++) {
    for (const type of ['vxlan', 'host-gw'] as const) {
      const pair = round % 2 === 0 ? [weftCold, ipCold] : [ipCold, weftCold];
      for (const f of pair) {
        const ms = await f(type);
        (f === weftCold ? cold[type]!.weft : cold[type]!.ip).push(ms);
        await settle();
      }
      console.log(`round ${round + 1} ${type}: weft ${cold[type]!.weft.at(-1)!.toFixed(1)} ms, ip -batch ${cold[type]!.ip.at(-1)!.toFixed(1)} ms`);
    }
  }
  const loop = await loopFigures();
  const vx = median(cold.vxlan!.weft);
  console.log(`leases=${LEASES} (cold: medians of 3; event: 50 samples; repair: 500 samples)`);
  console.log(
    `cold_ratio=${(vx / median(cold.vxlan!.ip)).toFixed(2)} cold_ms=${vx.toFixed(1)} ` +
      `hostgw_cold_ratio=${(median(cold['host-gw']!.weft) / median(cold['host-gw']!.ip)).toFixed(2)} ` +
      `event_p99_ms=${loop.eventP99.toFixed(2)} repair_p99_ms=${loop.repairP99.toFixed(2)} resync_ms=${loop.resync.toFixed(1)}`,
  );
}

await main();
