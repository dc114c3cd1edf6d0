/**
 * The generic reflector and the informer over it against the real kube-apiserver v1.28.4 and its
 * RBAC: a refusal names the rule RBAC must allow; an informer refused lists again once the rule
 * is granted, then follows its label selector's watch as objects move in and out of it. Paged
 * lists and the relist after 410 Gone need faults on demand: reflector-faults.test.ts.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Informer } from '../../../src/k8s/informer.ts';
import { Reflector } from '../../../src/k8s/reflector.ts';
import { KubeApiError } from '../../../src/lease/kube/client.ts';
import { memoryLogger } from '../../../src/log.ts';
import { KubeControlPlane } from '../../support/control-plane.ts';
import { weftClient } from '../../support/control-plane-objects.ts';
import { until } from '../../support/until.ts';

const FLANNEL = 'system:serviceaccount:kube-flannel:flannel';
let cp: KubeControlPlane;

before(async () => {
  cp = await KubeControlPlane.start({ tokens: { weft: { user: FLANNEL } } });
  await cp.grant('weft-list-nodes', FLANNEL, [{ apiGroups: [''], resources: ['nodes'], verbs: ['list'] }]);
});
after(() => cp?.stop());

test('a reflector refused by RBAC stops with the verb and resource named', async () => {
  const http = await weftClient(cp, 'weft');
  const r = new Reflector<unknown>({
    http, path: '/apis/networking.k8s.io/v1/networkpolicies', resource: 'networkpolicies', log: memoryLogger(),
    parse: (o) => o, onList: () => {}, onChanges: () => {},
  });
  await assert.rejects(r.run(new AbortController().signal), (e: unknown) => {
    assert.ok(e instanceof KubeApiError);
    assert.equal(e.status, 403);
    assert.match(e.message, /RBAC must allow verb "list" on resource "networkpolicies"/);
    return true;
  });
});

test('an informer keeps the objects its selector picks; refused by RBAC, it says so and lists again once allowed', async () => {
  const team = (name: string, t: string) => cp.modify(`/api/v1/namespaces/${name}`, (o) => void (o.metadata!.labels = { team: t }));
  for (const [name, t] of [['ns-a', 'a'], ['ns-b', 'b'], ['ns-a2', 'a']] as const) {
    await cp.create('/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name, labels: { team: t } } });
  }
  const stop = new AbortController();
  try {
    const log = memoryLogger();
    let changes = 0;
    const informer = new Informer({
      http: await weftClient(cp, 'weft'), path: '/api/v1/namespaces', query: { labelSelector: 'team=a' }, log,
      onChange: () => changes++, refusedRetryMs: 200,
    });
    const running = informer.run(stop.signal);
    const refusal = /RBAC must allow verb "list" on resource "namespaces"/;
    const refused = () =>
      log.records.some((r) => r.level === 'error' && refusal.test(String((r.fields.err as Error | undefined)?.message)));
    await until('the refusal to be logged', refused);
    assert.equal(informer.hasSynced, false);
    await cp.grant('weft-namespaces', FLANNEL, [{ apiGroups: [''], resources: ['namespaces'], verbs: ['list', 'watch'] }]);
    await informer.synced;
    assert.deepEqual([...informer.objects.keys()].sort(), ['ns-a', 'ns-a2']);
    // Moved into and out of the selector, the watch sends them as ADDED and DELETED.
    await team('ns-b', 'a');
    await team('ns-a', 'b');
    await until('the watch to move ns-b in and ns-a out', () => informer.objects.has('ns-b') && !informer.objects.has('ns-a'));
    assert.ok(changes >= 2, 'onChange after the list and the watch');
    stop.abort();
    await running;
  } finally {
    stop.abort();
  }
});
