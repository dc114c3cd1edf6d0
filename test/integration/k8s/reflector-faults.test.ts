/**
 * The generic reflector against the test API server, for what kube-apiserver cannot be made to do
 * on demand: the pages of its list counted, then history compacted under a silenced watch that is
 * then broken, so that resuming gets 410 Gone and the reflector lists again; and every request
 * answered 503 for a while, after which the first attempt is live. Its behaviour against the real
 * kube-apiserver is reflector.test.ts.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Reflector } from '../../../src/k8s/reflector.ts';
import { sleep } from '../../../src/retry.ts';
import type { Changes } from '../../../src/k8s/reflector.ts';
import { kubeConfigFromFlags } from '../../../src/lease/kube/client.ts';
import { KubeHttp } from '../../../src/lease/kube/http.ts';
import { memoryLogger } from '../../../src/log.ts';
import { ApiError, KubeApiServer } from '../../support/kube-apiserver.ts';
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
    const pages = api.requests.filter((q) => q.verb === 'list' && q.resource === 'namespaces');
    assert.equal(pages.length, Math.ceil(held.size / 3), 'pages of three');
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

test('refresh() lists again from etcd past a watch that lags, and the watch goes on after it', async () => {
  const api = await KubeApiServer.start();
  const stop = new AbortController();
  try {
    api.seed('namespaces', ns('ns-0', 'a'));
    const http = new KubeHttp(kubeConfigFromFlags({ kubeconfigFile: await api.kubeconfig() }));
    const held = new Map<string, string>();
    let lists = 0;
    const r = new Reflector<string>({
      http, path: '/api/v1/namespaces', resource: 'namespaces', log: memoryLogger(),
      parse: (o) => (o as { metadata: { labels?: { team?: string } } }).metadata.labels?.team ?? '',
      onList: (items) => {
        lists++;
        held.clear();
        for (const [k, v] of items) held.set(k, v);
      },
      onChanges: (changes) => {
        for (const [k, v] of changes) if (v !== null) held.set(k, v);
      },
    });
    const running = r.run(stop.signal);
    await until('the first list', () => lists === 1);
    // The watch stays open but delivers nothing: what the reflector holds falls behind.
    api.silenceWatches();
    api.modify('namespaces', 'ns-0', (o) => void ((o.metadata as { labels: object }).labels = { team: 'b' }));
    const listsBefore = api.requests.filter((q) => q.verb === 'list').length;
    await r.refresh();
    assert.equal(held.get('ns-0'), 'b', 'what refresh() resolves after includes the change the watch did not deliver');
    const list = api.requests.filter((q) => q.verb === 'list').slice(listsBefore);
    assert.equal(list.length, 1);
    assert.doesNotMatch(list[0]!.path, /resourceVersion=/, 'a consistent list, not one from the watch cache');
    api.modify('namespaces', 'ns-0', (o) => void ((o.metadata as { labels: object }).labels = { team: 'c' }));
    await until('the new watch to deliver the next change', () => held.get('ns-0') === 'c');
    assert.equal(lists, 2);
    stop.abort();
    await running;
  } finally {
    stop.abort();
    await api.stop();
  }
});

test('after the API server answered 503 for a while, the watch is live at its first attempt: waits stay in [T/2, T)', async () => {
  const api = await KubeApiServer.start();
  const stop = new AbortController();
  try {
    const http = new KubeHttp(kubeConfigFromFlags({ kubeconfigFile: await api.kubeconfig() }));
    const held = new Set<string>();
    const waits: number[] = [];
    let answerAgain!: () => void;
    const answering = new Promise<void>((resolve) => {
      answerAgain = resolve;
    });
    const r = new Reflector<string>({
      http, path: '/api/v1/namespaces', resource: 'namespaces', log: memoryLogger(), parse: () => '',
      onList: (items) => {
        for (const k of items.keys()) held.add(k);
      },
      onChanges: (changes) => {
        for (const k of changes.keys()) held.add(k);
      },
      // The waits between attempts recorded (the silence check's, 150 s, are the only others) and taken
      // a hundredth as long; after the eighth failure, until the server answers again, so every
      // attempt after it is made to a server that answers.
      watchSilenceMs: 600_000,
      delay: async (ms, signal) => {
        if (ms < 100_000) waits.push(ms);
        if (waits.length >= 8) await answering;
        await sleep(ms / 100, signal);
      },
    });
    const running = r.run(stop.signal);
    await until('the first list', () => held.has('default'));
    api.beforeServe = () => {
      throw new ApiError(503, 'ServiceUnavailable', 'the API server is down (test)');
    };
    api.breakWatches();
    // Longer than a doubling backoff from 500 ms (this reflector's before) takes to pass 1 s.
    await until('eight failed attempts', () => waits.length >= 8);
    api.beforeServe = undefined;
    answerAgain();
    api.seed('namespaces', ns('after', 'a'));
    await until('the namespace made after the return', () => held.has('after'));
    assert.equal(waits.length, 8, 'no attempt failed once the server answered');
    assert.ok(waits.every((ms) => ms >= 500 && ms < 1000), `waits: ${waits.join(', ')} ms`);
    stop.abort();
    await running;
  } finally {
    stop.abort();
    await api.stop();
  }
});
