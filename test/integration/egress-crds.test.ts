/**
 * egress-crds.yaml applied to the real kube-apiserver v1.28.4 as users apply it, used with the
 * real client-node the way the egress controller uses it: the CRDs Established and served with
 * their scopes; objects stored with the schema's defaults and unknown fields pruned; bad ones
 * refused by kube-apiserver's own validation, naming the fields test/unit/egress-crds.test.ts
 * expects of the same samples (so the unit test's schema code judges as kube-apiserver does);
 * objects parsed by src/egress/api.ts, placed, and the placement written to the status subresources.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { CustomObjectsApi, KubeConfig, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { EGRESS_GROUP, EGRESS_VERSION, parseGateway, parsePolicy } from '../../src/egress/api.ts';
import { parseInbound } from '../../src/egress/inbound.ts';
import { place } from '../../src/egress/placement.ts';
import { KubeControlPlane } from '../support/control-plane.ts';
import type { Obj } from '../support/control-plane.ts';
import { installCrds, invalidFields } from '../support/control-plane-objects.ts';

const apiVersion = `${EGRESS_GROUP}/${EGRESS_VERSION}`;
const base = `/apis/${EGRESS_GROUP}/${EGRESS_VERSION}`;
let cp: KubeControlPlane;

before(async () => {
  cp = await KubeControlPlane.start();
  await installCrds(cp);
  await cp.namespace('shop');
});
after(() => cp?.stop());

/** Creates `spec` (and `status`) as a `kind` named `name` (in namespace shop when namespaced); returns it as stored. */
async function create(plural: string, kind: string, name: string, spec: Obj, namespaced: boolean): Promise<Obj> {
  const path = namespaced ? `${base}/namespaces/shop/${plural}` : `${base}/${plural}`;
  return cp.create(path, { apiVersion, kind, metadata: { name }, spec });
}

/** The fields kube-apiserver names when it refuses to create the object. */
async function refused(plural: string, kind: string, spec: Obj, namespaced: boolean): Promise<string[]> {
  try {
    await create(plural, kind, 'refused', spec, namespaced);
  } catch (e) {
    return invalidFields(e);
  }
  assert.fail(`a ${kind} with spec ${JSON.stringify(spec)} was accepted`);
}

test('six CRDs served at egress.weft.dev/v1alpha1, scoped as the API says; the five users write with a status subresource', async () => {
  const list = (await cp.request('GET', base))!.resources as { name: string; namespaced: boolean; kind: string }[];
  const resources = list.map((r) => `${r.name} ${r.kind} ${r.namespaced}`);
  assert.deepEqual(resources.sort(), [
    'egressclusterpolicies EgressClusterPolicy false', 'egressclusterpolicies/status EgressClusterPolicy false',
    'egressendpoints EgressEndpoints false',
    'egressgateways EgressGateway false', 'egressgateways/status EgressGateway false',
    'egresspolicies EgressPolicy true', 'egresspolicies/status EgressPolicy true',
    'floatingips FloatingIP true', 'floatingips/status FloatingIP true',
    'portforwards PortForward true', 'portforwards/status PortForward true',
  ]);
});

