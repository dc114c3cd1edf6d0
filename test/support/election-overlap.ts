/**
 * Forced overlap of two egress controller candidates (election-candidate.ts, each a process of
 * its own against one real kube-apiserver v1.28.4): `a` leads and writes, is paused with SIGSTOP
 * for `pauseMs` (past its renew deadline and the lease duration), `b` takes over and writes, then
 * `a` is resumed. What kube-apiserver accepted, in the order it committed it, tells whether the
 * two ever acted at once: a watch of the namespace's Leases sees every accepted write (each one
 * changes its Lease), stamped when it arrives here.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { CONTROLLER_LEASE } from '../../src/egress/leases.ts';
import { sleep } from '../../src/retry.ts';
import { KubeControlPlane } from './control-plane.ts';
import { watchEvents } from './control-plane-objects.ts';
import type { SeenEvent } from './control-plane-objects.ts';
import { until } from './until.ts';

const NODE = new URL('../../node_modules/.bin/node', import.meta.url).pathname;
const CANDIDATE = new URL('./election-candidate.ts', import.meta.url).pathname;
const LEASES = '/apis/coordination.k8s.io/v1/namespaces/default/leases';

export interface OverlapResult {
  /** The probe's writers, in the order kube-apiserver accepted their updates. */
  writers: string[];
  /** ms between b's first accepted write and a's last one after it (0: none after). */
  overlapMs: number;
  /** ms between a's last renewal of the controller Lease and b's takeover, as kube-apiserver accepted them. */
  takeoverMs: number;
  /** What a printed: `leading` and `stopped` lines. */
  aOut: string;
}

/** The writes of Lease `name` among `events`: when each arrived and the holder it wrote. */
function writes(events: SeenEvent[], name: string): { at: number; holder: string }[] {
  return events
    .filter((e) => e.object.metadata?.name === name && (e.type === 'ADDED' || e.type === 'MODIFIED'))
    .map((e) => ({ at: e.at, holder: String((e.object.spec as { holderIdentity?: string } | undefined)?.holderIdentity ?? '') }));
}

/**
 * Runs the forced overlap with the election's timings and the pause, in ms; `b`, when given, is
 * the successor's own lease duration and renew deadline (a rollout that changed them).
 */
export async function forcedOverlap(o: {
  leaseMs: number; deadlineMs: number; retryMs: number; pauseMs: number; b?: { leaseMs: number; deadlineMs: number };
}): Promise<OverlapResult> {
  const cp = await KubeControlPlane.start();
  const children: ChildProcess[] = [];
  const outs: string[] = [];
  let stopWatch = () => {};
  try {
    await cp.create(LEASES, {
      apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name: 'probe' }, spec: { holderIdentity: '' },
    });
    const watch = await watchEvents(cp, LEASES);
    stopWatch = watch.stop;
    const holder = () => writes(watch.events, 'probe').at(-1)?.holder;
    const kubeconfig = await cp.kubeconfig();
    const start = (name: string, timing: { leaseMs: number; deadlineMs: number }) => {
      const args = [CANDIDATE, kubeconfig, name, String(timing.leaseMs), String(timing.deadlineMs), String(o.retryMs)];
      const child = spawn(NODE, args, { stdio: ['ignore', 'pipe', 'inherit'] });
      const i = children.push(child) - 1;
      outs[i] = '';
      child.stdout!.on('data', (d: Buffer) => (outs[i] += d.toString()));
      return () => outs[i]!;
    };
    const a = start('a', o);
    await until('a leads', () => a().includes('leading'), 10_000);
    const b = start('b', o.b ?? o);
    await until('a writes', () => holder() === 'a', 5000);
    await sleep(o.retryMs * 3);
    if (b().includes('leading')) throw new Error('b took a Lease that a renews');
    const pausedAt = performance.now();
    children[0]!.kill('SIGSTOP');
    await until('b leads', () => b().includes('leading'), 10_000 + o.pauseMs);
    await until('b writes', () => holder() === 'b', 5000);
    await sleep(Math.max(0, pausedAt + o.pauseMs - performance.now()));
    children[0]!.kill('SIGCONT');
    await until('a says it stopped', () => a().includes('stopped'), 5000);
    await sleep(1000);
    const accepted = writes(watch.events, 'probe').filter((w) => w.holder !== '');
    const lease = writes(watch.events, CONTROLLER_LEASE);
    const takeover = lease.find((w) => w.holder === 'b')!;
    const lastRenewal = lease.filter((w) => w.holder === 'a' && w.at < takeover.at).at(-1)!;
    const firstB = accepted.find((w) => w.holder === 'b');
    const lastA = accepted.filter((w) => w.holder === 'a').at(-1);
    return {
      writers: accepted.map((w) => w.holder),
      overlapMs: firstB && lastA ? Math.max(0, lastA.at - firstB.at) : 0,
      takeoverMs: takeover.at - lastRenewal.at,
      aOut: a(),
    };
  } finally {
    stopWatch();
    for (const c of children) {
      c.kill('SIGCONT');
      c.kill('SIGTERM');
      if (c.exitCode === null && c.signalCode === null) await once(c, 'exit');
    }
    await cp.stop();
  }
}
