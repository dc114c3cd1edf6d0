/**
 * The in-repo test API server (test/support/kube-apiserver.ts) against the real
 * @kubernetes/client-node: every behaviour of kube-apiserver that Weft's controllers rely on,
 * for built-in and custom resources alike, so tests built on it test against the real semantics.
 */
import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import { request } from 'node:https';
import type { RequestOptions } from 'node:https';
import { test } from 'node:test';
import {
  ApiextensionsV1Api, CoordinationV1Api, CoreV1Api, CustomObjectsApi, KubeConfig, KubernetesObjectApi, makeInformer, NetworkingV1Api,
  PatchStrategy, setHeaderOptions, Watch,
} from '@kubernetes/client-node';
import type { KubernetesObject, V1CustomResourceDefinition } from '@kubernetes/client-node';
import { KubeApiServer } from '../support/kube-apiserver.ts';
import type { Grant, Obj } from '../support/kube-apiserver.ts';
import { sleep } from '../../src/retry.ts';
import { until } from '../support/until.ts';

const G = 'test.weft.dev';

// client-node's models name `enum`, `default` and the x-kubernetes- fields in camel case (_enum, …).

/** A cluster-scoped resource with a status subresource and a schema with a default and bounds. */
const WIDGETS: V1CustomResourceDefinition = {
  apiVersion: 'apiextensions.k8s.io/v1', kind: 'CustomResourceDefinition', metadata: { name: `widgets.${G}` },
  spec: {
    group: G, scope: 'Cluster', names: { plural: 'widgets', singular: 'widget', kind: 'Widget', listKind: 'WidgetList' },
    versions: [{
      name: 'v1', served: true, storage: true, subresources: { status: {} },
      schema: {
        openAPIV3Schema: {
          type: 'object',
          properties: {
            spec: {
              type: 'object', required: ['size'],
              properties: {
                size: { type: 'integer', minimum: 1 },
                mode: { type: 'string', _enum: ['spread', 'pack'], _default: 'spread' },
                address: { type: 'string', format: 'ipv4' },
                tags: { type: 'array', items: { type: 'string' } },
              },
            },
            status: { type: 'object', properties: { ready: { type: 'boolean' } } },
          },
        },
      },
    }],
  },
};

/** A namespaced resource without a status subresource, keeping unknown fields of its spec. */
const GADGETS: V1CustomResourceDefinition = {
  apiVersion: 'apiextensions.k8s.io/v1', kind: 'CustomResourceDefinition', metadata: { name: `gadgets.${G}` },
  spec: {
    group: G, scope: 'Namespaced', names: { plural: 'gadgets', kind: 'Gadget' },
    versions: [{
      name: 'v1', served: true, storage: true,
      schema: { openAPIV3Schema: { type: 'object', properties: { spec: { type: 'object', x_kubernetes_preserve_unknown_fields: true }, status: { type: 'object', x_kubernetes_preserve_unknown_fields: true } } } },
    }],
  },
};

interface Ctx {
  api: KubeApiServer;
  kc: KubeConfig;
  core: CoreV1Api;
  coord: CoordinationV1Api;
  net: NetworkingV1Api;
  custom: CustomObjectsApi;
  ext: ApiextensionsV1Api;
  /** A client of another token. */
  as: (token: string) => Promise<KubeConfig>;
}

async function withServer(fn: (c: Ctx) => Promise<void>, tokens?: Record<string, Grant>): Promise<void> {
  const api = await KubeApiServer.start({ tokens: tokens ?? { admin: { user: 'admin', allow: '*' } }, bookmarkIntervalMs: 100 });
  try {
    const as = async (token: string) => {
      const kc = new KubeConfig();
      kc.loadFromFile(await api.kubeconfig(token));
      return kc;
    };
    const kc = await as('admin');
    await fn({
      api, kc, as, core: kc.makeApiClient(CoreV1Api), coord: kc.makeApiClient(CoordinationV1Api), net: kc.makeApiClient(NetworkingV1Api),
      custom: kc.makeApiClient(CustomObjectsApi), ext: kc.makeApiClient(ApiextensionsV1Api),
    });
  } finally {
    await api.stop();
  }
}

/** Asserts `p` fails with a Status of this code and reason, its message matching `message`. */
async function rejectsWith(p: Promise<unknown>, code: number, reason: string, message?: RegExp): Promise<Obj> {
  let status: Obj | undefined;
  await assert.rejects(p, (e: { code?: number; body?: unknown }) => {
    status = (typeof e.body === 'string' ? JSON.parse(e.body) : e.body) as Obj;
    return e.code === code;
  });
  assert.equal(status?.kind, 'Status');
  assert.equal(status?.code, code);
  assert.equal(status?.reason, reason, String(status?.message));
  if (message) assert.match(String(status?.message), message);
  return status!;
}

const strategic = setHeaderOptions('Content-Type', PatchStrategy.StrategicMergePatch);
const merge = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);

const pod = (name: string, labels: Record<string, string> = {}, nodeName = 'node-1') => ({
  metadata: { name, labels },
  spec: { nodeName, containers: [{ name: 'main', image: 'busybox', ports: [{ name: 'http', containerPort: 80 }] }] },
});

