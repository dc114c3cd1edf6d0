/**
 * Weft's etcd client (etcd3 underneath) against a real etcd: a paged listing is one consistent
 * revision, a prefix guard compares every key under it, the next endpoint takes over when one is
 * down, a call past its deadline fails, a watch that etcd does not create in time is given up, and
 * a watch started from a revision delivers what came after it; after etcd was away, the watch is
 * live again at its first attempt once etcd answers, its waits never growing with the outage.
 * (The lease source's tests cover faults on the watch: compaction, restarts, stalls.)
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Etcd3 } from 'etcd3';
import { EtcdClient, prefixEnd } from '../../src/lease/etcd/client.ts';
import type { WatchEvent } from '../../src/lease/etcd/client.ts';
import { EtcdServer, freePort } from '../support/etcd.ts';
import { FaultProxy } from '../support/fault-proxy.ts';
import { ReconnectPace, sleep } from '../../src/retry.ts';
import { until } from '../support/until.ts';

async function withEtcd(fn: (etcd: EtcdServer, admin: Etcd3) => Promise<void>): Promise<void> {
  const etcd = await EtcdServer.start();
  const admin = new Etcd3({ hosts: etcd.endpoint });
  try {
    await fn(etcd, admin);
  } finally {
    admin.close();
    await etcd.stop();
  }
}

test('a listing in pages is one revision: keys written between pages are not in it', async () => {
  await withEtcd(async (etcd, admin) => {
    for (let i = 0; i < 25; i++) await admin.put(`/p/k${String(i).padStart(2, '0')}`).value(`v${i}`);
    await admin.put('/q/outside').value('x');
    const client = new EtcdClient({ endpoints: [etcd.endpoint] });
    try {
      // The first page is answered; every later one is asked for after a new key landed.
      let pages = 0;
      const range = client.range.bind(client);
      client.range = async (key, o) => {
        if (pages++ > 0) await admin.put(`/p/k${pages}x`).value('late');
        return range(key, o);
      };
      const listed = await client.list('/p/', 10);
      assert.equal(pages, 3);
      assert.deepEqual(listed.kvs.map((kv) => kv.key), Array.from({ length: 25 }, (_, i) => `/p/k${String(i).padStart(2, '0')}`));
      assert.equal(listed.kvs[7]!.value, 'v7');
      assert.equal(listed.revision, String(26 + 1), 'the revision of the first page');
    } finally {
      client.close();
    }
  });
});

test('a txn guarded by the Mod of a prefix fails once any key under it changed', async () => {
  await withEtcd(async (etcd, admin) => {
    await admin.put('/p/a').value('1');
    const client = new EtcdClient({ endpoints: [etcd.endpoint] });
    try {
      const { revision } = await client.list('/p/');
      const guard = { key: '/p/', rangeEnd: prefixEnd('/p/'), target: 'mod' as const, result: 'less' as const, operand: String(BigInt(revision) + 1n) };
      assert.equal(await client.txn([guard], [{ put: { key: '/p/b', value: '2' } }]), true);
      assert.equal(await client.txn([guard], [{ put: { key: '/p/c', value: '3' } }]), false, '/p/b changed since');
      assert.equal(await admin.get('/p/c').string(), null);
      const id = await client.leaseGrant(60);
      assert.equal(await client.txn([{ key: '/p/b', target: 'value', result: 'equal', operand: '2' }], [{ put: { key: '/p/b', value: '2', lease: id } }]), true);
      assert.equal((await client.range('/p/b')).kvs[0]!.lease, id);
      await client.leaseRevoke(id);
      assert.equal(await admin.get('/p/b').string(), null, 'revoking the lease deleted its key');
      assert.equal(await client.txn([{ key: '/p/a', target: 'version', result: 'equal', operand: '0' }], [{ delete: { key: '/p/a' } }]), false);
      assert.equal(await client.txn([{ key: '/p/a', target: 'version', result: 'equal', operand: '1' }], [{ delete: { key: '/p/a' } }]), true);
      assert.deepEqual((await client.list('/p/')).kvs, []);
    } finally {
      client.close();
    }
  });
});

test('endpoints are tried in turn: with the first endpoint dead, every call is answered through the second', async () => {
  await withEtcd(async (etcd, admin) => {
    await admin.put('/k').value('v');
    const client = new EtcdClient({ endpoints: [`http://127.0.0.1:${await freePort()}`, etcd.endpoint] });
    try {
      for (let i = 0; i < 5; i++) assert.equal((await client.range('/k')).kvs[0]!.value, 'v');
    } finally {
      client.close();
    }
  });
});

test('a call etcd does not answer fails at its deadline; a watch it does not create is given up', async () => {
  await withEtcd(async (etcd) => {
    const proxy = await FaultProxy.start(etcd.clientPort);
    const client = new EtcdClient({ endpoints: [proxy.endpoint], callTimeoutMs: 300 });
    try {
      await client.range('/k');
      proxy.suspend();
      await assert.rejects(client.range('/k'), /DEADLINE_EXCEEDED|Deadline exceeded/);
      const ctl = new AbortController();
      const errors: string[] = [];
      const done = client.watch('/w/', prefixEnd('/w/'), '1', {
        onResponse: () => assert.fail('a response through a stalled connection'),
        onDisconnected: (err) => errors.push(err.message),
        onReconnected: () => {},
      }, ctl.signal);
      await until('the watch to be given up', () => errors.length > 0);
      assert.match(errors[0]!, /did not create the watch within 300 ms/);
      ctl.abort();
      assert.equal(await done, undefined);
    } finally {
      client.close();
      await proxy.close();
    }
  });
});

test('a watch from a revision delivers every event after it, in order, and ends when aborted', async () => {
  await withEtcd(async (etcd, admin) => {
    await admin.put('/w/a').value('1');
    const client = new EtcdClient({ endpoints: [etcd.endpoint] });
    const ctl = new AbortController();
    try {
      const { revision } = await client.list('/w/');
      await admin.put('/w/b').value('2');
      await admin.delete().key('/w/a');
      await admin.put('/x/outside').value('3');
      const seen: WatchEvent[] = [];
      const done = client.watch('/w/', prefixEnd('/w/'), String(BigInt(revision) + 1n), {
        onResponse: (res) => seen.push(...res.events),
        onDisconnected: (err) => assert.fail(`disconnected: ${err.message}`),
        onReconnected: () => assert.fail('reconnected'),
      }, ctl.signal);
      await until('both events', () => seen.length === 2);
      await admin.put('/w/c').value('4');
      await until('the third', () => seen.length === 3);
      assert.deepEqual(seen.map((e) => [e.type, e.kv.key, e.kv.value]), [['put', '/w/b', '2'], ['delete', '/w/a', ''], ['put', '/w/c', '4']]);
      ctl.abort();
      assert.equal(await done, undefined);
    } finally {
      ctl.abort();
      client.close();
    }
  });
});

test('after etcd was away, the watch is live at its first attempt once etcd answers: waits stay in [T/2, T), none grows', async () => {
  await withEtcd(async (etcd) => {
    const waits: number[] = [];
    const attempts: { afterReturn: boolean; failed: boolean }[] = [];
    let returned = false;
    // Real waits: the gRPC channel's own reconnection backoff runs on real time, and it is what
    // could hold back an attempt made after etcd's return.
    const client = new EtcdClient({
      endpoints: [etcd.endpoint],
      delay: async (ms, signal) => {
        waits.push(ms);
        await sleep(ms, signal);
        attempts.push({ afterReturn: returned, failed: false });
      },
    });
    const ctl = new AbortController();
    const seen: WatchEvent[] = [];
    let reconnected = 0;
    try {
      const { revision } = await client.list('/w/');
      const done = client.watch('/w/', prefixEnd('/w/'), String(BigInt(revision) + 1n), {
        onResponse: (res) => seen.push(...res.events),
        onDisconnected: () => {
          const last = attempts.at(-1);
          if (last) last.failed = true;
        },
        onReconnected: () => reconnected++,
      }, ctl.signal, new ReconnectPace());
      await etcd.pause();
      // Long enough that a growing backoff (100 ms doubling, as this watch had) would be past 1 s.
      await until('six failed attempts while etcd is away', () => attempts.filter((a) => a.failed).length >= 6, 30_000);
      await etcd.resume();
      returned = true;
      await until('the watch live again', () => reconnected === 1, 10_000);
      const admin = new Etcd3({ hosts: etcd.endpoint });
      try {
        await admin.put('/w/after').value('1');
      } finally {
        admin.close();
      }
      await until('the key written after the return', () => seen.length === 1);
      assert.ok(waits.every((ms) => ms >= 500 && ms < 1000), `waits: ${waits.join(', ')} ms`);
      // An attempt made while etcd was starting may already be the live one; if not, the next is.
      const after = attempts.filter((a) => a.afterReturn);
      assert.ok(after.length <= 1 && after.every((a) => !a.failed), `attempts after etcd answered: ${JSON.stringify(after)}`);
      ctl.abort();
      assert.equal(await done, undefined);
    } finally {
      ctl.abort();
      client.close();
    }
  });
});
