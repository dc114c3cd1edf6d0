/**
 * weftd --service-proxy refuses an API server address its own proxy would translate (issue #39,
 * point 1): the `kubernetes` Service's cluster IP the kubelet hands every pod, an address of
 * --service-cluster-ip-range, the Service's DNS names; the API server's real address passes.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError } from '../../../src/errors.ts';
import { parseCIDR } from '../../../src/ip/ip.ts';
import { apiThroughService, requireDirectApi } from '../../../src/services/api-address.ts';

/** What the kubelet gives a pod of a cluster whose `kubernetes` Service is 10.96.0.1:443. */
const KUBELET_ENV = { KUBERNETES_SERVICE_HOST: '10.96.0.1', KUBERNETES_SERVICE_PORT: '443', KUBERNETES_PORT: 'tcp://10.96.0.1:443' };
const RANGE = [parseCIDR('10.96.0.0/12', 'range'), parseCIDR('fd00:96::/108', 'range')];

test('the kubernetes Service\'s cluster IP is refused, with or without the range, and the error names the fix', () => {
  assert.equal(apiThroughService('https://10.96.0.1:443', KUBELET_ENV, []), '10.96.0.1 is the cluster IP of Service default/kubernetes');
  assert.throws(() => requireDirectApi('https://10.96.0.1:443', KUBELET_ENV, []), (e: unknown) => {
    assert.ok(e instanceof ConfigError);
    assert.equal(e.field, '--service-proxy');
    assert.match(e.message, /https:\/\/10\.96\.0\.1:443.*cluster IP of Service default\/kubernetes/);
    assert.match(e.message, /api-server-host and api-server-port \(service-proxy\.yaml, step 1\)/);
    return true;
  });
  const v6 = { KUBERNETES_PORT: 'tcp://[fd00:96::1]:443' };
  assert.match(apiThroughService('https://[fd00:96::1]:443', v6, []) ?? '', /^fd00:96::1 is the cluster IP/);
  assert.match(apiThroughService('https://[fd00:96:0::1]:6443', v6, []) ?? '', /cluster IP/, 'the same address written otherwise');
});

test('an address of --service-cluster-ip-range and the Service\'s DNS names are refused', () => {
  assert.equal(apiThroughService('https://10.96.0.1:443', {}, RANGE), '10.96.0.1 is in --service-cluster-ip-range 10.96.0.0/12');
  assert.match(apiThroughService('https://[fd00:96::1]:443', {}, RANGE) ?? '', /in --service-cluster-ip-range fd00:96::\/108/);
  for (const name of ['kubernetes.default', 'kubernetes.default.svc', 'kubernetes.default.svc.cluster.local', 'Kubernetes.Default.Svc.']) {
    assert.match(apiThroughService(`https://${name}:443`, {}, []) ?? '', /is the name of Service default\/kubernetes/, name);
  }
});

test('the API server\'s real address passes: set in place of the kubelet\'s, or from a kubeconfig', () => {
  // daemonset.yaml's override from kube-flannel-cfg: KUBERNETES_SERVICE_HOST changes, the kubelet's KUBERNETES_PORT stays.
  const overridden = { ...KUBELET_ENV, KUBERNETES_SERVICE_HOST: '198.51.100.250', KUBERNETES_SERVICE_PORT: '6443' };
  assert.equal(apiThroughService('https://198.51.100.250:6443', overridden, RANGE), undefined);
  assert.doesNotThrow(() => requireDirectApi('https://198.51.100.250:6443', overridden, RANGE));
  assert.equal(apiThroughService('https://api.example.com:6443', KUBELET_ENV, RANGE), undefined);
  assert.equal(apiThroughService('https://kubernetes.default.example.com', {}, []), undefined, 'another domain\'s name');
  assert.equal(apiThroughService('https://10.95.255.255:443', { KUBERNETES_PORT: 'not a URL' }, RANGE), undefined);
});
