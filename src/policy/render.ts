/**
 * NetworkPolicy rendered into one node's nftables rules (issue #22), pure: from the model and the
 * node's name to the `nft -f` script that enforces, on that node, the policies of the pods it
 * runs. The reference evaluator (evaluate.ts) is what these rules must agree with.
 *
 * DESIGN NOTES
 *
 * Where the rules hook. A node sees its pods' traffic in three places: routed through the IP
 * stack (to or from other nodes, the outside, or a Service address DNAT'ed to a pod), which the
 * IP `forward` hook sees after kube-proxy's DNAT; bridged across cni0 between two pods of the
 * node, which the IP hooks see only through br_netfilter; and to or from the node itself (input
 * and output hooks), which the API says is always allowed. Enforcement must be stateful (replies
 * of an allowed connection pass, whatever the other side's policies), so it needs conntrack:
 * - a netdev ingress/egress hook on each pod's veth sees every packet but has no conntrack yet,
 *   and its chains (one per device, or a device list) follow pod churn;
 * - the bridge family has conntrack only with nf_conntrack_bridge (CONFIG_NF_CONNTRACK_BRIDGE),
 *   which kernels may lack: this machine's 6.18 does (`ct state` in a bridge table fails with
 *   EPROTO), so a bridge-family design could not even be loaded here;
 * - br_netfilter (CONFIG_BRIDGE_NETFILTER, built into this kernel and on by default in every
 *   namespace: net.bridge.bridge-nf-call-iptables and -ip6tables are 1) passes bridged IP
 *   packets through the IP hooks with IP conntrack, so one `inet` forward chain sees same-node
 *   and cross-node traffic alike, after DNAT, each packet once. kube-proxy needs it already.
 * So the rules live in one table of ours, `inet weft-policy`, hooked at `forward`, and the data
 * plane (next round) must make sure both sysctls are 1 in the node's namespace, or refuse to
 * enforce with an error naming them. The node's own traffic never reaches `forward` (output and
 * input hooks), which is how node ↔ own-pod traffic (kubelet probes) stays allowed; a pod's
 * traffic to itself never leaves it. test/integration/netpol.test.ts holds the truth tables on
 * two such nodes, bridged and routed, IPv4 and IPv6. Known gaps of this placement: kube-proxy in
 * IPVS mode DNATs in the input/output hooks, so Service traffic would bypass `forward`; and, as
 * with every conntrack-based enforcement, a flow established before a policy tightened goes on
 * until its conntrack entry ends.
 *
 * Shape. The base chain accepts `ct state established,related` first (replies, and ICMP errors
 * of allowed connections), then IPv6 neighbour solicitations and advertisements (bridged between
 * pods, they cross the IPv6 hooks, and a dropped advertisement would break every allowed IPv6
 * connection of an isolated pod), then a pod's traffic to its own address through a Service
 * (hairpin: a pod cannot block itself; a set of `addr . addr` pairs), then sends a packet whose
 * source is a local pod isolated for egress to the `egress4`/`egress6` chain, then one whose
 * destination is a local pod isolated for ingress to `ingress4`/`ingress6`. Isolation is a set lookup, so pods selected by no policy of a
 * direction are untouched. A direction chain holds one rule per policy rule (two for an egress
 * rule with both numeric and named ports) that `return`s when the rule allows the packet, and a
 * final `drop`; a return from egress goes on to the ingress check, so pod to pod needs both.
 * Every address and port lives in named sets, keyed by concatenations (`ip daddr . meta l4proto
 * . th dport`) with intervals for ipBlock ranges and endPort ranges: the rule count grows with
 * the policies' rules, never with pods. Named ports are resolved per pod into those sets (on the
 * local target for ingress, on each peer pod for egress). ipBlock excepts are subtracted and
 * ranges merged before rendering, so every set holds disjoint elements, each once (pods sharing
 * an address, a terminating one and its successor, merged). A policy that selects no local pod
 * renders nothing on this node; no policy selecting one removes the table.
 *
 * Determinism. Policies in namespace/name order, rules in API order, set elements sorted: equal
 * models give byte-equal scripts, so a diff of two scripts is the change. Set names carry the
 * policy's namespace and name (`_` cannot occur in either), hashed when too long for the kernel.
 */
import { createHash } from 'node:crypto';
import { bits, formatIP, lastIP } from '../ip/ip.ts';
import type { CIDR, Family, IP } from '../ip/ip.ts';
import { matchesLabels } from '../k8s/label-selector.ts';
import { byNamespace, podsMatching, policiesSelecting, resolvePort } from './evaluate.ts';
import type { Direction } from './evaluate.ts';
import type { NetworkPolicy, Pod, PolicyModel, PolicyPort, PolicyRule, Protocol } from './model.ts';

