/**
 * The egress data plane (dataplane.ts's plan) for nodes whose traffic rules engine is iptables:
 * `iptables-restore` input for one family (iptables for IPv4, ip6tables for IPv6), in chains of
 * Weft's own ({@link IPT_EGRESS_PREFIX}*) jumped to from the built-in chains. Pure.
 *
 * DESIGN NOTES
 * - The same rules as the nftables table, with what iptables lacks done another way:
 *   - No sets: a chain per set test. `WEFT-EGRESS-OUT` returns for inside destinations, then
 *     jumps to the policy's chain `WEFT-EGRESS-M<i>` once per selected pod (`-s`), which marks
 *     per destination of its list (or all). Rules grow with pods here, not only with policies.
 *   - No priorities: our jumps are inserted first in the built-in chains (`-I <hook> 1`), so they
 *     run before flanneld's masquerade (FLANNEL-POSTRTG, appended) and kube-proxy's DNAT.
 *   - No `snat to ip saddr`: in the nat table `ACCEPT` ends the hook's traversal, which leaves the
 *     connection bound to its own addresses, so masquerade never sees it. The steered connections
 *     are recognised by the steering match itself (nat's own `WEFT-EGRESS-OUT` and `-M<i>` chains,
 *     ACCEPT instead of a mark): iptables has no filter chain after NAT, and the mark must be
 *     cleared before the packet reaches the vxlan device, so mangle POSTROUTING (before NAT)
 *     clears it.
 * - mangle PREROUTING → `WEFT-EGRESS-PRE`: new connections from outside to an inbound pod get
 *   their gateway's conntrack mark (`WEFT-EGRESS-INB`), steered pods their gateway's packet mark
 *   (`WEFT-EGRESS-OUT`), replies of marked connections the conntrack mark as packet mark, last.
 *   mangle runs before any DNAT, so unlike the nftables chain it sees a Service's cluster IP, not
 *   its endpoint: a Service whose endpoints are outside the cluster is not steered here.
 * - mangle POSTROUTING → `WEFT-EGRESS-POST`: clears our mark bits.
 * - nat PREROUTING → `WEFT-EGRESS-DNAT`: the gateway's DNATs of EIPs to pods.
 * - nat POSTROUTING → `WEFT-EGRESS-SNAT`: steered connections and connections DNATed from an
 *   EIP accepted (kept as they are), then the gateway's SNAT to the EIP (`WEFT-EGRESS-GW`, per
 *   policy `WEFT-EGRESS-G<i>`).
 */
import type { Family } from '../ip/ip.ts';
import { parseIptablesSave } from '../masq/rules.ts';
import { EGRESS_MARK_MASK, hex } from './dataplane.ts';
import type { DataplanePlan, PolicyRules } from './dataplane.ts';

/** Every chain of ours starts with this. */
export const IPT_EGRESS_PREFIX = 'WEFT-EGRESS-';

/** One table's part: our chains (in order), the jumps to them from built-in chains, their rules. */
export interface IptablesEgressTable {
  table: 'mangle' | 'nat';
  chains: string[];
  jumps: { hook: string; chain: string }[];
  /** `-A <chain> …` lines. */
  rules: string[];
}

const C = (name: string) => `${IPT_EGRESS_PREFIX}${name}`;
const xmark = (mark: number) => `${hex(mark)}/${hex(EGRESS_MARK_MASK)}`;

/**
 * The tables of ours family `f` wants (none: no rules of that family), for the plan of
 * renderDataplane.
 */
