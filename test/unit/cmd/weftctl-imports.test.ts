/**
 * weftctl's import graph, as `make build-weftctl` cuts its bundle: `weftctl status` with weftd
 * up loads commander and the socket client only (its speed is the bar of bench-weftctl); the
 * kernel, doctor's checks and the etcd client come in chunks loaded when weftd is down or doctor
 * runs.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { has, loadedWith, metafile, outputOf } from '../../support/imports.ts';

const ENTRY = 'src/cmd/weftctl.ts';
const ETCD_CLIENT = 'src/lease/etcd/client.ts';

test('weftctl loads no netlink, etcd client, Kubernetes client or winston up front; the etcd client only to read the registry', async () => {
  const meta = await metafile(ENTRY);
  const start = loadedWith(meta, outputOf(meta, ENTRY));
  assert.ok(has(start, 'commander') && start.has('src/local/client.ts'), 'verbs by commander, weftd asked over the local socket');
  for (const pkg of ['@kubernetes/client-node', 'winston']) assert.ok(!has(start, pkg), `${pkg} loaded at start`);
  for (const file of [ETCD_CLIENT, 'src/netlink/native.ts', 'src/admin/facts.ts', 'src/admin/offline.ts', 'src/admin/doctor.ts']) assert.ok(!start.has(file), `${file} loaded at start`);
  const offline = loadedWith(meta, outputOf(meta, 'src/admin/offline.ts'));
  assert.ok(!offline.has(ETCD_CLIENT), 'reading the kernel while weftd is down loads the etcd client');
  const registry = loadedWith(meta, outputOf(meta, 'src/admin/registry-etcd.ts'));
  assert.ok(registry.has(ETCD_CLIENT) && has(registry, 'etcd3'), 'the etcd registry is read with the etcd client, through etcd3');
  assert.ok(!has(start, 'etcd3') && !has(offline, 'etcd3'), 'etcd3 loaded before the registry is read');
  assert.ok(!loadedWith(meta, outputOf(meta, 'src/admin/registry-kube.ts')).has(ETCD_CLIENT), 'reading Nodes loads the etcd client');
});
