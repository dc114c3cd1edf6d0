/**
 * weftd's network policy verdict logs (issue #42): the packets the rules of verdict-rules.ts log
 * to NFLOG, read through the addon (no process per packet, the kernel rate-limits per pod), each
 * written as one structured line through weftd's logger, naming the pods, namespaces, addresses,
 * ports and the policy that decided (or "no policy allows it"), and counted by policy.
 *
 * A line is written at the level of the severity its namespace asks for (acl-logging.ts), as the
 * namespace is now: a packet logged by rules about to go, for a namespace no longer asking, is
 * dropped. An allowed verdict names the policies with a rule admitting the connection (the
 * reference evaluator's answer on the rendered model: the chain's sets merge the rules of every
 * policy selecting its pods, so the kernel cannot say which one matched).
 */
import { formatIP, tryParseIP } from '../ip/ip.ts';
import type { IP } from '../ip/ip.ts';
import type { Logger } from '../log.ts';
import type { LoggedPacket, NflogOptions, NflogReader } from '../netlink/index.ts';
import { SEVERITY_LEVEL } from './acl-logging.ts';
import { policiesAllowing } from './evaluate.ts';
import type { NetworkPolicy, Pod, PolicyModel, Protocol } from './model.ts';
import { NFLOG_GROUP } from './verdict-rules.ts';
import type { Verdict, VerdictTarget } from './verdict-rules.ts';

/** What a denied verdict names as its decider. */
export const NO_POLICY = 'no policy allows it';
/**
 * How the group is read: the IP header and ports copied; the kernel sends a datagram once 32
 * packets wait or after 100 ms, so a flood of many pods wakes weftd ~10 times a second, not per
 * packet, and a line is at most ~100 ms late; 1 MB of socket buffer holds a burst.
 */
export const NFLOG_READ: NflogOptions = { copyRange: 128, queueThreshold: 32, flushMs: 100, rcvbuf: 1 << 20 };
/** The kernel dropping lines (weftd read too slowly) is warned about at most this often. */
const LOST_WARNING_MS = 60_000;

const PROTOCOLS: Readonly<Record<number, string>> = { 1: 'ICMP', 6: 'TCP', 17: 'UDP', 58: 'ICMPv6', 132: 'SCTP' };

/** The pods of a model by address (`family:value`), hostNetwork pods left out (their addresses are the node's). */
export function podsByAddress(model: PolicyModel): Map<string, Pod> {
  const out = new Map<string, Pod>();
  for (const pod of model.pods) {
    if (pod.hostNetwork) continue;
    for (const ip of pod.ips) out.set(`${ip.family}:${ip.value}`, pod);
  }
  return out;
}

const podId = (p: Pod) => `${p.namespace}/${p.name}`;
const policyId = (p: NetworkPolicy) => `${p.namespace}/${p.name}`;

/** One verdict as weftd logs and counts it. */
export interface VerdictLine {
  level: 'warn' | 'info' | 'debug';
  msg: string;
  fields: Record<string, unknown>;
  /** The counter's labels: the deciding policies' names (a denied verdict: those isolating the pod). */
  verdict: Verdict;
  policy: string;
  namespace: string;
}

/**
 * The line of one logged packet of `target`'s chain, or undefined when its namespace no longer
 * asks for that verdict (or the packet is not IP). Pure.
 */