/** Weft's network policy table (family `inet`). */
export const NFT_POLICY_TABLE = 'weft-policy';
/** The sysctls (in the node's namespace) that must be 1 for same-node traffic to be seen. */
export const BRIDGE_NF_SYSCTLS = ['net.bridge.bridge-nf-call-iptables', 'net.bridge.bridge-nf-call-ip6tables'] as const;

const FAMILIES: readonly Family[] = [4, 6];
/** NFT_SET_MAXNAMELEN is 256 with the NUL; room is left for the suffixes. */
const MAX_SET_NAME = 240;

/** An inclusive range of addresses of one family, or of ports. */
type Range = readonly [bigint, bigint];

/** A named set of the table. */
export interface NftSet {
  name: string;
  type: string;
  interval: boolean;
  elements: string[];
}

/**
 * The rules enforcing a model on one node, before they become `nft` text: {@link policyScript}
 * loads them whole, {@link policyUpdate} changes loaded ones into them.
 */
export interface PolicyRuleset {
  sets: NftSet[];
  /** Chains in script order, the base chain `forward` last. */
  chains: Map<string, string[]>;
}

const l3 = (f: Family) => (f === 4 ? 'ip' : 'ip6');
const addrType = (f: Family) => (f === 4 ? 'ipv4_addr' : 'ipv6_addr');
const protoName = (p: Protocol) => p.toLowerCase();

/** Sorts and merges overlapping or adjacent ranges. */
function merge(ranges: Range[]): Range[] {
  const sorted = [...ranges].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  const out: [bigint, bigint][] = [];
  for (const [lo, hi] of sorted) {
    const last = out.at(-1);
    if (last && lo <= last[1] + 1n) last[1] = hi > last[1] ? hi : last[1];
    else out.push([lo, hi]);
  }
  return out;
}

/** `ranges` without the addresses of `holes` (all merged). */
function subtract(ranges: Range[], holes: Range[]): Range[] {
  const out: Range[] = [];
  for (const [lo, hi] of merge(ranges)) {
    let start = lo;
    for (const [hlo, hhi] of merge(holes)) {
      if (hhi < start || hlo > hi) continue;
      if (hlo > start) out.push([start, hlo - 1n]);
      start = hhi + 1n;
    }
    if (start <= hi) out.push([start, hi]);
  }
  return out;
}

const byValue = (a: IP, b: IP) => (a.value < b.value ? -1 : a.value > b.value ? 1 : 0);
const cidrRange = (c: CIDR): Range => [c.ip.value, lastIP(c).value];
const ipRange = (ip: IP): Range => [ip.value, ip.value];

/** An address range as nft reads it: one address, a prefix when it is one, else `a-b`. */
function formatRange(f: Family, [lo, hi]: Range): string {
  const ip = (value: bigint) => formatIP({ family: f, value });
  if (lo === hi) return ip(lo);
  const size = hi - lo + 1n;
  const hostBits = size.toString(2).length - 1;
  if (size === 1n << BigInt(hostBits) && lo % size === 0n) return `${ip(lo)}/${bits(f) - hostBits}`;
  return `${ip(lo)}-${ip(hi)}`;
}

const formatPorts = ([lo, hi]: Range) => (lo === hi ? `${lo}` : `${lo}-${hi}`);

/** Port ranges per protocol admitted by `ports` towards `dst`, named ones resolved there. */
function portRanges(ports: readonly PolicyPort[], dst: Pod | undefined, named: boolean): Map<Protocol, Range[]> {
  const out = new Map<Protocol, Range[]>();
  for (const p of ports) {
    if ((typeof p.port === 'string') !== named) continue;
    const first = p.port === undefined ? 0 : resolvePort(p, dst);
    if (first === undefined) continue;
    const last = p.port === undefined ? 65535 : (p.endPort ?? first);
    out.set(p.protocol, [...(out.get(p.protocol) ?? []), [BigInt(first), BigInt(last)]]);
  }
  for (const [proto, r] of out) out.set(proto, merge(r));
  return out;
}

/** `<proto> . <ports>` elements, sorted by protocol then port. */
function portElements(ports: Map<Protocol, Range[]>): string[] {
  return [...ports.keys()].sort().flatMap((proto) => ports.get(proto)!.map((r) => `${protoName(proto)} . ${formatPorts(r)}`));
}

