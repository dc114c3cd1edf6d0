/**
 * The Kubernetes lease source with the real @kubernetes/client-node against the real
 * kube-apiserver v1.28.4, over HTTPS with bearer tokens and flannel's RBAC as real ClusterRoles.
 * The tests share one control plane and remove their Nodes when done. What needs faults on cue
 * (watches broken, silenced or compacted, requests refused or counted) is kube-faults.test.ts.
 */
import assert from 'node:assert/strict';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { formatCIDR, formatIP, parseIP } from '../../src/ip/ip.ts';
import { KubeApiError, kubeConfigFromFlags } from '../../src/lease/kube/client.ts';
import { KubeHttp } from '../../src/lease/kube/http.ts';
import { LeaseTable } from '../../src/lease/table.ts';
import { memoryLogger } from '../../src/log.ts';
import { KubeControlPlane } from '../support/control-plane.ts';
import type { Obj, PolicyRule } from '../support/control-plane.ts';
import { removeAll } from '../support/control-plane-objects.ts';
import { attrs, DUAL_CONF, mac, P, peerNode, sources, subnets, watchInto } from '../support/kube-source.ts';
import type { Sources } from '../support/kube-source.ts';
import { until } from '../support/until.ts';

const FLANNEL = 'system:serviceaccount:kube-flannel:flannel';
/** flannel's ClusterRole (reference §3): pods get; nodes get, list, watch; nodes/status patch. */
const rules = (nodeVerbs: string[], statusPatch = true): PolicyRule[] => [
  { apiGroups: [''], resources: ['pods'], verbs: ['get'] },
  { apiGroups: [''], resources: ['nodes'], verbs: nodeVerbs },
  ...(statusPatch ? [{ apiGroups: [''], resources: ['nodes/status'], verbs: ['patch'] }] : []),
];
const NODES = '/api/v1/nodes';
let cp: KubeControlPlane;

before(async () => {
  const tokens = { flannel: { user: FLANNEL }, 'no-status-patch': { user: 'no-status-patch' }, 'no-list': { user: 'no-list' } };
  cp = await KubeControlPlane.start({ tokens });
  await cp.grant('flannel', FLANNEL, rules(['get', 'list', 'watch']));
  await cp.grant('no-status-patch', 'no-status-patch', rules(['get', 'list', 'watch'], false));
  await cp.grant('no-list', 'no-list', rules(['get', 'watch']));
});
after(() => cp?.stop());

async function withApi(fn: (s: Sources) => Promise<void>): Promise<void> {
  const made = await sources((token) => cp.kubeconfig(token));
  try {
    await fn(made);
  } finally {
    await made.close();
    await removeAll(cp, NODES);
  }
}

const addNode = (o: Obj) => cp.create(NODES, { apiVersion: 'v1', kind: 'Node', ...o });
const annotationsOf = async (name: string) => (await cp.node(name))!.metadata!.annotations as Record<string, string>;
const resourceVersionOf = async (name: string) => (await cp.node(name))!.metadata!.resourceVersion;

