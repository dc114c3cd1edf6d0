/**
 * One node's egress data plane, rendered purely from the EgressEndpoints it sees (endpoints.ts),
 * the way to each gateway node (from the backend's plan) and what counts as inside the cluster.
 *
 * DESIGN NOTES
 * - The rules are first a plan ({@link DataplanePlan}), rendered here for nftables and in
 *   iptables.ts for iptables (the node's traffic rules engine decides); the notes below speak
 *   of nftables, iptables.ts says what it does otherwise.
 * - Steering (a node with selected pods whose gateway is another node): nftables table
 *   `inet weft-egress`, chain `prerouting` (filter, {@link STEER_PRIORITY}: after Services' DNAT,
 *   so a cluster IP whose endpoint is outside the cluster is steered by that endpoint, and before
 *   routing) marks packets from the policy's local pods to destinations outside the cluster (and
 *   in its list, if it has one) with the gateway's mark (bits {@link EGRESS_MARK_MASK}; the k-th
 *   gateway node used here gets k+1 in them); `ip rule fwmark <mark>/<mask> lookup <EGRESS_TABLE_BASE + k>` sends them to a
 *   table of ours holding one default route: the same next hop the backend uses for the gateway
 *   node's subnet (vxlan: via its VTEP address on flannel.<VNI>, onlink; host-gw and DirectRouting:
 *   via its public address). Replies come back the normal way (the gateway de-NATs them and routes
 *   them to the pod's node).
 * - The steered packet must keep the pod's source: weft's masquerade (`inet weft`, srcnat) would
 *   rewrite it to this node's address. The kernel runs NAT chains of one hook in priority order
 *   and stops at the first that binds the connection, so our `postrouting` nat chain at srcnat-10
 *   binds marked connections to their own source (`snat to ip saddr`), and masquerade never sees
 *   them. A filter chain after NAT clears our mark bits, so the vxlan device's lookup for the
 *   outer packet (which inherits the inner packet's mark) uses the main table, not ours.
 * - On the gateway node: each EIP of its policies is on the external interface (/32, /128), and
 *   the nat chain SNATs the policy's pods (all nodes' ones, its own included) to outside
 *   destinations to the EIP, or to the node's own address for source NodeIP, before masquerade.
 * - Inside the cluster, never steered nor SNATed here: the pod networks, the service CIDRs, every
 *   node's addresses (from the leases) and the custom list.
 * - Every address lives in sets: rules grow with policies, not pods.
 * - Inbound (floating IPs and port forwards, inbound.ts; endpoints with `inbound` targets): the
 *   gateway node DNATs its EIP (every port, or a protocol and port) to the pod's address in a nat
 *   prerouting chain at dstnat-10, and routes it through the overlay the normal way (Weft's
 *   forward rules accept it: its destination is in the pod network). The client's address is
 *   kept: our srcnat-10 chain binds connections DNATed from the EIP to their own source, so
 *   masquerade (flannel masquerades traffic from outside the pod network to another node's pods)
 *   never rewrites them; the pod sees the outside client.
 * - The pod's node sends replies back through the gateway, whose conntrack entry de-NATs them to
 *   the EIP: a new connection from outside the cluster to the pod (its port, for a forward) gets
 *   the gateway's mark in its conntrack mark, and packets of the reply direction carrying it get
 *   it as their packet mark, which the gateway's ip rule and table route (as egress steering).
 *   A floating IP's pod is also a source of the endpoints (destinations: all), so what it opens
 *   leaves from the EIP as an egress policy's pods do.
 * - So a floating IP's or forward's pod is reachable from outside through its gateway only:
 *   connections from outside reaching it otherwise (a route to the pod network) would get their
 *   replies sent to the gateway too.
 */
import { formatCIDR } from '../ip/ip.ts';
import type { CIDR, Family } from '../ip/ip.ts';
import type { NodeEndpoints } from './endpoints.ts';

/** Weft's egress table (family `inet`). */
export const NFT_EGRESS_TABLE = 'weft-egress';
/** The fwmark bits egress steering uses. */
export const EGRESS_MARK_MASK = 0x00ff0000;
const MARK_SHIFT = 16;
/** Routing table of the first gateway node; the k-th is this + k. */
export const EGRESS_TABLE_BASE = 7700;
/** At most this many gateway nodes per node (the mark's bits). */
export const MAX_GATEWAYS = 255;
/**
 * rtm_protocol of our routes: not Weft's 201, which the main reconciler owns in every table and
 * would remove as stale.
 */
