import assert from 'node:assert/strict';
import { test } from 'node:test';
import { podOfArgs } from '../../../src/cni/args.ts';
import { ConfigError, NetlinkError } from '../../../src/errors.ts';
import { KubeHttp } from '../../../src/lease/kube/http.ts';
import { memoryLogger, silentLogger } from '../../../src/log.ts';
import type { Logger } from '../../../src/log.ts';
import type { Runner, Sysctl } from '../../../src/masq/runner.ts';
import { PolicyEnforcer } from '../../../src/policy/enforcer.ts';
import type { PolicyEnforcerOptions } from '../../../src/policy/enforcer.ts';
import { NFLOG_GROUP } from '../../../src/policy/verdict-rules.ts';
import { readBackAnswer } from '../../support/nft-host.ts';
import { KubeConfig } from '@kubernetes/client-node';

test('the Pod of a CNI call comes from CNI_ARGS, when both its namespace and name are there', () => {
  assert.deepEqual(podOfArgs({ CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAMESPACE=x;K8S_POD_NAME=a;K8S_POD_INFRA_CONTAINER_ID=c1' }), { namespace: 'x', name: 'a' });
  assert.equal(podOfArgs({ CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAMESPACE=x' }), undefined);
  assert.equal(podOfArgs({ CNI_ARGS: 'K8S_POD_NAMESPACE=;K8S_POD_NAME=a' }), undefined);
  assert.equal(podOfArgs({}), undefined);
});

/** An enforcer whose nft and sysctls are stand-ins; its API client is never called before the checks pass. */
function enforcer(run: Runner, sysctl: Sysctl, log: Logger = silentLogger): PolicyEnforcer {
  const kc = new KubeConfig();
  kc.loadFromClusterAndUser({ name: 'c', server: 'https://127.0.0.1:1', skipTLSVerify: false }, { name: 'u' });
  return new PolicyEnforcer({ http: new KubeHttp(kc), node: 'node-1', log, runner: run, sysctl });
}

const nftWorks: Runner = async (argv) => readBackAnswer(argv) ?? { code: 0, stdout: '', stderr: '' };
const bridgeOn: Sysctl = { read: async () => '1', write: async () => undefined };

test('start-up refuses without nft; without br_netfilter\'s calls it starts, degraded, and says so', async () => {
  const stop = new AbortController();
  stop.abort();
  await assert.rejects(enforcer(async () => ({ code: 127, stdout: '', stderr: 'spawn nft ENOENT' }), bridgeOn).start(stop.signal), (err: unknown) => {
    assert.ok(err instanceof ConfigError, String(err));
    assert.equal(err.field, '--network-policy');
    assert.match(err.message, /nftables .*nft list chains: spawn nft ENOENT/);
    return true;
  });
  const log = memoryLogger();
  const readOnly = enforcer(nftWorks, { read: async () => '0', write: async () => { throw new Error('EROFS'); } }, log);
  await readOnly.start(stop.signal);
  await readOnly.stop();
  const degraded = log.records.find((r) => r.msg === 'network policy: degraded, the rest goes on');
  assert.match(String((degraded?.fields?.['err'] as Error | undefined)?.message), /net\.bridge\.bridge-nf-call-iptables is 0 and could not be set to 1 \(EROFS\)/);
  const written: string[] = [];
  const e = enforcer(nftWorks, { read: async (k) => (k.endsWith('ip6tables') ? '0' : '1'), write: async (k, v) => void written.push(`${k}=${v}`) });
  await e.start(stop.signal);
  await e.stop();
  assert.deepEqual(written, ['net.bridge.bridge-nf-call-ip6tables=1'], 'the sysctl that was off is switched on');
});

test('verdict logs: the group is bound at start, unbound at stop; where it cannot be bound, enforcement starts without them', async () => {
  const stop = new AbortController();
  stop.abort();
  const kc = new KubeConfig();
  kc.loadFromClusterAndUser({ name: 'c', server: 'https://127.0.0.1:1', skipTLSVerify: false }, { name: 'u' });
  const run = (nflog: PolicyEnforcerOptions['nflog'], log: Logger) =>
    new PolicyEnforcer({ http: new KubeHttp(kc), node: 'node-1', log, runner: nftWorks, sysctl: bridgeOn, nflog });
  const calls: string[] = [];
  const bound = run(async (group) => {
    calls.push(`bind ${group}`);
    return { stop: () => void calls.push('unbind') };
  }, silentLogger);
  await bound.start(stop.signal);
  await bound.stop();
  assert.deepEqual(calls, [`bind ${NFLOG_GROUP}`, 'unbind']);
  const log = memoryLogger();
  const refused = run(async () => {
    throw new NetlinkError('bind', 'EPERM', `NFLOG group ${NFLOG_GROUP}`);
  }, log);
  await refused.start(stop.signal);
  await refused.stop();
  const warning = log.records.find((r) => r.msg === 'network policy: verdict logs off, enforcement goes on');
  assert.match(String((warning?.fields['err'] as Error | undefined)?.message), /failed to bind NFLOG group 22342: EPERM/);
});

test('a host whose nft is older than 1.0.1 refuses --network-policy naming the fix (#39)', async () => {
  const stop = new AbortController();
  stop.abort();
  const old: Runner = async (argv) => readBackAnswer(argv, '0.9.8') ?? { code: 0, stdout: '', stderr: '' };
  await assert.rejects(enforcer(old, bridgeOn).start(stop.signal), (err: unknown) => {
    assert.ok(err instanceof ConfigError, String(err));
    assert.equal(err.field, '--network-policy');
    assert.match(err.message, /are nft 0\.9\.8, .*needs a kernel of 5\.13 or later and nftables 1\.0\.1 or later/);
    return true;
  });
});
