/**
 * Which conntrack entries an endpoint change leaves stale, as kube-proxy decides after each sync
 * (pkg/proxy/conntrack/cleanup.go, v1.28): only datagram protocols (UDP, SCTP), whose flows have
 * no end a client would notice and so keep going to the endpoint first chosen. Pure.
 *
 * - An endpoint of a Service port that served and no longer does (gone, or neither ready nor
 *   terminating and serving): entries from each Service address (cluster IP, external IPs, load balancer IPs) DNATed to it, and
 *   those to the node port DNATed to it.
 * - A Service port going from no endpoints to some: every entry to its addresses and node port
 *   (the reject of a Service without endpoints may have left entries).
 */
import { formatIP } from '../ip/ip.ts';
import type { Family } from '../ip/ip.ts';
import { targetsOf } from './endpoints.ts';
import type { ServiceIndex } from './render.ts';

/** Entries to delete: all set fields match (the addon's ConntrackFilter, in netlink/). */
export interface StaleFlows {
  family: Family;
  protocol: 'udp' | 'sctp';
  /** The Service address the client sent to; absent: any (a node port's entries). */
  origDst?: string;
  origDstPort?: number;
  /** The endpoint the entry was DNATed to; absent: any. */
  replySrc?: string;
}

/** One datagram port of a Service in one family, as the last render saw it. */
interface DatagramPort {
  /** `<family> <protocol> <port name>`. */
  key: string;
  family: Family;
  protocol: 'udp' | 'sctp';
  addresses: string[];
  nodePort?: number;
  /** The serving endpoints: flows may go to them (a terminating one keeps those it has). */
  serving: Set<string>;
}

function datagramPorts(index: ServiceIndex, key: string, node: string): DatagramPort[] {
  const service = index.services.get(key);
  if (!service) return [];
  const slices = index.slices.get(key) ?? [];
  const out: DatagramPort[] = [];
  for (const port of service.ports) {
    if (port.protocol === 'TCP') continue;
    const protocol = port.protocol === 'UDP' ? 'udp' : 'sctp';
    for (const family of [4, 6] as const) {
      const addresses = [...service.clusterIPs, ...service.externalIPs, ...service.loadBalancerIPs]
        .filter((ip) => ip.family === family).map(formatIP);
      if (addresses.length === 0) continue;
      const targets = targetsOf(port, family, slices, node);
      out.push({
        key: `${family} ${protocol} ${port.name}`, family, protocol, addresses,
        ...(port.nodePort !== undefined ? { nodePort: port.nodePort } : {}),
        serving: new Set(targets.filter((t) => t.endpoint.serving).map((t) => formatIP(t.ip))),
      });
    }
  }
  return out;
}

/** The entries one port's change leaves stale; `before` or `after` absent: the port did not exist. */
function staleOf(before: DatagramPort | undefined, after: DatagramPort | undefined): StaleFlows[] {
  const out: StaleFlows[] = [];
  const port = (before ?? after)!;
  const { family, protocol } = port;
  if (after && after.serving.size > 0 && !(before && before.serving.size > 0)) {
    for (const origDst of after.addresses) out.push({ family, protocol, origDst });
    if (after.nodePort !== undefined) out.push({ family, protocol, origDstPort: after.nodePort });
  }
  for (const replySrc of before?.serving ?? []) {
    if (after?.serving.has(replySrc)) continue;
    for (const origDst of before!.addresses) out.push({ family, protocol, origDst, replySrc });
    if (before!.nodePort !== undefined) out.push({ family, protocol, origDstPort: before!.nodePort, replySrc });
  }
  return out;
}

/** The datagram ports of every Service as last rendered, and what each change leaves stale. */
export class DatagramPorts {
  readonly #ports = new Map<string, DatagramPort[]>();

  /**
   * Takes the Services `changed` names (every Service when undefined) as `index` now holds them
   * and returns the entries their changes left stale: delete them once the rules of this index
   * are applied, not before, or a packet meanwhile makes the entry again.
   */
  update(index: ServiceIndex, node: string, changed: ReadonlySet<string> | undefined): StaleFlows[] {
    const keys = changed ?? new Set([...this.#ports.keys(), ...index.services.keys()]);
    const out: StaleFlows[] = [];
    for (const key of keys) {
      const before = new Map((this.#ports.get(key) ?? []).map((p) => [p.key, p]));
      const after = datagramPorts(index, key, node);
      if (after.length > 0) this.#ports.set(key, after);
      else this.#ports.delete(key);
      for (const p of after) out.push(...staleOf(before.get(p.key), p));
      for (const [portKey, p] of before) if (!after.some((a) => a.key === portKey)) out.push(...staleOf(p, undefined));
    }
    return out;
  }
}