/** `<addr> . <proto> . <ports>` elements. */
function addrPortElements(addr: string, ports: Map<Protocol, Range[]>): string[] {
  return portElements(ports).map((e) => `${addr} . ${e}`);
}

/**
 * `<addr> . <proto> . <ports>` elements of pod addresses, in address order, the ports of pods
 * sharing one address (a terminating pod and its successor) merged, as interval sets need.
 */
function podPortElements(entries: [IP, Map<Protocol, Range[]>][]): string[] {
  const byAddr = new Map<bigint, [IP, Map<Protocol, Range[]>]>();
  for (const [ip, ports] of entries) {
    const have = byAddr.get(ip.value);
    if (!have) {
      byAddr.set(ip.value, [ip, ports]);
      continue;
    }
    for (const [proto, rs] of ports) have[1].set(proto, merge([...(have[1].get(proto) ?? []), ...rs]));
  }
  return [...byAddr.values()].sort((a, b) => byValue(a[0], b[0])).flatMap(([ip, ports]) => addrPortElements(formatIP(ip), ports));
}

/** Addresses in order, each once. */
function uniqueAddrs(ips: IP[]): string[] {
  return [...new Set([...ips].sort(byValue).map(formatIP))];
}

/** The addresses of family `f` that a rule's peers match, merged (undefined: every address). */
function peerRanges(model: PolicyModel, policy: NetworkPolicy, rule: PolicyRule, f: Family): Range[] | undefined {
  if (rule.peers.length === 0) return undefined;
  const ranges: Range[] = [];
  for (const peer of rule.peers) {
    if (peer.kind === 'ipBlock') {
      if (peer.cidr.ip.family === f) ranges.push(...subtract([cidrRange(peer.cidr)], peer.except.map(cidrRange)));
      continue;
    }
    for (const pod of podsMatching(model, peer, policy.namespace)) {
      for (const ip of pod.ips) if (ip.family === f) ranges.push(ipRange(ip));
    }
  }
  return merge(ranges);
}

/** The pods (non-hostNetwork) and their addresses of family `f` inside `ranges` (all, when undefined). */
function podsIn(model: PolicyModel, f: Family, ranges: Range[] | undefined): [Pod, IP][] {
  const out: [Pod, IP][] = [];
  for (const pod of model.pods) {
    if (pod.hostNetwork) continue;
    for (const ip of pod.ips) {
      if (ip.family === f && (!ranges || ranges.some(([lo, hi]) => ip.value >= lo && ip.value <= hi))) out.push([pod, ip]);
    }
  }
  return out;
}

function setName(dir: Direction, f: Family, policy: NetworkPolicy, part: string): string {
  const name = `${dir === 'ingress' ? 'in' : 'eg'}${f}_${policy.namespace}_${policy.name}_${part}`;
  if (name.length <= MAX_SET_NAME) return name;
  const hash = createHash('sha256').update(name).digest('hex').slice(0, 16);
  return `${name.slice(0, MAX_SET_NAME - 17)}_${hash}`;
}

/**
 * The rules (and their sets) of one policy for one direction and family: one per rule, two for
 * an egress rule with numeric and named ports. `targets` are the local pods it selects.
 */
