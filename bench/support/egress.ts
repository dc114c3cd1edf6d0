/**
 * The measurements bench/egress.bench.ts and bench/fip.bench.ts share, on an EgressCluster with
 * one EIP placed on one of two gateway nodes:
 * - failovers by link cut (eth0 down and the node cut from the API server, weftd alive) and by
 *   weftd kill (SIGKILL, link up), alternated, each from whichever node holds the EIP then, the
 *   node put back after; each ends when the other node holds the EIP and serves; meanwhile the outside host probes the EIP back to back and adds up the
 *   time two MACs answered (dual answers);
 * - a 10 s stall of the API server (kube-apiserver frozen with SIGSTOP: every call hangs): the
 *   policies whose placement changed during it or in the 5 s after;
 * - the forced overlap of two election candidates (test/support/election-overlap.ts);
 * - many EIPs on one gateway node, its weftd killed: until every EIP answers from the other
 *   node, and whether any ever answered from both (the outside host probes them all every 50 ms);
 * - every API request made slow (each way through the cluster's delay proxy): the share of the
 *   outside host's 50 ms probes of the EIPs that nobody answered.
 */
import { performance } from 'node:perf_hooks';
import { electionTiming } from '../../src/egress/run.ts';
import type { ClusterNode } from '../../test/support/cluster.ts';
import type { EgressCluster, EipWindow } from '../../test/support/egress-cluster.ts';
import { forcedOverlap } from '../../test/support/election-overlap.ts';
import { until } from '../../test/support/until.ts';

export interface Failovers {
  cutMs: number[];
  killMs: number[];
  /** ms in which the outside host got answers for the EIP from two MACs, over every failover. */
  dualMs: number;
}

/**
 * `rounds` failovers of each kind, alternated (cut first). `node()` names the node the EIP is
 * placed on; `reached(t0)` resolves with the ms from `t0` until the EIP serves (once the other
 * node holds it).
 */
export async function failovers(e: EgressCluster, o: {
  rounds: number; eip: string; gateways: readonly ClusterNode[]; node: () => Promise<unknown>; reached: (t0: number) => Promise<number>;
}): Promise<Failovers> {
  const out: Failovers = { cutMs: [], killMs: [], dualMs: 0 };
  for (let i = 0; i < 2 * o.rounds; i++) {
    const kind = i % 2 === 0 ? 'cut' : 'kill';
    const placed = await o.node();
    const from = o.gateways.find((g) => g.name === placed)!;
    const watch = e.watchAnswers(o.eip);
    let ms;
    try {
      const t0 = performance.now();
      if (kind === 'cut') {
        await from.ns.ip('link', 'set', 'eth0', 'down');
        await e.c.cutFromApi(from);
      } else {
        await e.c.stopWeftd(from, 'SIGKILL');
      }
      // The old node may still serve for a moment (a killed weftd's kernel keeps its rules until the
      // EIP's lifetime runs out): the failover is done when the other node holds the EIP and serves.
      const to = o.gateways.find((g) => g !== from)!;
      await until(`${to.name} holding ${o.eip}`, () => e.holds(to, o.eip), 60_000);
      ms = await o.reached(t0);
    } finally {
      out.dualMs += (await watch.stop()).dualMs;
    }
    (kind === 'cut' ? out.cutMs : out.killMs).push(ms);
    console.log(`failover ${i + 1} by ${kind === 'cut' ? 'link cut' : 'weftd kill'} from ${from.name}: ${Math.round(ms)} ms`);
    if (kind === 'cut') {
      await from.ns.ip('link', 'set', 'eth0', 'up');
      await e.c.rejoinApi(from);
    } else {
      await e.c.restartWeftd(from);
    }
    // A full liveness timeout with its heartbeat renewed, so the controller counts it as serving.
    await new Promise((r) => setTimeout(r, 4000));
  }
  return out;
}

