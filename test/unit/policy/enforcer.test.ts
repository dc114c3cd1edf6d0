import assert from 'node:assert/strict';
import { test } from 'node:test';
import { podOfArgs } from '../../../src/cni/args.ts';
import { ConfigError } from '../../../src/errors.ts';
import { KubeHttp } from '../../../src/lease/kube/http.ts';
import { silentLogger } from '../../../src/log.ts';
import type { Runner, Sysctl } from '../../../src/masq/runner.ts';
import { PolicyEnforcer } from '../../../src/policy/enforcer.ts';
import { KubeConfig } from '@kubernetes/client-node';

test('the Pod of a CNI call comes from CNI_ARGS, when both its namespace and name are there', () => {
  assert.deepEqual(podOfArgs({ CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAMESPACE=x;K8S_POD_NAME=a;K8S_POD_INFRA_CONTAINER_ID=c1' }), { namespace: 'x', name: 'a' });
  assert.equal(podOfArgs({ CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAMESPACE=x' }), undefined);
  assert.equal(podOfArgs({ CNI_ARGS: 'K8S_POD_NAMESPACE=;K8S_POD_NAME=a' }), undefined);
  assert.equal(podOfArgs({}), undefined);
});

/** An enforcer whose nft and sysctls are stand-ins; its API client is never called before the checks pass. */
function enforcer(run: Runner, sysctl: Sysctl): PolicyEnforcer {
  const kc = new KubeConfig();
  kc.loadFromClusterAndUser({ name: 'c', server: 'https://127.0.0.1:1', skipTLSVerify: false }, { name: 'u' });
  return new PolicyEnforcer({ http: new KubeHttp(kc), node: 'node-1', log: silentLogger, runner: run, sysctl });
}

const nftWorks: Runner = async () => ({ code: 0, stdout: '', stderr: '' });
const bridgeOn: Sysctl = { read: async () => '1', write: async () => undefined };

test('start-up refuses, naming what is missing: nft, br_netfilter, or a sysctl it cannot set', async () => {
  const stop = new AbortController();
  stop.abort();
  const refused = async (e: PolicyEnforcer, message: RegExp) => {
    await assert.rejects(e.start(stop.signal), (err: unknown) => {
      assert.ok(err instanceof ConfigError, String(err));
      assert.equal(err.field, '--network-policy');
      assert.match(err.message, message);
      return true;
    });
  };
  await refused(enforcer(async () => ({ code: 127, stdout: '', stderr: 'spawn nft ENOENT' }), bridgeOn), /nftables .*nft list chains: spawn nft ENOENT/);
  await refused(enforcer(nftWorks, { read: async () => { throw new Error('ENOENT'); }, write: async () => undefined }), /net\.bridge\.bridge-nf-call-iptables cannot be read .*modprobe br_netfilter/);
  await refused(enforcer(nftWorks, { read: async () => '0', write: async () => { throw new Error('EROFS'); } }), /net\.bridge\.bridge-nf-call-iptables is 0 and could not be set to 1 \(EROFS\)/);
  const written: string[] = [];
  const e = enforcer(nftWorks, { read: async (k) => (k.endsWith('ip6tables') ? '0' : '1'), write: async (k, v) => void written.push(`${k}=${v}`) });
  await e.start(stop.signal);
  await e.stop();
  assert.deepEqual(written, ['net.bridge.bridge-nf-call-ip6tables=1'], 'the sysctl that was off is switched on');
});