function policyRules(model: PolicyModel, sets: NftSet[], dir: Direction, f: Family, policy: NetworkPolicy, targets: Pod[]): string[] {
  const ip = l3(f);
  const set = (part: string, type: string, interval: boolean, elements: string[]) => {
    const s: NftSet = { name: setName(dir, f, policy, part), type, interval, elements };
    sets.push(s);
    return `@${s.name}`;
  };
  const concat = `${addrType(f)} . inet_proto . inet_service`;
  const local = targets.flatMap((pod) => pod.ips.filter((a) => a.family === f).map((a): [Pod, IP] => [pod, a]));
  let podsSet: string | undefined;
  const pods = () => (podsSet ??= set('pods', addrType(f), false, uniqueAddrs(local.map(([, a]) => a))));
  const lines: string[] = [];
  for (const [r, rule] of policy[dir]!.entries()) {
    const peers = peerRanges(model, policy, rule, f);
    const peerElements = (peers ?? []).map((x) => formatRange(f, x));
    if (dir === 'ingress') {
      const from = peers ? ` ${ip} saddr ${set(`${r}_from`, addrType(f), true, peerElements)}` : '';
      if (rule.ports.length === 0) {
        lines.push(`${ip} daddr ${pods()}${from} return`);
        continue;
      }
      const elements = podPortElements(local.map(([pod, a]) => {
        const ports = portRanges(rule.ports, pod, false);
        for (const [proto, rs] of portRanges(rule.ports, pod, true)) ports.set(proto, merge([...(ports.get(proto) ?? []), ...rs]));
        return [a, ports];
      }));
      lines.push(`${ip} daddr . meta l4proto . th dport ${set(`${r}_to`, concat, true, elements)}${from} return`);
      continue;
    }
    const from = `${ip} saddr ${pods()}`;
    if (rule.ports.length === 0) {
      lines.push(peers ? `${from} ${ip} daddr ${set(`${r}_to`, addrType(f), true, peerElements)} return` : `${from} return`);
      continue;
    }
    if (rule.ports.some((p) => typeof p.port !== 'string')) {
      const ports = portRanges(rule.ports, undefined, false);
      lines.push(peers
        ? `${from} ${ip} daddr . meta l4proto . th dport ${set(`${r}_to`, concat, true, peerElements.flatMap((a) => addrPortElements(a, ports)))} return`
        : `${from} meta l4proto . th dport ${set(`${r}_to`, 'inet_proto . inet_service', true, portElements(ports))} return`);
    }
    if (rule.ports.some((p) => typeof p.port === 'string')) {
      const elements = podPortElements(podsIn(model, f, peers).map(([pod, a]) => [a, portRanges(rule.ports, pod, true)]));
      lines.push(`${from} ${ip} daddr . meta l4proto . th dport ${set(`${r}_to_named`, concat, true, elements)} return`);
    }
  }
  return lines;
}

/** The local pods `policy` selects. */
function targetsOf(policy: NetworkPolicy, local: readonly Pod[]): Pod[] {
  return (byNamespace(local).get(policy.namespace) ?? []).filter((p) => matchesLabels(policy.podSelector, p.labels));
}

/** The sets and chains enforcing `model` on `node`'s pods; undefined when no policy selects one. */
export function renderPolicy(model: PolicyModel, node: string): PolicyRuleset | undefined {
  const local = model.pods.filter((p) => p.node === node && !p.hostNetwork && p.ips.length > 0);
  const key = (p: NetworkPolicy) => `${p.namespace}/${p.name}`;
  const policies = [...model.policies].sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
  const sets: NftSet[] = [];
  const chains = new Map<string, string[]>();
  const jumps: string[] = [];
  const isolated = new Map<Family, IP[]>(FAMILIES.map((f) => [f, []]));
  for (const dir of ['egress', 'ingress'] as const) {
    const pods = local.filter((p) => policiesSelecting(model, p, dir).length > 0);
    for (const f of FAMILIES) {
      const addrs = pods.flatMap((p) => p.ips.filter((a) => a.family === f));
      if (addrs.length === 0) continue;
      const name = `${dir}${f}`;
      sets.push({ name, type: addrType(f), interval: false, elements: uniqueAddrs(addrs) });
      for (const a of addrs) isolated.get(f)!.push(a);
      const rules: string[] = [];
      for (const policy of policies) {
        const targets = policy[dir] ? targetsOf(policy, local) : [];
        if (targets.length > 0) rules.push(...policyRules(model, sets, dir, f, policy, targets));
      }
      chains.set(name, [...rules, 'drop']);
      jumps.push(`${l3(f)} ${dir === 'egress' ? 'saddr' : 'daddr'} @${name} jump ${name}`);
    }
  }
  if (jumps.length === 0) return undefined;
  // A pod reaching itself through a Service address (hairpin) is a pod reaching itself.
  const loops: string[] = [];
  const loopSets: NftSet[] = [];
  for (const [f, addrs] of isolated) {
    if (addrs.length === 0) continue;
    const elements = uniqueAddrs(addrs).map((a) => `${a} . ${a}`);
    loopSets.push({ name: `self${f}`, type: `${addrType(f)} . ${addrType(f)}`, interval: false, elements });
    loops.push(`${l3(f)} saddr . ${l3(f)} daddr @self${f} accept`);
  }
  sets.unshift(...loopSets);
  // Neighbour discovery between two pods of the bridge passes the IPv6 hooks too (br_netfilter).
  const nd = chains.has('egress6') || chains.has('ingress6') ? ['icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert } accept'] : [];
  chains.set('forward', ['type filter hook forward priority filter; policy accept;', 'ct state established,related accept', ...nd, ...loops, ...jumps]);
  return { sets, chains };
}

