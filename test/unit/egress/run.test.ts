import assert from 'node:assert/strict';
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