/** Collects the events of a client-node Watch; `stop` ends it. */
async function collect(kc: KubeConfig, path: string, query: Record<string, string | number | boolean>) {
  const events: { type: string; object: Obj }[] = [];
  let ended: unknown = 'open';
  const req = await new Watch(kc).watch(path, query, (type, object) => events.push({ type, object: object as Obj }), (err) => void (ended = err));
  return { events, ended: () => ended, stop: () => req.abort(), names: (type?: string) => events.filter((e) => !type || e.type === type).map((e) => (e.object.metadata as Obj).name) };
}

test('pods: created in an existing namespace only, defaults, AlreadyExists, spec immutable, status only through /status with podIPs', async () => {
  await withServer(async ({ api, core }) => {
    await rejectsWith(core.createNamespacedPod({ namespace: 'x', body: pod('a') }), 404, 'NotFound', /^namespaces "x" not found$/);
    await core.createNamespace({ body: { metadata: { name: 'x', labels: { team: 'red' } } } });
    const created = await core.createNamespacedPod({ namespace: 'x', body: { ...pod('a', { app: 'web' }), status: { podIP: '10.244.1.5' } } });
    assert.match(created.metadata!.uid!, /^[0-9a-f]{8}-[0-9a-f]{4}-/);
    assert.ok(created.metadata!.creationTimestamp instanceof Date);
    assert.equal(created.status?.phase, 'Pending', 'status on create is the server\'s');
    assert.equal(created.status?.podIP, undefined);
    assert.equal(created.spec!.containers[0]!.ports![0]!.protocol, 'TCP', 'protocol defaults to TCP');
    const conflict = await rejectsWith(core.createNamespacedPod({ namespace: 'x', body: pod('a') }), 409, 'AlreadyExists', /^pods "a" already exists$/);
    assert.deepEqual(conflict.details, { name: 'a', kind: 'pods' });
    await rejectsWith(core.createNamespacedPod({ namespace: 'x', body: { metadata: { name: 'b' }, spec: { containers: [] } } }), 422, 'Invalid', /^Pod "b" is invalid: spec.containers: Required value$/);
    await rejectsWith(core.patchNamespacedPod({ name: 'a', namespace: 'x', body: { spec: { nodeName: 'node-2' } } }, merge), 422, 'Invalid', /pod updates may not change fields/);

    const ips = { podIP: '10.244.1.5', podIPs: [{ ip: '10.244.1.5' }, { ip: 'fd00:10:244:1::5' }], phase: 'Running' };
    await core.patchNamespacedPod({ name: 'a', namespace: 'x', body: { metadata: { labels: { app: 'db' } }, status: ips } }, merge);
    let stored = api.object('pods', 'a', 'x')!;
    assert.equal((stored.metadata as Obj & { labels: Obj }).labels.app, 'db');
    assert.equal((stored.status as Obj).podIP, undefined, 'the main resource ignores status');
    await core.patchNamespacedPodStatus({ name: 'a', namespace: 'x', body: { spec: { nodeName: 'elsewhere' }, status: ips } }, strategic);
    stored = api.object('pods', 'a', 'x')!;
    assert.deepEqual((stored.status as Obj).podIPs, ips.podIPs);
    assert.equal((stored.spec as Obj).nodeName, 'node-1', '/status ignores spec');
    const read = await core.readNamespacedPod({ name: 'a', namespace: 'x' });
    assert.deepEqual(read.status!.podIPs!.map((p) => p.ip), ['10.244.1.5', 'fd00:10:244:1::5']);
    await rejectsWith(core.patchNamespacedPodStatus({ name: 'a', namespace: 'x', body: { status: { podIP: '10.244.1.6' } } }, strategic), 422, 'Invalid', /status.podIPs\[0\].ip/);

    await core.patchNamespacedPod({ name: 'a', namespace: 'x', body: { spec: { containers: [{ name: 'main', image: 'busybox:2' }] } } }, strategic);
    const containers = (api.object('pods', 'a', 'x')!.spec as Obj).containers as Obj[];
    assert.deepEqual(containers.map((c) => [c.name, c.image, (c.ports as Obj[]).length]), [['main', 'busybox:2', 1]], 'strategic merge by container name');

    const deleted = await core.deleteNamespacedPod({ name: 'a', namespace: 'x' });
    assert.equal(deleted.metadata?.name, 'a', 'a Pod delete answers with the Pod');
    await rejectsWith(core.readNamespacedPod({ name: 'a', namespace: 'x' }), 404, 'NotFound', /^pods "a" not found$/);
  });
});

