/**
 * Forced overlap of two egress controller candidates (election-candidate.ts, each a process of
 * its own against one test API server): `a` leads and writes, is paused with SIGSTOP for
 * `pauseMs` (past its renew deadline and the lease duration), `b` takes over and writes, then `a`
 * is resumed. What the API server accepted tells whether the two ever acted at once.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { KubeApiServer } from './kube-apiserver.ts';
import { until } from './until.ts';

const NODE = new URL('../../node_modules/.bin/node', import.meta.url).pathname;
const CANDIDATE = new URL('./election-candidate.ts', import.meta.url).pathname;

export interface OverlapResult {
  /** The probe's writers, in the order the API server accepted their updates. */
  writers: string[];
  /** ms between b's first accepted write and a's last one after it (0: none after). */
  overlapMs: number;
  /** ms between a's last renewal of the controller Lease and b's takeover, as the API server accepted them. */
  takeoverMs: number;
  /** What a printed: `leading` and `stopped` lines. */
  aOut: string;
}

const holder = (api: KubeApiServer) =>
  (api.object('leases.coordination.k8s.io', 'probe', 'default')?.spec as { holderIdentity?: string } | undefined)?.holderIdentity;

export async function forcedOverlap(o: { leaseMs: number; deadlineMs: number; retryMs: number; pauseMs: number }): Promise<OverlapResult> {
  const api = await KubeApiServer.start();
  const children: ChildProcess[] = [];
  const outs: string[] = [];
  const start = (name: string) => {
    const child = spawn(NODE, [CANDIDATE, kubeconfig, name, String(o.leaseMs), String(o.deadlineMs), String(o.retryMs)], { stdio: ['ignore', 'pipe', 'inherit'] });
    const i = children.push(child) - 1;
    outs[i] = '';
    child.stdout!.on('data', (d: Buffer) => (outs[i] += d.toString()));
    return () => outs[i]!;
  };
  let kubeconfig = '';
  try {
    api.seed('leases.coordination.k8s.io', { metadata: { namespace: 'default', name: 'probe' }, spec: { holderIdentity: '' } });
    kubeconfig = await api.kubeconfig();
    const a = start('a');
    await until('a leads', () => a().includes('leading'), 10_000);
    const b = start('b');
    await until('a writes', () => holder(api) === 'a', 5000);
    await new Promise((r) => setTimeout(r, o.retryMs * 3));
    if (b().includes('leading')) throw new Error('b took a Lease that a renews');
    const pausedAt = performance.now();
    children[0]!.kill('SIGSTOP');
    await until('b leads', () => b().includes('leading'), 10_000 + o.pauseMs);
    await until('b writes', () => holder(api) === 'b', 5000);
    await new Promise((r) => setTimeout(r, Math.max(0, pausedAt + o.pauseMs - performance.now())));
    children[0]!.kill('SIGCONT');
    await until('a says it stopped', () => a().includes('stopped'), 5000);
    await new Promise((r) => setTimeout(r, 1000));
    const accepted = api.requests
      .filter((r) => r.verb === 'update' && r.path.endsWith('/leases/probe') && r.status === 200)
      .sort((x, y) => x.at - y.at)
      .map((r) => ({ at: r.at, writer: (JSON.parse(r.body!) as { spec: { holderIdentity: string } }).spec.holderIdentity }));
    const lease = api.requests
      .filter((r) => r.path.endsWith('/leases/weft-egress-controller') && (r.verb === 'update' || r.verb === 'create') && r.status < 300)
      .sort((x, y) => x.at - y.at)
      .map((r) => ({ at: r.at, holder: (JSON.parse(r.body!) as { spec: { holderIdentity: string } }).spec.holderIdentity }));
    const takeover = lease.find((w) => w.holder === 'b')!;
    const lastRenewal = lease.filter((w) => w.holder === 'a' && w.at < takeover.at).at(-1)!;
    const takeoverMs = takeover.at - lastRenewal.at;
    const firstB = accepted.find((w) => w.writer === 'b');
    const lastA = accepted.filter((w) => w.writer === 'a').at(-1);
    return {
      writers: accepted.map((w) => w.writer),
      overlapMs: firstB && lastA ? Math.max(0, lastA.at - firstB.at) : 0,
      takeoverMs,
      aOut: a(),
    };
  } finally {
    for (const c of children) {
      c.kill('SIGCONT');
      c.kill('SIGTERM');
      if (c.exitCode === null && c.signalCode === null) await once(c, 'exit');
    }
    await api.stop();
  }
}
