/**
 * trace's masquerade step: whether the Service proxy's rules SNAT a translated connection to the
 * node's address (services/service-part.ts and base-chains.ts, after kube-proxy): the mark 0x4000
 * set on the way in, `masquerade fully-random` in postrouting, and the hairpin rule. Pure.
 *
 * - Hairpin: an endpoint on the translating node's bridge (in the cluster network) reaching
 *   itself through its Service is masqueraded, whatever the way in.
 * - A cluster IP: sources outside the cluster network (the node itself included) are masqueraded;
 *   with no cluster network of the family there is no such rule.
 * - An external way in (node port, externalIP, load balancer IP), externalTrafficPolicy Cluster:
 *   always masqueraded. externalTrafficPolicy Local: the client's address is kept, but for the
 *   translating node's own connections (`fib saddr type local`), which are masqueraded.
 */
import { contains, equalIP, formatCIDR, formatIP } from '../ip/ip.ts';
import type { CIDR, IP } from '../ip/ip.ts';
import type { Service } from '../services/model.ts';
import type { ServiceWay } from './trace-service.ts';
import type { TraceStep } from './trace-step.ts';

/** The connection as the translating node's rules see it. */
export interface MasqueradeCase {
  service: Service;
  way: ServiceWay;
  /** The client's address, and whether it is an address of the translating node. */
  src: IP;
  fromTranslator: boolean;
  /** The endpoint chosen, and whether it is on the translating node. */
  endpoint: IP;
  endpointLocal: boolean;
  /** The cluster networks (at most one per family). */
  clusterCIDRs: readonly CIDR[];
}

/** The masquerade step of one endpoint choice; `masquerade` says whether the source is rewritten. */
export function masqueradeStep(c: MasqueradeCase): TraceStep & { masquerade: boolean } {
  const cidr = c.clusterCIDRs.find((n) => n.ip.family === c.src.family);
  const inCluster = cidr !== undefined && contains(cidr, c.src);
  const yes = (why: string) => ({ stage: 'masquerade' as const, decision: 'SNAT to the node\'s address', why, masquerade: true });
  const no = (why: string) => ({ stage: 'masquerade' as const, decision: 'keeps its source', why, masquerade: false });
  const s = formatIP(c.src);
  if (c.endpointLocal && equalIP(c.src, c.endpoint) && cidr && contains(cidr, c.endpoint)) {
    return yes(`hairpin: ${s} reaches itself through its Service (postrouting, ct status dnat, set hairpin${c.src.family})`);
  }
  if (c.way === 'cluster IP') {
    if (!cidr) return no(`no cluster network of IPv${c.src.family}: no masquerade rule for cluster IPs`);
    if (inCluster) return no(`${s} is in the cluster network ${formatCIDR(cidr)}`);
    return yes(`${s} is outside the cluster network ${formatCIDR(cidr)} (mark 0x4000, masquerade fully-random in postrouting)`);
  }
  if (!c.service.externalLocal) {
    return yes(`${c.way} of an externalTrafficPolicy Cluster Service: every client is masqueraded (mark 0x4000)`);
  }
  if (inCluster) return no(`externalTrafficPolicy Local: ${s} is in the cluster network ${formatCIDR(cidr!)}`);
  if (c.fromTranslator) return yes(`externalTrafficPolicy Local: ${s} is the node's own address (fib saddr type local, mark 0x4000)`);
  return no(`externalTrafficPolicy Local keeps the client's address ${s}`);
}
