/** The test cluster DNS's records (test/support/cluster-zone.ts), as the Kubernetes DNS specification names them. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1EndpointSlice, V1Service } from '@kubernetes/client-node';
import { ClusterZone } from '../../support/cluster-zone.ts';

const svc = (name: string, spec: V1Service['spec']): V1Service => ({ metadata: { name, namespace: 'ns' }, spec });
const slice = (service: string, endpoints: V1EndpointSlice['endpoints']): V1EndpointSlice => ({
  metadata: { name: `${service}-x`, namespace: 'ns', labels: { 'kubernetes.io/service-name': service } },
  addressType: 'IPv4', endpoints,
});

function zone(): ClusterZone {
  const z = new ClusterZone();
  z.setService(svc('web', { clusterIP: '10.96.3.4', clusterIPs: ['10.96.3.4'], ports: [{ name: 'http', port: 80, protocol: 'TCP' }] }));
  z.setService(svc('db', { clusterIP: 'None' }));
  z.setService(svc('all', { clusterIP: 'None', publishNotReadyAddresses: true }));
  z.setService(svc('ext', { type: 'ExternalName', externalName: 'example.org' }));
  const eps: V1EndpointSlice['endpoints'] = [
    { addresses: ['10.244.1.5'], hostname: 'db-0', conditions: { ready: true } },
    { addresses: ['10.244.2.6'], conditions: { ready: false } },
  ];
  z.setSlice(slice('db', eps));
  z.setSlice({ ...slice('all', eps), metadata: { name: 'all-x', namespace: 'ns', labels: { 'kubernetes.io/service-name': 'all' } } });
  return z;
}

const data = (z: ClusterZone, name: string, type: string): unknown[] => z.lookup(name, type).answers.map((a) => a.data);

test('a Service\'s name is its cluster IP, any case, with or without the final dot', () => {
  assert.deepEqual(data(zone(), 'web.ns.svc.cluster.local', 'A'), ['10.96.3.4']);
  assert.deepEqual(data(zone(), 'WEB.ns.svc.cluster.local.', 'A'), ['10.96.3.4']);
  assert.deepEqual(zone().lookup('web.ns.svc.cluster.local', 'AAAA'), { rcode: 'NOERROR', answers: [] });
});

test('a headless Service\'s name is its ready endpoints (all with publishNotReadyAddresses), a hostname its endpoint', () => {
  assert.deepEqual(data(zone(), 'db.ns.svc.cluster.local', 'A'), ['10.244.1.5']);
  assert.deepEqual(data(zone(), 'all.ns.svc.cluster.local', 'A'), ['10.244.1.5', '10.244.2.6']);
  assert.deepEqual(data(zone(), 'db-0.db.ns.svc.cluster.local', 'A'), ['10.244.1.5']);
  assert.equal(zone().lookup('db-1.db.ns.svc.cluster.local', 'A').rcode, 'NXDOMAIN');
});

test('ExternalName is a CNAME, a named port an SRV, a pod\'s dashed address its A', () => {
  assert.deepEqual(data(zone(), 'ext.ns.svc.cluster.local', 'A'), ['example.org']);
  assert.deepEqual(data(zone(), '_http._tcp.web.ns.svc.cluster.local', 'SRV'),
    [{ priority: 0, weight: 100, port: 80, target: 'web.ns.svc.cluster.local' }]);
  assert.deepEqual(data(zone(), '10-244-1-5.ns.pod.cluster.local', 'A'), ['10.244.1.5']);
});

test('names outside the zone, unknown Services and deleted ones are NXDOMAIN', () => {
  const z = zone();
  const names = ['example.org', 'nope.ns.svc.cluster.local', 'web.other.svc.cluster.local', 'ns.svc.cluster.local',
    'x-y-z-w.ns.pod.cluster.local', '10-244-1-256.ns.pod.cluster.local'];
  for (const n of names) {
    assert.equal(z.lookup(n, 'A').rcode, 'NXDOMAIN', n);
  }
  z.deleteService(svc('web', {}));
  assert.equal(z.lookup('web.ns.svc.cluster.local', 'A').rcode, 'NXDOMAIN');
});
