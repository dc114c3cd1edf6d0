/**
 * The controller's disruption mode (as Kubernetes' node lifecycle controller stops evicting when
 * most of a zone's nodes go unready at once): when most gateway heartbeats go quiet together, the
 * API server or etcd more likely stalled than the nodes died. Pure.
 *
 * DESIGN NOTES
 * - A quiet gateway's EIPs have lapsed on it whatever the cause (fence.ts: it cannot renew them
 *   without its heartbeat, and one its peers vouch for is not quiet to the controller, vouch.ts).
 *   So freezing placement saves nothing where another gateway node still serves: those EIPs move
 *   there as in a failover, and the traffic comes back before the stall ends.
 * - What disruption mode keeps is the placement of a gateway none of whose nodes serves: without
 *   it, a stall of the whole API would withdraw every policy (and its pods' egress), and its end
 *   would place them anew; with it, each gateway node takes its EIPs back as its heartbeat resumes.
 */
import type { Gateway, InvalidGateway } from './api.ts';
import { matchesLabels } from '../k8s/label-selector.ts';
import { place } from './placement.ts';
import type { GatewayNode, PlacementInput, PlacementResult } from './placement.ts';

/** Disruption mode needs at least this many quiet gateway heartbeats... */
export const DISRUPTION_MIN = 2;
/** ...making at least this fraction of the gateway nodes' heartbeats (Kubernetes' unhealthy-zone-threshold). */
export const DISRUPTION_FRACTION = 0.55;

/**
 * Whether the gateway nodes' heartbeats went quiet together (the controller's disruption mode): at least
 * {@link DISRUPTION_MIN} of the Ready gateway nodes that have a heartbeat, and at least
 * {@link DISRUPTION_FRACTION} of them, last renewed longer than `livenessTimeoutMs` before `now`.
 */
export function disruption(gateways: readonly (Gateway | InvalidGateway)[], nodes: readonly GatewayNode[], now: number,
  livenessTimeoutMs: number): boolean {
  const selectors = gateways.filter((g): g is Gateway => !('invalid' in g)).map((g) => g.nodeSelector);
  const candidates = nodes.filter((n) => n.ready && n.renewedAt !== undefined && selectors.some((sel) => matchesLabels(sel, n.labels)));
  const quiet = candidates.filter((n) => now - n.renewedAt! > livenessTimeoutMs).length;
  return quiet >= DISRUPTION_MIN && quiet >= DISRUPTION_FRACTION * candidates.length;
}

/**
 * Placement in disruption mode: heartbeats judged as always, so the EIPs of quiet nodes move to
 * the gateway nodes still serving; but a gateway with no serving node keeps every placement it
 * had (heartbeats not judged for it) instead of withdrawing them.
 */
export function placeDisrupted(input: PlacementInput): PlacementResult {
  const judged = place(input);
  const unserved = new Set(judged.gateways.filter((g) => !g.nodes.some((n) => n.ready)).map((g) => g.name));
  if (unserved.size === 0) return judged;
  const frozen = place({ ...input, livenessTimeoutMs: Infinity });
  const pick = <T>(judgedOne: T, frozenOne: T | undefined, gateway: string) => (unserved.has(gateway) && frozenOne ? frozenOne : judgedOne);
  const frozenGateways = new Map(frozen.gateways.map((g) => [g.name, g]));
  const frozenPolicies = new Map(frozen.policies.map((s) => [s.id, s]));
  return {
    gateways: judged.gateways.map((g) => pick(g, frozenGateways.get(g.name), g.name)),
    policies: judged.policies.map((s) => pick(s, frozenPolicies.get(s.id), s.gateway)),
  };
}
