/**
 * The generic reflector against the test API server: paged lists, watch batches, a relist after
 * 410 Gone (history compacted, watches broken), and 403 naming the RBAC rule; the informer over it.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Informer } from '../../../src/k8s/informer.ts';
import { Reflector } from '../../../src/k8s/reflector.ts';
import type { Changes } from '../../../src/k8s/reflector.ts';
import { KubeApiError, kubeConfigFromFlags } from '../../../src/lease/kube/client.ts';
import { KubeHttp } from '../../../src/lease/kube/http.ts';
import { memoryLogger } from '../../../src/log.ts';
import { KubeApiServer } from '../../support/kube-apiserver.ts';
import { until } from '../../support/until.ts';

const ns = (name: string, team: string) => ({ metadata: { name, labels: { team } } });

test('a reflector lists in pages, follows the watch, and relists after 410 Gone', async () => {
  const api = await KubeApiServer.start();
  const stop = new AbortController();
  try {
    for (let i = 0; i < 7; i++) api.seed('namespaces', ns(`ns-${i}`, 'a'));
    const http = new KubeHttp(kubeConfigFromFlags({ kubeconfigFile: await api.kubeconfig() }));
    const held = new Map<string, string>();
    const lists: number[] = [];
    const batches: Changes<string>[] = [];
    const log = memoryLogger();
    const r = new Reflector<string>({
      http, path: '/api/v1/namespaces', resource: 'namespaces', log, listPageSize: 3,
      parse: (o) => (o as { metadata: { labels: { team: string } } }).metadata.labels.team,
      onList: (items) => {
        lists.push(items.size);
        held.clear();
        for (const [k, v] of items) held.set(k, v);
      },
      onChanges: (changes) => {
        batches.push(changes);
        for (const [k, v] of changes) {
          if (v === null) held.delete(k);
          else held.set(k, v);
        }
      },
    });
    const running = r.run(stop.signal);
    await until('the first list', () => lists.length === 1);
    assert.ok(['ns-0', 'ns-6', 'default'].every((n) => held.has(n)), 'ours and the server\'s own namespaces');
    assert.equal(api.requests.filter((q) => q.verb === 'list' && q.resource === 'namespaces').length, Math.ceil(held.size / 3), 'pages of three');
    api.modify('namespaces', 'ns-1', (o) => void ((o.metadata as { labels: object }).labels = { team: 'b' }));
    api.remove('namespaces', 'ns-2');
    await until('the watch to deliver both', () => held.get('ns-1') === 'b' && !held.has('ns-2'));
    // History compacted past where the watch stands, then the watch broken: resuming gets 410.
    api.silenceWatches();
    api.seed('namespaces', ns('ns-new', 'c'));
    api.compact();
    api.breakWatches();
    await until('a relist to bring ns-new', () => held.get('ns-new') === 'c', 20_000);
    assert.equal(lists.length, 2, 'a second list');
    assert.ok(!batches.some((b) => b.has('ns-new')), 'ns-new came by the relist, not the watch');
    assert.ok(log.records.some((rec) => /relisting namespaces: 410 Gone/.test(rec.msg)), 'the relist is logged with its reason');
    stop.abort();
    await running;
  } finally {
    stop.abort();
    await api.stop();
  }
});

test('a reflector refused by RBAC stops with the verb and resource named', async () => {
  const api = await KubeApiServer.start({ tokens: { admin: { user: 'admin', allow: '*' }, weft: { user: 'system:serviceaccount:kube-flannel:flannel', allow: ['list nodes'] } } });
  try {
    const http = new KubeHttp(kubeConfigFromFlags({ kubeconfigFile: await api.kubeconfig('weft') }));
    const r = new Reflector<unknown>({ http, path: '/apis/networking.k8s.io/v1/networkpolicies', resource: 'networkpolicies', log: memoryLogger(), parse: (o) => o, onList: () => {}, onChanges: () => {} });
    await assert.rejects(r.run(new AbortController().signal), (e: unknown) => {
      assert.ok(e instanceof KubeApiError);
      assert.equal(e.status, 403);
      assert.match(e.message, /RBAC must allow verb "list" on resource "networkpolicies"/);
      return true;
    });
  } finally {
    await api.stop();
  }
});

test('an informer keeps the objects its selector picks; refused by RBAC, it says so and lists again once allowed', async () => {
  const grant = { user: 'system:serviceaccount:kube-flannel:flannel', allow: ['list nodes'] };
  const api = await KubeApiServer.start({ tokens: { admin: { user: 'admin', allow: '*' }, weft: grant } });
  const stop = new AbortController();
  try {
    for (const [name, team] of [['ns-a', 'a'], ['ns-b', 'b'], ['ns-a2', 'a']] as const) api.seed('namespaces', ns(name, team));
    const http = new KubeHttp(kubeConfigFromFlags({ kubeconfigFile: await api.kubeconfig('weft') }));
    const log = memoryLogger();
    let changes = 0;
    const informer = new Informer({ http, path: '/api/v1/namespaces', query: { labelSelector: 'team=a' }, log, onChange: () => changes++, refusedRetryMs: 200 });
    const running = informer.run(stop.signal);
    await until('the refusal to be logged', () => log.records.some((r) => r.level === 'error' && /RBAC must allow verb "list" on resource "namespaces"/.test(String((r.fields.err as Error | undefined)?.message))));
    assert.equal(informer.hasSynced, false);
    grant.allow.push('list namespaces', 'watch namespaces');
    await informer.synced;
    assert.deepEqual([...informer.objects.keys()].sort(), ['ns-a', 'ns-a2']);
    api.modify('namespaces', 'ns-b', (o) => void ((o.metadata as { labels: object }).labels = { team: 'a' }));
    api.remove('namespaces', 'ns-a');
    await until('the watch to move ns-b in and ns-a out', () => informer.objects.has('ns-b') && !informer.objects.has('ns-a'));
    assert.ok(changes >= 2, 'onChange after the list and the watch');
    stop.abort();
    await running;
  } finally {
    stop.abort();
    await api.stop();
  }
});
