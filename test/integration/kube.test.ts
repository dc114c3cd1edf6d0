/**
 * The Kubernetes lease source with the real @kubernetes/client-node against the in-repo API
 * server (test/support/kube-apiserver.ts), over HTTPS with bearer tokens and flannel's RBAC.
 */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { CoreV1Api, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { formatCIDR, formatIP, parseIP } from '../../src/ip/ip.ts';
import type { LeaseAttrs } from '../../src/lease/lease.ts';
import { KubeApiError, kubeConfigFromFlags } from '../../src/lease/kube/client.ts';
import { KubeLeaseSource } from '../../src/lease/kube/source.ts';
import type { KubeSourceOptions } from '../../src/lease/kube/options.ts';
import { LeaseTable } from '../../src/lease/table.ts';
import type { LeaseEvent } from '../../src/lease/table.ts';
import { memoryLogger, silentLogger } from '../../src/log.ts';
import { sleep } from '../../src/retry.ts';
import { ApiError, KubeApiServer } from '../support/kube-apiserver.ts';
import type { Grant, Obj } from '../support/kube-apiserver.ts';
import { flannelNode } from '../support/kube-nodes.ts';
import { until } from '../support/until.ts';

const P = 'flannel.alpha.coreos.com';
/** flannel's ClusterRole (reference §3). */
const FLANNEL_ALLOW = ['get pods', 'get nodes', 'list nodes', 'watch nodes', 'patch nodes/status'];
const FLANNEL_RBAC: Grant = { user: 'system:serviceaccount:kube-flannel:flannel', allow: FLANNEL_ALLOW };
const TOKENS: Record<string, Grant> = {
  admin: { user: 'admin', allow: '*' },
  flannel: FLANNEL_RBAC,
  'no-status-patch': { user: 'limited', allow: FLANNEL_ALLOW.filter((a) => a !== 'patch nodes/status') },
  'no-list': { user: 'limited', allow: FLANNEL_ALLOW.filter((a) => a !== 'list nodes') },
};
const V4_CONF = '{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}';
const DUAL_CONF = '{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}';

function mac(n: number): string {
  return `6e:00:00:00:00:${n.toString(16).padStart(2, '0')}`;
}

function attrs(n: number): LeaseAttrs {
  return { backendType: 'vxlan', publicIP: parseIP(`198.18.0.${n}`, 'ip'), backendData: { VNI: 1, VtepMAC: mac(n) } };
}

/** A Node as another flanneld would have annotated it. */
function peerNode(n: number, extra: Record<string, string> = {}): Obj {
  return flannelNode({ name: `node-${n}`, podCIDR: `10.244.${n}.0/24`, publicIP: `198.18.0.${n}`, vtepMac: mac(n), annotations: extra });
}

interface Ctx {
  api: KubeApiServer;
  dir: string;
  source: (token: string, extra?: Partial<KubeSourceOptions>, conf?: string) => Promise<KubeLeaseSource>;
}

/** Backoff waits shortened tenfold so retries happen within a test's time. */
const fastDelay = (ms: number, signal: AbortSignal) => sleep(ms / 10, signal);

async function withApi(fn: (c: Ctx) => Promise<void>): Promise<void> {
  const api = await KubeApiServer.start({ tokens: TOKENS, bookmarkIntervalMs: 200 });
  const dir = await mkdtemp(join(tmpdir(), 'weft-kube-test-'));
  const sources: KubeLeaseSource[] = [];
  try {
    await fn({
      api, dir,
      source: async (token, extra = {}, conf = V4_CONF) => {
        const netConfigPath = join(dir, `net-conf-${sources.length}.json`);
        await writeFile(netConfigPath, conf);
        const s = KubeLeaseSource.create({
          kubeconfigFile: await api.kubeconfig(token), netConfigPath, env: { NODE_NAME: 'node-1' }, log: silentLogger,
          delay: fastDelay, watchSilenceMs: 5_000, ...extra,
        });
        sources.push(s);
        return s;
      },
    });
  } finally {
    for (const s of sources) await s.close();
    await api.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

/** Starts watching into a fresh table; returns it, its batches and a stop function. */
function watchInto(s: KubeLeaseSource) {
  const table = new LeaseTable();
  const batches: LeaseEvent[][] = [];
  table.subscribe((b) => batches.push([...b]));
  const ac = new AbortController();
  const done = s.watch(table, ac.signal);
  return { table, batches, done, stop: async () => { ac.abort(); await done; } };
}

function subnets(table: LeaseTable): string[] {
  return table.leases().map((l) => `${l.peer}=${formatCIDR(l.subnet!)}`).sort();
}

test('acquire: byte-identical annotations through nodes/status with flannel RBAC and POD_NAME; no patch when current; NetworkUnavailable=False once', async () => {
  await withApi(async ({ api, source }) => {
    api.addNode({ metadata: { name: 'node-1' }, spec: { podCIDR: '10.244.1.0/24', podCIDRs: ['10.244.1.0/24'] } });
    api.addPod('kube-flannel', 'kube-flannel-ds-abcde', 'node-1');
    const signal = AbortSignal.timeout(10_000);
    const s = await source('flannel', { env: { POD_NAME: 'kube-flannel-ds-abcde', POD_NAMESPACE: 'kube-flannel' } });
    await s.networkConfig(signal);
    const lease = await s.acquire({ attrs: attrs(1) }, signal);
    assert.equal(lease.peer, 'node-1');
    assert.equal(formatCIDR(lease.subnet!), '10.244.1.0/24');
    const ann = (api.node('node-1')!.metadata as Obj).annotations;
    assert.deepEqual(ann, {
      [`${P}/backend-type`]: 'vxlan',
      [`${P}/backend-data`]: '{"VNI":1,"VtepMAC":"6e:00:00:00:00:01"}',
      [`${P}/public-ip`]: '198.18.0.1',
      [`${P}/kube-subnet-manager`]: 'true',
    });
    const patches = api.requests.filter((r) => r.method === 'PATCH');
    assert.deepEqual(patches.map((r) => [r.path, r.contentType]), [['/api/v1/nodes/node-1/status', 'application/strategic-merge-patch+json']]);

    const again = await source('flannel');
    await again.networkConfig(signal);
    await again.acquire({ attrs: attrs(1) }, signal);
    assert.equal(api.requests.filter((r) => r.method === 'PATCH').length, 1, 'nothing differed, so no second patch');

    await s.complete(signal);
    await again.complete(signal);
    const cond = ((api.node('node-1')!.status as Obj).conditions as Obj[]);
    assert.equal(cond.length, 1);
    assert.deepEqual({ ...cond[0], lastHeartbeatTime: 'x', lastTransitionTime: 'x' }, {
      type: 'NetworkUnavailable', status: 'False', reason: 'FlannelIsUp', message: 'Flannel is running on this node', lastHeartbeatTime: 'x', lastTransitionTime: 'x',
    });
    assert.match(String(cond[0]!.lastTransitionTime), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    assert.equal(api.requests.filter((r) => r.method === 'PATCH').length, 2, 'the condition is set once');

    const off = await source('flannel', { setNodeNetworkUnavailable: false });
    const before = api.requests.length;
    await off.complete(signal);
    assert.equal(api.requests.length, before);
  });
});

test('acquire: waits for the Node and its pod CIDR; overwrite annotations win; node-public-ip and the old VTEP MAC are offered', async () => {
  await withApi(async ({ api, source }) => {
    const s = await source('flannel');
    const signal = AbortSignal.timeout(10_000);
    await s.networkConfig(signal);
    const acquiring = s.acquire({ attrs: attrs(1) }, signal);
    await sleep(150);
    api.addNode({
      metadata: { name: 'node-1', annotations: { [`${P}/public-ip-overwrite`]: '203.0.113.1', [`${P}/node-public-ip`]: '198.51.100.1', [`${P}/backend-data`]: '{"VNI":1,"VtepMAC":"6e:00:00:00:00:aa"}', [`${P}/backend-type`]: 'vxlan', [`${P}/kube-subnet-manager`]: 'true' } },
    });
    await sleep(150);
    const published = await s.published(signal);
    assert.equal(published.publicIP, '198.51.100.1');
    assert.deepEqual(published.attrs?.backendData, { VNI: 1, VtepMAC: '6e:00:00:00:00:aa' });
    api.modifyNode('node-1', (n) => {
      n.spec = { podCIDR: '10.244.1.0/24' };
    });
    const lease = await acquiring;
    assert.equal(formatCIDR(lease.subnet!), '10.244.1.0/24');
    assert.equal(formatIP(lease.attrs.publicIP!), '198.18.0.1', 'the lease keeps the interface address');
    const ann = (api.node('node-1')!.metadata as Obj).annotations as Record<string, string>;
    assert.equal(ann[`${P}/public-ip`], '203.0.113.1');
    assert.equal(ann[`${P}/backend-data`], '{"VNI":1,"VtepMAC":"6e:00:00:00:00:01"}');
  });
});

test('dual stack: own lease and annotations of both families; remote dual-stack lease; a remote lacking IPv6 is skipped', async () => {
  await withApi(async ({ api, source }) => {
    api.addNode({ metadata: { name: 'node-1' }, spec: { podCIDR: '10.244.1.0/24', podCIDRs: ['10.244.1.0/24', 'fd00:10:244:1::/64'] } });
    const peer = peerNode(2, { [`${P}/public-ipv6`]: '2001:db8::2', [`${P}/backend-v6-data`]: `{"VNI":1,"VtepMAC":"${mac(0x22)}"}` });
    (peer.spec as Obj).podCIDRs = ['10.244.2.0/24', 'fd00:10:244:2::/64'];
    api.addNode(peer);
    api.addNode(peerNode(3));
    const log = memoryLogger();
    const s = await source('flannel', { log }, DUAL_CONF);
    const signal = AbortSignal.timeout(10_000);
    await s.networkConfig(signal);
    const lease = await s.acquire({ attrs: { ...attrs(1), publicIPv6: parseIP('2001:db8::1', 'ip'), backendV6Data: { VNI: 1, VtepMAC: mac(0x11) } } }, signal);
    assert.equal(formatCIDR(lease.ipv6Subnet!), 'fd00:10:244:1::/64');
    const ann = (api.node('node-1')!.metadata as Obj).annotations as Record<string, string>;
    assert.equal(ann[`${P}/backend-v6-data`], '{"VNI":1,"VtepMAC":"6e:00:00:00:00:11"}');
    assert.equal(ann[`${P}/public-ipv6`], '2001:db8::1');
    const w = watchInto(s);
    try {
      await until('the first list', () => w.table.synced);
      assert.deepEqual(w.table.leases().map((l) => [l.peer, formatCIDR(l.subnet!), formatCIDR(l.ipv6Subnet!)]), [['node-2', '10.244.2.0/24', 'fd00:10:244:2::/64']]);
      assert.equal(log.records.filter((r) => r.level === 'warn' && r.fields.node === 'node-3').length, 1);
    } finally {
      await w.stop();
    }
  });
});

test('watch: own and unmanaged Nodes left out, podCIDR change is one update, delete removes, a known Node turned bad keeps its last good lease and warns once', async () => {
  await withApi(async ({ api, source }) => {
    api.addNode({ metadata: { name: 'node-1' }, spec: { podCIDR: '10.244.1.0/24' } });
    api.addNode(peerNode(2));
    api.addNode({ metadata: { name: 'plain' }, spec: { podCIDR: '10.244.9.0/24' } });
    const log = memoryLogger();
    const s = await source('flannel', { log });
    const signal = AbortSignal.timeout(15_000);
    await s.networkConfig(signal);
    await s.acquire({ attrs: attrs(1) }, signal);
    const w = watchInto(s);
    try {
      await until('the first list', () => w.table.synced);
      assert.deepEqual(subnets(w.table), ['node-2=10.244.2.0/24']);
      api.addNode(peerNode(3));
      await until('node-3', () => w.table.size === 2);
      api.modifyNode('node-2', (n) => {
        n.spec = { podCIDR: '10.244.22.0/24', podCIDRs: ['10.244.22.0/24'] };
      });
      await until('the new pod CIDR of node-2', () => subnets(w.table).includes('node-2=10.244.22.0/24'));
      const update = w.batches.at(-1)!;
      assert.equal(update.length, 1);
      assert.equal(update[0]!.type, 'added');
      assert.equal(formatCIDR(update[0]!.previous!.subnet!), '10.244.2.0/24');
      api.deleteNode('node-3');
      await until('node-3 removed', () => w.table.size === 1);
      assert.equal(w.batches.at(-1)![0]!.type, 'removed');
      for (let i = 0; i < 3; i++) {
        api.modifyNode('node-2', (n) => {
          ((n.metadata as Obj).annotations as Record<string, string>)[`${P}/public-ip`] = 'garbage';
          ((n.metadata as Obj).labels as Record<string, string> | undefined) ??= {};
          ((n.metadata as Obj).labels as Record<string, string>).i = String(i);
        });
      }
      await until('the warning about node-2', () => log.records.some((r) => r.level === 'warn' && r.fields.node === 'node-2'));
      await sleep(100);
      const warnings = log.records.filter((r) => r.level === 'warn' && r.fields.node === 'node-2');
      assert.equal(warnings.length, 1);
      assert.match(warnings[0]!.msg, /keeping its last good lease/);
      assert.match(String((warnings[0]!.fields.err as Error).message), /node-2.*public-ip/);
      assert.deepEqual(subnets(w.table), ['node-2=10.244.22.0/24'], 'the last good lease of node-2 is kept');
      // A relist (410 Gone) keeps it too; a new Node that is bad from the start is skipped.
      api.addNode(peerNode(4, { [`${P}/public-ip`]: 'garbage' }));
      api.compact();
      api.breakWatches();
      await until('the relist', () => log.records.some((r) => /relisting Nodes: .*410/.test(r.msg)));
      await sleep(100);
      assert.deepEqual(subnets(w.table), ['node-2=10.244.22.0/24']);
      api.deleteNode('node-2');
      await until('node-2 removed once deleted', () => w.table.size === 0);
      assert.equal(w.table.get('node-1'), undefined);
      assert.equal(w.table.get('plain'), undefined);
    } finally {
      await w.stop();
    }
  });
});

test('watch: broken watch, 410 Gone and a silent watch all end with the table equal to the server, nothing lost', async () => {
  await withApi(async ({ api, source }) => {
    for (let n = 2; n <= 6; n++) api.addNode(peerNode(n));
    const log = memoryLogger();
    const s = await source('flannel', { log, watchSilenceMs: 600 });
    const signal = AbortSignal.timeout(20_000);
    await s.networkConfig(signal);
    const w = watchInto(s);
    const expect = (names: number[]) => names.map((n) => `node-${n}=10.244.${n}.0/24`).sort();
    try {
      await until('the first list', () => w.table.size === 5);

      api.breakWatches();
      api.addNode(peerNode(7));
      api.deleteNode('node-2');
      await until('changes made while the watch was broken', () => subnets(w.table).join() === expect([3, 4, 5, 6, 7]).join());

      await until('a watch', () => api.watchCount === 1);
      const unchanged = w.table.get('node-5');
      api.breakWatches();
      api.addNode(peerNode(8));
      api.deleteNode('node-3');
      api.compact();
      await until('a relist after 410', () => subnets(w.table).join() === expect([4, 5, 6, 7, 8]).join());
      assert.ok(log.records.some((r) => /relisting Nodes: .*410/.test(r.msg)), 'relisted on 410');
      assert.ok(unchanged && w.table.get('node-5') === unchanged, 'an unchanged lease is held once: the relist kept the table\'s own');
      // The apiserver's load: the first list may be served from its cache (resourceVersion=0);
      // a relist asks for no older than what was seen (the cache again), never a quorum read.
      const lists = api.requests.filter((q) => q.verb === 'list').map((q) => new URL(q.path, api.url).searchParams);
      assert.equal(lists.length, 2);
      assert.equal(lists[0]!.get('resourceVersion'), '0');
      assert.equal(lists[1]!.get('resourceVersionMatch'), 'NotOlderThan');
      assert.ok(Number(lists[1]!.get('resourceVersion')) > 0, 'no older than the resourceVersion last seen');

      await until('a watch', () => api.watchCount === 1);
      api.silenceWatches();
      api.addNode(peerNode(9));
      api.deleteNode('node-4');
      await until('the silent watch replaced', () => subnets(w.table).join() === expect([5, 6, 7, 8, 9]).join());
      assert.ok(log.records.some((r) => /silent/.test(r.msg)), 'the silence was noticed');
    } finally {
      await w.stop();
    }
  });
});

test('an API server that refuses every list and watch is retried within 2 s each time (jittered), and the watch resumes when it is back', async () => {
  await withApi(async ({ api, source }) => {
    api.addNode(peerNode(2));
    const waits: number[] = [];
    const s = await source('flannel', { delay: (ms, signal) => (waits.push(ms), sleep(ms / 20, signal)) });
    await s.networkConfig(AbortSignal.timeout(10_000));
    api.beforeServe = ({ verb }) => {
      if (verb === 'list' || verb === 'watch') throw new ApiError(503, 'ServiceUnavailable', 'the API server is down');
    };
    const w = watchInto(s);
    try {
      await until('ten refused attempts', () => waits.length >= 10);
      api.beforeServe = undefined;
      await until('the list once it is back', () => w.table.size === 1);
      const retries = waits.slice(0, 10);
      assert.ok(retries.every((ms) => ms >= 0 && ms < 2000), `waits between attempts: ${retries.join(', ')}`);
      assert.ok(new Set(retries).size > 1, 'jittered');
    } finally {
      await w.stop();
    }
  });
});

test('our own Node: re-registered without annotations, they are published again; a new pod CIDR reaches onOwnLease', async () => {
  await withApi(async ({ api, source }) => {
    api.addNode({ metadata: { name: 'node-1' }, spec: { podCIDR: '10.244.1.0/24', podCIDRs: ['10.244.1.0/24'] } });
    api.addNode(peerNode(2));
    const signal = AbortSignal.timeout(20_000);
    const s = await source('flannel');
    await s.networkConfig(signal);
    await s.acquire({ attrs: attrs(1) }, signal);
    const published = (api.node('node-1')!.metadata as Obj).annotations;
    const table = new LeaseTable();
    const moved: string[] = [];
    const ac = new AbortController();
    const done = s.watch(table, ac.signal, (lease) => moved.push(formatCIDR(lease.subnet!)));
    try {
      await until('the first list', () => table.size === 1);
      assert.equal(table.get('node-1'), undefined, 'our own Node is not a peer');

      api.deleteNode('node-1');
      api.addNode({ metadata: { name: 'node-1' }, spec: { podCIDR: '10.244.1.0/24', podCIDRs: ['10.244.1.0/24'] } });
      await until('our annotations published again', () => JSON.stringify((api.node('node-1')!.metadata as Obj).annotations) === JSON.stringify(published));
      assert.deepEqual(moved, [], 'same pod CIDR: no lease change');

      api.modifyNode('node-1', (n) => {
        (n.spec as Obj).podCIDR = '10.244.9.0/24';
        (n.spec as Obj).podCIDRs = ['10.244.9.0/24'];
      });
      await until('the new own lease reported', () => moved.length === 1);
      assert.deepEqual(moved, ['10.244.9.0/24']);
    } finally {
      ac.abort();
      await done;
    }
  });
});

test('complete: a failing condition patch is retried with backoff; a forbidden one or the deadline gives up with an error logged, never thrown', async () => {
  await withApi(async ({ api, source }) => {
    api.addNode({ metadata: { name: 'node-1' }, spec: { podCIDR: '10.244.1.0/24' } });
    const signal = AbortSignal.timeout(20_000);
    let failures = 0;
    let answer = () => new ApiError(503, 'ServiceUnavailable', 'etcd leader changed');
    api.beforeServe = ({ verb, resource }) => {
      if (verb === 'patch' && resource === 'nodes/status' && failures-- > 0) throw answer();
    };
    const waits: number[] = [];
    const delay = (ms: number, sig: AbortSignal) => (waits.push(ms), fastDelay(ms, sig));
    const condition = () => ((api.node('node-1')!.status as Obj | undefined)?.conditions as Obj[] | undefined)?.find((c) => c.type === 'NetworkUnavailable');

    failures = 3;
    const log = memoryLogger();
    await (await source('flannel', { log, delay })).complete(signal);
    assert.equal(condition()?.status, 'False', 'set after three failures');
    assert.equal(waits.length, 3);
    assert.ok(waits.every((ms, i) => ms >= 0 && ms < 1000 * 2 ** i), `jittered waits under caps doubling from 1 s: ${waits.join(', ')}`);
    assert.ok(!log.records.some((r) => r.level === 'error'));

    api.modifyNode('node-1', (n) => void ((n.status as Obj).conditions = []));
    failures = Infinity;
    let now = 0;
    const late = memoryLogger();
    const patches = api.requests.length;
    await (await source('flannel', { log: late, completeTimeoutMs: 30_000, now: () => (now += 10_000), delay: fastDelay })).complete(signal);
    assert.equal(condition(), undefined);
    assert.ok(api.requests.length - patches <= 8, 'gives up at the deadline');
    assert.match(String(late.records.find((r) => r.level === 'error')?.msg), /failed to set the NetworkUnavailable condition/);

    answer = () => new ApiError(403, 'Forbidden', 'nodes "node-1" is forbidden');
    const denied = memoryLogger();
    const before = api.requests.length;
    await (await source('flannel', { log: denied, delay })).complete(signal);
    assert.equal(api.requests.filter((r, i) => i >= before && r.verb === 'patch').length, 1, 'a 403 is not retried');
    assert.ok(denied.records.some((r) => r.level === 'error' && /HTTP 403|forbidden/.test(String((r.fields.err as Error | undefined)?.message))));
  });
});

test('a Node list that expires between pages is listed again from the start, nothing dropped', async () => {
  await withApi(async ({ api, source }) => {
    for (let n = 2; n <= 8; n++) api.addNode(peerNode(n));
    const log = memoryLogger();
    const s = await source('flannel', { log, listPageSize: 2 });
    await s.networkConfig(AbortSignal.timeout(20_000));
    let expired = 0;
    api.beforeServe = ({ verb, url }) => {
      // The first time a third page is asked for, its snapshot is compacted away.
      if (verb === 'list' && url.searchParams.has('continue') && expired === 0 && api.requests.filter((q) => q.verb === 'list').length === 2) {
        expired++;
        api.compact();
      }
    };
    const w = watchInto(s);
    try {
      await until('the list', () => w.table.synced);
      assert.equal(expired, 1, 'a page expired');
      assert.deepEqual(subnets(w.table), [2, 3, 4, 5, 6, 7, 8].map((n) => `node-${n}=10.244.${n}.0/24`).sort());
      assert.ok(w.batches.every((b) => b.every((e) => e.type === 'added')), 'no lease was removed on the way');
      assert.ok(log.records.some((r) => /expired between pages/.test(r.msg)));
    } finally {
      await w.stop();
    }
  });
});

test('missing permission or credentials: a clear error naming the verb and resource', async () => {
  await withApi(async ({ api, source }) => {
    api.addNode({ metadata: { name: 'node-1' }, spec: { podCIDR: '10.244.1.0/24' } });
    const signal = AbortSignal.timeout(10_000);
    const noPatch = await source('no-status-patch');
    await noPatch.networkConfig(signal);
    await assert.rejects(noPatch.acquire({ attrs: attrs(1) }, signal), (e: unknown) => e instanceof KubeApiError && e.status === 403
      && e.verb === 'patch' && e.resource === 'nodes/status' && /failed to patch nodes\/status "node-1": forbidden .*verb "patch" on resource "nodes\/status"/.test(e.message));
    const noList = await source('no-list');
    await noList.networkConfig(signal);
    await assert.rejects(noList.watch(new LeaseTable(), signal), (e: unknown) => e instanceof KubeApiError && e.verb === 'list' && e.resource === 'nodes' && /forbidden/.test(e.message));
    const stranger = await source('who-is-this');
    await stranger.networkConfig(signal);
    await assert.rejects(stranger.acquire({ attrs: attrs(1) }, signal), (e: unknown) => e instanceof KubeApiError && e.status === 401 && /failed to get nodes "node-1": unauthorized/.test(e.message));
  });
});

test('client from flags: --kube-api-url overrides the kubeconfig server; in-cluster service account files', async () => {
  await withApi(async ({ api, dir }) => {
    api.addNode({ metadata: { name: 'node-1' } });
    const sa = join(dir, 'sa');
    await mkdir(join(sa, 'var/run/secrets/kubernetes.io/serviceaccount'), { recursive: true });
    await writeFile(join(sa, 'var/run/secrets/kubernetes.io/serviceaccount/token'), 'flannel');
    const { readFile } = await import('node:fs/promises');
    await writeFile(join(sa, 'var/run/secrets/kubernetes.io/serviceaccount/ca.crt'), await readFile(api.caFile));
    const port = new URL(api.url).port;
    const inCluster = kubeConfigFromFlags({ inClusterPathPrefix: sa }, { KUBERNETES_SERVICE_HOST: '127.0.0.1', KUBERNETES_SERVICE_PORT: port });
    assert.equal((await inCluster.makeApiClient(CoreV1Api).readNode({ name: 'node-1' })).metadata?.name, 'node-1');
    const overridden = kubeConfigFromFlags({ kubeconfigFile: await api.kubeconfig('flannel'), apiUrl: 'https://127.0.0.1:1' });
    assert.equal(overridden.getCurrentCluster()?.server, 'https://127.0.0.1:1');
    assert.throws(() => kubeConfigFromFlags({}, {}), /--kubeconfig-file.*KUBERNETES_SERVICE_HOST/);
  });
});

test('test API server semantics: 409 on a stale update, status subresource keeps spec, merge vs strategic patch of conditions, 410 for an expired continue', async () => {
  await withApi(async ({ api }) => {
    const { KubeConfig } = await import('@kubernetes/client-node');
    const kc = new KubeConfig();
    kc.loadFromFile(await api.kubeconfig());
    const core = kc.makeApiClient(CoreV1Api);
    for (let n = 1; n <= 5; n++) api.addNode({ metadata: { name: `n${n}` }, spec: { podCIDR: `10.244.${n}.0/24` } });
    const n1 = await core.readNode({ name: 'n1' });
    await core.replaceNode({ name: 'n1', body: { ...n1, metadata: { ...n1.metadata, labels: { a: '1' } } } });
    await assert.rejects(core.replaceNode({ name: 'n1', body: { ...n1, metadata: { ...n1.metadata, labels: { a: '2' } } } }), (e: { code?: number }) => e.code === 409);
    const strategic = setHeaderOptions('Content-Type', PatchStrategy.StrategicMergePatch);
    const merge = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
    const cond = (type: string) => ({ type, status: 'False', reason: 'r', message: 'm' });
    await core.patchNodeStatus({ name: 'n1', body: { spec: { unschedulable: true }, status: { conditions: [cond('A'), cond('B')] } } }, strategic);
    await core.patchNodeStatus({ name: 'n1', body: { status: { conditions: [{ ...cond('A'), status: 'True' }] } } }, strategic);
    let node = api.node('n1')!;
    assert.equal((node.spec as Obj).unschedulable, undefined, 'status subresource does not change spec');
    assert.deepEqual(((node.status as Obj).conditions as Obj[]).map((c) => `${c.type}=${c.status}`), ['A=True', 'B=False']);
    await core.patchNode({ name: 'n1', body: { status: { conditions: [] }, metadata: { annotations: { x: 'y' } } } }, merge);
    node = api.node('n1')!;
    assert.equal(((node.status as Obj).conditions as Obj[]).length, 2, 'the main resource does not change status');
    await core.patchNodeStatus({ name: 'n1', body: { status: { conditions: [cond('C')] } } }, merge);
    assert.deepEqual(((api.node('n1')!.status as Obj).conditions as Obj[]).map((c) => c.type), ['C'], 'a merge patch replaces the list');
    const rv = api.resourceVersion;
    await core.patchNodeStatus({ name: 'n1', body: { metadata: { annotations: { x: 'y' } } } }, merge);
    assert.equal(api.resourceVersion, rv, 'a no-op patch keeps the resourceVersion');
    await assert.rejects(core.patchNode({ name: 'n1', body: { spec: { podCIDR: '10.9.9.0/24' } } }, strategic), (e: { code?: number }) => e.code === 422);
    const page = await core.listNode({ limit: 2 });
    assert.equal(page.items.length, 2);
    const next = await core.listNode({ limit: 2, _continue: page.metadata!._continue! });
    assert.deepEqual(next.items.map((i) => i.metadata!.name), ['n3', 'n4']);
    api.compact();
    await assert.rejects(core.listNode({ limit: 2, _continue: next.metadata!._continue! }), (e: { code?: number }) => e.code === 410);
  });
});
