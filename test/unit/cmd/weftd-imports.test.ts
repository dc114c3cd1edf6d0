/**
 * weftd's import graph, as the bundle bin/weftd runs is cut (esbuild, the same options as `make
 * build-weftd`): what a run loads before it knows its mode, and what each mode loads, must not
 * bring in the other mode's client. A static `import` of a heavy module anywhere on the way makes
 * these fail.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { build } from 'esbuild';
import type { Metafile } from 'esbuild';

const ENTRY = 'src/cmd/weftd.ts';

async function metafile(): Promise<Metafile> {
  const r = await build({
    entryPoints: [ENTRY], bundle: true, splitting: true, format: 'esm', platform: 'node', target: 'node24',
    outdir: 'dist/weftd-imports-test', write: false, metafile: true, logLevel: 'silent',
  });
  return r.metafile;
}

/** The input files of `output` and of every output it imports statically, transitively. */
function loadedWith(meta: Metafile, output: string): Set<string> {
  const inputs = new Set<string>();
  const seen = new Set<string>();
  const visit = (o: string) => {
    if (seen.has(o)) return;
    seen.add(o);
    const out = meta.outputs[o]!;
    for (const input of Object.keys(out.inputs)) inputs.add(input);
    for (const imp of out.imports) if (imp.kind === 'import-statement' && !imp.external) visit(imp.path);
  };
  visit(output);
  return inputs;
}

/** The output whose dynamic-import entry is the source file `input`. */
function outputOf(meta: Metafile, input: string): string {
  const found = Object.entries(meta.outputs).find(([, o]) => o.entryPoint === input);
  assert.ok(found, `${input} is imported dynamically, so it has an output of its own`);
  return found[0];
}

const has = (inputs: Set<string>, pkg: string) => [...inputs].some((i) => i.includes(`node_modules/${pkg}/`));

test('before the mode is known, weftd loads no datastore client, gRPC, metrics or netlink', async () => {
  const meta = await metafile();
  const start = loadedWith(meta, outputOf(meta, ENTRY));
  assert.ok(has(start, 'commander'), 'the flags are parsed with commander');
  for (const pkg of ['etcd3', '@grpc/grpc-js', 'protobufjs', '@kubernetes/client-node']) assert.ok(!has(start, pkg), `${pkg} loaded at start`);
  for (const file of ['src/server/metrics.ts', 'src/server/http.ts', 'src/netlink/native.ts', 'src/masq/manager.ts']) {
    assert.ok(!start.has(file), `${file} loaded at start`);
  }
});

test('etcd mode never loads the Kubernetes client; kube mode never loads etcd3 or gRPC', async () => {
  const meta = await metafile();
  const etcd = loadedWith(meta, outputOf(meta, 'src/lease/etcd/source.ts'));
  const kube = loadedWith(meta, outputOf(meta, 'src/lease/kube/source.ts'));
  const agent = loadedWith(meta, outputOf(meta, 'src/agent/agent.ts'));
  assert.ok(has(etcd, 'etcd3') && has(etcd, '@grpc/grpc-js'), 'etcd mode has its client');
  assert.ok(has(kube, '@kubernetes/client-node'), 'kube mode has its client');
  assert.ok(!has(etcd, '@kubernetes/client-node'), 'etcd mode loads @kubernetes/client-node');
  for (const pkg of ['etcd3', '@grpc/grpc-js', 'protobufjs']) assert.ok(!has(kube, pkg), `kube mode loads ${pkg}`);
  for (const pkg of ['etcd3', '@grpc/grpc-js', '@kubernetes/client-node']) assert.ok(!has(agent, pkg), `the agent loads ${pkg}`);
});

test('the CNI server is a chunk of its own that loads no datastore client, gRPC or metrics', async () => {
  const meta = await metafile();
  const start = loadedWith(meta, outputOf(meta, ENTRY));
  const cni = loadedWith(meta, outputOf(meta, 'src/cni/server.ts'));
  assert.ok(!start.has('src/cni/server.ts') && !start.has('src/cni/pod.ts'), 'the CNI server is loaded at start');
  for (const pkg of ['etcd3', '@grpc/grpc-js', '@kubernetes/client-node', 'prom-client']) assert.ok(!has(cni, pkg), `the CNI server loads ${pkg}`);
});
