/**
 * trace's Service step: which Service port an address and port belong to, and the endpoints a new
 * connection may be translated to, chosen as the proxy's renderer chooses them
 * (services/endpoints.ts). Pure.
 */
import { equalIP, formatIP } from '../ip/ip.ts';
import type { IP } from '../ip/ip.ts';
import type { Protocol } from '../policy/model.ts';
import { hostPort, targetsOf, usable } from '../services/endpoints.ts';
import type { ServiceIndex } from '../services/render.ts';
import type { TraceStep } from './trace-step.ts';

/** The Service step and the endpoints (address, target port, `host:port` text) it may choose. */
export interface ServiceTrace {
  step: TraceStep;
  targets: { ip: IP; port: number; text: string }[];
}

/**
 * The translation of a new connection to `ip`:`port`, or undefined when the address is none of
 * a Service's (cluster IPs, externalIPs, load balancer IPs).
 */
export function traceService(index: ServiceIndex, node: string, ip: IP, proto: Protocol, port: number): ServiceTrace | undefined {
  for (const [key, service] of index.services) {
    const kind = service.clusterIPs.some((a) => equalIP(a, ip)) ? 'cluster IP'
      : service.externalIPs.some((a) => equalIP(a, ip)) ? 'external IP'
        : service.loadBalancerIPs.some((a) => equalIP(a, ip)) ? 'load balancer IP' : undefined;
    if (!kind) continue;
    const sp = service.ports.find((p) => p.port === port && p.protocol === proto);
    const at = `${formatIP(ip)}:${port}/${proto}`;
    if (!sp) {
      if (kind !== 'cluster IP') continue;
      const why = `Service ${key} has no port ${port}/${proto} on its cluster IP`;
      return { step: { stage: 'service', decision: 'reject', why }, targets: [] };
    }
    const name = `Service ${key}${sp.name ? ` port ${sp.name}` : ''}`;
    const all = targetsOf(sp, ip.family, index.slices.get(key) ?? [], node);
    // internalTrafficPolicy Local holds for cluster IPs; external ways in of a Local Service keep this
    // node's endpoints only for clients from outside, which a trace from a pod is not.
    const local = kind === 'cluster IP' && service.internalLocal;
    const used = usable(local ? all.filter((t) => t.local) : all);
    if (used.length === 0) {
      const which = local ? 'ready endpoint on this node (internalTrafficPolicy Local)' : 'ready endpoint';
      const why = `${name} (${kind} ${at}) has no ${which}`;
      return { step: { stage: 'service', decision: 'reject', why }, targets: [] };
    }
    const texts = used.map(hostPort);
    const affinity = service.affinitySeconds !== undefined ? `, ClientIP affinity ${service.affinitySeconds} s` : '';
    return {
      step: {
        stage: 'service',
        decision: `DNAT to one of ${texts.join(', ')}`,
        why: `${at} is ${name}'s ${kind}: ${used.length} of ${all.length} endpoints usable, chosen at random${affinity}`,
      },
      targets: used.map((t, i) => ({ ip: t.ip, port: t.port, text: texts[i]! })),
    };
  }
  return undefined;
}
