/**
 * Endpoints and inputs the egress data plane's unit tests share (test/unit/egress/dataplane.test.ts
 * renders them for nftables, iptables.test.ts for iptables): node-1 has selected pods, node-3 and
 * node-2 are gateways, node-4 has nothing to do with egress.
 */
import { parseCIDR } from '../../src/ip/ip.ts';
import type { DataplaneInput, NextHop } from '../../src/egress/dataplane.ts';
import type { NodeEndpoints } from '../../src/egress/endpoints.ts';

export const inside = ['10.244.0.0/16', '10.96.0.0/12', '198.51.100.1/32', 'fd00:10:244::/56'].map((c) => parseCIDR(c, 'test'));
export const hops: Record<string, NextHop> = { 'node-3 4': { gateway: '10.244.3.0', linkIndex: 7, onlink: true }, 'node-2 4': { gateway: '10.244.2.0', linkIndex: 7, onlink: true } };

/** `node`'s input, IPv4 only unless `over` says otherwise. */
export function input(node: string, endpoints: NodeEndpoints[], over: Partial<DataplaneInput> = {}): DataplaneInput {
  return { node, endpoints, families: [4], inside, nextHop: (n, f) => hops[`${n} ${f}`], ownAddress: { 4: '198.51.100.3' }, ...over };
}

/** A policy with an EIP on node-3, pods on node-1 and node-3. */
export const a: NodeEndpoints = { policy: 'default/a', gateway: 'node-3', eip: { ipv4: '198.51.100.100' }, destinations: [], sources: [{ node: 'node-1', ips: ['10.244.1.5'] }, { node: 'node-3', ips: ['10.244.3.7'] }] };
/** A policy for one destination, leaving as node-2's own address. */
export const b: NodeEndpoints = { policy: 'default/b', gateway: 'node-2', eip: {}, destinations: [parseCIDR('203.0.113.0/24', 'test')], sources: [{ node: 'node-1', ips: ['10.244.1.6'] }] };

/** A floating IP on node-3 for a pod on node-1. */
export const fip: NodeEndpoints = {
  policy: 'FloatingIP default/web', gateway: 'node-3', eip: { ipv4: '198.51.100.100' }, destinations: [],
  sources: [{ node: 'node-1', ips: ['10.244.1.5'] }], inbound: [{ node: 'node-1', ip: '10.244.1.5' }],
};
/** A TCP port forward of 198.51.100.101 (on node-3) to port 8080 of `ip` on `node`. */
export const fwd = (port: number, ip: string, node: string): NodeEndpoints => ({
  policy: `PortForward default/p${port}`, gateway: 'node-3', eip: { ipv4: '198.51.100.101' }, destinations: [], sources: [],
  inbound: [{ node, ip, protocol: 'TCP', port, podPort: 8080 }],
});
