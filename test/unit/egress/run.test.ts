import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { parseFlags } from '../../../src/config/flags.ts';
import { egressSettings } from '../../../src/egress/run.ts';
import { ConfigError } from '../../../src/errors.ts';

const kube = ['--kube-subnet-mgr', '--kube-api-url=https://127.0.0.1:6443', '--egress-gateways'];
const refused = (field: string, message: RegExp) => (e: unknown) => e instanceof ConfigError && e.field === field && message.test(e.message);

test('egress settings: defaults, the flags\' CIDRs, NODE_NAME and POD_NAMESPACE', () => {
  const s = egressSettings(parseFlags([...kube, '--egress-service-cidr=10.96.0.0/12', '--egress-exclude-cidr=203.0.113.0/24', '--egress-exclude-cidr=fd00:1::/64'], {}), { NODE_NAME: 'node-1' });
  assert.deepEqual([s.node, s.namespace, s.livenessTimeoutMs, s.inside.length], ['node-1', 'kube-flannel', 3000, 3]);
  assert.equal(egressSettings(parseFlags([...kube, '--egress-liveness-timeout=10'], {}), { NODE_NAME: 'n', POD_NAMESPACE: 'weft' }).namespace, 'weft');
  assert.equal(egressSettings(parseFlags([...kube, '--egress-liveness-timeout=10'], {}), { NODE_NAME: 'n' }).livenessTimeoutMs, 10_000);
});

test('egress settings refuse to start naming what is wrong', () => {
  assert.throws(() => egressSettings(parseFlags(['--egress-gateways'], {}), { NODE_NAME: 'n' }), refused('--egress-gateways', /needs --kube-subnet-mgr/));
  assert.throws(() => egressSettings(parseFlags(kube, {}), {}), refused('NODE_NAME', /NODE_NAME/));
  assert.throws(() => egressSettings(parseFlags([...kube, '--egress-service-cidr=10.96.0.0/33'], {}), { NODE_NAME: 'n' }), refused('--egress-service-cidr', /./));
  assert.throws(() => egressSettings(parseFlags([...kube, '--egress-exclude-cidr=nope'], {}), { NODE_NAME: 'n' }), refused('--egress-exclude-cidr', /./));
  assert.throws(() => parseFlags([...kube, '--egress-liveness-timeout=1'], {}), refused('--egress-liveness-timeout', /between 2 and 3600/));
});

test('egress settings: --egress-peer-key-file\'s key and port, and a key refused naming the flag', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'weft-peer-key-'));
  try {
    const env = { NODE_NAME: 'n' };
    assert.equal(egressSettings(parseFlags(kube, {}), env).peers, undefined, 'no key: no liveness over the underlay');
    await writeFile(join(dir, 'key'), '0123456789abcdef-shared\n');
    const s = egressSettings(parseFlags([...kube, `--egress-peer-key-file=${join(dir, 'key')}`], {}), env);
    assert.deepEqual([s.peers?.key.toString(), s.peers?.port], ['0123456789abcdef-shared', 7950]);
    await writeFile(join(dir, 'short'), 'short\n');
    assert.throws(() => egressSettings(parseFlags([...kube, `--egress-peer-key-file=${join(dir, 'short')}`], {}), env),
      refused('--egress-peer-key-file', /5 bytes; the key needs 16 or more/));
    assert.throws(() => egressSettings(parseFlags([...kube, `--egress-peer-key-file=${join(dir, 'none')}`], {}), env),
      refused('--egress-peer-key-file', /failed to read/));
    assert.throws(() => parseFlags([...kube, '--egress-peer-port=0'], {}), refused('--egress-peer-port', /between 1 and 65535/));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
