/**
 * API semantics Weft's clients rely on, asserted alike of the real kube-apiserver v1.28.4 and of
 * the test API server that stands in for it where a test needs faults (test/support/kube-apiserver.ts),
 * so that the stand-in is held to the real server: 409 on a stale update; the status subresource
 * keeps spec and the main resource keeps status; a strategic merge patch merges conditions by
 * type, a merge patch replaces the list; a patch that changes nothing keeps the resourceVersion;
 * a pod CIDR does not change; a list is paged in name order. Of the stand-in alone, as only it
 * compacts on cue: 410 for a continue token whose snapshot is gone.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CoreV1Api, KubeConfig, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { KubeControlPlane } from '../support/control-plane.ts';
import { KubeApiServer } from '../support/kube-apiserver.ts';
import type { Obj } from '../support/kube-apiserver.ts';

/** Asserts the semantics on nodes n1..n5 (pod CIDRs 10.244.<n>.0/24) of the server of `kubeconfig`; returns the last page's token. */
async function semantics(kubeconfig: string, node: (name: string) => Promise<Obj>): Promise<{ core: CoreV1Api; next: string }> {
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfig);
  const core = kc.makeApiClient(CoreV1Api);
  const n1 = await core.readNode({ name: 'n1' });
  await core.replaceNode({ name: 'n1', body: { ...n1, metadata: { ...n1.metadata, labels: { a: '1' } } } });
  const stale = { ...n1, metadata: { ...n1.metadata, labels: { a: '2' } } };
  await assert.rejects(core.replaceNode({ name: 'n1', body: stale }), (e: { code?: number }) => e.code === 409);
  const strategic = setHeaderOptions('Content-Type', PatchStrategy.StrategicMergePatch);
  const merge = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
  const cond = (type: string) => ({ type, status: 'False', reason: 'r', message: 'm' });
  const conditions = async () => ((await node('n1')).status as { conditions: Obj[] }).conditions;
  const both = { spec: { unschedulable: true }, status: { conditions: [cond('A'), cond('B')] } };
  await core.patchNodeStatus({ name: 'n1', body: both }, strategic);
  await core.patchNodeStatus({ name: 'n1', body: { status: { conditions: [{ ...cond('A'), status: 'True' }] } } }, strategic);
  assert.equal(((await node('n1')).spec as Obj).unschedulable, undefined, 'status subresource does not change spec');
  assert.deepEqual((await conditions()).map((c) => `${c.type}=${c.status}`), ['A=True', 'B=False']);
  await core.patchNode({ name: 'n1', body: { status: { conditions: [] }, metadata: { annotations: { x: 'y' } } } }, merge);
  assert.equal((await conditions()).length, 2, 'the main resource does not change status');
  await core.patchNodeStatus({ name: 'n1', body: { status: { conditions: [cond('C')] } } }, merge);
  assert.deepEqual((await conditions()).map((c) => c.type), ['C'], 'a merge patch replaces the list');
  const rv = ((await node('n1')).metadata as Obj).resourceVersion;
  await core.patchNodeStatus({ name: 'n1', body: { metadata: { annotations: { x: 'y' } } } }, merge);
  assert.equal(((await node('n1')).metadata as Obj).resourceVersion, rv, 'a no-op patch keeps the resourceVersion');
  const moved = core.patchNode({ name: 'n1', body: { spec: { podCIDR: '10.9.9.0/24' } } }, strategic);
  await assert.rejects(moved, (e: { code?: number }) => e.code === 422);
  const page = await core.listNode({ limit: 2 });
  assert.deepEqual(page.items.map((i) => i.metadata!.name), ['n1', 'n2']);
  const next = await core.listNode({ limit: 2, _continue: page.metadata!._continue! });
  assert.deepEqual(next.items.map((i) => i.metadata!.name), ['n3', 'n4']);
  return { core, next: next.metadata!._continue! };
}

test('the real kube-apiserver', async () => {
  const cp = await KubeControlPlane.start();
  try {
    for (let n = 1; n <= 5; n++) await cp.addNode(`n${n}`, { spec: { podCIDR: `10.244.${n}.0/24` } });
    await semantics(await cp.kubeconfig(), async (name) => (await cp.node(name))!);
  } finally {
    await cp.stop();
  }
});

test('the test API server, and its 410 for a continue token whose snapshot it compacted', async () => {
  const api = await KubeApiServer.start();
  try {
    for (let n = 1; n <= 5; n++) api.addNode({ metadata: { name: `n${n}` }, spec: { podCIDR: `10.244.${n}.0/24` } });
    const { core, next } = await semantics(await api.kubeconfig(), async (name) => api.node(name)!);
    api.compact();
    await assert.rejects(core.listNode({ limit: 2, _continue: next }), (e: { code?: number }) => e.code === 410);
  } finally {
    await api.stop();
  }
});
