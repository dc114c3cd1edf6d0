import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatCIDR, formatIP } from '../../../src/ip/ip.ts';
import { DEFAULT_AFFINITY_SECONDS, isInvalid, parseEndpointSlice, parseOwnNode, parseService } from '../../../src/services/model.ts';
import type { EndpointSlice, Invalid, OwnNode, Service } from '../../../src/services/model.ts';
import { endpoint, serviceObject, sliceObject } from '../../support/services.ts';

function valid<T extends object>(v: T | Invalid): T {
  if (isInvalid(v)) assert.fail(`unexpectedly invalid: ${v.invalid}`);
  return v;
}

test('a Service gets the API defaults where fields are absent', () => {
  const s = valid<Service>(parseService(serviceObject('ns', 'web', { clusterIP: '10.96.0.10', ports: [{ port: 80 }] })));
  assert.equal(s.type, 'ClusterIP');
  assert.deepEqual(s.clusterIPs.map(formatIP), ['10.96.0.10']);
  assert.deepEqual(s.ports, [{ name: '', protocol: 'TCP', port: 80 }]);
  assert.equal(s.affinitySeconds, undefined);
  assert.equal(s.internalLocal, false);
  assert.equal(s.externalLocal, false);
});

test('every field the proxy uses is read: dual stack, node ports, external and LB IPs, affinity, policies, ranges', () => {
  const s = valid<Service>(parseService(serviceObject('ns', 'lb', {
    type: 'LoadBalancer', clusterIPs: ['10.96.0.11', 'fd00:96::11'],
    ports: [{ name: 'dns', protocol: 'UDP', port: 53, nodePort: 30053 }, { name: 'sctp', protocol: 'SCTP', port: 9, nodePort: 30009 }],
    externalIPs: ['198.51.100.50'], sessionAffinity: 'ClientIP', sessionAffinityConfig: { clientIP: { timeoutSeconds: 60 } },
    internalTrafficPolicy: 'Local', externalTrafficPolicy: 'Local', healthCheckNodePort: 32000,
    loadBalancerSourceRanges: [' 198.18.0.0/15 ', 'fd00:1::/64'],
  }, { loadBalancer: { ingress: [{ ip: '198.51.100.200' }, { hostname: 'lb.example' }] } })));
  assert.deepEqual(s.clusterIPs.map(formatIP), ['10.96.0.11', 'fd00:96::11']);
  assert.deepEqual(s.ports.map((p) => [p.name, p.protocol, p.port, p.nodePort]), [['dns', 'UDP', 53, 30053], ['sctp', 'SCTP', 9, 30009]]);
  assert.deepEqual(s.externalIPs.map(formatIP), ['198.51.100.50']);
  assert.deepEqual(s.loadBalancerIPs.map(formatIP), ['198.51.100.200']);
  assert.equal(s.affinitySeconds, 60);
  assert.equal(s.internalLocal, true);
  assert.equal(s.externalLocal, true);
  assert.equal(s.healthCheckNodePort, 32000);
  assert.deepEqual(s.loadBalancerSourceRanges.map(formatCIDR), ['198.18.0.0/15', 'fd00:1::/64']);
});

test('ClientIP affinity without a timeout gets kube-proxy\'s 3 hours; a headless Service has no address', () => {
  const affinity = { clusterIP: '10.96.0.1', sessionAffinity: 'ClientIP', ports: [{ port: 1 }] };
  const a = valid<Service>(parseService(serviceObject('ns', 'a', affinity)));
  assert.equal(a.affinitySeconds, DEFAULT_AFFINITY_SECONDS);
  const h = valid<Service>(parseService(serviceObject('ns', 'h', { clusterIP: 'None', ports: [{ port: 1 }] })));
  assert.deepEqual(h.clusterIPs, []);
  const e = valid<Service>(parseService(serviceObject('ns', 'e', { type: 'ExternalName', externalName: 'x.example' })));
  assert.deepEqual(e.clusterIPs, []);
});

test('externalTrafficPolicy Local counts only for NodePort and LoadBalancer Services', () => {
  const spec = { clusterIP: '10.96.0.1', externalTrafficPolicy: 'Local', ports: [{ port: 1 }] };
  const s = valid<Service>(parseService(serviceObject('ns', 'c', spec)));
  assert.equal(s.externalLocal, false);
});

test('a bad field of the Service as a whole makes it invalid, naming the field and the object', () => {
  const cases: [object, RegExp][] = [
    [{ clusterIP: 'ten', ports: [{ port: 80 }] }, /^spec\.clusterIPs\[0\]: not an IP address/],
    [{ clusterIPs: ['10.96.0.1', '10.96.0.2'], ports: [{ port: 80 }] }, /^spec\.clusterIPs: at most one address of each family/],
    [{ clusterIP: '10.96.0.1', type: 'Bogus' }, /^spec\.type: must be one of/],
    [{ clusterIP: '10.96.0.1', sessionAffinity: 'ClientIP', sessionAffinityConfig: { clientIP: { timeoutSeconds: 0 } } },
      /^spec\.sessionAffinityConfig\.clientIP\.timeoutSeconds: must be 1-86400/],
    [{ clusterIP: '10.96.0.1', internalTrafficPolicy: 'Nearby' }, /^spec\.internalTrafficPolicy: must be one of Cluster, Local/],
  ];
  for (const [spec, why] of cases) {
    const v = parseService(serviceObject('ns', 'bad', spec as Record<string, unknown>));
    assert.ok(isInvalid(v), JSON.stringify(spec));
    assert.equal(v.id, 'ns/bad');
    assert.match(v.invalid, why);
  }
});