/** `nft -f` lines deleting table `inet weft-policy` whether or not it exists. */
const DELETE_TABLE = [`table inet ${NFT_POLICY_TABLE} {}`, `delete table inet ${NFT_POLICY_TABLE}`];

/** A set's declaration, as the body of `set <name> { … }` lines or one `add set` line. */
function setBody(s: NftSet): string[] {
  return [`type ${s.type}`, ...(s.interval ? ['flags interval'] : []), ...(s.elements.length > 0 ? [`elements = { ${s.elements.join(', ')} }`] : [])];
}

/**
 * The `nft -f` script that, in one transaction, replaces table `inet weft-policy` with
 * `ruleset`, or only removes it when there is none. Equal inputs give byte-equal scripts.
 */
export function policyScript(ruleset: PolicyRuleset | undefined): string {
  const lines = [...DELETE_TABLE];
  if (ruleset) {
    lines.push(`table inet ${NFT_POLICY_TABLE} {`);
    for (const s of ruleset.sets) lines.push(`\tset ${s.name} {`, ...setBody(s).map((l) => `\t\t${l}`), '\t}');
    for (const [name, rules] of ruleset.chains) lines.push(`\tchain ${name} {`, ...rules.map((l) => `\t\t${l}`), '\t}');
    lines.push('}');
  }
  return `${lines.join('\n')}\n`;
}

/**
 * The `nft -f` script that, in one transaction, turns the loaded `from` into `to` touching only
 * what differs: a pod coming or going changes the elements of a few sets (flushed and filled
 * again), a policy changed rewrites the chains holding its rules, and the rest of the table, with
 * its thousands of elements, is not sent again. In order: the chains that change or go are
 * flushed (so nothing refers to what is deleted next), chains and sets that go (or change type)
 * are deleted, new ones added, changed sets refilled, and the changed chains' rules added. The
 * whole script when either side has no table. Empty when nothing differs.
 */
export function policyUpdate(from: PolicyRuleset | undefined, to: PolicyRuleset | undefined): string {
  if (!from || !to) return from === to ? '' : policyScript(to);
  const t = `inet ${NFT_POLICY_TABLE}`;
  const oldSets = new Map(from.sets.map((s) => [s.name, s]));
  const newSets = new Map(to.sets.map((s) => [s.name, s]));
  const sameType = (a: NftSet, b: NftSet) => a.type === b.type && a.interval === b.interval;
  const sameRules = (a: readonly string[] | undefined, b: readonly string[]) => a !== undefined && a.length === b.length && a.every((l, i) => l === b[i]);
  const changedChains = [...to.chains].filter(([name, rules]) => !sameRules(from.chains.get(name), rules));
  const goneChains = [...from.chains.keys()].filter((name) => !to.chains.has(name));
  const lines: string[] = [];
  for (const [name] of changedChains) if (from.chains.has(name)) lines.push(`flush chain ${t} ${name}`);
  for (const name of goneChains) lines.push(`flush chain ${t} ${name}`);
  for (const name of goneChains) lines.push(`delete chain ${t} ${name}`);
  for (const [name, s] of oldSets) {
    const next = newSets.get(name);
    if (!next || !sameType(s, next)) lines.push(`delete set ${t} ${name}`);
  }
  for (const [name, s] of newSets) {
    const was = oldSets.get(name);
    if (!was || !sameType(was, s)) lines.push(`add set ${t} ${name} { ${setBody(s).join('; ')}; }`);
    else if (was.elements.join() !== s.elements.join()) {
      lines.push(`flush set ${t} ${name}`);
      if (s.elements.length > 0) lines.push(`add element ${t} ${name} { ${s.elements.join(', ')} }`);
    }
  }
  for (const [name] of changedChains) if (!from.chains.has(name)) lines.push(`add chain ${t} ${name}`);
  for (const [name, rules] of changedChains) {
    // The base chain's first line is its declaration: kept by the flush, never a rule.
    for (const rule of name === 'forward' ? rules.slice(1) : rules) lines.push(`add rule ${t} ${name} ${rule}`);
  }
  return lines.length === 0 ? '' : `${lines.join('\n')}\n`;
}

/**
 * The `nft -f` script that, in one transaction, replaces table `inet weft-policy` with the rules
 * enforcing `model`'s policies on the pods of `node`, or only removes it when no policy selects
 * one of them. Equal inputs give byte-equal scripts.
 */
export function renderPolicyRules(model: PolicyModel, node: string): string {
  return policyScript(renderPolicy(model, node));
}
