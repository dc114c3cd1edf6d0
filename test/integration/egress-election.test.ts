import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { test } from 'node:test';
import { KubeApiServer } from '../support/kube-apiserver.ts';
import { until } from '../support/until.ts';

const NODE = new URL('../../node_modules/.bin/node', import.meta.url).pathname;
const CANDIDATE = new URL('../support/election-candidate.ts', import.meta.url).pathname;
const LEASE_MS = 1200;
const DEADLINE_MS = 800;

const holder = (api: KubeApiServer) =>
  (api.object('leases.coordination.k8s.io', 'probe', 'default')?.spec as { holderIdentity?: string } | undefined)?.holderIdentity;

function candidate(kubeconfig: string, name: string): { child: ChildProcess; out: () => string } {
  const child = spawn(NODE, [CANDIDATE, kubeconfig, name, String(LEASE_MS), String(DEADLINE_MS), '200'], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  return { child, out: () => out };
}

test('egress election: a leader paused with SIGSTOP past its deadline writes nothing once resumed, and its successor waits out the lease', async () => {
  const api = await KubeApiServer.start();
  const children: ChildProcess[] = [];
  try {
    api.seed('leases.coordination.k8s.io', { metadata: { namespace: 'default', name: 'probe' }, spec: { holderIdentity: '' } });
    const kubeconfig = await api.kubeconfig();
    const a = candidate(kubeconfig, 'a');
    children.push(a.child);
    await until('a leads', () => a.out().includes('leading'), 10_000);
    const b = candidate(kubeconfig, 'b');
    children.push(b.child);
    await until('a writes', () => holder(api) === 'a', 5000);
    await new Promise((r) => setTimeout(r, 500));
    assert.ok(!b.out().includes('leading'), 'b does not take a Lease that a renews');

    const pausedAt = performance.now();
    a.child.kill('SIGSTOP');
    await until('b leads', () => b.out().includes('leading'), 10_000);
    const takeoverMs = performance.now() - pausedAt;
    await until('b writes', () => holder(api) === 'b', 5000);
    a.child.kill('SIGCONT');
    await until('a says it stopped', () => a.out().includes('stopped'), 5000);
    await new Promise((r) => setTimeout(r, 1000));

    // Every update of the probe the server accepted, in order: none of a's after b's first.
    const writers = api.requests
      .filter((r) => r.verb === 'update' && r.path.endsWith('/leases/probe') && r.status === 200)
      .map((r) => (JSON.parse(r.body!) as { spec: { holderIdentity: string } }).spec.holderIdentity);
    const firstB = writers.indexOf('b');
    assert.ok(firstB > 0 && writers.slice(0, firstB).every((w) => w === 'a'));
    assert.deepEqual(writers.slice(firstB).filter((w) => w !== 'b'), [], 'a wrote after b took over');
    assert.ok(takeoverMs >= LEASE_MS, `b took over ${Math.round(takeoverMs)} ms after a paused, before the lease duration`);
    assert.equal((api.object('leases.coordination.k8s.io', 'weft-egress-controller', 'default')!.spec as { holderIdentity: string }).holderIdentity, 'b');
    assert.equal(a.out().split('\n').filter((l) => l === 'leading').length, 1, 'a did not lead again');
  } finally {
    for (const c of children) {
      c.kill('SIGCONT');
      c.kill('SIGTERM');
      if (c.exitCode === null && c.signalCode === null) await once(c, 'exit');
    }
    await api.stop();
  }
});
