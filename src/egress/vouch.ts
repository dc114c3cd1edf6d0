/**
 * Underlay liveness of egress gateway nodes, the pure part (peers.ts does the I/O): which peer a
 * node vouches for, how many peers' answers let a node keep its EIPs, and which quiet gateway the
 * controller may take them from. Times are ms on each node's own monotonic clock; only durations
 * cross nodes.
 *
 * DESIGN NOTES
 * - Members are the nodes with a heartbeat Lease (every node that can be a gateway), `n` of them.
 *   A node may hold its EIPs while its heartbeat Lease renewal was sent within the liveness
 *   timeout T (fence.ts), or while a ping it sent within T was answered by {@link acksNeeded} other
 *   members: with itself, a majority of the members, and at least two nodes. The ping's send time
 *   is what fence.ts's Claim is renewed with, so the bound on a lapsed EIP is the same either way.
 * - A member answers (vouches for) a peer only while it keeps hearing it: the first answer needs
 *   a ping saying the peer's own heartbeat Lease is fresh, and vouching lasts while pings keep
 *   coming at most T apart. Once a member stopped vouching, it starts again only after the peer
 *   renewed its Lease through the API, which the controller sees. Each member writes the peers it
 *   vouches for into its heartbeat Lease ({@link SEES_ANNOTATION}).
 * - The controller takes the EIPs of a gateway whose Lease went quiet for T only when enough
 *   members whose own Leases are live say they do not vouch for it that the rest (the gateway
 *   included) are fewer than a quorum ({@link provablyDown}): two majorities share a member, so
 *   the gateway cannot still be holding on its peers' word. Each one's last answer came more than
 *   T before it wrote so, and the ping answered was sent before that, so the lifetime it gave has
 *   run out. A member's Lease counts as live for T after the controller saw it change, which
 *   assumes, as the API heartbeat's fence does, that the controller's watch is not T late.
 * - So an API outage costs no EIP while the gateways see each other; a gateway cut from the API
 *   keeps its EIPs while its peers see it, and none moves; a gateway cut from both drops them
 *   within T, and the controller moves them once its peers say so, even in disruption mode. A
 *   quiet gateway the live members cannot prove down (a majority of them quiet) keeps its place.
 * - Membership changes while a gateway is cut from the API are not covered: it counts its
 *   quorum from the members it last saw.
 */

/** The heartbeat Lease annotation listing, comma-separated, the peers its node vouches for. */
export const SEES_ANNOTATION = 'egress.weft.dev/sees';

/** How many other members must answer a ping of a node among `members` (itself included) for it to keep its EIPs. */
export function acksNeeded(members: number): number {
  return Math.max(1, Math.floor(members / 2));
}

/** What one member has heard of its peers, and whom it vouches for. */
export class PeerView {
  readonly #livenessMs: number;
  readonly #heard = new Map<string, { at: number; vouching: boolean }>();

  constructor(livenessMs: number) {
    this.#livenessMs = livenessMs;
  }

  /**
   * A ping from `peer` arrived at `now`; `apiFresh`: its heartbeat Lease was renewed lately.
   * Returns whether to answer it (vouch for the peer).
   */
  pinged(peer: string, apiFresh: boolean, now: number): boolean {
    const last = this.#heard.get(peer);
    const vouching = apiFresh || (last !== undefined && last.vouching && now - last.at <= this.#livenessMs);
    this.#heard.set(peer, { at: now, vouching });
    return vouching;
  }

  /** The peers vouched for at `now`, sorted. */
  sees(now: number): string[] {
    return [...this.#heard].filter(([, h]) => h.vouching && now - h.at <= this.#livenessMs).map(([p]) => p).sort();
  }
}

/** A member's heartbeat as the controller sees it. */
export interface MemberReport {
  /** When (on the controller's clock) its heartbeat Lease last changed. */
  renewedAt: number;
  /** The peers its Lease says it vouches for; undefined: it runs without liveness over the underlay. */
  sees: readonly string[] | undefined;
}

/**
 * Whether member `node`, quiet for longer than `livenessMs`, provably holds no EIP on its peers'
 * word: enough members with a live Lease do not vouch for it that the others, `node` included,
 * are fewer than a quorum.
 */
export function provablyDown(node: string, members: ReadonlyMap<string, MemberReport>, now: number, livenessMs: number): boolean {
  const self = members.get(node);
  if (!self || now - self.renewedAt <= livenessMs) return false;
  const quorum = acksNeeded(members.size) + 1;
  let refusing = 0;
  for (const [name, m] of members) {
    if (name !== node && now - m.renewedAt <= livenessMs && !m.sees?.includes(node)) refusing++;
  }
  return members.size - refusing < quorum;
}

/**
 * The controller's verdict on each quiet member that runs the liveness over the underlay: `down`
 * ({@link provablyDown}: its EIPs lapsed, move them even in disruption mode) or `vouched` (it may
 * hold them on its peers' word: move none). Members without it are judged by their Lease alone.
 */
export function judgeQuiet(members: ReadonlyMap<string, MemberReport>, now: number, livenessMs: number): Map<string, 'down' | 'vouched'> {
  const out = new Map<string, 'down' | 'vouched'>();
  for (const [name, m] of members) {
    if (m.sees === undefined || now - m.renewedAt <= livenessMs) continue;
    out.set(name, provablyDown(name, members, now, livenessMs) ? 'down' : 'vouched');
  }
  return out;
}

/** The peers an annotation value lists; undefined when it is absent (no liveness over the underlay). */
export function parseSees(value: unknown): string[] | undefined {
  if (typeof value !== 'string') return undefined;
  return value === '' ? [] : value.split(',');
}