test('namespaces: the name label, cluster-scoped URLs, deletion removes their content; system namespaces exist', async () => {
  await withServer(async ({ api, core, coord }) => {
    const names = (await core.listNamespace()).items.map((n) => n.metadata!.name);
    assert.deepEqual(names, ['default', 'kube-node-lease', 'kube-public', 'kube-system']);
    const ns = await core.createNamespace({ body: { metadata: { name: 'y', labels: { team: 'blue' } } } });
    assert.deepEqual(ns.metadata!.labels, { team: 'blue', 'kubernetes.io/metadata.name': 'y' });
    assert.equal(ns.status?.phase, 'Active');
    await core.patchNamespace({ name: 'y', body: { metadata: { labels: { 'kubernetes.io/metadata.name': 'other', team: null } } } }, merge);
    assert.deepEqual((api.object('namespaces', 'y')!.metadata as Obj).labels, { 'kubernetes.io/metadata.name': 'y' }, 'the name label cannot be changed');
    await rejectsWith(core.createNamespace({ body: { metadata: { name: 'Bad_Name' } } }), 422, 'Invalid', /metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 label/);
    await core.createNamespacedPod({ namespace: 'y', body: pod('p') });
    await coord.createNamespacedLease({ namespace: 'y', body: { metadata: { name: 'l' }, spec: {} } });
    await core.createNamespacedPod({ namespace: 'default', body: pod('p') });
    // client-node types the answer as a Status; the apiserver answers with the Namespace, Terminating.
    const gone = (await core.deleteNamespace({ name: 'y' })) as unknown as { status?: { phase?: string } };
    assert.equal(gone.status?.phase, 'Terminating');
    assert.equal(api.object('pods', 'p', 'y'), undefined);
    assert.equal(api.object('leases.coordination.k8s.io', 'l', 'y'), undefined);
    assert.ok(api.object('pods', 'p', 'default'), 'other namespaces keep theirs');
    assert.equal(api.object('namespaces', 'y'), undefined);
  });
});

test('leases: create, update with 409 on a stale resourceVersion, unconditional update, merge and JSON patch, delete answers a Status', async () => {
  await withServer(async ({ coord }) => {
    const namespace = 'kube-system';
    const spec = { holderIdentity: 'node-1', leaseDurationSeconds: 15, renewTime: new Date('2026-01-01T00:00:00.123456Z') };
    const lease = await coord.createNamespacedLease({ namespace, body: { metadata: { name: 'weft-egress' }, spec } });
    assert.equal(lease.spec!.holderIdentity, 'node-1');
    await rejectsWith(coord.createNamespacedLease({ namespace, body: { metadata: { name: 'weft-egress' }, spec } }), 409, 'AlreadyExists',
      /^leases.coordination.k8s.io "weft-egress" already exists$/);
    const renewed = await coord.replaceNamespacedLease({ name: 'weft-egress', namespace, body: { ...lease, spec: { ...lease.spec, holderIdentity: 'node-2' } } });
    assert.notEqual(renewed.metadata!.resourceVersion, lease.metadata!.resourceVersion);
    const stale = await rejectsWith(coord.replaceNamespacedLease({ name: 'weft-egress', namespace, body: { ...lease, spec: { ...lease.spec, holderIdentity: 'node-3' } } }),
      409, 'Conflict', /^Operation cannot be fulfilled on leases.coordination.k8s.io "weft-egress": the object has been modified/);
    assert.deepEqual(stale.details, { name: 'weft-egress', group: 'coordination.k8s.io', kind: 'leases' });
    const { resourceVersion: _, ...metaNoRv } = renewed.metadata!;
    const forced = await coord.replaceNamespacedLease({ name: 'weft-egress', namespace, body: { ...renewed, metadata: metaNoRv, spec: { ...renewed.spec, holderIdentity: 'node-3' } } });
    assert.equal(forced.spec!.holderIdentity, 'node-3', 'a Lease allows an update without resourceVersion');
    await rejectsWith(coord.patchNamespacedLease({ name: 'weft-egress', namespace, body: { spec: { leaseDurationSeconds: 0 } } }, merge), 422, 'Invalid',
      /^Lease.coordination.k8s.io "weft-egress" is invalid: spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0$/);
    await coord.patchNamespacedLease({ name: 'weft-egress', namespace, body: [{ op: 'add', path: '/spec/leaseTransitions', value: 2 }, { op: 'test', path: '/spec/holderIdentity', value: 'node-3' }] });
    await rejectsWith(coord.patchNamespacedLease({ name: 'weft-egress', namespace, body: [{ op: 'test', path: '/spec/holderIdentity', value: 'node-1' }] }), 422, 'Invalid');
    await rejectsWith(coord.patchNamespacedLease({ name: 'weft-egress', namespace, body: [{ op: 'replace', path: '/spec/acquireTime', value: 'x' }] }), 422, 'Invalid', /does not exist/);
    assert.equal((await coord.readNamespacedLease({ name: 'weft-egress', namespace })).spec!.leaseTransitions, 2);
    const status = await coord.deleteNamespacedLease({ name: 'weft-egress', namespace });
    assert.equal(status.status, 'Success');
    assert.equal(status.details?.uid, lease.metadata!.uid);
    await rejectsWith(coord.deleteNamespacedLease({ name: 'weft-egress', namespace }), 404, 'NotFound');
  });
});

