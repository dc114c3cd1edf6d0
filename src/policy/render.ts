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
 * (hairpin: a pod cannot block itself; a set of `addr . addr` pairs), then dispatches: a verdict
 * map `egress4`/`egress6` from the source address of a local pod isolated for egress, then
 * `ingress4`/`ingress6` from the destination address of one isolated for ingress, each jumping
 * to the chain of that pod's group: the local addresses that exactly the same policies select in
 * that direction (named after the policy when it is one, else a hash of their names). A pod no
 * policy of a direction selects misses the map and is untouched; a `return` from the egress
 * chain goes on to the ingress dispatch, so pod to pod needs both.
 *
 * A group chain judges a new connection by at most three set lookups, however many policies and
 * rules select its pods: every rule of every policy of the group is cut into parts (peers ×
 * ports) and the parts of one shape go into one set: `_peers` (the remote address, rules without ports),
 * `_ports` (remote address . protocol . port, numeric ports, and egress named ports resolved on
 * each peer pod), `_named` (local address . remote address . protocol . port, ingress named
 * ports resolved on each local pod); a rule with neither peers nor ports makes the chain a bare
 * `return`; the chain ends with `drop`, counted per direction (drop-counters.ts). Sets are intervals of concatenations, whose elements
 * must not overlap: ipBlock excepts are subtracted, and the union of the boxes of all rules is
 * cut into disjoint address ranges, each with its merged ports (ranges.ts, disjointBoxes). So the rule
 * count grows with the groups (at most the local pods, in practice the distinct combinations of
 * policies selecting them), never with pods × policies; set elements grow with peers × ports of
 * the rules, once in each group a rule's policy selects. A change to one policy rewrites the few rules and refills the sets of the groups
 * of the pods it selects, and the maps' elements when pods change group; the rest stays.
 *
 * Verdict logs: where the namespace of a group's pods asks for them, the chain also logs its
 * verdicts to NFLOG, rate-limited per pod by the kernel (verdict-rules.ts).
 *
 * Determinism. Policies in namespace/name order, rules in API order, set elements sorted: equal
 * models give byte-equal scripts, so a diff of two scripts is the change. Chain names carry the
 * policy's namespace and name (`_` cannot occur in either), hashed when too long for the kernel.
 */
import { createHash } from 'node:crypto';
import { bits, formatIP } from '../ip/ip.ts';
import type { Family, IP } from '../ip/ip.ts';
import { matchesLabels } from '../k8s/label-selector.ts';
import { byNamespace, podsMatching, resolvePort } from './evaluate.ts';
import type { Direction } from './evaluate.ts';
import type { AclLogging } from './acl-logging.ts';
import { DROP_COUNTERS, dropStatement } from './drop-counters.ts';
import type { Namespace, NetworkPolicy, Pod, PolicyModel, PolicyPort, PolicyRule, Protocol } from './model.ts';
import { policyScript } from './nft-script.ts';
import type { NftSet, PolicyRuleset } from './nft-script.ts';
import { groupLogging, meterSets, VerdictTargets } from './verdict-rules.ts';
import type { VerdictTarget } from './verdict-rules.ts';
import { cidrRange, disjointBoxes, formatPorts, formatRange, ipRange, merge, subtract } from './ranges.ts';
import type { Range } from './ranges.ts';

const FAMILIES: readonly Family[] = [4, 6];
/** NFT_SET_MAXNAMELEN is 256 with the NUL; room is left for the suffixes. */
const MAX_SET_NAME = 240;

const l3 = (f: Family) => (f === 4 ? 'ip' : 'ip6');
const addrType = (f: Family) => (f === 4 ? 'ipv4_addr' : 'ipv6_addr');
const protoName = (p: Protocol) => p.toLowerCase();

const byValue = (a: IP, b: IP) => (a.value < b.value ? -1 : a.value > b.value ? 1 : 0);
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

/**
 * What one rule allows, as parts each allowing every combination of its fields: the remote end's
 * addresses (the source for ingress, the destination for egress; undefined: any) and ports per
 * protocol (undefined: any traffic, ports or not). `local` is the local pod's address a named port
 * was resolved on (ingress only).
 */
interface Part {
  local?: IP;
  remote?: Range[];
  ports?: Map<Protocol, Range[]>;
}