export function renderIptables(plan: DataplanePlan, f: Family): IptablesEgressTable[] {
  const policies = plan.policies.filter((p) => p.family === f);
  const steered = policies.filter((p) => p.steer);
  const gateway = policies.filter((p) => p.snat);
  const connMarks = plan.connMarks.filter((c) => c.family === f);
  const dnat = plan.dnat.filter((d) => d.family === f);
  const keep = plan.keepSource.filter((k) => k.family === f);
  const inside = plan.inside[f];
  const out: IptablesEgressTable[] = [];
  /** `out` chain: inside destinations return, each pod jumps to its policy's chain, which ends with `target`. */
  const perPolicy = (
    t: IptablesEgressTable,
    chain: string,
    prefix: string,
    ps: PolicyRules[],
    pods: (p: PolicyRules) => string[],
    target: (p: PolicyRules) => string,
  ) => {
    t.chains.push(chain);
    t.rules.push(...inside.map((c) => `-A ${chain} -d ${c} -j RETURN`));
    for (const p of ps) {
      const own = C(`${prefix}${p.index}`);
      t.chains.push(own);
      t.rules.push(...pods(p).map((ip) => `-A ${chain} -s ${ip} -j ${own}`));
      t.rules.push(...(p.dst.length > 0 ? p.dst.map((d) => `-A ${own} -d ${d} -j ${target(p)}`) : [`-A ${own} -j ${target(p)}`]));
    }
  };
  if (steered.length > 0 || connMarks.length > 0) {
    const t: IptablesEgressTable = {
      table: 'mangle',
      chains: [C('PRE')],
      jumps: [
        { hook: 'PREROUTING', chain: C('PRE') },
        { hook: 'POSTROUTING', chain: C('POST') },
      ],
      rules: [],
    };
    if (connMarks.length > 0) t.rules.push(`-A ${C('PRE')} -m conntrack --ctstate NEW -j ${C('INB')}`);
    if (steered.length > 0) t.rules.push(`-A ${C('PRE')} -j ${C('OUT')}`);
    // Replies of inbound connections last: they go back to the gateway they came through.
    for (const m of new Set(connMarks.map((c) => c.mark))) {
      t.rules.push(`-A ${C('PRE')} -m conntrack --ctdir REPLY -m connmark --mark ${xmark(m)} -j MARK --set-xmark ${xmark(m)}`);
    }
    if (connMarks.length > 0) {
      t.chains.push(C('INB'));
      t.rules.push(...inside.map((c) => `-A ${C('INB')} -s ${c} -j RETURN`));
      t.rules.push(
        ...connMarks.map(
          (c) =>
            `-A ${C('INB')} -d ${c.ip}${c.protocol ? ` -p ${c.protocol} -m ${c.protocol} --dport ${c.podPort}` : ''} ` +
            `-j CONNMARK --set-xmark ${xmark(c.mark)}`,
        ),
      );
    }
    if (steered.length > 0) perPolicy(t, C('OUT'), 'M', steered, (p) => p.steer!.local, (p) => `MARK --set-xmark ${xmark(p.steer!.mark)}`);
    t.chains.push(C('POST'));
    t.rules.push(`-A ${C('POST')} -m mark ! --mark 0x0/${hex(EGRESS_MARK_MASK)} -j MARK --set-xmark 0x0/${hex(EGRESS_MARK_MASK)}`);
    out.push(t);
  }
  if (steered.length > 0 || gateway.length > 0 || dnat.length > 0) {
    const t: IptablesEgressTable = { table: 'nat', chains: [], jumps: [], rules: [] };
    if (dnat.length > 0) {
      t.chains.push(C('DNAT'));
      t.jumps.push({ hook: 'PREROUTING', chain: C('DNAT') });
      t.rules.push(
        ...dnat.map(
          (d) =>
            `-A ${C('DNAT')} -d ${d.eip}${d.protocol ? ` -p ${d.protocol} -m ${d.protocol} --dport ${d.port}` : ''} ` +
            `-j DNAT --to-destination ${d.protocol ? `${f === 4 ? d.ip : `[${d.ip}]`}:${d.podPort}` : d.ip}`,
        ),
      );
    }
    t.chains.push(C('SNAT'));
    t.jumps.push({ hook: 'POSTROUTING', chain: C('SNAT') });
    if (steered.length > 0) t.rules.push(`-A ${C('SNAT')} -j ${C('OUT')}`);
    t.rules.push(...keep.map((k) => `-A ${C('SNAT')} -m conntrack --ctstate DNAT --ctorigdst ${k.eip} -j ACCEPT`));
    if (gateway.length > 0) t.rules.push(`-A ${C('SNAT')} -j ${C('GW')}`);
    if (steered.length > 0) perPolicy(t, C('OUT'), 'M', steered, (p) => p.steer!.local, () => 'ACCEPT');
    if (gateway.length > 0) perPolicy(t, C('GW'), 'G', gateway, (p) => p.snat!.all, (p) => `SNAT --to-source ${p.snat!.to}`);
    out.push(t);
  }
  return out;
}

/** Our chains and the jumps to them in one table, as `iptables-save` prints them. */
export interface IptablesEgressState {
  chains: string[];
  /** `-A <built-in> … -j WEFT-EGRESS-…` lines. */
  jumps: string[];
  /** `-A WEFT-EGRESS-… …` lines. */
  rules: string[];
}

/** What of ours `iptables-save` output shows, per table (tables without anything of ours left out). */
export function iptablesEgressState(save: string): Map<string, IptablesEgressState> {
  const out = new Map<string, IptablesEgressState>();
  const jumpRe = new RegExp(` -j ${IPT_EGRESS_PREFIX}\\S+(?: |$)`);
  for (const [table, t] of parseIptablesSave(save)) {
    const chains = [...t.chains].filter((c) => c.startsWith(IPT_EGRESS_PREFIX));
    const jumps = t.rules.filter((l) => !l.startsWith(`-A ${IPT_EGRESS_PREFIX}`) && jumpRe.test(l));
    const rules = t.rules.filter((l) => l.startsWith(`-A ${IPT_EGRESS_PREFIX}`));
    if (chains.length + jumps.length > 0) out.set(table, { chains, jumps, rules });
  }
  return out;
}

/**
 * The `iptables-restore --noflush` input making one family hold exactly `want` of ours, given
 * what it holds (`have`, {@link iptablesEgressState}): per table, every chain of ours wanted or
 * present is declared (created or flushed), every jump to ours deleted, the chains no longer
 * wanted deleted, the jumps inserted first in their built-in chains and the rules appended; each
 * table is committed whole. Undefined when there is nothing to write.
 */
export function iptablesEgressRestore(want: readonly IptablesEgressTable[], have: Map<string, IptablesEgressState>): string | undefined {
  const out: string[] = [];
  for (const table of ['mangle', 'nat'] as const) {
    const w = want.find((t) => t.table === table);
    const h = have.get(table);
    if (!w && !h) continue;
    const chains = [...new Set([...(w?.chains ?? []), ...(h?.chains ?? [])])];
    out.push(`*${table}`, ...chains.map((c) => `:${c} - [0:0]`), ...(h?.jumps ?? []).map((j) => `-D ${j.slice(3)}`));
    out.push(...(h?.chains ?? []).filter((c) => !w?.chains.includes(c)).map((c) => `-X ${c}`));
    if (w) out.push(...w.jumps.map((j) => `-I ${j.hook} 1 -j ${j.chain}`), ...w.rules);
    out.push('COMMIT');
  }
  return out.length > 0 ? `${out.join('\n')}\n` : undefined;
}
