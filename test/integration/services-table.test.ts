/**
 * Weft's Service rules against kube-proxy's behaviour, row by row, on a real kernel (issue #39):
 * every Service shape kube-proxy's proxier tests cover (pkg/proxy/nftables and iptables
 * proxier_test.go, v1.28), each packet they send and the outcome they expect, sent as a real
 * connection through a node namespace holding Weft's rules (test/support/service-table.ts).
 * A row where Weft differs from kube-proxy today keeps kube-proxy's expectation and runs as a todo.
 */
import { test } from 'node:test';
import { needsRoot, withNetns } from '../support/netns.ts';
import {
  ep4, ep6, GONE, NODE_IP, NODE_IP_ALT, NODE_IP6, NODE_PORT, POD_PORT, SERVICE_CIDRS, ServiceTable, TERMINATING,
} from '../support/service-table.ts';
import type { Outcome, PodName, Row } from '../support/service-table.ts';
import { parseCIDR } from '../../src/ip/ip.ts';
import { serviceObject, sliceObject } from '../support/services.ts';

const NS = 'table';
type Obj = Record<string, unknown>;
const services: Obj[] = [];
const slices: Obj[] = [];

/**
 * A Service `name` of port 80 (TCP, or `ports`) and load balancer IPs `lbIPs`, with its IPv4 slice of
 * `endpoints` serving on POD_PORT (or `slicePorts`).
 */
function service(name: string, spec: Obj, endpoints: Obj[] | undefined, lbIPs?: string | string[], ports?: Obj[], slicePorts?: Obj[]) {
  const ingress = (typeof lbIPs === 'string' ? [lbIPs] : lbIPs ?? []).map((ip) => ({ ip }));
  services.push(serviceObject(NS, name, { ports: [{ port: 80 }], ...spec, ...(ports ? { ports } : {}) },
    ingress.length > 0 ? { loadBalancer: { ingress } } : {}));
  if (endpoints) slices.push(sliceObject(NS, `${name}-4`, name, 'IPv4', slicePorts ?? [{ port: POD_PORT }], endpoints));
}
const lb = (clusterIP: string, nodePort: number, more: Obj = {}) =>
  ({ type: 'LoadBalancer', clusterIP, ports: [{ port: 80, nodePort }], ...more });
const to = (pods: PodName[], masq: boolean): Outcome => ({ to: pods, masq });
const row = (name: string, from: Row['from'], dest: string, port: number, expect: Outcome, more: Partial<Row> = {}): Row =>
  ({ name, from, to: dest, port, expect, ...more });

// TestClusterIPGeneral: one endpoint; several ports told apart by protocol; target ports by the slice's port names.
service('one', { clusterIP: '10.96.0.11' }, [ep4('pa')]);
service('multi', { clusterIP: '10.96.0.2' }, [ep4('pa'), ep4('pc')], undefined, [
  { name: 'http', port: 80, targetPort: 'web' }, { name: 'https', port: 443, targetPort: 8443 },
  { name: 'dns-udp', port: 53, protocol: 'UDP' }, { name: 'dns-tcp', port: 53, targetPort: 5353 }, { name: 'metrics', port: 9090 },
], [
  // Listed in another order than the Service's, with a port nothing listens on first: only the names match them up.
  { name: 'https', port: 9 }, { name: 'dns-tcp', port: POD_PORT }, { name: 'dns-udp', port: POD_PORT, protocol: 'UDP' },
  { name: 'http', port: POD_PORT },
]);
// TestExternalTrafficPolicyCluster / TestInternalExternalMasquerade svc1.
service('cluster', lb('10.96.0.3', 30003, { externalIPs: ['198.18.0.103'] }), [ep4('pa'), ep4('pc')], '198.18.0.3');
// TestExternalTrafficPolicyLocal / TestInternalExternalMasquerade svc2.
service('local', lb('10.96.0.4', 30004, { externalIPs: ['198.18.0.104'], externalTrafficPolicy: 'Local', healthCheckNodePort: 32004 }),
  [ep4('pa'), ep4('pc')], '198.18.0.4');
// TestOverallNFTablesRules svc2: eTP Local without an endpoint on this node.
service('local-none', { type: 'NodePort', clusterIP: '10.96.0.5', externalTrafficPolicy: 'Local', ports: [{ port: 80, nodePort: 30005 }] },
  [ep4('pc')]);