test('network policies: policyTypes and protocol defaults, generation bumped by spec changes only, list by label across namespaces', async () => {
  await withServer(async ({ core, net }) => {
    await core.createNamespace({ body: { metadata: { name: 'x' } } });
    const np = await net.createNamespacedNetworkPolicy({
      namespace: 'x', body: {
        metadata: { name: 'allow', labels: { tier: 'web' } },
        spec: { podSelector: { matchLabels: { app: 'a' } }, egress: [{ ports: [{ port: 53 }, { port: 1000, endPort: 2000, protocol: 'UDP' }] }] },
      },
    });
    assert.deepEqual(np.spec!.policyTypes, ['Ingress', 'Egress']);
    assert.deepEqual(np.spec!.egress![0]!.ports!.map((p) => p.protocol), ['TCP', 'UDP']);
    assert.equal(np.metadata!.generation, 1);
    const relabelled = await net.patchNamespacedNetworkPolicy({ name: 'allow', namespace: 'x', body: { metadata: { labels: { tier: 'db' } } } }, merge);
    assert.equal(relabelled.metadata!.generation, 1, 'metadata changes keep the generation');
    const changed = await net.patchNamespacedNetworkPolicy({ name: 'allow', namespace: 'x', body: { spec: { ingress: [{}] } } }, merge);
    assert.equal(changed.metadata!.generation, 2);
    await rejectsWith(net.patchNamespacedNetworkPolicy({ name: 'allow', namespace: 'x', body: { spec: { egress: [{ ports: [{ port: 5, endPort: 4 }] }] } } }, merge),
      422, 'Invalid', /spec.egress\[0\].ports\[0\].endPort/);
    await net.createNamespacedNetworkPolicy({ namespace: 'default', body: { metadata: { name: 'deny', labels: { tier: 'db' } }, spec: { podSelector: {} } } });
    const all = await net.listNetworkPolicyForAllNamespaces({ labelSelector: 'tier in (db)' });
    assert.deepEqual(all.items.map((i) => `${i.metadata!.namespace}/${i.metadata!.name}`), ['default/deny', 'x/allow']);
    assert.deepEqual((await net.listNamespacedNetworkPolicy({ namespace: 'x' })).items.map((i) => i.metadata!.name), ['allow']);
  });
});

test('selectors and paging: label selector operators, field selectors per resource, 400 for unsupported ones, pages of a consistent snapshot, 410 with an inconsistent continue token', async () => {
  await withServer(async ({ api, core }) => {
    const spec = { containers: [{ name: 'c', image: 'i' }] };
    for (const [name, labels, node] of [['a', { app: 'web', tier: 'front' }, 'n1'], ['b', { app: 'web' }, 'n2'], ['c', { app: 'db', tier: 'back' }, 'n1'], ['d', {}, 'n2']] as const) {
      await core.createNamespacedPod({ namespace: 'default', body: { metadata: { name, labels }, spec: { ...spec, nodeName: node } } });
    }
    const names = async (q: { labelSelector?: string; fieldSelector?: string }) => (await core.listNamespacedPod({ namespace: 'default', ...q })).items.map((p) => p.metadata!.name);
    assert.deepEqual(await names({ labelSelector: 'app=web' }), ['a', 'b']);
    assert.deepEqual(await names({ labelSelector: 'app!=web' }), ['c', 'd']);
    assert.deepEqual(await names({ labelSelector: 'app in (web, db),tier' }), ['a', 'c']);
    assert.deepEqual(await names({ labelSelector: 'app,!tier' }), ['b']);
    assert.deepEqual(await names({ labelSelector: 'tier notin (front)' }), ['b', 'c', 'd']);
    assert.deepEqual(await names({ fieldSelector: 'spec.nodeName=n1' }), ['a', 'c']);
    assert.deepEqual(await names({ fieldSelector: 'metadata.name!=a,spec.nodeName==n1' }), ['c']);
    assert.deepEqual((await core.listNode({ fieldSelector: 'metadata.name=nothing' })).items, []);
    await rejectsWith(names({ fieldSelector: 'spec.schedulerName=x,spec.bogus=1' }), 400, 'BadRequest', /^field label not supported: spec.bogus$/);
    await rejectsWith(core.listNode({ fieldSelector: 'spec.nodeName=n1' }), 400, 'BadRequest', /field label not supported: spec.nodeName/);
    await rejectsWith(names({ labelSelector: 'app in web' }), 400, 'BadRequest', /unable to parse requirement/);

    const first = await core.listNamespacedPod({ namespace: 'default', limit: 2 });
    assert.deepEqual(first.items.map((p) => p.metadata!.name), ['a', 'b']);
    assert.equal(first.metadata!.remainingItemCount, 2);
    await core.deleteNamespacedPod({ name: 'c', namespace: 'default' });
    await core.createNamespacedPod({ namespace: 'default', body: { metadata: { name: 'bb' }, spec } });
    const second = await core.listNamespacedPod({ namespace: 'default', limit: 2, _continue: first.metadata!._continue! });
    assert.deepEqual(second.items.map((p) => p.metadata!.name), ['c', 'd'], 'the snapshot of the first page');
    assert.equal(second.metadata!.resourceVersion, first.metadata!.resourceVersion);
    assert.equal(second.metadata!._continue, undefined);
    const selected = await core.listNamespacedPod({ namespace: 'default', labelSelector: 'app', limit: 1 });
    assert.equal(selected.metadata!.remainingItemCount, undefined, 'no count with a selector');
    api.compact();
    const expired = await rejectsWith(core.listNamespacedPod({ namespace: 'default', limit: 2, _continue: first.metadata!._continue! }), 410, 'Expired', /too old to display a consistent list/);
    const rest = await core.listNamespacedPod({ namespace: 'default', _continue: (expired.metadata as Obj).continue as string });
    assert.deepEqual(rest.items.map((p) => p.metadata!.name), ['bb', 'd'], 'the inconsistent continue goes on from the latest state');
    await rejectsWith(core.listNamespacedPod({ namespace: 'default', resourceVersion: String(Number(api.resourceVersion) + 100) }), 504, 'Timeout', /Too large resource version/);
  });
});