/** The parts of a rule that are the same for every local pod: peers, numeric ports, and egress named ports (resolved on the peers). */
function sharedParts(model: PolicyModel, dir: Direction, f: Family, policy: NetworkPolicy, rule: PolicyRule): Part[] {
  const remote = peerRanges(model, policy, rule, f);
  if (remote?.length === 0) return [];
  if (rule.ports.length === 0) return [remote ? { remote } : {}];
  const parts: Part[] = [];
  const numeric = portRanges(rule.ports, undefined, false);
  if (numeric.size > 0) parts.push(remote ? { remote, ports: numeric } : { ports: numeric });
  if (dir === 'egress' && rule.ports.some((p) => typeof p.port === 'string')) {
    for (const [pod, a] of podsIn(model, f, remote)) {
      const ports = portRanges(rule.ports, pod, true);
      if (ports.size > 0) parts.push({ remote: [ipRange(a)], ports });
    }
  }
  return parts;
}

/** The ingress parts of a rule's named ports, resolved on each local target. */
function namedParts(model: PolicyModel, f: Family, policy: NetworkPolicy, rule: PolicyRule, targets: [Pod, IP][]): Part[] {
  if (!rule.ports.some((p) => typeof p.port === 'string')) return [];
  const remote = peerRanges(model, policy, rule, f);
  if (remote?.length === 0) return [];
  const parts: Part[] = [];
  for (const [pod, local] of targets) {
    const ports = portRanges(rule.ports, pod, true);
    if (ports.size > 0) parts.push(remote ? { local, remote, ports } : { local, ports });
  }
  return parts;
}

/** `<remote> . <proto> . <ports>` elements of `parts` (all with ports), disjoint; `any` stands for an absent remote. */
function remotePortElements(f: Family, parts: readonly Part[]): string[] {
  const any: Range = [0n, (1n << BigInt(bits(f))) - 1n];
  const protos = [...new Set(parts.flatMap((p) => [...p.ports!.keys()]))].sort();
  return protos.flatMap((proto) => {
    const boxes = parts.flatMap((p) =>
      (p.remote ?? [any]).flatMap((r) => (p.ports!.get(proto) ?? []).map((ports): [Range, Range] => [r, ports])),
    );
    return disjointBoxes(boxes).flatMap(([r, ports]) => ports.map((x) => `${formatRange(f, r)} . ${protoName(proto)} . ${formatPorts(x)}`));
  });
}

const policyKey = (p: NetworkPolicy) => `${p.namespace}/${p.name}`;

/** The local pods `policy` selects. */
function targetsOf(policy: NetworkPolicy, local: readonly Pod[]): Pod[] {
  return (byNamespace(local).get(policy.namespace) ?? []).filter((p) => matchesLabels(policy.podSelector, p.labels));
}

/**
 * The name of the chain of the local addresses that exactly `policies` select in a direction and
 * family: the policy's namespace and name when it is one (`_` cannot occur in either), else a
 * hash of their names; cut and made unique by a hash when too long for the kernel.
 */
function groupName(dir: Direction, f: Family, policies: readonly NetworkPolicy[]): string {
  const hash = (text: string) => createHash('sha256').update(text).digest('hex').slice(0, 16);
  const prefix = `${dir === 'ingress' ? 'in' : 'eg'}${f}_`;
  const name =
    policies.length === 1
      ? `${prefix}${policies[0]!.namespace}_${policies[0]!.name}`
      : `${prefix}g${hash(policies.map(policyKey).join('\n'))}`;
  return name.length <= MAX_SET_NAME ? name : `${name.slice(0, MAX_SET_NAME - 17)}_${hash(name)}`;
}

/**
 * The chain (and its sets) of one group: the local addresses of family `f` that exactly
 * `policies` select in `dir`, held by `targets`. Every rule of every policy becomes parts, and the
 * parts of one shape go into one set, so the chain has at most three lookups and a `drop`,
 * whatever the number of policies.
 */