// TestInternalTrafficPolicy / TestInternalExternalMasquerade svc3.
service('itl', lb('10.96.0.6', 30006, { internalTrafficPolicy: 'Local' }), [ep4('pa'), ep4('pc')], '198.18.0.6');
service('itl-none', { clusterIP: '10.96.0.7', internalTrafficPolicy: 'Local' }, [ep4('pc')]);
// TestNoEndpointsReject.
service('empty', lb('10.96.0.8', 30008, { externalIPs: ['198.18.0.108'] }), undefined, '198.18.0.8',
  [{ name: 'tcp', port: 80, nodePort: 30008 }, { name: 'udp', port: 80, protocol: 'UDP', nodePort: 30008 }]);
// ClientIP affinity (TestOverallNFTablesRules svc5).
service('sticky', { type: 'NodePort', clusterIP: '10.96.0.9', sessionAffinity: 'ClientIP', ports: [{ port: 80, nodePort: 30009 }] },
  [ep4('pa'), ep4('pb'), ep4('pc')]);
// TestTerminatingEndpointsTrafficPolicyCluster and ...Local: serving terminating endpoints only when none is ready.
const nowhere = (c: Obj) => ({ addresses: ['10.244.1.50'], nodeName: 'n1', conditions: c });
service('tc-ready', lb('10.96.0.21', 30021), [ep4('pa'), ep4('pb', TERMINATING), ep4('pc'), nowhere(GONE)], '198.18.0.21');
service('tc-term', lb('10.96.0.22', 30022), [ep4('pa', TERMINATING), nowhere(GONE), ep4('pc', TERMINATING)], '198.18.0.22');
service('tc-gone', lb('10.96.0.23', 30023), [ep4('pa', GONE), ep4('pc', GONE)], '198.18.0.23');
const etpLocal = (ip: string, port: number) => lb(ip, port, { externalTrafficPolicy: 'Local', healthCheckNodePort: port + 2000 });
service('tl-ready', etpLocal('10.96.0.24', 30024), [ep4('pa'), ep4('pb', TERMINATING), ep4('pc'), nowhere(GONE)], '198.18.0.24');
service('tl-term', etpLocal('10.96.0.25', 30025), [ep4('pa', TERMINATING), nowhere(GONE), ep4('pc')], '198.18.0.25');
service('tl-remote', etpLocal('10.96.0.26', 30026), [ep4('pc', TERMINATING)], '198.18.0.26');
service('tl-gone', etpLocal('10.96.0.27', 30027), [ep4('pa', GONE), ep4('pc', GONE)], '198.18.0.27');
// TestLoadBalancer: loadBalancerSourceRanges (the node's address in the first, not in the second).
service('fw', lb('10.96.0.31', 30031, { loadBalancerSourceRanges: ['198.51.100.0/25'] }), [ep4('pa')], ['198.18.0.31', '198.18.0.131']);
service('fw-far', lb('10.96.0.32', 30032, { loadBalancerSourceRanges: ['198.51.100.128/25'] }), [ep4('pa')], '198.18.0.32');
// The API's ExternallyAccessible: a ClusterIP Service with externalIPs takes externalTrafficPolicy.
service('cip-ext-local', { clusterIP: '10.96.0.41', externalIPs: ['198.18.0.141'], externalTrafficPolicy: 'Local' },
  [ep4('pa'), ep4('pc')]);
// Node ports on every address of the node (no --nodeport-addresses).
service('np', { type: 'NodePort', clusterIP: '10.96.0.61', ports: [{ port: 80, nodePort: NODE_PORT }] }, [ep4('pa'), ep4('pc')]);
// Dual stack (TestNodePorts' IPv6 cases, TestClusterIPGeneral's rejects and drops for IPv6).
service('web6', { type: 'NodePort', clusterIP: '10.96.0.51', clusterIPs: ['10.96.0.51', 'fd00:10:96::51'],
  ipFamilyPolicy: 'RequireDualStack', ports: [{ port: 80, nodePort: 30051 }] }, [ep4('pa'), ep4('pc')]);
slices.push(sliceObject(NS, 'web6-6', 'web6', 'IPv6', [{ port: POD_PORT }], [ep6('pa'), ep6('pc')]));
service('empty6', { clusterIP: 'fd00:10:96::52', clusterIPs: ['fd00:10:96::52'], ipFamilies: ['IPv6'] }, undefined);

