/**
 * Masquerade and forward rules (issue #7, reference §6), pure: what Weft wants from a node's
 * network/subnet and flags, rendered for either driver, and the parsing of what a driver reads back.
 *
 * DESIGN NOTES
 *
 * One meaning, two renderings. {@link trafficRules} gives an abstract, ordered rule list per
 * family; {@link iptablesRules} and {@link nftScript} only spell it.
 *
 * iptables: flanneld's chains, rules, order and comments byte for byte (`FLANNEL-POSTRTG` jumped
 * to from `nat POSTROUTING`, `FLANNEL-FWD` from `filter FORWARD`, comments "flanneld masq" and
 * "flanneld forward"), written in the form `iptables-save` prints, so "is the set exactly there?"
 * is a comparison of lines, and a node moving from flanneld to weftd keeps one set: our apply is
 * one `iptables-restore --noflush` transaction that re-declares the chains (which flushes them),
 * deletes every jump to them that exists (flanneld v0.20 inserted its jump, later versions append
 * it; a crash can leave several) and appends one. Rules of an old network or subnet live only in
 * these chains, so the flush recycles them: no need to know the previous subnet.env to delete
 * them, though the manager logs the change.
 *
 * nftables: a table of our own, `inet weft` (both families in one table, so one `nft -f` swaps
 * the whole set atomically: add-empty + delete + recreate in one transaction). The same script
 * deletes flanneld's nftables tables (`ip flannel-ipv4`, `ip6 flannel-ipv6`), which would
 * otherwise be a second set. Two of flanneld's nftables mistakes are not copied: its 4th rule is
 * `ip saddr != <P> ip daddr <C> return`, which makes host → remote pod traffic leave unmasqueraded
 * (iptables mode masquerades it, and so do we: `ip saddr != <C> ip daddr <P> return`), and it
 * matches the kube-proxy mark exactly (`meta mark 0x4000`) where iptables masks it
 * (`meta mark & 0x4000 == 0x4000`). When iptables is nft-backed (iptables-nft), its rules live in
 * tables `ip nat`/`ip filter`: names tell the two drivers' sets apart.
 */
import { formatCIDR } from '../ip/ip.ts';
import type { CIDR, Family } from '../ip/ip.ts';

/** What the node's rules derive from: subnet.env's four values (a family left out when disabled). */
export interface TrafficNetworks {
  /** Cluster network (`FLANNEL_NETWORK`, `<C>` in the reference). */
  network?: CIDR;
  /** This node's lease (`<P>`). */
  subnet?: CIDR;
  ipv6Network?: CIDR;
  ipv6Subnet?: CIDR;
}

export interface TrafficFlags {
  /** `--ip-masq`: masquerade pod traffic leaving the cluster network. */
  ipMasq: boolean;
  /** `--iptables-forward-rules`: accept forwarding to and from the cluster network. */
  forwardRules: boolean;
  /** Fully-random source ports on masquerade (when the tools support it and not disabled). */
  fullyRandom: boolean;
}

/** The rules of one family; a part left out is wanted absent. */
export interface FamilyRules {
  family: Family;
  masq?: { network: CIDR; subnet: CIDR };
  forward?: { network: CIDR };
}

/** Everything Weft wants on the node: per family, and the fully-random choice. */
export interface WantedRules {
  v4?: FamilyRules;
  v6?: FamilyRules;
  fullyRandom: boolean;
}

export interface Match {
  cidr: CIDR;
  not?: boolean;
}

/** One rule, independent of the driver. */
export interface TrafficRule {
  part: 'masq' | 'forward';
  /** Matches packets carrying kube-proxy's mark 0x4000 (masked). */
  mark?: boolean;
  src?: Match;
  dst?: Match;
  verdict: 'return' | 'masquerade' | 'accept';
}

/** kube-proxy's masquerade mark, as flanneld matches it. */
export const KUBE_PROXY_MARK = '0x4000/0x4000';
export const IPT_MASQ_CHAIN = 'FLANNEL-POSTRTG';
export const IPT_FWD_CHAIN = 'FLANNEL-FWD';
export const IPT_MASQ_COMMENT = 'flanneld masq';
export const IPT_FWD_COMMENT = 'flanneld forward';
/** Weft's nftables table (family `inet`). */
export const NFT_TABLE = 'weft';
/** flanneld's nftables tables, removed wherever Weft installs its own set. */
export const FLANNEL_NFT_TABLES: readonly (readonly [family: 'ip' | 'ip6', name: string])[] = [
  ['ip', 'flannel-ipv4'],
  ['ip6', 'flannel-ipv6'],
];