function groupChain(
  model: PolicyModel,
  shared: (policy: NetworkPolicy, rule: PolicyRule) => Part[],
  sets: NftSet[],
  dir: Direction,
  f: Family,
  name: string,
  policies: readonly NetworkPolicy[],
  targets: readonly [Pod, IP][],
  logging: AclLogging | undefined,
): string[] {
  const logs = groupLogging(logging, f, dir, name);
  const parts: Part[] = [];
  for (const policy of policies) {
    const own = targets.filter(([pod]) => pod.namespace === policy.namespace && matchesLabels(policy.podSelector, pod.labels));
    for (const rule of policy[dir]!) {
      parts.push(...shared(policy, rule));
      if (dir === 'ingress') parts.push(...namedParts(model, f, policy, rule, own));
    }
  }
  if (parts.some((p) => !p.remote && !p.ports)) return [...(logs.allow ? [logs.allow] : []), 'return'];
  const ip = l3(f);
  const remote = dir === 'ingress' ? 'saddr' : 'daddr';
  const rules: string[] = [];
  const set = (suffix: string, type: string, elements: string[], match: string) => {
    if (elements.length === 0) return;
    sets.push({ kind: 'set', name: `${name}_${suffix}`, type, interval: true, elements });
    if (logs.allow) rules.push(`${match} @${name}_${suffix} ${logs.allow}`);
    rules.push(`${match} @${name}_${suffix} return`);
  };
  const peers = merge(parts.filter((p) => !p.ports).flatMap((p) => p.remote!));
  set(
    'peers',
    addrType(f),
    peers.map((r) => formatRange(f, r)),
    `${ip} ${remote}`,
  );
  set(
    'ports',
    `${addrType(f)} . inet_proto . inet_service`,
    remotePortElements(
      f,
      parts.filter((p) => p.ports && !p.local),
    ),
    `${ip} ${remote} . meta l4proto . th dport`,
  );
  const named = parts.filter((p) => p.local);
  const locals = [...new Map(named.map((p) => [p.local!.value, p.local!])).values()].sort(byValue);
  const namedElements = locals.flatMap((a) =>
    remotePortElements(
      f,
      named.filter((p) => p.local!.value === a.value),
    ).map((e) => `${formatIP(a)} . ${e}`),
  );
  set(
    'named',
    `${addrType(f)} . ${addrType(f)} . inet_proto . inet_service`,
    namedElements,
    `${ip} daddr . ${ip} saddr . meta l4proto . th dport`,
  );
  return [...rules, ...(logs.deny ? [logs.deny] : []), dropStatement(dir)];
}

/** Whether two lists hold the same objects in the same order. */
const sameObjects = (a: readonly object[], b: readonly object[]) => a.length === b.length && a.every((x, i) => x === b[i]);

/** A group chain as last rendered, with what it was rendered from. */
interface RenderedGroup {
  policies: readonly NetworkPolicy[];
  targets: readonly (readonly [Pod, IP])[];
  rules: string[];
  sets: NftSet[];
}

/**
 * Renders models into rulesets ({@link renderPolicy}), keeping what it worked out from one model
 * for the next: while the pods and namespaces are the same objects (a policy changed), each
 * policy's local targets, each rule's peers and ports, and each group chain whose policies and
 * pods are the same objects are taken again instead of worked out; any pod or namespace changed,
 * everything is worked out again. The result is what a fresh render gives, always; only the time
 * differs (weftd renders the whole model on every change).
 */
export class PolicyRenderer {
  #node = '';
  #pods: readonly Pod[] = [];
  #namespaces: readonly Namespace[] = [];
  #targets = new Map<NetworkPolicy, Pod[]>();
  #parts = new Map<string, Map<PolicyRule, Part[]>>();
  #groups = new Map<string, RenderedGroup>();
  readonly #verdicts = new VerdictTargets();

