/**
 * trace's Service step: which Service port an address and port belong to, and the endpoints a new
 * connection may be translated to, chosen as the proxy's renderer chooses them
 * (services/endpoints.ts, services/service-part.ts). Pure.
 *
 * - Addresses first (cluster IPs, externalIPs, load balancer IPs), then node ports on an address
 *   of a node, as the rules look up `services` before `nodeports`.
 * - internalTrafficPolicy Local: cluster IP traffic uses the translating node's endpoints, and is
 *   dropped when it has none.
 * - externalTrafficPolicy Local, on the external ways in (node ports, externalIPs, load balancer
 *   IPs): a client from outside (neither in the cluster network nor an address of the translating
 *   node) uses that node's endpoints only, dropped when there are none; pods and the node itself
 *   use every endpoint.
 */
import { equalIP, formatIP } from '../ip/ip.ts';
import type { IP } from '../ip/ip.ts';
import type { Protocol } from '../policy/model.ts';
import { hostPort, targetsOf, usable } from '../services/endpoints.ts';
import type { Service, ServicePort } from '../services/model.ts';
import type { ServiceIndex } from '../services/render.ts';
import type { TraceStep } from './trace-step.ts';

/** How a Service was reached. */
export type ServiceWay = 'cluster IP' | 'external IP' | 'load balancer IP' | 'node port';

/** The Service step and the endpoints (address, target port, `host:port` text) it may choose. */
export interface ServiceTrace {
  step: TraceStep;
  /** The Service port's Service and way in; absent when no Service port matched (a reject). */
  service?: Service;
  way?: ServiceWay;
  targets: { ip: IP; port: number; text: string; local: boolean }[];
  /** No endpoint, so a new connection is dropped (a Local policy) rather than rejected. */
  dropped?: boolean;
}

/** Where the connection comes from and who translates it. */
export interface ServiceRequest {
  /** The node translating the connection: its endpoints are the Local policies'. */
  node: string;
  /** The destination address is one of a node's addresses (node ports apply). */
  nodeAddress: boolean;
  /** The client is neither in the cluster network nor an address of the translating node. */
  outside: boolean;
}

function wayOf(service: Service, ip: IP): ServiceWay | undefined {
  if (service.clusterIPs.some((a) => equalIP(a, ip))) return 'cluster IP';
  if (service.externalIPs.some((a) => equalIP(a, ip))) return 'external IP';
  if (service.loadBalancerIPs.some((a) => equalIP(a, ip))) return 'load balancer IP';
  return undefined;
}

function translate(index: ServiceIndex, key: string, service: Service, sp: ServicePort, way: ServiceWay, ip: IP, port: number,
  request: ServiceRequest): ServiceTrace {
  const name = `Service ${key}${sp.name ? ` port ${sp.name}` : ''}`;
  const at = `${formatIP(ip)}:${port}/${sp.protocol}`;
  const all = targetsOf(sp, ip.family, index.slices.get(key) ?? [], request.node);
  const internalLocal = way === 'cluster IP' && service.internalLocal;
  const externalLocal = way !== 'cluster IP' && service.externalLocal && request.outside;
  const local = internalLocal || externalLocal;
  const used = usable(local ? all.filter((t) => t.local) : all);
  const base = { service, way };
  if (used.length === 0) {
    const policy = internalLocal ? 'internalTrafficPolicy Local' : 'externalTrafficPolicy Local, a client from outside';
    const which = local ? `ready endpoint on node ${request.node} (${policy})` : 'ready endpoint';
    const why = `${name} (${way} ${at}) has no ${which}`;
    // A Local policy without local endpoints drops; no endpoint at all rejects.
    const dropped = local && usable(all).length > 0;
    const step: TraceStep = { stage: 'service', decision: dropped ? 'drop' : 'reject', why };
    return { ...base, step, targets: [], ...(dropped ? { dropped } : {}) };
  }
  const texts = used.map(hostPort);
  const affinity = service.affinitySeconds !== undefined ? `, ClientIP affinity ${service.affinitySeconds} s` : '';
  const only = local ? `, node ${request.node}'s only (${internalLocal ? 'internal' : 'external'}TrafficPolicy Local)` : '';
  return {
    ...base,
    step: {
      stage: 'service',
      decision: `DNAT to one of ${texts.join(', ')}`,
      why: `${at} is ${name}'s ${way}: ${used.length} of ${all.length} endpoints usable${only}, chosen at random${affinity}`,
    },
    targets: used.map((t, i) => ({ ip: t.ip, port: t.port, text: texts[i]!, local: t.local })),
  };
}

/**
 * The translation of a new connection to `ip`:`port`, or undefined when the address and port
 * are none of a Service's (cluster IPs, externalIPs, load balancer IPs, node ports on a node's
 * address).
 */
export function traceService(index: ServiceIndex, ip: IP, proto: Protocol, port: number,
  request: ServiceRequest): ServiceTrace | undefined {
  for (const [key, service] of index.services) {
    const way = wayOf(service, ip);
    if (!way) continue;
    const sp = service.ports.find((p) => p.port === port && p.protocol === proto);
    if (!sp) {
      if (way !== 'cluster IP') continue;
      const why = `Service ${key} has no port ${port}/${proto} on its cluster IP`;
      return { step: { stage: 'service', decision: 'reject', why }, targets: [] };
    }
    return translate(index, key, service, sp, way, ip, port, request);
  }
  if (!request.nodeAddress || (ip.family === 4 ? (ip.value >> 24n) === 127n : ip.value === 1n)) return undefined;
  for (const [key, service] of index.services) {
    if (service.type !== 'NodePort' && service.type !== 'LoadBalancer') continue;
    if (!service.clusterIPs.some((a) => a.family === ip.family)) continue;
    const sp = service.ports.find((p) => p.nodePort === port && p.protocol === proto);
    if (sp) return translate(index, key, service, sp, 'node port', ip, port, request);
  }
  return undefined;
}
