import assert from 'node:assert/strict';
import { test } from 'node:test';
import { etcd3Options } from '../../../../src/lease/etcd/client.ts';
import { clientOptions } from '../../../../src/lease/etcd/options.ts';

const context = (isStream: boolean) => ({ service: isStream ? 'Watch' : 'KV', method: isStream ? 'watch' : 'range', isStream } as const);

test('every call carries the hasleader interceptor; unary calls a deadline, streams none', () => {
  const o = etcd3Options({ endpoints: ['http://127.0.0.1:2379'], callTimeoutMs: 1234 });
  const factory = o.defaultCallOptions as (c: ReturnType<typeof context>) => { deadline?: number; interceptors?: unknown[] };
  const before = Date.now();
  const unary = factory(context(false));
  assert.ok(unary.deadline! >= before + 1234 && unary.deadline! <= Date.now() + 1234);
  assert.equal(unary.interceptors?.length, 1);
  const stream = factory(context(true));
  assert.equal(stream.deadline, undefined);
  assert.equal(stream.interceptors?.length, 1);
});

test('keepalive pings only while calls are open, the connection dropped after half a period unanswered', () => {
  const o = etcd3Options({ endpoints: ['http://127.0.0.1:2379'], keepaliveMs: 600 });
  assert.equal(o.grpcOptions?.['grpc.keepalive_time_ms'], 600);
  assert.equal(o.grpcOptions?.['grpc.keepalive_timeout_ms'], 300);
  assert.equal(o.grpcOptions?.['grpc.keepalive_permit_without_calls'], 0);
});

test('unix endpoints are given to grpc-js as unix:<path>; TLS without a CA file verifies with the system roots', () => {
  assert.deepEqual(etcd3Options({ endpoints: ['unix:///run/etcd.sock'] }).hosts, ['unix:/run/etcd.sock']);
  const tls = etcd3Options({ endpoints: ['https://etcd:2379'], tls: { key: Buffer.from('k'), cert: Buffer.from('c') } });
  assert.ok(tls.credentials!.rootCertificate.length > 1000, 'the system roots');
  assert.equal(tls.credentials!.privateKey!.toString(), 'k');
});

test('flags: mixed http and https endpoints, half a client certificate and an unreadable file are named', async () => {
  await assert.rejects(clientOptions({ endpoints: ['https://a:2379', 'http://b:2379'] }), /--etcd-endpoints: endpoints must all be https:\/\/ or none/);
  await assert.rejects(clientOptions({ endpoints: ['https://a:2379'], keyFile: '/k' }), /--etcd-certfile: TLS client authentication needs both/);
  await assert.rejects(clientOptions({ endpoints: ['https://a:2379'], caFile: '/nonexistent/ca.crt' }), /--etcd-cafile: cannot read \/nonexistent\/ca.crt/);
  await assert.rejects(clientOptions({ endpoints: ['etcd:2379'] }), /--etcd-endpoints: "etcd:2379" is not an http:\/\/, https:\/\/ or unix:\/\/ URL/);
  assert.deepEqual(await clientOptions({ endpoints: ['http://a:2379/'], username: 'u' }), { endpoints: ['http://a:2379'], callTimeoutMs: 10_000, keepaliveMs: 10_000, username: 'u', password: '' });
});