const out = 'out';
const ROWS: Row[] = [
  row('simple clusterIP', 'pd', '10.96.0.11', 80, to(['pa'], false)),
  row('hairpin to cluster IP', 'pa', '10.96.0.11', 80, to(['pa'], true)),
  row('clusterIP with multiple endpoints, named target port', 'pd', '10.96.0.2', 80, to(['pa', 'pc'], false)),
  row('TCP and UDP on one port number (TCP)', 'pd', '10.96.0.2', 53, to(['pa', 'pc'], false)),
  row('TCP and UDP on one port number (UDP)', 'pd', '10.96.0.2', 53, to(['pa', 'pc'], false), { proto: 'UDP' }),
  row('TCP-only port does not match UDP traffic', 'pd', '10.96.0.2', 80, 'REJECT', { proto: 'UDP' }),
  row('a Service port no slice names has no endpoints', 'pd', '10.96.0.2', 9090, 'REJECT'),
  row('svc1 does not accept svc2\'s ports', 'pd', '10.96.0.11', POD_PORT, 'REJECT'),
  row('a cluster IP on an undefined port, from the node', 'node', '10.96.0.11', POD_PORT, 'REJECT'),
  row('packet to unallocated cluster ip', 'pd', '10.96.9.9', POD_PORT, 'DROP'),
  row('packet to unallocated cluster ip, from the node', 'node', '10.96.9.9', POD_PORT, 'DROP'),

  row('eTP Cluster: pod to cluster IP hits both endpoints, unmasqueraded', 'pd', '10.96.0.3', 80, to(['pa', 'pc'], false)),
  row('eTP Cluster: pod to external IP, masqueraded', 'pd', '198.18.0.103', 80, to(['pa', 'pc'], true)),
  row('eTP Cluster: external to external IP, masqueraded', out, '198.18.0.103', 80, to(['pa', 'pc'], true)),
  row('eTP Cluster: pod to LB IP, masqueraded', 'pd', '198.18.0.3', 80, to(['pa', 'pc'], true)),
  row('eTP Cluster: external to LB IP, masqueraded', out, '198.18.0.3', 80, to(['pa', 'pc'], true)),
  row('eTP Cluster: pod to NodePort, masqueraded', 'pd', NODE_IP, 30003, to(['pa', 'pc'], true)),
  row('eTP Cluster: external to NodePort, masqueraded', out, NODE_IP, 30003, to(['pa', 'pc'], true)),
  row('node to ClusterIP', 'node', '10.96.0.3', 80, to(['pa', 'pc'], true)),
  row('node to NodePort', 'node', NODE_IP, 30003, to(['pa', 'pc'], true)),
  row('node to LB', 'node', '198.18.0.3', 80, to(['pa', 'pc'], true)),
  row('external to ClusterIP', out, '10.96.0.3', 80, to(['pa', 'pc'], true)),

  row('eTP Local: pod to cluster IP hits both endpoints, unmasqueraded', 'pd', '10.96.0.4', 80, to(['pa', 'pc'], false)),
  row('eTP Local: pod to external IP hits both endpoints, unmasqueraded', 'pd', '198.18.0.104', 80, to(['pa', 'pc'], false)),
  row('eTP Local: external to external IP hits only local endpoint, unmasqueraded', out, '198.18.0.104', 80, to(['pa'], false)),
  row('eTP Local: pod to LB IP hits both endpoints, unmasqueraded', 'pd', '198.18.0.4', 80, to(['pa', 'pc'], false)),
  row('eTP Local: external to LB IP hits only local endpoint, unmasqueraded', out, '198.18.0.4', 80, to(['pa'], false)),
  row('eTP Local: pod to NodePort hits both endpoints, unmasqueraded', 'pd', NODE_IP, 30004, to(['pa', 'pc'], false)),
  row('eTP Local: external to NodePort hits only local endpoint, unmasqueraded', out, NODE_IP, 30004, to(['pa'], false)),
  row('node to ClusterIP with eTP:Local', 'node', '10.96.0.4', 80, to(['pa', 'pc'], true)),
  row('node to NodePort with eTP:Local', 'node', NODE_IP, 30004, to(['pa', 'pc'], true)),
  row('node to LB with eTP:Local', 'node', '198.18.0.4', 80, to(['pa', 'pc'], true)),
  row('external to ClusterIP with eTP:Local', out, '10.96.0.4', 80, to(['pa', 'pc'], true)),
  row('eTP Local, no endpoint on this node: external to NodePort', out, NODE_IP, 30005, 'DROP'),
  row('eTP Local, no endpoint on this node: pod to cluster IP', 'pd', '10.96.0.5', 80, to(['pc'], false)),
  row('eTP Local on a ClusterIP Service\'s external IP: external hits only local endpoint, unmasqueraded', out, '198.18.0.141', 80,
    to(['pa'], false)),
  row('eTP Local on a ClusterIP Service\'s external IP: pod hits both endpoints', 'pd', '198.18.0.141', 80, to(['pa', 'pc'], false)),

  row('pod to ClusterIP with iTP:Local hits only local endpoint', 'pd', '10.96.0.6', 80, to(['pa'], false)),
  row('node to ClusterIP with iTP:Local: local endpoint, masqueraded', 'node', '10.96.0.6', 80, to(['pa'], true)),
  row('external to ClusterIP with iTP:Local: local endpoint, masqueraded', out, '10.96.0.6', 80, to(['pa'], true)),
  row('pod to NodePort with iTP:Local: every endpoint', 'pd', NODE_IP, 30006, to(['pa', 'pc'], true)),
  row('external to LB with iTP:Local: every endpoint', out, '198.18.0.6', 80, to(['pa', 'pc'], true)),
  row('internalTrafficPolicy is local and there are no local endpoints', 'pd', '10.96.0.7', 80, 'DROP'),

  row('pod to cluster IP with no endpoints', 'pd', '10.96.0.8', 80, 'REJECT'),
  row('external to external IP with no endpoints', out, '198.18.0.108', 80, 'REJECT'),
  row('pod to NodePort with no endpoints', 'pd', NODE_IP, 30008, 'REJECT'),
  row('external to NodePort with no endpoints', out, NODE_IP, 30008, 'REJECT'),
  row('pod to LoadBalancer IP with no endpoints', 'pd', '198.18.0.8', 80, 'REJECT'),
  row('external to LoadBalancer IP with no endpoints', out, '198.18.0.8', 80, 'REJECT'),
  row('UDP: pod to cluster IP with no endpoints', 'pd', '10.96.0.8', 80, 'REJECT', { proto: 'UDP' }),
  row('UDP: external to NodePort with no endpoints', out, NODE_IP, 30008, 'REJECT', { proto: 'UDP' }),

  row('ClientIP affinity: a pod keeps its endpoint', 'pd', '10.96.0.9', 80, { sticky: ['pa', 'pb', 'pc'] }),
  row('ClientIP affinity: the node keeps its endpoint', 'node', '10.96.0.9', 80, { sticky: ['pa', 'pb', 'pc'] }),
  row('ClientIP affinity: an external client keeps its endpoint through the NodePort', out, NODE_IP, 30009, { sticky: ['pa', 'pb', 'pc'] }),

  row('terminating, eTP Cluster, ready endpoints exist: pod to clusterIP', 'pd', '10.96.0.21', 80, to(['pa', 'pc'], false)),
  row('terminating, eTP Cluster, ready endpoints exist: external to LB', out, '198.18.0.21', 80, to(['pa', 'pc'], true)),
  row('terminating, eTP Cluster, only terminating endpoints: pod to clusterIP', 'pd', '10.96.0.22', 80, to(['pa', 'pc'], false)),
  row('terminating, eTP Cluster, only terminating endpoints: external to LB', out, '198.18.0.22', 80, to(['pa', 'pc'], true)),
  row('terminating, eTP Cluster, no usable endpoints: pod to clusterIP', 'pd', '10.96.0.23', 80, 'REJECT'),
  row('terminating, eTP Cluster, no usable endpoints: external to LB', out, '198.18.0.23', 80, 'REJECT'),
  row('terminating, eTP Local, ready endpoints exist: pod to clusterIP', 'pd', '10.96.0.24', 80, to(['pa', 'pc'], false)),
  row('terminating, eTP Local, ready endpoints exist: external to LB', out, '198.18.0.24', 80, to(['pa'], false)),
  row('terminating, eTP Local, only terminating endpoints here: pod to clusterIP', 'pd', '10.96.0.25', 80, to(['pc'], false)),
  row('terminating, eTP Local, only terminating endpoints here: external to LB', out, '198.18.0.25', 80, to(['pa'], false)),
  row('terminating, eTP Local, terminating endpoints on remote node: pod to clusterIP', 'pd', '10.96.0.26', 80, to(['pc'], false)),
  row('terminating, eTP Local, terminating endpoints on remote node: external to LB', out, '198.18.0.26', 80, 'DROP'),
  row('terminating, eTP Local, no usable endpoints on any node: pod to clusterIP', 'pd', '10.96.0.27', 80, 'REJECT'),
  row('terminating, eTP Local, no usable endpoints on any node: external to LB', out, '198.18.0.27', 80, 'REJECT'),

  row('accepted external to LB1', out, '198.18.0.31', 80, to(['pa'], true)),
  row('accepted external to LB2', out, '198.18.0.131', 80, to(['pa'], true)),
  row('blocked external to LB1', 'far', '198.18.0.31', 80, 'DROP'),
  row('blocked external to LB2', 'far', '198.18.0.131', 80, 'DROP'),
  row('pod to LB (blocked by LoadBalancerSourceRanges)', 'pd', '198.18.0.31', 80, 'DROP'),
  row('node to LB (allowed by LoadBalancerSourceRanges)', 'node', '198.18.0.31', 80, to(['pa'], true)),
  row('nodePort bypasses LoadBalancerSourceRanges', 'far', NODE_IP_ALT, 30031, to(['pa'], true)),
  row('accepted external to LB, the other range', 'far', '198.18.0.32', 80, to(['pa'], true)),
  row('node to LB (not in LoadBalancerSourceRanges)', 'node', '198.18.0.32', 80, 'DROP',),

  row('NodePort on every node address: external to nodePort', out, NODE_IP, NODE_PORT, to(['pa', 'pc'], true)),
  row('NodePort on every node address: external to nodePort on secondary IP', 'far', NODE_IP_ALT, NODE_PORT, to(['pa', 'pc'], true)),
  row('NodePort on every node address: pod to the node\'s bridge address', 'pd', '10.244.1.1', NODE_PORT, to(['pa', 'pc'], true)),
  row('NodePort on every node address: node to nodePort', 'node', NODE_IP, NODE_PORT, to(['pa', 'pc'], true)),
  // The nftables proxier's behaviour; v1.28's iptables proxier translated it too, with route_localnet (since deprecated).
  row('localhost to nodePort is not translated', 'node', '127.0.0.1', NODE_PORT, 'NODE'),

  row('IPv6: pod to cluster IP', 'pd', 'fd00:10:96::51', 80, to(['pa', 'pc'], false)),
  row('IPv6: node to cluster IP, masqueraded', 'node', 'fd00:10:96::51', 80, to(['pa', 'pc'], true)),
  row('IPv6: pod to NodePort', 'pd', 'fd00:244:1::1', 30051, to(['pa', 'pc'], true)),
  row('IPv6: node to NodePort', 'node', NODE_IP6, 30051, to(['pa', 'pc'], true)),
  row('IPv6: pod to cluster IP with no endpoints', 'pd', 'fd00:10:96::52', 80, 'REJECT'),
  row('IPv6: a cluster IP on an undefined port', 'pd', 'fd00:10:96::51', POD_PORT, 'REJECT'),
  row('IPv6: packet to unallocated cluster ip', 'pd', 'fd00:10:96::99', POD_PORT, 'DROP'),
];

