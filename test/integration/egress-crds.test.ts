/**
 * egress-crds.yaml installed in the test API server with the real client-node, the way the
 * egress controller will use it: objects created with the schema's defaults, bad ones refused
 * with the field named, parsed by src/egress/api.ts, placed, and the placement written to the
 * status subresources.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { test } from 'node:test';
import { ApiextensionsV1Api, CustomObjectsApi, KubeConfig, loadAllYaml, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import type { V1CustomResourceDefinition } from '@kubernetes/client-node';
import { EGRESS_GROUP, EGRESS_VERSION, parseGateway, parsePolicy } from '../../src/egress/api.ts';
import { place } from '../../src/egress/placement.ts';
import { KubeApiServer } from '../support/kube-apiserver.ts';
import type { Obj } from '../support/kube-apiserver.ts';

test('egress CRDs in the API server: defaults, refusals by field, placement written to status', async () => {
  const api = await KubeApiServer.start();
  try {
    const kc = new KubeConfig();
    kc.loadFromFile(await api.kubeconfig());
    const ext = kc.makeApiClient(ApiextensionsV1Api);
    const custom = kc.makeApiClient(CustomObjectsApi);
    for (const crd of loadAllYaml(await readFile(new URL('../../egress-crds.yaml', import.meta.url), 'utf8')) as V1CustomResourceDefinition[]) {
      await ext.createCustomResourceDefinition({ body: crd });
    }
    const g = { group: EGRESS_GROUP, version: EGRESS_VERSION };
    const apiVersion = `${EGRESS_GROUP}/${EGRESS_VERSION}`;
    const gw = await custom.createClusterCustomObject({
      ...g, plural: 'egressgateways',
      body: { apiVersion, kind: 'EgressGateway', metadata: { name: 'gw' }, spec: { nodeSelector: { matchLabels: { egress: 'true' } }, eipPool: { ipv4: ['198.51.100.10-198.51.100.11'] } } },
    }) as Obj;
    assert.deepEqual((gw.spec as Obj).nodeSelection, { mode: 'Spread', limit: 5 });
    const policy = (name: string, spec: Obj) => custom.createNamespacedCustomObject({ ...g, plural: 'egresspolicies', namespace: 'default', body: { apiVersion, kind: 'EgressPolicy', metadata: { name }, spec } });
    await policy('a', { gateway: 'gw', podSelector: { matchLabels: { app: 'a' } } });
    await policy('b', { gateway: 'missing', podSelector: {} });
    await assert.rejects(policy('c', { gateway: 'gw', podSelector: {}, egressAddress: { source: 'Elsewhere' } }), (e: { code?: number; body?: string }) =>
      e.code === 422 && /spec.egressAddress.source: Unsupported value: "Elsewhere"/.test(String((JSON.parse(String(e.body)) as Obj).message)));
    await custom.createClusterCustomObject({
      ...g, plural: 'egressclusterpolicies',
      body: { apiVersion, kind: 'EgressClusterPolicy', metadata: { name: 'all' }, spec: { gateway: 'gw', namespaceSelector: {}, podSelector: { matchLabels: { tier: 'db' } }, egressAddress: { source: 'NodeIP' } } },
    });

    const list = async (plural: string) => ((await custom.listClusterCustomObject({ ...g, plural })) as { items: Obj[] }).items;
    const result = place({
      gateways: (await list('egressgateways')).map(parseGateway),
      policies: [...await list('egresspolicies'), ...await list('egressclusterpolicies')].map(parsePolicy),
      nodes: [{ name: 'n1', labels: { egress: 'true' }, ready: true, renewedAt: 0 }],
      previous: new Map(), now: 0, livenessTimeoutMs: 30_000, random: Math.random,
    });
    const merge = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
    for (const s of result.policies) {
      const [namespace, name] = s.id.includes('/') ? s.id.split('/') as [string, string] : [undefined, s.id];
      const condition = { type: 'Ready', status: s.ready ? 'True' : 'False', reason: s.reason, message: s.message, lastTransitionTime: '2026-01-01T00:00:00Z' };
      const status = { ...(s.placement ? { node: s.placement.node, ...(s.placement.ipv4 ? { eip: { ipv4: s.placement.ipv4 } } : {}) } : {}), conditions: [condition] };
      if (namespace) await custom.patchNamespacedCustomObjectStatus({ ...g, plural: 'egresspolicies', namespace, name, body: { status } }, merge);
      else await custom.patchClusterCustomObjectStatus({ ...g, plural: 'egressclusterpolicies', name, body: { status } }, merge);
    }
    const { nodes, ...gwStatus } = result.gateways[0]!;
    await custom.patchClusterCustomObjectStatus({
      ...g, plural: 'egressgateways', name: 'gw',
      body: { status: { nodes, conditions: [{ type: 'Ready', status: gwStatus.ready ? 'True' : 'False', reason: gwStatus.reason, message: gwStatus.message }] } },
    }, merge);

    const stored = (plural: string, name: string, ns?: string) => api.object(`${plural}.${EGRESS_GROUP}`, name, ns)!.status as Obj;
    assert.deepEqual([stored('egresspolicies', 'a', 'default').node, stored('egresspolicies', 'a', 'default').eip], ['n1', { ipv4: '198.51.100.10' }]);
    assert.equal(((stored('egresspolicies', 'b', 'default').conditions as Obj[])[0]!).reason, 'GatewayNotFound');
    assert.deepEqual([stored('egressclusterpolicies', 'all').node, stored('egressclusterpolicies', 'all').eip], ['n1', undefined]);
    assert.deepEqual(stored('egressgateways', 'gw').nodes, [{ name: 'n1', ready: true, policies: ['all', 'default/a'], eips: [{ ipv4: '198.51.100.10', policies: ['default/a'] }] }]);
  } finally {
    await api.stop();
  }
});