export const EGRESS_RTPROT = 202;
/** Priority of our `ip rule`s: after `local` (0), before `main` (32766). */
export const EGRESS_RULE_PRIORITY = 1500;
/** nat priority of our postrouting chain: before masquerade (srcnat). */
const NAT_PRIORITY = 'srcnat - 10';
/** nat priority of our prerouting chain (inbound DNAT): before kube-proxy's (dstnat). */
const DNAT_PRIORITY = 'dstnat - 10';
/** Priority of the steering chain: after every DNAT of prerouting (kube-proxy's, the Service proxy's). */
const STEER_PRIORITY = 'dstnat + 10';

/** The next hop the backend uses towards a node, for one family. */
export interface NextHop {
  gateway: string;
  linkIndex: number;
  onlink: boolean;
}

export interface DataplaneInput {
  node: string;
  endpoints: readonly NodeEndpoints[];
  families: readonly Family[];
  /** Destinations never steered nor SNATed. */
  inside: readonly CIDR[];
  /** The next hop to `node` for `family`, or undefined when it has no lease of that family. */
  nextHop(node: string, family: Family): NextHop | undefined;
  /** This node's own address per family (source NodeIP). */
  ownAddress: { 4?: string; 6?: string };
}

export interface EgressRule {
  family: Family;
  /** `0x10000/0xff0000` (mark/mask), as `ip rule` takes it. */
  fwmark: string;
  table: number;
}

export interface EgressRoute {
  family: Family;
  table: number;
  hop: NextHop;
}

export interface DataplaneResult {
  /** The `nft -f` script that replaces our table, or undefined: no table wanted. */
  nft: string | undefined;
  /** What the rules do, for the iptables rendering (iptables.ts), or undefined: no rules wanted. */
  plan: DataplanePlan | undefined;
  rules: EgressRule[];
  routes: EgressRoute[];
  /** Addresses wanted on the external interface. */
  eips: { family: Family; address: string }[];
  /** One line per policy skipped, for the log. */
  warnings: string[];
}

export const hex = (n: number) => `0x${n.toString(16)}`;
const familyOf = (ip: string): Family => (ip.includes(':') ? 6 : 4);
const nfKeyword = (f: Family) => (f === 4 ? 'ip' : 'ip6');
const setType = (f: Family) => (f === 4 ? 'ipv4_addr' : 'ipv6_addr');

/** Set names: policy ids hold `/`, `.` and `-`; nft takes letters, digits, `_` and `.` too. */
function setName(kind: string, index: number, f: Family): string {
  return `p${index}_${kind}${f}`;
}

function set(name: string, f: Family, elements: readonly string[]): string {
  const listed = elements.length > 0 ? `\t\telements = { ${elements.join(', ')} }\n` : '';
  return `\tset ${name} {\n\t\ttype ${setType(f)}; flags interval; auto-merge;\n${listed}\t}`;
}

/** One policy's rules for one family: steering of this node's pods, SNAT on its gateway. */
export interface PolicyRules {
  /** The policy's place in the sorted endpoints (names its sets and chains). */
  index: number;
  family: Family;
  /** Its destinations (all outside ones when empty). */
  dst: string[];
  /** This node's selected pods and the mark of their gateway. */
  steer?: { local: string[]; mark: number };
  /** On the gateway: every node's selected pods and the address they leave as. */
  snat?: { all: string[]; to: string };
}

/** An inbound target on its gateway: the EIP (or its protocol and port) DNATed to the pod. */
export interface InboundDnat {
  family: Family;
  eip: string;
  ip: string;
  protocol?: string;
  port?: number;
  podPort?: number;
}

/** An inbound target on its pod's node: new connections from outside to the pod get the gateway's mark. */
export interface InboundMark {
  family: Family;
  ip: string;
  protocol?: string;
  podPort?: number;
  mark: number;
}

/** What the node's rules do, whichever engine applies them (nftables or iptables). */
export interface DataplanePlan {
  families: readonly Family[];
  /** Per family, the destinations never steered nor SNATed. */
  inside: Record<Family, string[]>;
  policies: PolicyRules[];
  dnat: InboundDnat[];
  /** EIPs whose DNATed connections keep the client's address. */
  keepSource: { family: Family; eip: string }[];
  connMarks: InboundMark[];
}

