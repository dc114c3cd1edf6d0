/**
 * trace's egress step: whether this node's egress data plane (egress/dataplane.ts's plan, as last
 * rendered) steers a connection to a gateway node or SNATs it here, read the way its rules act:
 * destinations inside the cluster are never touched; of the steering rules the last matching
 * one sets the mark (each overwrites the mark bits); of the SNAT rules the first matching binds.
 * Pure.
 */
import { contains, formatIP, parseCIDR, tryParseIP } from '../ip/ip.ts';
import type { IP } from '../ip/ip.ts';
import type { DataplaneResult, PolicyRules } from '../egress/dataplane.ts';
import type { TraceStep } from './trace-step.ts';

const inAny = (cidrs: readonly string[], ip: IP) => cidrs.some((c) => contains(parseCIDR(c, 'cidr'), ip));
const holds = (ips: readonly string[], ip: IP) => ips.some((a) => tryParseIP(a)?.value === ip.value);

/**
 * The egress step of a connection from `src` to `dst` (after any Service translation), or
 * undefined when no egress policy concerns `src` on this node.
 */
export function egressStep(dataplane: DataplaneResult | undefined, src: IP, dst: IP): TraceStep | undefined {
  const plan = dataplane?.plan;
  if (!plan) return undefined;
  const mine = plan.policies.filter((p) => p.family === src.family && holds([...(p.steer?.local ?? []), ...(p.snat?.all ?? [])], src));
  if (mine.length === 0) return undefined;
  const s = formatIP(src);
  const d = formatIP(dst);
  if (inAny(plan.inside[src.family], dst)) {
    return { stage: 'egress', decision: 'not steered', why: `${d} is inside the cluster (never steered nor SNATed)` };
  }
  const matches = (p: PolicyRules) => p.dst.length === 0 || inAny(p.dst, dst);
  const steer = mine.filter((p) => p.steer && holds(p.steer.local, src) && matches(p)).at(-1);
  if (steer) {
    const rule = dataplane.rules.find((r) => r.family === src.family && r.fwmark.startsWith(`0x${steer.steer!.mark.toString(16)}/`));
    const route = rule && dataplane.routes.find((r) => r.family === rule.family && r.table === rule.table);
    const via = route ? `: table ${route.table} default via ${route.hop.gateway}${route.hop.onlink ? ' onlink' : ''}` : '';
    return {
      stage: 'egress',
      decision: 'steered to its gateway node',
      why: `${s} is a pod of egress policy #${steer.index} here, mark 0x${steer.steer!.mark.toString(16)}${via}; it keeps its source`,
    };
  }
  const snat = mine.find((p) => p.snat && holds(p.snat.all, src) && matches(p));
  if (snat) {
    const why = `this node is the gateway of egress policy #${snat.index} for ${s}`;
    return { stage: 'egress', decision: `SNAT to ${snat.snat!.to}`, why };
  }
  return { stage: 'egress', decision: 'not steered', why: `${d} is not among its egress policies' destinations` };
}