/** TestNodePorts with --nodeport-addresses: node ports on the chosen addresses only, the others left to the node's sockets. */
const CHOSEN_ROWS: Row[] = [
  row('nodeport-addresses: external to nodePort', out, NODE_IP, NODE_PORT, to(['pa', 'pc'], true)),
  row('nodeport-addresses: secondary nodeIP ignores NodePorts', 'far', NODE_IP_ALT, NODE_PORT, 'NODE'),
  row('nodeport-addresses: node to nodePort', 'node', NODE_IP, NODE_PORT, to(['pa', 'pc'], true)),
  row('nodeport-addresses: node to nodePort on an address not chosen', 'node', NODE_IP_ALT, NODE_PORT, 'NODE'),
  row('nodeport-addresses: pod to the node\'s bridge address, not chosen', 'pd', '10.244.1.1', NODE_PORT, 'NODE'),
  row('nodeport-addresses: pod to nodePort', 'pd', NODE_IP, NODE_PORT, to(['pa', 'pc'], true)),
  row('nodeport-addresses: external to nodePort with no endpoints', out, NODE_IP, 30008, 'REJECT'),
];

const NODES = ['node', 'pa', 'pb', 'pc', 'pd', 'out', 'far'];
const cidrs = (list: string[]) => list.map((c) => parseCIDR(c, 'test'));

test('Weft\'s Service rules give each packet of kube-proxy\'s proxier tests kube-proxy\'s outcome', { skip: needsRoot }, async (t) => {
  await withNetns(NODES, async (...ns) => {
    const table = await ServiceTable.build(ns, services, slices, { serviceCIDRs: cidrs(SERVICE_CIDRS) });
    try {
      await table.run(t, ROWS);
    } finally {
      await table.stop();
    }
  });
});

test('with --nodeport-addresses, node ports are translated on the chosen addresses only', { skip: needsRoot }, async (t) => {
  await withNetns(NODES, async (...ns) => {
    const nodePortCIDRs = cidrs(['198.51.100.0/25']);
    const table = await ServiceTable.build(ns, services, slices, { serviceCIDRs: cidrs(SERVICE_CIDRS), nodePortCIDRs });
    try {
      await table.run(t, CHOSEN_ROWS);
    } finally {
      await table.stop();
    }
  });
});