/** Renders the node's egress data plane; see the design notes. */
export function renderDataplane(input: DataplaneInput): DataplaneResult {
  const warnings: string[] = [];
  const plan: DataplanePlan = { families: input.families, inside: { 4: [], 6: [] }, policies: [], dnat: [], keepSource: [], connMarks: [] };
  const eips: { family: Family; address: string }[] = [];
  const gatewayIndex = new Map<string, number>();
  const rules: EgressRule[] = [];
  const routes: EgressRoute[] = [];
  for (const f of input.families) plan.inside[f] = input.inside.filter((c) => c.ip.family === f).map(formatCIDR).sort();
  /**
   * The mark that routes this node's packets to `e`'s gateway node for `f`, adding its ip rule
   * and route the first time; undefined (and a warning) when there is no way there.
   */
  const steer = (e: NodeEndpoints, f: Family, who: string, otherwise: string): number | undefined => {
    const hop = input.nextHop(e.gateway, f);
    if (!hop) {
      warnings.push(`${who}: no IPv${f} route to gateway node ${e.gateway} (no lease of that family); ${otherwise}`);
      return undefined;
    }
    let k = gatewayIndex.get(e.gateway);
    if (k === undefined) {
      k = gatewayIndex.size;
      if (k >= MAX_GATEWAYS) {
        warnings.push(`${who}: more than ${MAX_GATEWAYS} gateway nodes; ${otherwise}`);
        return undefined;
      }
      gatewayIndex.set(e.gateway, k);
    }
    const mark = (k + 1) << MARK_SHIFT;
    if (!rules.some((r) => r.family === f && r.table === EGRESS_TABLE_BASE + k)) {
      rules.push({ family: f, fwmark: `${hex(mark)}/${hex(EGRESS_MARK_MASK)}`, table: EGRESS_TABLE_BASE + k });
      routes.push({ family: f, table: EGRESS_TABLE_BASE + k, hop });
    }
    return mark;
  };
  const policies = [...input.endpoints].sort((a, b) => (a.policy < b.policy ? -1 : a.policy > b.policy ? 1 : 0));
  for (const [i, e] of policies.entries()) {
    const local = e.sources.find((s) => s.node === input.node)?.ips ?? [];
    const isGateway = e.gateway === input.node;
    for (const f of input.families) {
      const dst = e.destinations.filter((d) => d.ip.family === f).map(formatCIDR).sort();
      if (e.destinations.length > 0 && dst.length === 0) continue;
      const p: PolicyRules = { index: i, family: f, dst };
      const localIps = local.filter((ip) => familyOf(ip) === f);
      if (!isGateway && localIps.length > 0) {
        const mark = steer(e, f, `egress policy ${e.policy}`, 'its pods leave the normal way');
        if (mark !== undefined) p.steer = { local: localIps.sort(), mark };
      }
      if (isGateway) {
        const all = e.sources.flatMap((s) => s.ips).filter((ip) => familyOf(ip) === f);
        const to = f === 4 ? e.eip.ipv4 : e.eip.ipv6;
        const source = to ?? input.ownAddress[f];
        if (to) eips.push({ family: f, address: to });
        if (all.length > 0 && source) p.snat = { all: [...new Set(all)].sort(), to: source };
      }
      if (p.steer || p.snat) plan.policies.push(p);
    }
    for (const t of e.inbound ?? []) {
      const f = familyOf(t.ip);
      const eip = f === 4 ? e.eip.ipv4 : e.eip.ipv6;
      if (!eip || !input.families.includes(f)) continue;
      const l4 = t.protocol ? { protocol: t.protocol.toLowerCase() } : {};
      if (isGateway) {
        plan.dnat.push({ family: f, eip, ip: t.ip, ...l4, ...(t.protocol ? { port: t.port, podPort: t.podPort } : {}) });
        if (!plan.keepSource.some((k) => k.eip === eip)) plan.keepSource.push({ family: f, eip });
      } else if (t.node === input.node) {
        const mark = steer(e, f, e.policy, 'replies to its connections leave the normal way');
        if (mark === undefined) continue;
        plan.connMarks.push({ family: f, ip: t.ip, ...l4, ...(t.protocol ? { podPort: t.podPort } : {}), mark });
      }
    }
  }
  const wanted = plan.policies.length > 0 || plan.dnat.length > 0 || plan.connMarks.length > 0;
  return { nft: wanted ? renderNft(plan) : undefined, plan: wanted ? plan : undefined, rules, routes, eips: dedupe(eips), warnings };
}