/** The wanted rules for these networks and flags; a family without network and subnet gets none. */
export function wantedRules(nets: TrafficNetworks, flags: TrafficFlags): WantedRules {
  const family = (family: Family, network?: CIDR, subnet?: CIDR): FamilyRules | undefined => {
    if (!network) return undefined;
    const f: FamilyRules = { family };
    if (flags.ipMasq && subnet) f.masq = { network, subnet };
    if (flags.forwardRules) f.forward = { network };
    return f.masq || f.forward ? f : undefined;
  };
  const want: WantedRules = { fullyRandom: flags.fullyRandom };
  const v4 = family(4, nets.network, nets.subnet);
  const v6 = family(6, nets.ipv6Network, nets.ipv6Subnet);
  if (v4) want.v4 = v4;
  if (v6) want.v6 = v6;
  return want;
}

/** flanneld's rules for one family, in its order (reference §6). */
export function trafficRules(f: FamilyRules): TrafficRule[] {
  const rules: TrafficRule[] = [];
  if (f.masq) {
    const c = f.masq.network;
    const p = f.masq.subnet;
    rules.push(
      // kube-proxy marked it for its own masquerade: do not NAT twice.
      { part: 'masq', mark: true, verdict: 'return' },
      // pod → pod, either direction, keeps its address.
      { part: 'masq', src: { cidr: p }, dst: { cidr: c }, verdict: 'return' },
      { part: 'masq', src: { cidr: c }, dst: { cidr: p }, verdict: 'return' },
      // anything from outside the cluster into this node's pods (e.g. a NodePort) keeps its address.
      { part: 'masq', src: { cidr: c, not: true }, dst: { cidr: p }, verdict: 'return' },
      // pods leaving the cluster network, unless multicast.
      { part: 'masq', src: { cidr: c }, dst: { cidr: multicastCIDR(f.family), not: true }, verdict: 'masquerade' },
      // the host (or anything not a pod) towards remote pods.
      { part: 'masq', src: { cidr: c, not: true }, dst: { cidr: c }, verdict: 'masquerade' },
    );
  }
  if (f.forward) {
    rules.push(
      { part: 'forward', src: { cidr: f.forward.network }, verdict: 'accept' },
      { part: 'forward', dst: { cidr: f.forward.network }, verdict: 'accept' },
    );
  }
  return rules;
}

/** 224.0.0.0/4 or ff00::/8. */
function multicastCIDR(family: Family): CIDR {
  return family === 4 ? { ip: { family: 4, value: 0xe0000000n }, prefix: 4 } : { ip: { family: 6, value: 0xffn << 120n }, prefix: 8 };
}

// ---------------------------------------------------------------------------------------------
// iptables

/** A chain of ours, the built-in chain jumping to it, and its table. */
export interface IptablesPart {
  part: 'masq' | 'forward';
  table: 'nat' | 'filter';
  hook: 'POSTROUTING' | 'FORWARD';
  chain: string;
  comment: string;
}

export const IPT_PARTS: readonly IptablesPart[] = [
  { part: 'masq', table: 'nat', hook: 'POSTROUTING', chain: IPT_MASQ_CHAIN, comment: IPT_MASQ_COMMENT },
  { part: 'forward', table: 'filter', hook: 'FORWARD', chain: IPT_FWD_CHAIN, comment: IPT_FWD_COMMENT },
];

/** The lines `iptables-save` prints for one part: the jump, then the chain's rules. */
export interface IptablesLines {
  jump: string;
  rules: string[];
}

/** The jump from the built-in chain, as `iptables-save` prints it. */
export function iptablesJump(p: IptablesPart): string {
  return `-A ${p.hook} -m comment --comment "${p.comment}" -j ${p.chain}`;
}

function iptablesRule(r: TrafficRule, p: IptablesPart, fullyRandom: boolean): string {
  const out = ['-A', p.chain];
  if (r.src) out.push(...(r.src.not ? ['!'] : []), '-s', formatCIDR(r.src.cidr));
  if (r.dst) out.push(...(r.dst.not ? ['!'] : []), '-d', formatCIDR(r.dst.cidr));
  if (r.mark) out.push('-m', 'mark', '--mark', KUBE_PROXY_MARK);
  out.push('-m', 'comment', '--comment', `"${p.comment}"`);
  if (r.verdict === 'return') out.push('-j', 'RETURN');
  else if (r.verdict === 'accept') out.push('-j', 'ACCEPT');
  else out.push('-j', 'MASQUERADE', ...(fullyRandom ? ['--random-fully'] : []));
  return out.join(' ');
}