test('gateways and policies: defaults filled as parseGateway and parsePolicy assume, unknown fields pruned, bad fields named', async () => {
  const gw = await create('egressgateways', 'EgressGateway', 'samples', {
    nodeSelector: { matchLabels: { 'egress.weft.dev/gateway': 'true' } }, eipPool: { ipv4: ['198.51.100.10-198.51.100.20'] }, extra: 1,
  }, false);
  assert.deepEqual(gw.spec, {
    nodeSelector: { matchLabels: { 'egress.weft.dev/gateway': 'true' } }, eipPool: { ipv4: ['198.51.100.10-198.51.100.20'] },
    nodeSelection: { mode: 'Spread', limit: 5 }, eipAllocation: { mode: 'PreferUnused', limit: 5 },
  });
  assert.ok(!('invalid' in parseGateway(gw)));
  const badGateway = { nodeSelector: {}, nodeSelection: { mode: 'spread', limit: 0 }, eipPool: { ipv4: 'x' } };
  assert.deepEqual(await refused('egressgateways', 'EgressGateway', badGateway, false),
    ['spec.eipPool.ipv4', 'spec.nodeSelection.limit', 'spec.nodeSelection.mode']);
  assert.deepEqual(await refused('egressgateways', 'EgressGateway', {}, false), ['spec.nodeSelector']);

  const pol = await create('egresspolicies', 'EgressPolicy', 'p', { gateway: 'gw', podSelector: { matchLabels: { app: 'pay' } } }, true);
  assert.deepEqual((pol.spec as Obj).egressAddress, { source: 'EIP' });
  assert.ok(!('invalid' in parsePolicy(pol)));
  assert.deepEqual(await refused('egresspolicies', 'EgressPolicy', {
    gateway: '', podSelector: { matchExpressions: [{ key: 'a', operator: 'Is' }] }, destinations: ['10.0.0.0/40'],
    egressAddress: { source: 'EIP', ipv4: '198.51.100.300' },
  }, true), ['spec.destinations[0]', 'spec.egressAddress.ipv4', 'spec.gateway', 'spec.podSelector.matchExpressions[0].operator']);
  assert.deepEqual(await refused('egressclusterpolicies', 'EgressClusterPolicy', { gateway: 'gw', podSelector: {} }, false),
    ['spec.namespaceSelector']);
  const cluster = await create('egressclusterpolicies', 'EgressClusterPolicy', 'c', {
    gateway: 'gw', podSelector: {}, namespaceSelector: {}, egressAddress: { source: 'NodeIP' },
  }, false);
  assert.ok(!('invalid' in parsePolicy(cluster)));
  // A status is written through its subresource only, and validated there: kube-apiserver names
  // the fields from the status down.
  const statusPath = `${base}/namespaces/shop/egresspolicies/p/status`;
  const maybe = { status: { node: 'n1', conditions: [{ type: 'Ready', status: 'Maybe' }] } };
  await assert.rejects(cp.mergePatch(statusPath, maybe), (e: unknown) => {
    assert.deepEqual(invalidFields(e), ['conditions[0].status']);
    return true;
  });
});

test('floating IPs and port forwards: defaults filled as parseInbound assumes, bad fields refused by field', async () => {
  const fip = await create('floatingips', 'FloatingIP', 'web', { gateway: 'gw', pod: 'web', extra: 1 }, true);
  assert.deepEqual(fip.spec, { gateway: 'gw', pod: 'web' });
  assert.ok(!('invalid' in parseInbound('FloatingIP', fip)));
  assert.deepEqual(await refused('floatingips', 'FloatingIP', { gateway: '', eip: { ipv4: '2001:db8::1' } }, true),
    ['spec.eip.ipv4', 'spec.gateway', 'spec.pod']);
  const forward = { gateway: 'gw', pod: 'web', eip: { ipv4: '198.51.100.10' }, port: 80 };
  const pf = await create('portforwards', 'PortForward', 'web', forward, true);
  assert.equal((pf.spec as Obj).protocol, 'TCP');
  const parsed = parseInbound('PortForward', pf);
  assert.ok(parsed.kind === 'PortForward' && !('invalid' in parsed), JSON.stringify(parsed));
  assert.deepEqual([parsed.protocol, parsed.port, parsed.podPort], ['TCP', 80, 80]);
  const badForward = { gateway: 'gw', pod: 'web', eip: {}, protocol: 'ICMP', port: 0, podPort: 65536 };
  assert.deepEqual(await refused('portforwards', 'PortForward', badForward, true),
    ['spec.eip', 'spec.podPort', 'spec.port', 'spec.protocol']);
  assert.deepEqual(await refused('portforwards', 'PortForward', { gateway: 'gw', pod: 'web' }, true), ['spec.eip', 'spec.port']);
  const status = {
    node: 'n1', eip: { ipv4: '198.51.100.10' }, podIPs: ['10.244.1.5'],
    conditions: [{ type: 'Ready', status: 'False', reason: 'PodNotFound' }],
  };
  const written = await cp.mergePatch(`${base}/namespaces/shop/floatingips/web/status`, { status });
  assert.deepEqual((written.status as Obj).podIPs, ['10.244.1.5']);
});

