/**
 * weftd's import graph, as the bundle bin/weftd runs is cut (esbuild, the same options as `make
 * build-weftd`): what a run loads before it knows its mode, and what each mode loads, must not
 * bring in the other mode's client. A static `import` of a heavy module anywhere on the way makes
 * these fail.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { has, loadedWith, metafile as bundle, outputOf } from '../../support/imports.ts';

const ENTRY = 'src/cmd/weftd.ts';
const ETCD_CLIENT = 'src/lease/etcd/client.ts';
const metafile = () => bundle(ENTRY);

test('etcd3 and its gRPC stack come with etcd mode only: not at start, not in kube mode, not with --version', async () => {
  const meta = await metafile();
  const start = loadedWith(meta, outputOf(meta, ENTRY));
  const etcd = loadedWith(meta, outputOf(meta, 'src/lease/etcd/source.ts'));
  const kube = loadedWith(meta, outputOf(meta, 'src/lease/kube/source.ts'));
  for (const pkg of ['etcd3', '@grpc/grpc-js', '@grpc/proto-loader', 'protobufjs', 'cockatiel']) {
    assert.ok(has(etcd, pkg), `etcd mode has ${pkg}`);
    assert.ok(!has(start, pkg), `${pkg} loaded at start (and so by --version)`);
    assert.ok(!has(kube, pkg), `kube mode loads ${pkg}`);
  }
});

test('before the mode is known, weftd loads no datastore client, winston, metrics, netlink or admin socket', async () => {
  const meta = await metafile();
  const start = loadedWith(meta, outputOf(meta, ENTRY));
  assert.ok(has(start, 'commander'), 'the flags are parsed with commander');
  for (const pkg of ['@kubernetes/client-node', 'winston', 'logform']) assert.ok(!has(start, pkg), `${pkg} loaded at start`);
  for (const file of ['src/lease/etcd/client.ts', 'src/server/metrics.ts', 'src/server/http.ts', 'src/netlink/native.ts', 'src/masq/manager.ts', 'src/admin/server.ts', 'src/local/server.ts', 'src/winston-log.ts']) {
    assert.ok(!start.has(file), `${file} loaded at start`);
  }
});

test('etcd mode never loads the Kubernetes client; kube mode never loads the etcd client', async () => {
  const meta = await metafile();
  const etcd = loadedWith(meta, outputOf(meta, 'src/lease/etcd/source.ts'));
  const kube = loadedWith(meta, outputOf(meta, 'src/lease/kube/source.ts'));
  const agent = loadedWith(meta, outputOf(meta, 'src/agent/agent.ts'));
  assert.ok(etcd.has(ETCD_CLIENT), 'etcd mode has its client');
  assert.ok(has(kube, '@kubernetes/client-node'), 'kube mode has its client');
  assert.ok(!has(etcd, '@kubernetes/client-node'), 'etcd mode loads @kubernetes/client-node');
  assert.ok(!kube.has(ETCD_CLIENT), 'kube mode loads the etcd client');
  assert.ok(!agent.has(ETCD_CLIENT) && !has(agent, '@kubernetes/client-node'), 'the agent loads a datastore client');
});

test('the admin socket and the logger come without a datastore client; the logger is winston', async () => {
  const meta = await metafile();
  const admin = loadedWith(meta, outputOf(meta, 'src/admin/server.ts'));
  const logger = loadedWith(meta, outputOf(meta, 'src/winston-log.ts'));
  assert.ok(has(logger, 'winston'), 'the logger is winston');
  assert.ok(admin.has('src/local/server.ts'), 'the admin socket is served by the local socket layer');
  for (const inputs of [admin, logger]) assert.ok(!inputs.has(ETCD_CLIENT) && !has(inputs, '@kubernetes/client-node'), 'a datastore client comes with the admin socket or the logger');
});

test('the Service proxy is a chunk of its own, loaded by no mode, the agent, network policy or the CNI server without --service-proxy', async () => {
  const meta = await metafile();
  const proxy = loadedWith(meta, outputOf(meta, 'src/services/proxy.ts'));
  assert.ok(proxy.has('src/services/render.ts') && proxy.has('src/k8s/reflector.ts'), 'the proxy brings its renderer and watches');
  assert.ok(!proxy.has(ETCD_CLIENT), 'the Service proxy loads the etcd client');
  for (const part of [ENTRY, 'src/lease/kube/source.ts', 'src/agent/agent.ts', 'src/cni/server.ts', 'src/policy/enforcer.ts']) {
    const loaded = loadedWith(meta, outputOf(meta, part));
    for (const file of ['src/services/proxy.ts', 'src/services/render.ts', 'src/services/model.ts']) {
      assert.ok(!loaded.has(file), `${part} loads ${file}`);
    }
  }
});

test('the CNI server is a chunk of its own that loads no datastore client or metrics', async () => {
  const meta = await metafile();
  const start = loadedWith(meta, outputOf(meta, ENTRY));
  const cni = loadedWith(meta, outputOf(meta, 'src/cni/server.ts'));
  assert.ok(!start.has('src/cni/server.ts') && !start.has('src/cni/pod.ts'), 'the CNI server is loaded at start');
  assert.ok(!cni.has(ETCD_CLIENT) && !has(cni, '@kubernetes/client-node'), 'the CNI server loads a datastore client');
  assert.ok(!cni.has('src/server/metrics.ts'), 'the CNI server loads metrics');
});

test('network policy is a chunk of its own, loaded by no mode, the agent or the CNI server without --network-policy', async () => {
  const meta = await metafile();
  const policy = loadedWith(meta, outputOf(meta, 'src/policy/enforcer.ts'));
  assert.ok(policy.has('src/policy/render.ts') && policy.has('src/k8s/reflector.ts'), 'the enforcer brings its renderer and watches');
  assert.ok(!policy.has(ETCD_CLIENT), 'network policy loads the etcd client');
  for (const part of [ENTRY, 'src/lease/kube/source.ts', 'src/agent/agent.ts', 'src/cni/server.ts']) {
    const loaded = loadedWith(meta, outputOf(meta, part));
    // The reflector is also the kube lease source's Node watch: kube mode loads it, nothing else does.
    const policyOnly = part === 'src/lease/kube/source.ts' ? ['src/policy/enforcer.ts', 'src/policy/render.ts'] : ['src/policy/enforcer.ts', 'src/policy/render.ts', 'src/k8s/reflector.ts'];
    for (const file of policyOnly) assert.ok(!loaded.has(file), `${part} loads ${file}`);
  }
});
