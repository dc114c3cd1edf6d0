/**
 * trace's nodes as ends: a node named by its lease (its Node name in kube mode) or one of its
 * addresses (the lease's public addresses). A node's own connection starts in its output hook:
 * no pod's egress policy applies, and its address is a local one for that node's rules. Pure.
 */
import { equalIP } from '../ip/ip.ts';
import type { IP } from '../ip/ip.ts';
import type { Lease } from '../lease/lease.ts';

/** The addresses of a node's lease, of `family` when given. */
export function leaseAddresses(lease: Lease, family?: 4 | 6): IP[] {
  return [lease.attrs.publicIP, lease.attrs.publicIPv6]
    .filter((a): a is IP => a !== undefined && (family === undefined || a.family === family));
}

/** The node whose lease holds address `ip`, if any. */
export function nodeOfAddress(leases: readonly Lease[], ip: IP): string | undefined {
  return leases.find((l) => leaseAddresses(l).some((a) => equalIP(a, ip)))?.peer;
}

/** Node `name` at its address of `family` (default: its first); undefined when no lease is named so. */
export function nodeByName(leases: readonly Lease[], name: string, family?: 4 | 6): { node: string; ip?: IP } | undefined {
  const lease = leases.find((l) => l.peer === name);
  if (!lease) return undefined;
  const ip = leaseAddresses(lease, family)[0];
  return { node: name, ...(ip ? { ip } : {}) };
}

/**
 * The address a node masquerades to towards another node's pod: its vxlan device's (its
 * subnet's first address, as flannel numbers it), else its public address.
 */
export function masqueradeAddress(lease: Lease, family: 4 | 6): IP | undefined {
  const subnet = family === 4 ? lease.subnet : lease.ipv6Subnet;
  if (lease.attrs.backendType.toLowerCase() === 'vxlan' && subnet) return subnet.ip;
  return leaseAddresses(lease, family)[0];
}
