/** src/lease/kube/kubeconfig.ts: a kubeconfig's current context, as client-node's KubeConfig would apply it to a request. */
import assert from 'node:assert/strict';
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import type { RequestOptions } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { Kubeconfig } from '../../../../src/lease/kube/kubeconfig.ts';

const b64 = (s: string): string => Buffer.from(s).toString('base64');

async function withDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'weft-kubeconfig-'));
  try {
    await fn(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

const doc = (user: Record<string, unknown>, cluster: Record<string, unknown> = {}): string => JSON.stringify({
  apiVersion: 'v1', kind: 'Config', 'current-context': 'b',
  clusters: [{ name: 'one', cluster: { server: 'https://198.51.100.1:6443' } },
    { name: 'two', cluster: { server: 'https://198.51.100.2:6443', ...cluster } }],
  users: [{ name: 'u', user }],
  contexts: [{ name: 'a', context: { cluster: 'one', user: 'u' } }, { name: 'b', context: { cluster: 'two', user: 'u' } }],
});

type Applied = RequestOptions & { headers?: Record<string, string> };

async function options(kc: { applyToHTTPSOptions(o: RequestOptions): Promise<void> }): Promise<Applied> {
  const o: RequestOptions = {};
  await kc.applyToHTTPSOptions(o);
  return o as Applied;
}

test('the current context\'s cluster and user, applied as client-node\'s KubeConfig applies them', async () => {
  const text = doc({ 'client-certificate-data': b64('CERT'), 'client-key-data': b64('KEY'), token: 'T', as: 'someone' },
    { 'certificate-authority-data': b64('CA'), 'tls-server-name': 'api.example', 'insecure-skip-tls-verify': true });
  const ours = Kubeconfig.parse(text);
  assert.equal(ours.getCurrentCluster().server, 'https://198.51.100.2:6443');
  const theirs = new KubeConfig();
  theirs.loadFromString(text);
  const { agent, ...o } = await options(ours);
  const { agent: theirAgent, ...expected } = await options(theirs);
  assert.deepEqual(o, expected);
  assert.equal((agent as { keepAlive?: boolean }).keepAlive, (theirAgent as { keepAlive?: boolean }).keepAlive);
  assert.equal(String(o.ca), 'CA');
  assert.equal(o.headers?.['Authorization'], 'Bearer T');
  assert.equal(o.headers?.['Impersonate-User'], 'someone');
});

test('relative file names are taken from the kubeconfig\'s directory; --kube-api-url keeps the credentials', async () => {
  await withDir(async (dir) => {
    await writeFile(join(dir, 'ca.pem'), 'CA-FILE');
    await writeFile(join(dir, 'kubeconfig'), doc({ username: 'admin', password: 'pw' }, { 'certificate-authority': 'ca.pem' }));
    const kc = Kubeconfig.fromFile(join(dir, 'kubeconfig'));
    assert.equal(String((await options(kc)).ca), 'CA-FILE');
    const moved = kc.withServer('https://198.51.100.9:443');
    assert.equal(moved.getCurrentCluster().server, 'https://198.51.100.9:443');
    const o = await options(moved);
    assert.equal(String(o.ca), 'CA-FILE');
    assert.equal(o.auth, 'admin:pw');
  });
});

test('an exec plugin\'s token; the in-cluster service account\'s token file and CA', async () => {
  await withDir(async (dir) => {
    const plugin = join(dir, 'plugin');
    await writeFile(plugin, '#!/bin/sh\necho \'{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",'
      + '"status":{"token":"from-exec"}}\'\n');
    await chmod(plugin, 0o755);
    const exec = Kubeconfig.parse(doc({ exec: { apiVersion: 'client.authentication.k8s.io/v1', command: plugin, interactiveMode: 'Never' } }));
    assert.equal((await options(exec)).headers?.['Authorization'], 'Bearer from-exec');

    const sa = join(dir, 'var/run/secrets/kubernetes.io/serviceaccount');
    await mkdir(sa, { recursive: true });
    await writeFile(join(sa, 'token'), 'first');
    await writeFile(join(sa, 'ca.crt'), 'SA-CA');
    const inCluster = Kubeconfig.inCluster('fd00::1', '443', dir);
    assert.equal(inCluster.getCurrentCluster().server, 'https://[fd00::1]:443');
    const first = await options(inCluster);
    assert.equal(first.headers?.['Authorization'], 'Bearer first');
    assert.equal(String(first.ca), 'SA-CA');
  });
});

test('a user\'s token file (client-go\'s tokenFile, or token-file) is read relative to the kubeconfig, over a token', async () => {
  await withDir(async (dir) => {
    await writeFile(join(dir, 'token'), 'from-file');
    for (const key of ['tokenFile', 'token-file']) {
      await writeFile(join(dir, 'kubeconfig'), doc({ [key]: 'token', token: 'inline' }));
      const kc = Kubeconfig.fromFile(join(dir, 'kubeconfig'));
      assert.equal((await options(kc)).headers?.['Authorization'], 'Bearer from-file', key);
    }
  });
});

test('what is missing or unsupported is named', () => {
  for (const text of ['plain', '- a']) assert.throws(() => Kubeconfig.parse(text), /not a kubeconfig/);
  assert.throws(() => Kubeconfig.parse(doc({}).replace('"current-context":"b"', '"current-context":"c"')), /"c" is not among its contexts/);
  assert.throws(() => Kubeconfig.parse(doc({}).replace('"cluster":"two"', '"cluster":"three"')), /names cluster "three", which it lacks/);
  assert.throws(() => Kubeconfig.parse(doc({}, { 'proxy-url': 'http://198.51.100.7:3128' })), /cluster "two": proxy-url is not supported/);
  assert.throws(() => Kubeconfig.parse(doc({ 'auth-provider': { name: 'gcp', config: {} } })), /auth-provider "gcp" is not supported/);
});