test('acquire: byte-identical annotations through nodes/status with flannel RBAC and POD_NAME; NetworkUnavailable=False once; '
  + 'nothing written again when current', async () => {
  await withApi(async ({ source }) => {
    await addNode({ metadata: { name: 'node-1' }, spec: { podCIDR: '10.244.1.0/24', podCIDRs: ['10.244.1.0/24'] } });
    await cp.addPod('kube-flannel', 'kube-flannel-ds-abcde', 'node-1');
    const signal = AbortSignal.timeout(10_000);
    const s = await source('flannel', { env: { POD_NAME: 'kube-flannel-ds-abcde', POD_NAMESPACE: 'kube-flannel' } });
    await s.networkConfig(signal);
    const lease = await s.acquire({ attrs: attrs(1) }, signal);
    assert.equal(lease.peer, 'node-1');
    assert.equal(formatCIDR(lease.subnet!), '10.244.1.0/24');
    assert.deepEqual(await annotationsOf('node-1'), {
      [`${P}/backend-type`]: 'vxlan',
      [`${P}/backend-data`]: '{"VNI":1,"VtepMAC":"6e:00:00:00:00:01"}',
      [`${P}/public-ip`]: '198.18.0.1',
      [`${P}/kube-subnet-manager`]: 'true',
    });

    const published = await resourceVersionOf('node-1');
    const again = await source('flannel');
    await again.networkConfig(signal);
    await again.acquire({ attrs: attrs(1) }, signal);
    assert.equal(await resourceVersionOf('node-1'), published, 'nothing differed, so the Node is not written again');

    await s.complete(signal);
    const completed = await resourceVersionOf('node-1');
    await again.complete(signal);
    const cond = ((await cp.node('node-1'))!.status as { conditions: Obj[] }).conditions;
    assert.equal(cond.length, 1);
    assert.deepEqual({ ...cond[0], lastHeartbeatTime: 'x', lastTransitionTime: 'x' }, {
      type: 'NetworkUnavailable', status: 'False', reason: 'FlannelIsUp', message: 'Flannel is running on this node',
      lastHeartbeatTime: 'x', lastTransitionTime: 'x',
    });
    assert.match(String(cond[0]!.lastTransitionTime), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    assert.equal(await resourceVersionOf('node-1'), completed, 'the condition is set once');

    await (await source('flannel', { setNodeNetworkUnavailable: false })).complete(signal);
    assert.equal(await resourceVersionOf('node-1'), completed);
  });
});

test('acquire: waits for the Node and its pod CIDR; overwrite annotations win; node-public-ip and the old VTEP MAC are offered',
  async () => {
  await withApi(async ({ source }) => {
    const log = memoryLogger();
    const s = await source('flannel', { log });
    const signal = AbortSignal.timeout(10_000);
    await s.networkConfig(signal);
    const acquiring = s.acquire({ attrs: attrs(1) }, signal);
    const waiting = (why: RegExp) => until(`acquire waiting: ${why.source}`, () => log.records.some((r) => why.test(r.msg)));
    await waiting(/waiting to acquire our lease: Node "node-1" does not exist yet/);
    await addNode({
      metadata: {
        name: 'node-1',
        annotations: {
          [`${P}/public-ip-overwrite`]: '203.0.113.1', [`${P}/node-public-ip`]: '198.51.100.1',
          [`${P}/backend-data`]: '{"VNI":1,"VtepMAC":"6e:00:00:00:00:aa"}', [`${P}/backend-type`]: 'vxlan',
          [`${P}/kube-subnet-manager`]: 'true',
        },
      },
    });
    await waiting(/waiting to acquire our lease: Node "node-1" has no pod CIDR assigned yet/);
    const published = await s.published(signal);
    assert.equal(published.publicIP, '198.51.100.1');
    assert.deepEqual(published.attrs?.backendData, { VNI: 1, VtepMAC: '6e:00:00:00:00:aa' });
    // The pod CIDR given later, as nodeipam gives it: from none to one.
    await cp.modify(`${NODES}/node-1`, (n) => void (n.spec = { podCIDR: '10.244.1.0/24' }));
    const lease = await acquiring;
    assert.equal(formatCIDR(lease.subnet!), '10.244.1.0/24');
    assert.equal(formatIP(lease.attrs.publicIP!), '198.18.0.1', 'the lease keeps the interface address');
    const ann = await annotationsOf('node-1');
    assert.equal(ann[`${P}/public-ip`], '203.0.113.1');
    assert.equal(ann[`${P}/backend-data`], '{"VNI":1,"VtepMAC":"6e:00:00:00:00:01"}');
  });
});

test('dual stack: own lease and annotations of both families; remote dual-stack lease; a remote lacking IPv6 is skipped', async () => {
  await withApi(async ({ source }) => {
    await addNode({ metadata: { name: 'node-1' }, spec: { podCIDR: '10.244.1.0/24', podCIDRs: ['10.244.1.0/24', 'fd00:10:244:1::/64'] } });
    const peer = peerNode(2, { [`${P}/public-ipv6`]: '2001:db8::2', [`${P}/backend-v6-data`]: `{"VNI":1,"VtepMAC":"${mac(0x22)}"}` });
    peer.spec.podCIDRs = ['10.244.2.0/24', 'fd00:10:244:2::/64'];
    await addNode(peer);
    await addNode(peerNode(3));
    const log = memoryLogger();
    const s = await source('flannel', { log }, DUAL_CONF);
    const signal = AbortSignal.timeout(10_000);
    await s.networkConfig(signal);
    const both = { ...attrs(1), publicIPv6: parseIP('2001:db8::1', 'ip'), backendV6Data: { VNI: 1, VtepMAC: mac(0x11) } };
    const lease = await s.acquire({ attrs: both }, signal);
    assert.equal(formatCIDR(lease.ipv6Subnet!), 'fd00:10:244:1::/64');
    const ann = await annotationsOf('node-1');
    assert.equal(ann[`${P}/backend-v6-data`], '{"VNI":1,"VtepMAC":"6e:00:00:00:00:11"}');
    assert.equal(ann[`${P}/public-ipv6`], '2001:db8::1');
    const w = watchInto(s);
    try {
      await until('the first list', () => w.table.synced);
      const leases = w.table.leases().map((l) => [l.peer, formatCIDR(l.subnet!), formatCIDR(l.ipv6Subnet!)]);
      assert.deepEqual(leases, [['node-2', '10.244.2.0/24', 'fd00:10:244:2::/64']]);
      assert.equal(log.records.filter((r) => r.level === 'warn' && r.fields.node === 'node-3').length, 1);
    } finally {
      await w.stop();
    }
  });
});

test('watch: own and unmanaged Nodes left out; a Node added, registered again with another pod CIDR, deleted; a known Node turned bad '
  + 'keeps its last good lease and warns once; one bad from the start is skipped', async () => {
  await withApi(async ({ source }) => {
    await addNode({ metadata: { name: 'node-1' }, spec: { podCIDR: '10.244.1.0/24' } });
    await addNode(peerNode(2));
    await addNode({ metadata: { name: 'plain' }, spec: { podCIDR: '10.244.9.0/24' } });
    const log = memoryLogger();
    const s = await source('flannel', { log });
    const signal = AbortSignal.timeout(15_000);
    await s.networkConfig(signal);
    await s.acquire({ attrs: attrs(1) }, signal);
    const w = watchInto(s);
    try {
      await until('the first list', () => w.table.synced);
      assert.deepEqual(subnets(w.table), ['node-2=10.244.2.0/24']);
      await addNode(peerNode(3));
      await until('node-3', () => w.table.size === 2);
      // kube-apiserver changes no pod CIDR in place: a Node gets another by being registered again.
      await cp.remove(`${NODES}/node-2`);
      await addNode({ ...peerNode(2), spec: { podCIDR: '10.244.22.0/24', podCIDRs: ['10.244.22.0/24'] } });
      await until('the new pod CIDR of node-2', () => subnets(w.table).join() === 'node-2=10.244.22.0/24,node-3=10.244.3.0/24');
      await cp.remove(`${NODES}/node-3`);
      await until('node-3 removed', () => w.table.size === 1);
      assert.equal(w.batches.at(-1)![0]!.type, 'removed');
      for (let i = 0; i < 3; i++) {
        await cp.modify(`${NODES}/node-2`, (n) => {
          (n.metadata!.annotations as Record<string, string>)[`${P}/public-ip`] = 'garbage';
          n.metadata!.labels = { i: String(i) };
        });
      }
      // Events come in order: once node-4 is skipped, every change of node-2 has been seen.
      await addNode(peerNode(4, { [`${P}/public-ip`]: 'garbage' }));
      const skipped = () => log.records.some((r) => r.level === 'warn' && r.fields.node === 'node-4' && /skipping Node/.test(r.msg));
      await until('node-4 skipped', skipped);
      const warnings = log.records.filter((r) => r.level === 'warn' && r.fields.node === 'node-2');
      assert.equal(warnings.length, 1);
      assert.match(warnings[0]!.msg, /keeping its last good lease/);
      assert.match(String((warnings[0]!.fields.err as Error).message), /node-2.*public-ip/);
      assert.deepEqual(subnets(w.table), ['node-2=10.244.22.0/24'], 'the last good lease of node-2 is kept');
      await cp.remove(`${NODES}/node-2`);
      await until('node-2 removed once deleted', () => w.table.size === 0);
      assert.equal(w.table.get('node-1'), undefined);
      assert.equal(w.table.get('plain'), undefined);
    } finally {
      await w.stop();
    }
  });
});

test('our own Node: registered again without annotations, they are published again; registered again with another pod CIDR, '
  + 'the new lease reaches onOwnLease', async () => {
  await withApi(async ({ source }) => {
    const own = (podCIDR: string) => addNode({ metadata: { name: 'node-1' }, spec: { podCIDR, podCIDRs: [podCIDR] } });
    await own('10.244.1.0/24');
    await addNode(peerNode(2));
    const signal = AbortSignal.timeout(20_000);
    const s = await source('flannel');
    await s.networkConfig(signal);
    await s.acquire({ attrs: attrs(1) }, signal);
    const published = JSON.stringify(await annotationsOf('node-1'));
    const table = new LeaseTable();
    const moved: string[] = [];
    const ac = new AbortController();
    const done = s.watch(table, ac.signal, (lease) => moved.push(formatCIDR(lease.subnet!)));
    try {
      await until('the first list', () => table.size === 1);
      assert.equal(table.get('node-1'), undefined, 'our own Node is not a peer');

      await cp.remove(`${NODES}/node-1`);
      await own('10.244.1.0/24');
      await until('our annotations published again', async () => JSON.stringify(await annotationsOf('node-1')) === published);
      assert.deepEqual(moved, [], 'same pod CIDR: no lease change');

      await cp.remove(`${NODES}/node-1`);
      await own('10.244.9.0/24');
      await until('the new own lease reported', () => moved.length === 1);
      assert.deepEqual(moved, ['10.244.9.0/24']);
    } finally {
      ac.abort();
      await done;
    }
  });
});

test('missing permission or credentials: a clear error naming the verb and resource', async () => {
  await withApi(async ({ source }) => {
    await addNode({ metadata: { name: 'node-1' }, spec: { podCIDR: '10.244.1.0/24' } });
    const signal = AbortSignal.timeout(10_000);
    const noPatch = await source('no-status-patch');
    await noPatch.networkConfig(signal);
    await assert.rejects(noPatch.acquire({ attrs: attrs(1) }, signal), (e: unknown) => e instanceof KubeApiError && e.status === 403
      && e.verb === 'patch' && e.resource === 'nodes/status'
      && /failed to patch nodes\/status "node-1": forbidden .*verb "patch" on resource "nodes\/status"/.test(e.message));
    const noList = await source('no-list');
    await noList.networkConfig(signal);
    await assert.rejects(noList.watch(new LeaseTable(), signal),
      (e: unknown) => e instanceof KubeApiError && e.verb === 'list' && e.resource === 'nodes' && /forbidden/.test(e.message));
    const stranger = await source('who-is-this');
    await stranger.networkConfig(signal);
    await assert.rejects(stranger.acquire({ attrs: attrs(1) }, signal),
      (e: unknown) => e instanceof KubeApiError && e.status === 401 && /failed to get nodes "node-1": unauthorized/.test(e.message));
  });
});

test('client from flags: --kube-api-url overrides the kubeconfig server; in-cluster service account files', async () => {
  await withApi(async ({ dir }) => {
    await addNode({ metadata: { name: 'node-1' } });
    const sa = join(dir, 'sa', 'var/run/secrets/kubernetes.io/serviceaccount');
    await mkdir(sa, { recursive: true });
    await writeFile(join(sa, 'token'), 'flannel');
    await writeFile(join(sa, 'ca.crt'), await readFile(cp.caFile));
    const port = new URL(cp.url).port;
    const env = { KUBERNETES_SERVICE_HOST: '127.0.0.1', KUBERNETES_SERVICE_PORT: port };
    const inCluster = kubeConfigFromFlags({ inClusterPathPrefix: join(dir, 'sa') }, env);
    assert.equal((await new KubeHttp(inCluster).get<{ metadata: { name: string } }>('/api/v1/nodes/node-1')).metadata.name, 'node-1');
    const overridden = kubeConfigFromFlags({ kubeconfigFile: await cp.kubeconfig('flannel'), apiUrl: 'https://127.0.0.1:1' });
    assert.equal(overridden.getCurrentCluster()?.server, 'https://127.0.0.1:1');
    assert.throws(() => kubeConfigFromFlags({}, {}), /--kubeconfig-file.*KUBERNETES_SERVICE_HOST/);
  });
});
