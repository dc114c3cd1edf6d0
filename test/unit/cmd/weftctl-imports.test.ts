/**
 * weftctl's import graph, as `make build-weftctl` cuts its bundle: `weftctl status` with weftd
 * up loads commander and the socket client only (its speed is the bar of bench-weftctl); the
 * kernel, doctor's checks and etcd3 come in chunks loaded when weftd is down or doctor runs.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { has, loadedWith, metafile, outputOf } from '../../support/imports.ts';

const ENTRY = 'src/cmd/weftctl.ts';

test('weftctl loads no netlink, etcd3, Kubernetes client or winston up front; etcd3 only to read the registry', async () => {
  const meta = await metafile(ENTRY);
  const start = loadedWith(meta, outputOf(meta, ENTRY));
  assert.ok(has(start, 'commander') && start.has('src/local/client.ts'), 'verbs by commander, weftd asked over the local socket');
  for (const pkg of ['etcd3', '@grpc/grpc-js', '@kubernetes/client-node', 'winston']) assert.ok(!has(start, pkg), `${pkg} loaded at start`);
  for (const file of ['src/netlink/native.ts', 'src/admin/facts.ts', 'src/admin/offline.ts', 'src/admin/doctor.ts']) assert.ok(!start.has(file), `${file} loaded at start`);
  const offline = loadedWith(meta, outputOf(meta, 'src/admin/offline.ts'));
  assert.ok(!has(offline, 'etcd3'), 'reading the kernel while weftd is down loads no etcd3');
  assert.ok(has(loadedWith(meta, outputOf(meta, 'src/admin/registry-etcd.ts')), 'etcd3'), 'the etcd registry is read with etcd3');
  assert.ok(!has(loadedWith(meta, outputOf(meta, 'src/admin/registry-kube.ts')), 'etcd3'), 'reading Nodes loads no etcd3');
});
