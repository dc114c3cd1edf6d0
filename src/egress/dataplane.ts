/**
 * One node's egress data plane, rendered purely from the EgressEndpoints it sees (endpoints.ts),
 * the way to each gateway node (from the backend's plan) and what counts as inside the cluster.
 *
 * DESIGN NOTES
 * - Steering (a node with selected pods whose gateway is another node): nftables table
 *   `inet weft-egress`, chain `prerouting` (filter, priority mangle) marks packets from the
 *   policy's local pods to destinations outside the cluster (and in its list, if it has one)
 *   with the gateway's mark (bits {@link EGRESS_MARK_MASK}; the k-th gateway node used here gets
 *   k+1 in them); `ip rule fwmark <mark>/<mask> lookup <EGRESS_TABLE_BASE + k>` sends them to a
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
  rules: EgressRule[];
  routes: EgressRoute[];
  /** Addresses wanted on the external interface. */
  eips: { family: Family; address: string }[];
  /** One line per policy skipped, for the log. */
  warnings: string[];
}

const hex = (n: number) => `0x${n.toString(16)}`;
const familyOf = (ip: string): Family => (ip.includes(':') ? 6 : 4);
const nfKeyword = (f: Family) => (f === 4 ? 'ip' : 'ip6');
const setType = (f: Family) => (f === 4 ? 'ipv4_addr' : 'ipv6_addr');

/** Set names: policy ids hold `/`, `.` and `-`; nft takes letters, digits, `_` and `.` too. */
function setName(kind: string, index: number, f: Family): string {
  return `p${index}_${kind}${f}`;
}

function set(name: string, f: Family, elements: readonly string[]): string {
  return `\tset ${name} {\n\t\ttype ${setType(f)}; flags interval; auto-merge;\n${elements.length > 0 ? `\t\telements = { ${elements.join(', ')} }\n` : ''}\t}`;
}

/** Renders the node's egress data plane; see the design notes. */
export function renderDataplane(input: DataplaneInput): DataplaneResult {
  const warnings: string[] = [];
  const sets: string[] = [];
  const marks: string[] = [];
  const nat: string[] = [];
  const eips: { family: Family; address: string }[] = [];
  const gatewayIndex = new Map<string, number>();
  const rules: EgressRule[] = [];
  const routes: EgressRoute[] = [];
  for (const f of input.families) {
    sets.push(set(`inside${f}`, f, input.inside.filter((c) => c.ip.family === f).map(formatCIDR).sort()));
  }
  const policies = [...input.endpoints].sort((a, b) => (a.policy < b.policy ? -1 : a.policy > b.policy ? 1 : 0));
  for (const [i, e] of policies.entries()) {
    const local = e.sources.find((s) => s.node === input.node)?.ips ?? [];
    const isGateway = e.gateway === input.node;
    for (const f of input.families) {
      const dst = e.destinations.filter((d) => d.ip.family === f).map(formatCIDR).sort();
      if (e.destinations.length > 0 && dst.length === 0) continue;
      const match = (src: string) => `${nfKeyword(f)} saddr @${src} ${nfKeyword(f)} daddr != @inside${f}${dst.length > 0 ? ` ${nfKeyword(f)} daddr @${setName('dst', i, f)}` : ''}`;
      let wantsDst = false;
      const localIps = local.filter((ip) => familyOf(ip) === f);
      if (!isGateway && localIps.length > 0) {
        const hop = input.nextHop(e.gateway, f);
        if (!hop) {
          warnings.push(`egress policy ${e.policy}: no IPv${f} route to gateway node ${e.gateway} (no lease of that family); its pods leave the normal way`);
        } else {
          let k = gatewayIndex.get(e.gateway);
          if (k === undefined) {
            k = gatewayIndex.size;
            if (k >= MAX_GATEWAYS) {
              warnings.push(`egress policy ${e.policy}: more than ${MAX_GATEWAYS} gateway nodes; its pods leave the normal way`);
              continue;
            }
            gatewayIndex.set(e.gateway, k);
          }
          const mark = (k + 1) << MARK_SHIFT;
          if (!rules.some((r) => r.family === f && r.table === EGRESS_TABLE_BASE + k)) {
            rules.push({ family: f, fwmark: `${hex(mark)}/${hex(EGRESS_MARK_MASK)}`, table: EGRESS_TABLE_BASE + k });
            routes.push({ family: f, table: EGRESS_TABLE_BASE + k, hop });
          }
          sets.push(set(setName('local', i, f), f, localIps.sort()));
          marks.push(`${match(setName('local', i, f))} meta mark set meta mark & ${hex(~EGRESS_MARK_MASK >>> 0)} | ${hex(mark)}`);
          wantsDst = true;
        }
      }
      if (isGateway) {
        const all = e.sources.flatMap((s) => s.ips).filter((ip) => familyOf(ip) === f);
        const to = f === 4 ? e.eip.ipv4 : e.eip.ipv6;
        const source = to ?? input.ownAddress[f];
        if (to) eips.push({ family: f, address: to });
        if (all.length > 0 && source) {
          sets.push(set(setName('all', i, f), f, [...new Set(all)].sort()));
          nat.push(`${match(setName('all', i, f))} snat ${nfKeyword(f)} to ${source}`);
          wantsDst = true;
        }
      }
      if (wantsDst && dst.length > 0) sets.push(set(setName('dst', i, f), f, dst));
    }
  }
  if (marks.length === 0 && nat.length === 0) return { nft: undefined, rules, routes, eips, warnings };
  const identity = marks.length === 0 ? [] : input.families.map((f) => `meta mark & ${hex(EGRESS_MARK_MASK)} != 0 snat ${nfKeyword(f)} to ${nfKeyword(f)} saddr`);
  const chains = [
    ...(marks.length > 0 ? [chain('prerouting', 'filter', 'prerouting', 'mangle', marks)] : []),
    chain('postrouting', 'nat', 'postrouting', NAT_PRIORITY, [...identity, ...nat]),
    ...(marks.length > 0 ? [chain('unmark', 'filter', 'postrouting', 'srcnat + 10', [`meta mark & ${hex(EGRESS_MARK_MASK)} != 0 meta mark set meta mark & ${hex(~EGRESS_MARK_MASK >>> 0)}`])] : []),
  ];
  const nft = `table inet ${NFT_EGRESS_TABLE} {\n${[...sets, ...chains].join('\n')}\n}\n`;
  return { nft, rules, routes, eips: dedupe(eips), warnings };
}

function chain(name: string, type: string, hook: string, priority: string, lines: readonly string[]): string {
  return `\tchain ${name} {\n\t\ttype ${type} hook ${hook} priority ${priority}; policy accept;\n${lines.map((l) => `\t\t${l}\n`).join('')}\t}`;
}

function dedupe(eips: { family: Family; address: string }[]): { family: Family; address: string }[] {
  const seen = new Set<string>();
  return eips.filter((e) => !seen.has(e.address) && !!seen.add(e.address));
}