test('custom resources: a CRD makes them served (cluster-scoped and namespaced), schema pruning, defaults and validation, status subresource, generation, conflicts', async () => {
  await withServer(async ({ api, custom, ext, core }) => {
    const w = { group: G, version: 'v1', plural: 'widgets' };
    await rejectsWith(custom.listClusterCustomObject(w), 404, 'NotFound', /could not find the requested resource/);
    const crd = await ext.createCustomResourceDefinition({ body: WIDGETS });
    assert.ok(crd.status!.conditions!.some((c) => c.type === 'Established' && c.status === 'True'));
    await sleep(1000); // timestamps have whole seconds: a rewritten condition time would differ now
    const same = await ext.patchCustomResourceDefinition({ name: `widgets.${G}`, body: {} }, merge);
    assert.equal(same.metadata!.resourceVersion, crd.metadata!.resourceVersion, 'a write that changes nothing stores nothing');
    await ext.createCustomResourceDefinition({ body: GADGETS });
    await rejectsWith(ext.createCustomResourceDefinition({ body: { ...WIDGETS, metadata: { name: 'wrong' } } }), 422, 'Invalid', /metadata.name/);

    const created = await custom.createClusterCustomObject({
      ...w, body: { apiVersion: `${G}/v1`, kind: 'Widget', metadata: { name: 'w1', labels: { k: 'v' } }, spec: { size: 1, unknown: 'x' }, status: { ready: true } },
    }) as Obj;
    assert.deepEqual(created.spec, { size: 1, mode: 'spread' }, 'pruned and defaulted');
    assert.equal(created.status, undefined, 'status is not set on create with a status subresource');
    assert.equal((created.metadata as Obj).generation, 1);
    await rejectsWith(custom.createClusterCustomObject({ ...w, body: { apiVersion: `${G}/v1`, kind: 'Widget', metadata: { name: 'w1' }, spec: { size: 1 } } }), 409, 'AlreadyExists',
      /^widgets.test.weft.dev "w1" already exists$/);
    const bad = await rejectsWith(custom.createClusterCustomObject({
      ...w, body: { apiVersion: `${G}/v1`, kind: 'Widget', metadata: { name: 'w2' }, spec: { size: 0, mode: 'other', address: '10.0.0.300', tags: 'x' } },
    }), 422, 'Invalid', /^Widget.test.weft.dev "w2" is invalid: \[/);
    assert.deepEqual(((bad.details as Obj).causes as Obj[]).map((c) => c.field), ['spec.size', 'spec.mode', 'spec.address', 'spec.tags']);
    await rejectsWith(custom.createClusterCustomObject({ ...w, body: { apiVersion: `${G}/v1`, kind: 'Widget', metadata: { name: 'w3' }, spec: {} } }), 422, 'Invalid', /spec.size: Required value/);

    const status = await custom.patchClusterCustomObjectStatus({ ...w, name: 'w1', body: { spec: { size: 9 }, metadata: { labels: { k: 'changed' } }, status: { ready: true } } }, merge) as Obj;
    assert.deepEqual(status.status, { ready: true });
    assert.deepEqual([(status.spec as Obj).size, ((status.metadata as Obj).labels as Obj).k, (status.metadata as Obj).generation], [1, 'v', 1], '/status changes only status');
    const main = await custom.patchClusterCustomObject({ ...w, name: 'w1', body: { spec: { size: 2 }, status: { ready: false } } }, merge) as Obj;
    assert.deepEqual([(main.spec as Obj).size, (main.status as Obj).ready, (main.metadata as Obj).generation], [2, true, 2], 'the main resource ignores status and bumps generation');
    const relabelled = await custom.patchClusterCustomObject({ ...w, name: 'w1', body: [{ op: 'add', path: '/metadata/labels/extra', value: 'y' }] }) as Obj;
    assert.equal((relabelled.metadata as Obj).generation, 2, 'JSON patch (client-node\'s default) of metadata keeps the generation');
    await rejectsWith(custom.patchClusterCustomObject({ ...w, name: 'w1', body: { spec: { size: 3 } } }, strategic), 415, 'UnsupportedMediaType');

    const { resourceVersion: rv, ...noRv } = relabelled.metadata as Obj;
    await rejectsWith(custom.replaceClusterCustomObject({ ...w, name: 'w1', body: { ...relabelled, metadata: noRv } }), 422, 'Invalid', /metadata.resourceVersion: Invalid value: 0: must be specified for an update/);
    await custom.replaceClusterCustomObject({ ...w, name: 'w1', body: { ...relabelled, spec: { size: 5 } } });
    await rejectsWith(custom.replaceClusterCustomObject({ ...w, name: 'w1', body: { ...relabelled, metadata: { ...noRv, resourceVersion: rv }, spec: { size: 6 } } }), 409, 'Conflict');
    await rejectsWith(custom.replaceClusterCustomObjectStatus({ ...w, name: 'w1', body: { ...relabelled, status: { ready: 'yes' } } }), 409, 'Conflict');

    const g = { group: G, version: 'v1', plural: 'gadgets' };
    await rejectsWith(custom.createNamespacedCustomObject({ ...g, namespace: 'nowhere', body: { apiVersion: `${G}/v1`, kind: 'Gadget', metadata: { name: 'g' } } }), 404, 'NotFound', /namespaces "nowhere"/);
    await custom.createNamespacedCustomObject({ ...g, namespace: 'default', body: { apiVersion: `${G}/v1`, kind: 'Gadget', metadata: { name: 'g', labels: { a: 'b' } }, spec: { any: { thing: 1 } }, status: { s: 1 } } });
    const gadget = await custom.getNamespacedCustomObject({ ...g, namespace: 'default', name: 'g' }) as Obj;
    assert.deepEqual([gadget.spec, gadget.status], [{ any: { thing: 1 } }, { s: 1 }], 'no status subresource: status is plain data');
    await rejectsWith(custom.getNamespacedCustomObjectStatus({ ...g, namespace: 'default', name: 'g' }), 404, 'NotFound');
    const changed = await custom.patchNamespacedCustomObject({ ...g, namespace: 'default', name: 'g', body: { status: { s: 2 } } }, merge) as Obj;
    assert.equal((changed.metadata as Obj).generation, 2, 'without a status subresource a status change is a change of content');
    const listed = await custom.listNamespacedCustomObject({ ...g, namespace: 'default', labelSelector: 'a=b' }) as Obj;
    assert.deepEqual(((listed.items as Obj[])).map((i) => [i.kind, i.apiVersion]), [['Gadget', `${G}/v1`]], 'custom resource list items keep kind and apiVersion');
    await rejectsWith(custom.getClusterCustomObject({ ...g, name: 'g' }), 404, 'NotFound');

    await ext.deleteCustomResourceDefinition({ name: `gadgets.${G}` });
    await rejectsWith(custom.listNamespacedCustomObject({ ...g, namespace: 'default' }), 404, 'NotFound');
    await ext.createCustomResourceDefinition({ body: GADGETS });
    assert.deepEqual((await custom.listNamespacedCustomObject({ ...g, namespace: 'default' }) as Obj).items, [], 'objects went with their CRD');
    assert.ok(api.object(`widgets.${G}`, 'w1'));
    assert.ok((await core.listNamespace()).items.length > 0);
  });
});

test('finalizers: delete only marks the object; removing the last finalizer deletes it; delete preconditions', async () => {
  await withServer(async ({ custom, ext }) => {
    await ext.createCustomResourceDefinition({ body: WIDGETS });
    const w = { group: G, version: 'v1', plural: 'widgets' };
    const made = await custom.createClusterCustomObject({ ...w, body: { apiVersion: `${G}/v1`, kind: 'Widget', metadata: { name: 'w', finalizers: ['weft.dev/cleanup'] }, spec: { size: 1 } } }) as Obj;
    await rejectsWith(custom.deleteClusterCustomObject({ ...w, name: 'w', body: { preconditions: { uid: 'not-it' } } }), 409, 'Conflict', /Precondition failed: UID in precondition: not-it/);
    const marked = await custom.deleteClusterCustomObject({ ...w, name: 'w' }) as Obj;
    assert.match(String((marked.metadata as Obj).deletionTimestamp), /^\d{4}-/);
    assert.equal((marked.metadata as Obj).generation, 2);
    const still = await custom.getClusterCustomObject({ ...w, name: 'w' }) as Obj;
    assert.equal((still.metadata as Obj).uid, (made.metadata as Obj).uid);
    await custom.patchClusterCustomObject({ ...w, name: 'w', body: { metadata: { deletionTimestamp: null } } }, merge);
    assert.ok(((await custom.getClusterCustomObject({ ...w, name: 'w' }) as Obj).metadata as Obj).deletionTimestamp, 'deletionTimestamp is the server\'s');
    await custom.patchClusterCustomObject({ ...w, name: 'w', body: [{ op: 'remove', path: '/metadata/finalizers' }] });
    await rejectsWith(custom.getClusterCustomObject({ ...w, name: 'w' }), 404, 'NotFound');
  });
});

test('watch: from a resourceVersion, bookmarks, selectors (ADDED/DELETED when an object moves in or out), 410 ERROR when compacted, namespaced and custom resources', async () => {
  await withServer(async ({ api, kc, core, custom, ext }) => {
    await core.createNamespace({ body: { metadata: { name: 'x' } } });
    await core.createNamespacedPod({ namespace: 'x', body: pod('before', { app: 'web' }) });
    const list = await core.listNamespacedPod({ namespace: 'x' });
    const rv = list.metadata!.resourceVersion!;
    await core.createNamespacedPod({ namespace: 'x', body: pod('a', { app: 'web' }) });
    await core.createNamespacedPod({ namespace: 'default', body: pod('elsewhere', { app: 'web' }) });
    const selected = await collect(kc, '/api/v1/namespaces/x/pods', { resourceVersion: rv, labelSelector: 'app=web', allowWatchBookmarks: true });
    const everything = await collect(kc, '/api/v1/pods', {});
    try {
      await until('the change after the list', () => selected.names('ADDED').join() === 'a');
      await until('the current pods as ADDED', () => everything.names('ADDED').length === 3);
      await core.patchNamespacedPod({ name: 'a', namespace: 'x', body: { metadata: { labels: { app: 'db' } } } }, merge);
      await core.patchNamespacedPod({ name: 'before', namespace: 'x', body: { metadata: { annotations: { k: 'v' } } } }, merge);
      await core.patchNamespacedPod({ name: 'a', namespace: 'x', body: { metadata: { labels: { app: 'web' } } } }, merge);
      await core.deleteNamespacedPod({ name: 'a', namespace: 'x' });
      await until('the moves through the selector', () => selected.events.filter((e) => e.type !== 'BOOKMARK').length === 5);
      assert.deepEqual(selected.events.filter((e) => e.type !== 'BOOKMARK').map((e) => `${e.type} ${String((e.object.metadata as Obj).name)}`),
        ['ADDED a', 'DELETED a', 'MODIFIED before', 'ADDED a', 'DELETED a']);
      const leaving = selected.events[1]!.object;
      assert.equal((leaving.metadata as Obj & { labels: Obj }).labels.app, 'web', 'DELETED carries the content that matched');
      assert.ok(Number((leaving.metadata as Obj).resourceVersion) > Number(rv));
      await until('a bookmark', () => selected.events.some((e) => e.type === 'BOOKMARK'));
      const bm = selected.events.find((e) => e.type === 'BOOKMARK')!.object;
      assert.deepEqual(Object.keys(bm.metadata as Obj), ['resourceVersion']);
      assert.equal(bm.kind, 'Pod');
      assert.ok(!everything.events.some((e) => e.type === 'BOOKMARK'), 'bookmarks only when asked for');
      assert.equal(everything.names('DELETED').join(), 'a');
    } finally {
      selected.stop();
      everything.stop();
    }

    api.compact();
    const old = await collect(kc, '/api/v1/namespaces/x/pods', { resourceVersion: rv });
    await until('the watch ends', () => old.ended() !== 'open');
    assert.deepEqual(old.events.map((e) => [e.type, e.object.code, e.object.reason]), [['ERROR', 410, 'Expired']]);

    await ext.createCustomResourceDefinition({ body: WIDGETS });
    const widgets = await collect(kc, `/apis/${G}/v1/widgets`, { sendInitialEvents: true, resourceVersionMatch: 'NotOlderThan', allowWatchBookmarks: true });
    try {
      await custom.createClusterCustomObject({ group: G, version: 'v1', plural: 'widgets', body: { apiVersion: `${G}/v1`, kind: 'Widget', metadata: { name: 'w' }, spec: { size: 1 } } });
      await custom.patchClusterCustomObjectStatus({ group: G, version: 'v1', plural: 'widgets', name: 'w', body: { status: { ready: true } } }, merge);
      await until('the widget events', () => widgets.names('MODIFIED').length === 1);
      assert.deepEqual((widgets.events[0]!.object.metadata as Obj).annotations, { 'k8s.io/initial-events-end': 'true' }, 'the end of the (empty) initial events');
      assert.deepEqual(widgets.events.filter((e) => e.type !== 'BOOKMARK').map((e) => [e.type, e.object.kind, e.object.status]), [['ADDED', 'Widget', undefined], ['MODIFIED', 'Widget', { ready: true }]]);
    } finally {
      widgets.stop();
    }
  });
});

test('informers: client-node\'s ListWatch over Pods by label and over a custom resource, relisting after 410 without losing a change', async () => {
  await withServer(async ({ api, kc, core, custom, ext }) => {
    await ext.createCustomResourceDefinition({ body: GADGETS });
    const g = { group: G, version: 'v1', plural: 'gadgets' };
    const gadget = (name: string) => ({ apiVersion: `${G}/v1`, kind: 'Gadget', metadata: { name }, spec: { n: name } });
    await custom.createNamespacedCustomObject({ ...g, namespace: 'default', body: gadget('one') });
    const gadgets = makeInformer(kc, `/apis/${G}/v1/namespaces/default/gadgets`,
      async () => (await custom.listNamespacedCustomObject({ ...g, namespace: 'default' })) as { items: KubernetesObject[]; metadata?: { resourceVersion?: string } });
    const pods = makeInformer(kc, '/api/v1/pods', () => core.listPodForAllNamespaces({ labelSelector: 'role=gw' }), 'role=gw');
    // client-node's informers stop on a broken watch; the owner restarts them, as controllers do.
    let stopping = false;
    for (const inf of [gadgets, pods]) inf.on('error', () => void setTimeout(() => void (stopping || inf.start()), 50));
    const names = (inf: { list(): readonly KubernetesObject[] }) => inf.list().map((o) => o.metadata!.name).sort().join();
    await gadgets.start();
    await pods.start();
    try {
      await until('the first list', () => names(gadgets) === 'one');
      await custom.createNamespacedCustomObject({ ...g, namespace: 'default', body: gadget('two') });
      await core.createNamespacedPod({ namespace: 'default', body: pod('p1', { role: 'gw' }) });
      await core.createNamespacedPod({ namespace: 'default', body: pod('p2', {}) });
      await until('the watches', () => names(gadgets) === 'one,two' && names(pods) === 'p1');
      await core.patchNamespacedPod({ name: 'p2', namespace: 'default', body: { metadata: { labels: { role: 'gw' } } } }, merge);
      await core.patchNamespacedPod({ name: 'p1', namespace: 'default', body: { metadata: { labels: { role: null } } } }, merge);
      await until('a relabelled pod moves in, the other out', () => names(pods) === 'p2');

      api.breakWatches();
      await custom.deleteNamespacedCustomObject({ ...g, namespace: 'default', name: 'one' });
      await custom.createNamespacedCustomObject({ ...g, namespace: 'default', body: gadget('three') });
      api.compact();
      await until('the relist after 410', () => names(gadgets) === 'three,two');
      const lists = api.requests.filter((r) => r.verb === 'list' && r.resource === 'gadgets').length;
      assert.ok(lists >= 2, `listed again (${lists} lists)`);
    } finally {
      stopping = true;
      await gadgets.stop();
      await pods.stop();
    }
  });
});

test('discovery: /api, /apis and group versions list every served resource, so KubernetesObjectApi works on custom resources', async () => {
  await withServer(async ({ kc, ext }) => {
    await ext.createCustomResourceDefinition({ body: WIDGETS });
    const objects = KubernetesObjectApi.makeApiClient(kc);
    await objects.create({ apiVersion: `${G}/v1`, kind: 'Widget', metadata: { name: 'w' }, spec: { size: 3 } } as KubernetesObject);
    const read = await objects.read({ apiVersion: `${G}/v1`, kind: 'Widget', metadata: { name: 'w' } }) as KubernetesObject & { spec: Obj };
    assert.equal(read.spec.size, 3);
    const lease = await objects.create({ apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name: 'l', namespace: 'default' }, spec: {} } as KubernetesObject);
    assert.equal(lease.metadata!.namespace, 'default');
    const raw = async (path: string): Promise<Obj> => {
      const opts: RequestOptions = {};
      await kc.applyToHTTPSOptions(opts);
      const res = await new Promise<IncomingMessage>((resolve, reject) => request(`${kc.getCurrentCluster()!.server}${path}`, opts, resolve).on('error', reject).end());
      let text = '';
      for await (const c of res) text += String(c);
      return JSON.parse(text) as Obj;
    };
    const v1 = (await raw('/api/v1')).resources as Obj[];
    assert.ok(v1.some((r) => r.name === 'pods/status' && r.namespaced === true));
    assert.ok(v1.some((r) => r.name === 'nodes' && r.namespaced === false && r.kind === 'Node'));
    const groups = ((await raw('/apis')).groups as Obj[]).map((x) => x.name);
    for (const name of ['coordination.k8s.io', 'networking.k8s.io', 'apiextensions.k8s.io', G]) assert.ok(groups.includes(name), name);
    assert.deepEqual(((await raw(`/apis/${G}/v1`)).resources as Obj[]).map((r) => r.name), ['widgets', 'widgets/status']);
  });
});