/** Per part (`masq`, `forward`): the lines wanted, or undefined when the part is wanted absent. */
export function iptablesRules(f: FamilyRules | undefined, fullyRandom: boolean): Map<IptablesPart, IptablesLines | undefined> {
  const rules = f ? trafficRules(f) : [];
  const out = new Map<IptablesPart, IptablesLines | undefined>();
  for (const p of IPT_PARTS) {
    const mine = rules.filter((r) => r.part === p.part);
    out.set(p, mine.length === 0 ? undefined : { jump: iptablesJump(p), rules: mine.map((r) => iptablesRule(r, p, fullyRandom)) });
  }
  return out;
}

/** One table of `iptables-save` output: chains declared and `-A` lines in order. */
export interface IptablesTable {
  chains: Set<string>;
  rules: string[];
}

/** Parses `iptables-save` output into tables; comments and unknown lines are ignored. */
export function parseIptablesSave(text: string): Map<string, IptablesTable> {
  const tables = new Map<string, IptablesTable>();
  let cur: IptablesTable | undefined;
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line.startsWith('*')) {
      cur = { chains: new Set(), rules: [] };
      tables.set(line.slice(1), cur);
    } else if (!cur || line === '' || line.startsWith('#')) {
      continue;
    } else if (line === 'COMMIT') {
      cur = undefined;
    } else if (line.startsWith(':')) {
      const name = line.slice(1).split(/\s+/)[0];
      if (name) cur.chains.add(name);
    } else if (line.startsWith('-A ')) {
      cur.rules.push(line.replace(/\s+/g, ' '));
    }
  }
  return tables;
}

/** What one part looks like on the node: does the chain exist, the jumps to it, its rules. */
export interface IptablesPartState {
  chainExists: boolean;
  jumps: string[];
  rules: string[];
}

/** Reads one part out of parsed `iptables-save` output. */
export function iptablesPartState(tables: Map<string, IptablesTable>, p: IptablesPart): IptablesPartState {
  const t = tables.get(p.table);
  if (!t) return { chainExists: false, jumps: [], rules: [] };
  const jumpRe = new RegExp(` -j ${p.chain}(?: |$)`);
  return {
    chainExists: t.chains.has(p.chain),
    jumps: t.rules.filter((l) => l.startsWith(`-A ${p.hook} `) && jumpRe.test(l)),
    rules: t.rules.filter((l) => l.startsWith(`-A ${p.chain} `)),
  };
}

/** How the observed part differs from the wanted one (empty: exactly as wanted). */
export function iptablesPartDrift(p: IptablesPart, want: IptablesLines | undefined, have: IptablesPartState): string[] {
  const where = `${p.table} ${p.chain}`;
  if (!want) {
    const d: string[] = [];
    if (have.chainExists) d.push(`${where}: chain present, wanted absent`);
    if (have.jumps.length > 0) d.push(`${where}: ${have.jumps.length} jump(s) from ${p.hook}, wanted none`);
    return d;
  }
  const d: string[] = [];
  if (!have.chainExists) return [`${where}: chain missing`];
  if (have.jumps.length !== 1 || have.jumps[0] !== want.jump) {
    d.push(`${where}: jumps from ${p.hook} are ${JSON.stringify(have.jumps)}, wanted exactly ${JSON.stringify(want.jump)}`);
  }
  if (have.rules.length !== want.rules.length || have.rules.some((l, i) => l !== want.rules[i])) {
    const missing = want.rules.filter((l) => !have.rules.includes(l));
    const extra = have.rules.filter((l) => !want.rules.includes(l));
    const parts = [...missing.map((l) => `missing ${JSON.stringify(l)}`), ...extra.map((l) => `extra ${JSON.stringify(l)}`)];
    d.push(`${where}: ${parts.length > 0 ? parts.join(', ') : 'rules out of order'}`);
  }
  return d;
}

/**
 * The `iptables-restore --noflush` input making the node hold exactly `want` for one family,
 * given what it holds now (`have`, from the same family's `iptables-save`): wanted chains are
 * re-declared (created or flushed), every existing jump to them deleted and one appended; chains
 * wanted absent are emptied and deleted. Undefined when there is nothing to write.
 */
