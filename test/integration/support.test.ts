import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect } from 'node:net';
import { test } from 'node:test';
import { EtcdServer } from '../support/etcd.ts';
import { FaultProxy } from '../support/fault-proxy.ts';

const b64 = (s: string) => Buffer.from(s).toString('base64');

/** A v3 KV call through etcd's JSON gateway, so these tests need no client library. */
async function kv(endpoint: string, verb: 'put' | 'range', body: Record<string, string>, timeoutMs = 2000): Promise<Record<string, unknown>> {
  const r = await fetch(`${endpoint}/v3/kv/${verb}`, { method: 'POST', body: JSON.stringify(body), signal: AbortSignal.timeout(timeoutMs) });
  assert.equal(r.status, 200);
  return (await r.json()) as Record<string, unknown>;
}

async function get(endpoint: string, key: string, timeoutMs?: number): Promise<string | undefined> {
  const res = await kv(endpoint, 'range', { key: b64(key) }, timeoutMs);
  const kvs = res.kvs as { value: string }[] | undefined;
  return kvs?.[0] ? Buffer.from(kvs[0].value, 'base64').toString() : undefined;
}

test('etcd launcher: a real etcd on loopback that keeps its data across a pause, and is removed after', async () => {
  const etcd = await EtcdServer.start();
  try {
    assert.match(etcd.endpoint, /^http:\/\/127\.0\.0\.1:\d+$/);
    await kv(etcd.endpoint, 'put', { key: b64('/coreos.com/network/config'), value: b64('{"Network":"10.244.0.0/16"}') });
    assert.equal(await get(etcd.endpoint, '/coreos.com/network/config'), '{"Network":"10.244.0.0/16"}');
    await etcd.pause();
    await assert.rejects(get(etcd.endpoint, '/coreos.com/network/config', 500));
    await etcd.resume();
    assert.equal(await get(etcd.endpoint, '/coreos.com/network/config'), '{"Network":"10.244.0.0/16"}');
  } finally {
    await etcd.stop();
  }
  await assert.rejects(import('node:fs/promises').then((fs) => fs.access(etcd.dataDir)));
});

test('fault proxy: forwards, suspends without closing, resumes, and drops connections', async () => {
  const etcd = await EtcdServer.start();
  const proxy = await FaultProxy.start(etcd.clientPort);
  try {
    await kv(proxy.endpoint, 'put', { key: b64('k'), value: b64('v1') });
    assert.equal(await get(proxy.endpoint, 'k'), 'v1');
    proxy.suspend();
    await assert.rejects(get(proxy.endpoint, 'k', 300), /abort|timeout/i);
    proxy.resume();
    assert.equal(await get(proxy.endpoint, 'k'), 'v1');
    const raw = connect(proxy.port, '127.0.0.1');
    await once(raw, 'connect');
    const reset = once(raw, 'error');
    await new Promise((r) => setTimeout(r, 50));
    assert.ok(proxy.connections > 0);
    proxy.drop();
    assert.equal(proxy.connections, 0);
    const [err] = (await reset) as [NodeJS.ErrnoException];
    assert.equal(err.code, 'ECONNRESET');
    // A pooled connection of fetch's may have been reset too; after reconnecting it works.
    await get(proxy.endpoint, 'k').catch(() => undefined);
    assert.equal(await get(proxy.endpoint, 'k'), 'v1');
  } finally {
    await proxy.close();
    await etcd.stop();
  }
});
