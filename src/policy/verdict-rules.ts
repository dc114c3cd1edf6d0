/**
 * The rules that log network policy verdicts (issue #42), pure: what render.ts adds to a group
 * chain when the namespace of its pods asks for verdict logs (acl-logging.ts).
 *
 * - A logged verdict is nftables `log group NFLOG_GROUP prefix "<id>"`, read by weftd through the
 *   addon (verdict-log.ts): no process per packet. `<id>` is `weft-D-` (denied: no policy allows
 *   it) or `weft-A-` (allowed) and 12 hex digits of the group chain's name, which weftd maps back
 *   to the chain's policies ({@link VerdictTarget}); a prefix holds at most 127 bytes, chain names
 *   240.
 * - Rate-limited by the kernel per local pod: a meter (`update @vlog4 { ip daddr limit rate … }`)
 *   keyed by the address of the pod the policies select (the destination for ingress, the source
 *   for egress) lets LOG_RATE lines a second through, LOG_BURST at once; past that the rule stops
 *   before its `log` and the packet goes on to the verdict as it would unlogged. A flood at one
 *   pod costs weftd at most LOG_RATE lines a second for it.
 * - Denied: the log rule stands before the chain's `drop`. Allowed: before each `… return` of a
 *   set lookup, the same lookup with the log rule (an allowed packet meets that lookup twice,
 *   only where allow logs are on), and a bare `return` gets the log rule before it.
 */
import { createHash } from 'node:crypto';
import type { Family } from '../ip/ip.ts';
import type { AclLogging } from './acl-logging.ts';
import type { Direction } from './evaluate.ts';
import type { NetworkPolicy } from './model.ts';
import type { NftSet } from './nft-script.ts';

/** The NFLOG group weftd binds (u16; ulogd's examples use 0–2, so this one is out of their way). */
export const NFLOG_GROUP = 22342;
/** Logged verdicts a second per local pod, and at once. */
export const LOG_RATE = 10;
export const LOG_BURST = 20;
/** A pod's meter entry goes this long after its last logged packet. */
const METER_TIMEOUT_SECONDS = 60;

export type Verdict = 'deny' | 'allow';

/** What a prefix stands for: the group chain's direction, family, namespace and policies. */
export interface VerdictTarget {
  verdict: Verdict;
  direction: Direction;
  family: Family;
  namespace: string;
  /** The policies selecting the chain's pods in its direction, in namespace/name order. */
  policies: readonly NetworkPolicy[];
}

const meterName = (f: Family) => `vlog${f}`;

/** The log prefix of `verdict` in the group chain `chain`. */
export function verdictPrefix(verdict: Verdict, chain: string): string {
  return `weft-${verdict === 'deny' ? 'D' : 'A'}-${createHash('sha256').update(chain).digest('hex').slice(0, 12)}`;
}

/** The statements logging `verdict` of chain `chain` (rate-limited per local pod); they end the rule's matches. */
function logStatements(f: Family, dir: Direction, verdict: Verdict, chain: string): string {
  const local = `${f === 4 ? 'ip' : 'ip6'} ${dir === 'ingress' ? 'daddr' : 'saddr'}`;
  return `update @${meterName(f)} { ${local} limit rate ${LOG_RATE}/second burst ${LOG_BURST} packets } `
    + `log group ${NFLOG_GROUP} prefix "${verdictPrefix(verdict, chain)}"`;
}

/** The log statements of a group chain's verdicts its namespace asks for; undefined where it does not. */
export function groupLogging(logging: AclLogging | undefined, f: Family, dir: Direction, chain: string): { allow?: string; deny?: string } {
  return {
    ...(logging?.allow ? { allow: logStatements(f, dir, 'allow', chain) } : {}),
    ...(logging?.deny ? { deny: logStatements(f, dir, 'deny', chain) } : {}),
  };
}

/** The meters `chains` update, declared (per address family, elements left to the kernel). */
export function meterSets(chains: ReadonlyMap<string, readonly string[]>): NftSet[] {
  const used = (f: Family) => [...chains.values()].some((rules) => rules.some((r) => r.includes(`@${meterName(f)} `)));
  return ([4, 6] as const).filter(used).map((f) => ({
    kind: 'set', name: meterName(f), type: f === 4 ? 'ipv4_addr' : 'ipv6_addr', interval: false,
    flags: ['dynamic', 'timeout'], timeoutSeconds: METER_TIMEOUT_SECONDS, elements: [],
  }));
}

/**
 * The prefixes of a renderer's logging chains and what they stand for: those of the last render,
 * and of the one before, so a packet logged just before a change is still named.
 */
export class VerdictTargets {
  #current = new Map<string, VerdictTarget>();
  #previous = new Map<string, VerdictTarget>();

  /** Starts a render: its chains replace those of the render before the last. */
  next(): void {
    this.#previous = this.#current;
    this.#current = new Map();
  }

  /** Records the prefixes of group chain `chain`, for the verdicts `logging` asks for. */
  add(chain: string, direction: Direction, family: Family, policies: readonly NetworkPolicy[], logging: AclLogging | undefined): void {
    for (const verdict of ['deny', 'allow'] as const) {
      if (!logging?.[verdict]) continue;
      this.#current.set(verdictPrefix(verdict, chain), { verdict, direction, family, namespace: policies[0]!.namespace, policies });
    }
  }

  get(prefix: string): VerdictTarget | undefined {
    return this.#current.get(prefix) ?? this.#previous.get(prefix);
  }
}