export function verdictLine(
  target: VerdictTarget, packet: LoggedPacket, model: PolicyModel, pods: ReadonlyMap<string, Pod>,
): VerdictLine | undefined {
  const severity = model.namespaces.find((n) => n.name === target.namespace)?.aclLogging?.[target.verdict];
  const src = tryParseIP(packet.src);
  const dst = tryParseIP(packet.dst);
  if (!severity || !src || !dst) return undefined;
  const podAt = (ip: IP) => pods.get(`${ip.family}:${ip.value}`);
  const [srcPod, dstPod] = [podAt(src), podAt(dst)];
  const proto = PROTOCOLS[packet.protocol] ?? String(packet.protocol);
  const ported = packet.protocol === 6 || packet.protocol === 17 || packet.protocol === 132;
  let deciders = target.policies;
  if (target.verdict === 'allow') {
    const [ip, pod] = target.direction === 'ingress' ? [src, srcPod] : [dst, dstPod];
    const remote = { ip, ...(pod ? { pod } : {}) };
    // A connection without ports (ICMP) is admitted by port-less rules only: a protocol no rule names stands for it.
    const asked = (ported ? proto : 'ICMP') as Protocol;
    const allowing = policiesAllowing(model, target.policies, target.direction, remote, dstPod, asked, packet.dport);
    if (allowing.length > 0) deciders = allowing;
  }
  const fields: Record<string, unknown> = {
    verdict: target.verdict,
    direction: target.direction,
    policy: target.verdict === 'deny' ? NO_POLICY : deciders.map(policyId).join(','),
    ...(target.verdict === 'deny' ? { isolatedBy: target.policies.map(policyId) } : {}),
    namespace: target.namespace,
    proto,
    src: formatIP(src),
    ...(srcPod ? { srcPod: podId(srcPod) } : {}),
    ...(ported ? { sport: packet.sport } : {}),
    dst: formatIP(dst),
    ...(dstPod ? { dstPod: podId(dstPod) } : {}),
    ...(ported ? { dport: packet.dport } : {}),
    severity,
  };
  return {
    level: SEVERITY_LEVEL[severity],
    msg: `network policy: connection ${target.verdict === 'deny' ? 'denied' : 'allowed'}`,
    fields,
    verdict: target.verdict,
    policy: deciders.map((p) => p.name).join(','),
    namespace: target.namespace,
  };
}

export interface VerdictLogOptions {
  log: Logger;
  /** Binds an NFLOG group in the node's namespace (NetlinkHandle.nflog). */
  bind: (group: number, listener: (packets: LoggedPacket[], lost: boolean) => void, options: NflogOptions) => Promise<NflogReader>;
  /** What a log prefix stands for (PolicyRenderer.verdictTarget). */
  target: (prefix: string) => VerdictTarget | undefined;
  /** The model the rules in place were rendered from; undefined before the first render. */
  model: () => PolicyModel | undefined;
  /** Called for each verdict logged (weft_policy_verdicts_total). */
  counted?: (verdict: Verdict, policy: string, namespace: string) => void;
  /** Time, for the lost-lines warning; default Date.now. */
  now?: () => number;
}

/** Reads the verdicts the rules log and writes them through the logger. */
export class VerdictLog {
  readonly #options: VerdictLogOptions;
  #reader: NflogReader | undefined;
  #indexed: { model: PolicyModel; pods: Map<string, Pod> } | undefined;
  #lostWarned = -Infinity;

  constructor(options: VerdictLogOptions) {
    this.#options = options;
  }

  /** Binds the NFLOG group the rules log to; rejects (a NetlinkError) when it cannot. */
  async start(): Promise<void> {
    this.#reader = await this.#options.bind(NFLOG_GROUP, (packets, lost) => this.#received(packets, lost), NFLOG_READ);
  }

  /** Unbinds the group; idempotent. */
  stop(): void {
    this.#reader?.stop();
    this.#reader = undefined;
  }

  #received(packets: readonly LoggedPacket[], lost: boolean): void {
    const { log, now = Date.now } = this.#options;
    if (lost && now() - this.#lostWarned >= LOST_WARNING_MS) {
      this.#lostWarned = now();
      log.warn('network policy: the kernel dropped verdict log lines weftd read too slowly (warned once a minute)');
    }
    const model = this.#options.model();
    if (!model) return;
    if (this.#indexed?.model !== model) this.#indexed = { model, pods: podsByAddress(model) };
    for (const packet of packets) {
      const target = this.#options.target(packet.prefix);
      const line = target && verdictLine(target, packet, model, this.#indexed.pods);
      if (!line) continue;
      log[line.level](line.msg, line.fields);
      this.#options.counted?.(line.verdict, line.policy, line.namespace);
    }
  }
}