/** The `nft -f` script of the plan: table `inet weft-egress`. */
function renderNft(plan: DataplanePlan): string {
  const sets: string[] = [];
  const marks: string[] = [];
  const nat: string[] = [];
  for (const f of plan.families) sets.push(set(`inside${f}`, f, plan.inside[f]));
  for (const p of plan.policies) {
    const kw = nfKeyword(p.family);
    const dst = p.dst.length > 0 ? ` ${kw} daddr @${setName('dst', p.index, p.family)}` : '';
    const match = (src: string) => `${kw} saddr @${src} ${kw} daddr != @inside${p.family}${dst}`;
    if (p.steer) {
      sets.push(set(setName('local', p.index, p.family), p.family, p.steer.local));
      marks.push(
        `${match(setName('local', p.index, p.family))} meta mark set meta mark & ${hex(~EGRESS_MARK_MASK >>> 0)} | ${hex(p.steer.mark)}`,
      );
    }
    if (p.snat) {
      sets.push(set(setName('all', p.index, p.family), p.family, p.snat.all));
      nat.push(`${match(setName('all', p.index, p.family))} snat ${kw} to ${p.snat.to}`);
    }
    if (p.dst.length > 0) sets.push(set(setName('dst', p.index, p.family), p.family, p.dst));
  }
  const dnat = plan.dnat.map((d) => {
    const kw = nfKeyword(d.family);
    const pod = d.family === 4 ? d.ip : `[${d.ip}]`;
    return d.protocol
      ? `${kw} daddr ${d.eip} meta l4proto ${d.protocol} th dport ${d.port} dnat ${kw} to ${pod}:${d.podPort}`
      : `${kw} daddr ${d.eip} dnat ${kw} to ${d.ip}`;
  });
  const keepSource = plan.keepSource.map(
    ({ family, eip }) =>
      `ct status dnat ct original ${nfKeyword(family)} daddr ${eip} snat ${nfKeyword(family)} to ${nfKeyword(family)} saddr`,
  );
  const connMarks = plan.connMarks.map((c) => {
    const kw = nfKeyword(c.family);
    const port = c.protocol ? ` meta l4proto ${c.protocol} th dport ${c.podPort}` : '';
    return (
      `ct state new ${kw} saddr != @inside${c.family} ${kw} daddr ${c.ip}${port} ` +
      `ct mark set ct mark & ${hex(~EGRESS_MARK_MASK >>> 0)} | ${hex(c.mark)}`
    );
  });
  const replyMarks = [...new Set(plan.connMarks.map((c) => c.mark))].map(
    (m) =>
      `ct direction reply ct mark & ${hex(EGRESS_MARK_MASK)} == ${hex(m)} ` +
      `meta mark set meta mark & ${hex(~EGRESS_MARK_MASK >>> 0)} | ${hex(m)}`,
  );
  // Replies of inbound connections last: they go back to the gateway they came through, even from a pod an egress policy sends elsewhere.
  const steering = [...connMarks, ...marks, ...replyMarks];
  const identity =
    steering.length === 0
      ? []
      : plan.families.map((f) => `meta mark & ${hex(EGRESS_MARK_MASK)} != 0 snat ${nfKeyword(f)} to ${nfKeyword(f)} saddr`);
  const chains = [
    ...(steering.length > 0 ? [chain('prerouting', 'filter', 'prerouting', STEER_PRIORITY, steering)] : []),
    ...(dnat.length > 0 ? [chain('inbound', 'nat', 'prerouting', DNAT_PRIORITY, dnat)] : []),
    chain('postrouting', 'nat', 'postrouting', NAT_PRIORITY, [...identity, ...keepSource, ...nat]),
    ...(steering.length > 0
      ? [
          chain('unmark', 'filter', 'postrouting', 'srcnat + 10', [
            `meta mark & ${hex(EGRESS_MARK_MASK)} != 0 meta mark set meta mark & ${hex(~EGRESS_MARK_MASK >>> 0)}`,
          ]),
        ]
      : []),
  ];
  return `table inet ${NFT_EGRESS_TABLE} {\n${[...sets, ...chains].join('\n')}\n}\n`;
}

function chain(name: string, type: string, hook: string, priority: string, lines: readonly string[]): string {
  const rules = lines.map((l) => `\t\t${l}\n`).join('');
  return `\tchain ${name} {\n\t\ttype ${type} hook ${hook} priority ${priority}; policy accept;\n${rules}\t}`;
}

function dedupe(eips: { family: Family; address: string }[]): { family: Family; address: string }[] {
  const seen = new Set<string>();
  return eips.filter((e) => !seen.has(e.address) && !!seen.add(e.address));
}