export function iptablesRestoreScript(
  want: Map<IptablesPart, IptablesLines | undefined>,
  have: Map<IptablesPart, IptablesPartState>,
): string | undefined {
  const out: string[] = [];
  for (const table of ['nat', 'filter'] as const) {
    const decl: string[] = [];
    const body: string[] = [];
    for (const p of IPT_PARTS.filter((x) => x.table === table)) {
      const w = want.get(p);
      const h = have.get(p) ?? { chainExists: false, jumps: [], rules: [] };
      if (!w && !h.chainExists && h.jumps.length === 0) continue;
      if (w || h.chainExists) decl.push(`:${p.chain} - [0:0]`);
      for (const j of h.jumps) body.push(`-D ${j.slice(3)}`);
      if (w) body.push(w.jump, ...w.rules);
      else if (h.chainExists) body.push(`-X ${p.chain}`);
    }
    if (decl.length + body.length > 0) out.push(`*${table}`, ...decl, ...body, 'COMMIT');
  }
  return out.length > 0 ? `${out.join('\n')}\n` : undefined;
}

/** `iptables v1.8.9 (nf_tables)` → [1, 8, 9]; undefined when unreadable. */
export function parseIptablesVersion(text: string): [number, number, number] | undefined {
  const m = /v(\d+)\.(\d+)\.(\d+)/.exec(text);
  return m ? [Number(m[1]), Number(m[2]), Number(m[3])] : undefined;
}

/** `--random-fully` and `iptables-restore --wait` exist from iptables 1.6.2 on (as flanneld checks). */
export function iptablesAtLeast162(v: readonly [number, number, number]): boolean {
  const [a, b, c] = v;
  return a > 1 || (a === 1 && (b > 6 || (b === 6 && c >= 2)));
}

// ---------------------------------------------------------------------------------------------
// nftables

function nftRule(r: TrafficRule, family: Family, fullyRandom: boolean): string {
  const proto = family === 4 ? 'ip' : 'ip6';
  const out: string[] = [];
  if (r.mark) out.push('meta mark & 0x4000 == 0x4000');
  if (r.src) out.push(`${proto} saddr ${r.src.not ? '!= ' : ''}${formatCIDR(r.src.cidr)}`);
  if (r.dst) out.push(`${proto} daddr ${r.dst.not ? '!= ' : ''}${formatCIDR(r.dst.cidr)}`);
  out.push(r.verdict === 'masquerade' ? (fullyRandom ? 'masquerade fully-random' : 'masquerade') : r.verdict);
  return out.join(' ');
}

/** `nft -f` lines deleting a table whether or not it exists (add-empty then delete). */
function nftDeleteTable(family: string, name: string): string[] {
  return [`table ${family} ${name} {}`, `delete table ${family} ${name}`];
}

/**
 * The `nft -f` script that, in one transaction, removes flanneld's tables and replaces table
 * `inet weft` with exactly `want` (or only removes it when nothing is wanted).
 */
export function nftScript(want: WantedRules): string {
  const lines: string[] = [...nftDeleteTable('inet', NFT_TABLE)];
  for (const [family, name] of FLANNEL_NFT_TABLES) lines.push(...nftDeleteTable(family, name));
  const postrouting: string[] = [];
  const forward: string[] = [];
  for (const f of [want.v4, want.v6]) {
    if (!f) continue;
    for (const r of trafficRules(f)) {
      // The mark rule means the same for both families: written once, first.
      if (r.mark) {
        if (postrouting.length === 0) postrouting.push(nftRule(r, f.family, want.fullyRandom));
        continue;
      }
      (r.part === 'masq' ? postrouting : forward).push(nftRule(r, f.family, want.fullyRandom));
    }
  }
  if (postrouting.length + forward.length > 0) {
    lines.push(`table inet ${NFT_TABLE} {`);
    if (postrouting.length > 0) {
      lines.push(
        '\tchain postrouting {',
        '\t\ttype nat hook postrouting priority srcnat; policy accept;',
        ...postrouting.map((l) => `\t\t${l}`),
        '\t}',
      );
    }
    if (forward.length > 0) {
      lines.push(
        '\tchain forward {',
        '\t\ttype filter hook forward priority filter; policy accept;',
        ...forward.map((l) => `\t\t${l}`),
        '\t}',
      );
    }
    lines.push('}');
  }
  return `${lines.join('\n')}\n`;
}

/** The `nft -f` script removing Weft's table and flanneld's tables (cleanup). */
export function nftRemoveScript(): string {
  return nftScript({ fullyRandom: false });
}

/** Tables named in `nft list chains` (or `nft list tables`) output, as `<family> <name>`. */
export function parseNftTables(text: string): Set<string> {
  const out = new Set<string>();
  for (const line of text.split('\n')) {
    const m = /^\s*table\s+(\S+)\s+(\S+)/.exec(line);
    if (m) out.add(`${m[1]} ${m[2]}`);
  }
  return out;
}
