/**
 * The Kubernetes lease source against the test API server (test/support/kube-apiserver.ts), for
 * what the real kube-apiserver cannot be made to do on cue: watches broken, silenced, or resumed
 * after history was compacted (410 Gone); lists and watches, or one patch, refused with a 503 or a
 * 403 for a while; a list's page expiring between pages; every request counted. Its behaviour
 * against the real kube-apiserver is kube.test.ts.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatCIDR } from '../../src/ip/ip.ts';
import { memoryLogger } from '../../src/log.ts';
import { sleep } from '../../src/retry.ts';
import { ApiError, KubeApiServer } from '../support/kube-apiserver.ts';
import type { Grant, Obj } from '../support/kube-apiserver.ts';
import { attrs, fastDelay, P, peerNode, sources, subnets, watchInto } from '../support/kube-source.ts';
import type { Sources } from '../support/kube-source.ts';
import { until } from '../support/until.ts';

/** flannel's ClusterRole (reference §3). */
const FLANNEL_RBAC: Grant = {
  user: 'system:serviceaccount:kube-flannel:flannel', allow: ['get pods', 'get nodes', 'list nodes', 'watch nodes', 'patch nodes/status'],
};

async function withApi(fn: (c: Sources & { api: KubeApiServer }) => Promise<void>): Promise<void> {
  const tokens = { admin: { user: 'admin', allow: '*' as const }, flannel: FLANNEL_RBAC };
  const api = await KubeApiServer.start({ tokens, bookmarkIntervalMs: 200 });
  const made = await sources((token) => api.kubeconfig(token));
  try {
    await fn({ ...made, api });
  } finally {
    await made.close();
    await api.stop();
  }
}

test('acquire and complete send no request when the Node is current: one strategic merge patch of nodes/status each, '
  + 'none with setNodeNetworkUnavailable=false', async () => {
  await withApi(async ({ api, source }) => {
    api.addNode({ metadata: { name: 'node-1' }, spec: { podCIDR: '10.244.1.0/24', podCIDRs: ['10.244.1.0/24'] } });
    const signal = AbortSignal.timeout(10_000);
    const patches = () => api.requests.filter((r) => r.method === 'PATCH');
    const s = await source('flannel');
    await s.networkConfig(signal);
    await s.acquire({ attrs: attrs(1) }, signal);
    assert.deepEqual(patches().map((r) => [r.path, r.contentType]),
      [['/api/v1/nodes/node-1/status', 'application/strategic-merge-patch+json']]);
    const again = await source('flannel');
    await again.networkConfig(signal);
    await again.acquire({ attrs: attrs(1) }, signal);
    assert.equal(patches().length, 1, 'nothing differed, so no second patch');
    await s.complete(signal);
    await again.complete(signal);
    assert.equal(patches().length, 2, 'the condition is set once');
    const off = await source('flannel', { setNodeNetworkUnavailable: false });
    const before = api.requests.length;
    await off.complete(signal);
    assert.equal(api.requests.length, before);
  });
});

test('watch: across a relist after 410 Gone, a Node registered again with another pod CIDR meanwhile is one update, '
  + 'a known Node turned bad keeps its last good lease, a new bad one is skipped', async () => {
  await withApi(async ({ api, source }) => {
    api.addNode({ metadata: { name: 'node-1' }, spec: { podCIDR: '10.244.1.0/24' } });
    api.addNode(peerNode(2));
    api.addNode(peerNode(3));
    const log = memoryLogger();
    const s = await source('flannel', { log });
    const signal = AbortSignal.timeout(15_000);
    await s.networkConfig(signal);
    await s.acquire({ attrs: attrs(1) }, signal);
    const w = watchInto(s);
    const warned = (node: string) => log.records.some((r) => r.level === 'warn' && r.fields.node === node);
    try {
      await until('the first list', () => w.table.synced);
      api.modifyNode('node-2', (n) => void (((n.metadata as Obj).annotations as Record<string, string>)[`${P}/public-ip`] = 'garbage'));
      await until('the warning about node-2', () => warned('node-2'));
      // While the watch hears nothing: node-3 registered again with another pod CIDR, node-4 bad from
      // the start, history compacted; then the watch is broken and resuming gets 410.
      api.silenceWatches();
      api.deleteNode('node-3');
      api.addNode({ ...peerNode(3), spec: { podCIDR: '10.244.33.0/24', podCIDRs: ['10.244.33.0/24'] } });
      api.addNode(peerNode(4, { [`${P}/public-ip`]: 'garbage' }));
      api.compact();
      api.breakWatches();
      await until('the relist', () => log.records.some((r) => /relisting Nodes: .*410/.test(r.msg)));
      await until('the new pod CIDR of node-3', () => subnets(w.table).includes('node-3=10.244.33.0/24'));
      const update = w.batches.at(-1)!;
      assert.deepEqual(update.map((e) => [e.type, e.lease.peer, formatCIDR(e.previous!.subnet!)]), [['added', 'node-3', '10.244.3.0/24']]);
      assert.deepEqual(subnets(w.table), ['node-2=10.244.2.0/24', 'node-3=10.244.33.0/24'], 'the last good lease of node-2 is kept');
      assert.ok(warned('node-4'), 'node-4 is skipped with a warning');
      assert.equal(log.records.filter((r) => r.level === 'warn' && r.fields.node === 'node-2').length, 1, 'node-2 is warned about once');
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

test('an API server that refuses every list and watch is retried within 2 s each time (jittered), '
  + 'and the watch resumes when it is back', async () => {
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

test('complete: a failing condition patch is retried with backoff; a forbidden one or the deadline gives up '
  + 'with an error logged, never thrown', async () => {
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
    const condition = () =>
      ((api.node('node-1')!.status as Obj | undefined)?.conditions as Obj[] | undefined)?.find((c) => c.type === 'NetworkUnavailable');

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
    const clocked = await source('flannel', { log: late, completeTimeoutMs: 30_000, now: () => (now += 10_000), delay: fastDelay });
    await clocked.complete(signal);
    assert.equal(condition(), undefined);
    assert.ok(api.requests.length - patches <= 8, 'gives up at the deadline');
    assert.match(String(late.records.find((r) => r.level === 'error')?.msg), /failed to set the NetworkUnavailable condition/);

    answer = () => new ApiError(403, 'Forbidden', 'nodes "node-1" is forbidden');
    const denied = memoryLogger();
    const before = api.requests.length;
    await (await source('flannel', { log: denied, delay })).complete(signal);
    assert.equal(api.requests.filter((r, i) => i >= before && r.verb === 'patch').length, 1, 'a 403 is not retried');
    const forbidden = (r: { level: string; fields: Record<string, unknown> }) =>
      r.level === 'error' && /HTTP 403|forbidden/.test(String((r.fields.err as Error | undefined)?.message));
    assert.ok(denied.records.some(forbidden));
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
      const lists = api.requests.filter((q) => q.verb === 'list').length;
      if (verb === 'list' && url.searchParams.has('continue') && expired === 0 && lists === 2) {
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