/**
 * Stalls the API server for `stallMs`; the ids whose placement (`placement(id)`) differed from
 * before when sampled (every 50 ms; the samples hang with the server) until 5 s after.
 */
export async function stallWithdrawn(
  e: EgressCluster, ids: readonly string[], placement: (id: string) => Promise<string>, stallMs = 10_000,
): Promise<string[]> {
  const before = new Map(await Promise.all(ids.map(async (id) => [id, await placement(id)] as const)));
  const changed = new Set<string>();
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      for (const id of ids) if ((await placement(id)) !== before.get(id)) changed.add(id);
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  try {
    e.c.api!.pause();
    try {
      await new Promise((r) => setTimeout(r, stallMs));
    } finally {
      e.c.api!.resume();
    }
    await new Promise((r) => setTimeout(r, 5000));
  } finally {
    sampling = false;
    await sampler;
  }
  return [...changed];
}

/** ms two controllers acted at once in the forced overlap, with weftd's election timing at its default liveness timeout (3 s). */
export async function leaderOverlapMs(): Promise<number> {
  const t = electionTiming(3000);
  const r = await forcedOverlap({ leaseMs: t.leaseDurationMs, deadlineMs: t.renewDeadlineMs, retryMs: t.retryMs, pauseMs: 8000 });
  console.log(`forced overlap: the successor took over ${Math.round(r.takeoverMs)} ms after the leader's last renewal; accepted writes ${r.writers.length}`);
  return Math.round(r.overlapMs);
}

/** ms of `windows` in which some EIP was answered by two MACs or more. */
function dualMs(windows: readonly EipWindow[]): number {
  return Math.round(windows.filter((w) => w.macs.some((m) => m.length > 1)).reduce((sum, w) => sum + w.end - w.start, 0));
}

/**
 * `eips` (all held by `from`) moved by killing `from`'s weftd (SIGKILL): the ms from the kill until
 * each EIP was answered by `to` alone, the latest of them, and the ms two MACs answered one of them.
 * `from`'s weftd is started again after.
 */
export async function manyEipsFailover(
  e: EgressCluster, o: { eips: readonly string[]; from: ClusterNode; to: ClusterNode },
): Promise<{ failoverMs: number; dualMs: number }> {
  const toMac = await e.mac(o.to);
  const watch = e.watchEips(o.eips);
  let windows: EipWindow[] = [];
  const t0 = performance.now();
  const answered = () => o.eips.map((_, i) =>
    watch.windows.find((w) => w.start >= t0 && w.macs[i]!.length === 1 && w.macs[i]![0] === toMac));
  try {
    await e.c.stopWeftd(o.from, 'SIGKILL');
    await until(`all ${o.eips.length} EIPs answered by ${o.to.name}`, () => answered().every((w) => w !== undefined), 60_000);
  } finally {
    windows = await watch.stop();
  }
  await e.c.restartWeftd(o.from);
  return { failoverMs: Math.round(Math.max(...answered().map((w) => w!.end)) - t0), dualMs: dualMs(windows.filter((w) => w.start >= t0)) };
}

/**
 * Every API request of every node made `delayMs` slower (half each way through the cluster's
 * delay proxy) for `forMs`: the per cent of the outside host's probes of `eips` that nobody answered.
 */
export async function slowApiLostPct(e: EgressCluster, eips: readonly string[], delayMs: number, forMs: number): Promise<number> {
  const proxy = e.c.apiDelay;
  if (!proxy) throw new Error('the cluster was not started with apiDelay');
  const watch = e.watchEips(eips);
  let windows: EipWindow[] = [];
  try {
    proxy.delayMs = delayMs / 2;
    await new Promise((r) => setTimeout(r, forMs));
  } finally {
    proxy.delayMs = 0;
    windows = await watch.stop();
  }
  const lost = windows.reduce((sum, w) => sum + w.macs.filter((m) => m.length === 0).length, 0);
  return (100 * lost) / (windows.length * eips.length);
}