test('RBAC allow-lists name grouped resources and subresources as kubectl does; 403 says user, verb, resource, group and scope', async () => {
  const tokens: Record<string, Grant> = {
    admin: { user: 'admin', allow: '*' },
    ctl: { user: 'system:serviceaccount:kube-system:weft', allow: ['get leases.coordination.k8s.io', `list widgets.${G}`, `update widgets.${G}/status`] },
  };
  await withServer(async ({ as, coord, ext, custom }) => {
    await ext.createCustomResourceDefinition({ body: WIDGETS });
    await coord.createNamespacedLease({ namespace: 'kube-system', body: { metadata: { name: 'l' }, spec: {} } });
    const w = await custom.createClusterCustomObject({ group: G, version: 'v1', plural: 'widgets', body: { apiVersion: `${G}/v1`, kind: 'Widget', metadata: { name: 'w' }, spec: { size: 1 } } }) as Obj;
    const kc = await as('ctl');
    const lim = { coord: kc.makeApiClient(CoordinationV1Api), custom: kc.makeApiClient(CustomObjectsApi) };
    assert.equal((await lim.coord.readNamespacedLease({ name: 'l', namespace: 'kube-system' })).metadata!.name, 'l');
    const denied = await rejectsWith(lim.coord.replaceNamespacedLease({ name: 'l', namespace: 'kube-system', body: { metadata: { name: 'l' }, spec: {} } }), 403, 'Forbidden',
      /^leases.coordination.k8s.io "l" is forbidden: User "system:serviceaccount:kube-system:weft" cannot update resource "leases" in API group "coordination.k8s.io" in the namespace "kube-system"$/);
    assert.deepEqual(denied.details, { name: 'l', group: 'coordination.k8s.io', kind: 'leases' });
    await lim.custom.listClusterCustomObject({ group: G, version: 'v1', plural: 'widgets' });
    await lim.custom.replaceClusterCustomObjectStatus({ group: G, version: 'v1', plural: 'widgets', name: 'w', body: { ...w, status: { ready: true } } });
    await rejectsWith(lim.custom.replaceClusterCustomObject({ group: G, version: 'v1', plural: 'widgets', name: 'w', body: w }), 403, 'Forbidden',
      /cannot update resource "widgets" in API group "test.weft.dev" at the cluster scope/);
    const stranger = (await as('nobody')).makeApiClient(CoreV1Api);
    await assert.rejects(stranger.listNode(), (e: { code?: number }) => e.code === 401);
  }, tokens);
});