test('policies placed through client-node: refusals name the field, the placement is written to every status', async () => {
  const kc = new KubeConfig();
  kc.loadFromFile(await cp.kubeconfig());
  const custom = kc.makeApiClient(CustomObjectsApi);
  const g = { group: EGRESS_GROUP, version: EGRESS_VERSION };
  await custom.createClusterCustomObject({
    ...g, plural: 'egressgateways',
    body: {
      apiVersion, kind: 'EgressGateway', metadata: { name: 'gw' },
      spec: { nodeSelector: { matchLabels: { egress: 'true' } }, eipPool: { ipv4: ['198.51.100.10-198.51.100.11'] } },
    },
  });
  await cp.namespace('placed');
  const policy = (name: string, spec: Obj) => custom.createNamespacedCustomObject({
    ...g, plural: 'egresspolicies', namespace: 'placed', body: { apiVersion, kind: 'EgressPolicy', metadata: { name }, spec },
  });
  await policy('a', { gateway: 'gw', podSelector: { matchLabels: { app: 'a' } } });
  await policy('b', { gateway: 'missing', podSelector: {} });
  const elsewhere = { gateway: 'gw', podSelector: {}, egressAddress: { source: 'Elsewhere' } };
  await assert.rejects(policy('c', elsewhere), (e: { code?: number; body?: string }) => e.code === 422
    && /spec.egressAddress.source: Unsupported value: "Elsewhere"/.test(String((JSON.parse(String(e.body)) as Obj).message)));
  await custom.createClusterCustomObject({
    ...g, plural: 'egressclusterpolicies',
    body: {
      apiVersion, kind: 'EgressClusterPolicy', metadata: { name: 'all' },
      spec: {
        gateway: 'gw', namespaceSelector: {}, podSelector: { matchLabels: { tier: 'db' } }, egressAddress: { source: 'NodeIP' },
      },
    },
  });

  const list = async (plural: string) => ((await custom.listClusterCustomObject({ ...g, plural })) as { items: Obj[] }).items;
  const named = (o: Obj) => ['gw', 'all'].includes(String(o.metadata?.name)) || o.metadata?.namespace === 'placed';
  const result = place({
    gateways: (await list('egressgateways')).filter(named).map(parseGateway),
    policies: [...await list('egresspolicies'), ...await list('egressclusterpolicies')].filter(named).map(parsePolicy),
    nodes: [{ name: 'n1', labels: { egress: 'true' }, ready: true, renewedAt: 0 }],
    previous: new Map(), now: 0, livenessTimeoutMs: 30_000, random: Math.random,
  });
  const merge = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
  for (const s of result.policies) {
    const [namespace, name] = s.id.includes('/') ? s.id.split('/') as [string, string] : [undefined, s.id];
    const condition = {
      type: 'Ready', status: s.ready ? 'True' : 'False', reason: s.reason, message: s.message, lastTransitionTime: '2026-01-01T00:00:00Z',
    };
    const placed = s.placement ? { node: s.placement.node, ...(s.placement.ipv4 ? { eip: { ipv4: s.placement.ipv4 } } : {}) } : {};
    const status = { ...placed, conditions: [condition] };
    if (namespace) {
      await custom.patchNamespacedCustomObjectStatus({ ...g, plural: 'egresspolicies', namespace, name, body: { status } }, merge);
    } else {
      await custom.patchClusterCustomObjectStatus({ ...g, plural: 'egressclusterpolicies', name, body: { status } }, merge);
    }
  }
  const gateway = result.gateways.find((r) => r.name === 'gw')!;
  await custom.patchClusterCustomObjectStatus({
    ...g, plural: 'egressgateways', name: 'gw',
    body: {
      status: {
        nodes: gateway.nodes,
        conditions: [{ type: 'Ready', status: gateway.ready ? 'True' : 'False', reason: gateway.reason, message: gateway.message }],
      },
    },
  }, merge);

  const stored = async (path: string) => (await cp.request('GET', `${base}/${path}`))!.status as Obj;
  const a = await stored('namespaces/placed/egresspolicies/a');
  assert.deepEqual([a.node, a.eip], ['n1', { ipv4: '198.51.100.10' }]);
  assert.equal(((await stored('namespaces/placed/egresspolicies/b')).conditions as Obj[])[0]!.reason, 'GatewayNotFound');
  const all = await stored('egressclusterpolicies/all');
  assert.deepEqual([all.node, all.eip], ['n1', undefined]);
  assert.deepEqual((await stored('egressgateways/gw')).nodes, [
    { name: 'n1', ready: true, policies: ['all', 'placed/a'], eips: [{ ipv4: '198.51.100.10', policies: ['placed/a'] }] },
  ]);
});