test('a bad item of a Service is left out and named, the rest kept, as kube-proxy serves the rest (#39)', () => {
  const s = valid<Service>(parseService(serviceObject('ns', 'web', {
    type: 'LoadBalancer', clusterIP: '10.96.0.1', healthCheckNodePort: 70_000,
    ports: [{ name: 'zero', port: 0 }, { name: 'icmp', port: 80, protocol: 'ICMP' }, { name: 'ok', port: 81, nodePort: -1 },
      { name: 'np', port: 82, nodePort: 30082 }],
    externalIPs: ['198.18.0.1', 'ten'], loadBalancerSourceRanges: ['10.0.0.0/33', '198.51.100.0/24'],
  }, { loadBalancer: { ingress: [{ ip: 'x' }, { ip: '198.18.0.2' }, 'y'] } })));
  assert.deepEqual(s.ports, [{ name: 'ok', protocol: 'TCP', port: 81 }, { name: 'np', protocol: 'TCP', port: 82, nodePort: 30082 }]);
  assert.deepEqual(s.externalIPs.map(formatIP), ['198.18.0.1']);
  assert.deepEqual(s.loadBalancerIPs.map(formatIP), ['198.18.0.2']);
  assert.deepEqual(s.loadBalancerSourceRanges.map(formatCIDR), ['198.51.100.0/24']);
  assert.equal(s.healthCheckNodePort, undefined);
  assert.deepEqual(s.skipped?.map((m) => m.split(':')[0]), [
    'spec.ports[0].port', 'spec.ports[1].protocol', 'spec.ports[2].nodePort', 'spec.externalIPs[1]', 'status.loadBalancer.ingress[0].ip',
    'status.loadBalancer.ingress[2]', 'spec.loadBalancerSourceRanges[0]', 'spec.healthCheckNodePort',
  ]);
  const ok = valid<Service>(parseService(serviceObject('ns', 'ok', { clusterIP: '10.96.0.1', ports: [{ port: 80 }] })));
  assert.equal(ok.skipped, undefined);
});

test('an EndpointSlice: its Service, family, ports and endpoint conditions with the API\'s defaults', () => {
  const s = valid<EndpointSlice>(parseEndpointSlice(sliceObject('ns', 'web-abc', 'web', 'IPv6', [{ name: 'http', port: 8080 }], [
    { addresses: ['fd00:244::2'] },
    endpoint('fd00:244::3', 'n2', { ready: false, serving: true, terminating: true }),
  ])));
  assert.equal(s.service, 'web');
  assert.equal(s.family, 6);
  assert.deepEqual(s.ports, [{ name: 'http', protocol: 'TCP', port: 8080 }]);
  assert.deepEqual(s.endpoints.map((e) => [formatIP(e.ip), e.ready, e.serving, e.terminating, e.nodeName]), [
    ['fd00:244::2', true, true, false, undefined],
    ['fd00:244::3', false, true, true, 'n2'],
  ]);
});

test('an EndpointSlice the proxy cannot use is invalid with the reason', () => {
  const fqdn = parseEndpointSlice(sliceObject('ns', 'f', 'web', 'FQDN' as 'IPv4', [{ port: 80 }], [{ addresses: ['x.example'] }]));
  assert.ok(isInvalid(fqdn) && /addressType: only IPv4 and IPv6/.test(fqdn.invalid));
  const orphan = parseEndpointSlice({ metadata: { namespace: 'ns', name: 'o' }, addressType: 'IPv4', endpoints: [] });
  assert.ok(isInvalid(orphan) && /no kubernetes\.io\/service-name label/.test(orphan.invalid));
});

test('a bad endpoint or port of a slice is left out and named, the rest of the slice kept, as kube-proxy does (#39)', () => {
  const s = valid<EndpointSlice>(parseEndpointSlice(sliceObject('ns', 'm', 'web', 'IPv4', [{ name: 'a' }, { name: 'b', port: 80 },
    { name: 'c', port: 81, protocol: 'ICMP' }], [{ addresses: ['fd00::1'] }, endpoint('10.244.1.2', 'n1'), { addresses: [] },
    { addresses: ['10.244.1.3'], conditions: 'yes' }])));
  assert.deepEqual(s.ports, [{ name: 'b', protocol: 'TCP', port: 80 }]);
  assert.deepEqual(s.endpoints.map((e) => formatIP(e.ip)), ['10.244.1.2']);
  assert.deepEqual(s.skipped, [
    'ports[0].port: must be a port number 1-65535, not undefined', 'ports[2].protocol: must be one of TCP, UDP, SCTP, not "ICMP"',
    'endpoints[0].addresses[0]: not an IPv4 address', 'endpoints[2].addresses: required', 'endpoints[3].conditions: must be an object',
  ]);
});

test('topology: an endpoint\'s zone hints, a bad hint leaving its endpoint out, and the Node\'s zone label (#39)', () => {
  const s = valid<EndpointSlice>(parseEndpointSlice(sliceObject('ns', 'z', 'web', 'IPv4', [{ port: 80 }], [
    { ...endpoint('10.244.1.2', 'n1'), hints: { forZones: [{ name: 'a' }, { name: 'b' }] } },
    endpoint('10.244.1.3', 'n1'),
    { ...endpoint('10.244.1.4', 'n1'), hints: { forZones: [{}] } },
  ])));
  assert.deepEqual(s.endpoints.map((e) => e.zoneHints), [['a', 'b'], undefined]);
  assert.deepEqual(s.skipped, ['endpoints[2].hints.forZones[0].name: required']);
  const node = (labels?: Record<string, string>) => valid<OwnNode>(parseOwnNode({ metadata: { name: 'n1', labels } }));
  assert.deepEqual(node({ 'topology.kubernetes.io/zone': 'a' }), { name: 'n1', zone: 'a', ips: [] });
  assert.deepEqual(node(), { name: 'n1', zone: '', ips: [] });
});