  /** The sets and chains enforcing `model` on `node`'s pods; undefined when no policy selects one. */
  render(model: PolicyModel, node: string): PolicyRuleset | undefined {
    if (node !== this.#node || !sameObjects(model.pods, this.#pods) || !sameObjects(model.namespaces, this.#namespaces)) {
      this.#node = node;
      this.#pods = model.pods;
      this.#namespaces = model.namespaces;
      this.#targets.clear();
      this.#parts.clear();
      this.#groups.clear();
    }
    const local = model.pods.filter((p) => p.node === node && !p.hostNetwork && p.ips.length > 0);
    const targets = new Map<NetworkPolicy, Pod[]>();
    for (const policy of model.policies) targets.set(policy, this.#targets.get(policy) ?? targetsOf(policy, local));
    this.#targets = targets;
    const parts = new Map<string, Map<PolicyRule, Part[]>>();
    const groups = new Map<string, RenderedGroup>();
    const sets: NftSet[] = [];
    const maps: NftSet[] = [];
    const chains = new Map<string, string[]>();
    const dispatch: string[] = [];
    const isolated = new Map<Family, IP[]>(FAMILIES.map((f) => [f, []]));
    const logged = new Map(model.namespaces.flatMap((n) => (n.aclLogging ? [[n.name, n.aclLogging] as const] : [])));
    this.#verdicts.next();
    for (const dir of ['egress', 'ingress'] as const) {
      const selecting = new Map<Pod, NetworkPolicy[]>();
      for (const [policy, pods] of targets) {
        if (!policy[dir]) continue;
        for (const pod of pods) selecting.set(pod, [...(selecting.get(pod) ?? []), policy]);
      }
      for (const f of FAMILIES) {
        // Each local address, the policies selecting a pod holding it (pods sharing one, a
        // terminating pod and its successor, add up) and those pods.
        const byAddr = new Map<bigint, { ip: IP; policies: Set<NetworkPolicy>; pods: Pod[] }>();
        for (const [pod, policies] of selecting) {
          for (const ip of pod.ips) {
            if (ip.family !== f) continue;
            const entry = byAddr.get(ip.value) ?? { ip, policies: new Set(), pods: [] };
            for (const p of policies) entry.policies.add(p);
            entry.pods.push(pod);
            byAddr.set(ip.value, entry);
          }
        }
        if (byAddr.size === 0) continue;
        const members = new Map<string, { policies: NetworkPolicy[]; targets: [Pod, IP][] }>();
        const jumps: [IP, string][] = [];
        for (const { ip, policies, pods } of byAddr.values()) {
          const sorted = [...policies].sort((a, b) => (policyKey(a) < policyKey(b) ? -1 : policyKey(a) > policyKey(b) ? 1 : 0));
          const name = groupName(dir, f, sorted);
          const group = members.get(name) ?? { policies: sorted, targets: [] };
          for (const pod of pods) group.targets.push([pod, ip]);
          members.set(name, group);
          jumps.push([ip, name]);
        }
        const key = `${dir}${f}`;
        const known = this.#parts.get(key);
        const cache = new Map<PolicyRule, Part[]>();
        parts.set(key, cache);
        const shared = (policy: NetworkPolicy, rule: PolicyRule) => {
          let p = cache.get(rule);
          if (!p) cache.set(rule, (p = known?.get(rule) ?? sharedParts(model, dir, f, policy, rule)));
          return p;
        };
        for (const name of [...members.keys()].sort()) {
          const { policies, targets: held } = members.get(name)!;
          const was = this.#groups.get(name);
          const same =
            was &&
            sameObjects(was.policies, policies) &&
            was.targets.length === held.length &&
            was.targets.every(([p, a], i) => p === held[i]![0] && a === held[i]![1]);
          let group: RenderedGroup;
          if (same) {
            group = was;
            // The parts its policies' rules are made of stay known for the next render.
            for (const policy of policies) for (const rule of policy[dir]!) shared(policy, rule);
          } else {
            const own: NftSet[] = [];
            const logging = logged.get(policies[0]!.namespace);
            group = { policies, targets: held, rules: groupChain(model, shared, own, dir, f, name, policies, held, logging), sets: own };
          }
          groups.set(name, group);
          this.#verdicts.add(name, dir, f, policies, logged.get(policies[0]!.namespace));
          chains.set(name, group.rules);
          sets.push(...group.sets);
        }
        jumps.sort(([a], [b]) => byValue(a, b));
        isolated.get(f)!.push(...jumps.map(([ip]) => ip));
        const elements = jumps.map(([ip, name]) => `${formatIP(ip)} : jump ${name}`);
        maps.push({ kind: 'map', name: key, type: `${addrType(f)} : verdict`, interval: false, elements });
        dispatch.push(`${l3(f)} ${dir === 'egress' ? 'saddr' : 'daddr'} vmap @${key}`);
      }
    }
    this.#parts = parts;
    this.#groups = groups;
    if (dispatch.length === 0) return undefined;
    // A pod reaching itself through a Service address (hairpin) is a pod reaching itself.
    const loops: string[] = [];
    const loopSets: NftSet[] = [];
    for (const [f, addrs] of isolated) {
      if (addrs.length === 0) continue;
      const elements = uniqueAddrs(addrs).map((a) => `${a} . ${a}`);
      loopSets.push({ kind: 'set', name: `self${f}`, type: `${addrType(f)} . ${addrType(f)}`, interval: false, elements });
      loops.push(`${l3(f)} saddr . ${l3(f)} daddr @self${f} accept`);
    }
    // Neighbour discovery between two pods of the bridge passes the IPv6 hooks too (br_netfilter).
    const nd = isolated.get(6)!.length > 0 ? ['icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert } accept'] : [];
    chains.set('forward', [
      'type filter hook forward priority filter; policy accept;',
      'ct state established,related accept',
      ...nd,
      ...loops,
      ...dispatch,
    ]);
    return { sets: [...loopSets, ...meterSets(chains), ...sets, ...maps], chains, counters: Object.values(DROP_COUNTERS) };
  }

  /** What a log prefix of the last render (or the one before, for packets logged meanwhile) stands for. */
  verdictTarget(prefix: string): VerdictTarget | undefined {
    return this.#verdicts.get(prefix);
  }
}

/** The sets and chains enforcing `model` on `node`'s pods; undefined when no policy selects one. */
export function renderPolicy(model: PolicyModel, node: string): PolicyRuleset | undefined {
  return new PolicyRenderer().render(model, node);
}

/**
 * The `nft -f` script that, in one transaction, replaces table `inet weft-policy` with the rules
 * enforcing `model`'s policies on the pods of `node`, or only removes it when no policy selects
 * one of them. Equal inputs give byte-equal scripts.
 */
export function renderPolicyRules(model: PolicyModel, node: string): string {
  return policyScript(renderPolicy(model, node));
}
