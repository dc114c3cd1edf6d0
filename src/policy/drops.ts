/**
 * Every packet network policy drops on this node, counted by the kernel (issue #42,
 * `weft_policy_drops_total{direction}`): the verdict logs (verdict-log.ts) see only the namespaces
 * that ask for them, at most LOG_RATE a second per pod, so they cannot tell how much is dropped.
 *
 * - Each group chain's `drop` counts in one of two named counters of the policy table,
 *   `drops_ingress` and `drops_egress` (drop-counters.ts, render.ts): no rule more, two objects
 *   whatever the policies, and the repair leaves their values out (nft/listing.ts).
 * - Read when scraped, not on a timer, so an idle weftd spends nothing on it: one
 *   `nft -j list counters table inet weft-policy` (two small objects), shared by the scrapes of
 *   {@link READ_CACHE_MS} (two Prometheus replicas scraping together spawn one nft).
 * - The kernel's counters start again at 0 when the table is loaded whole (at start, after a
 *   drift or a failed apply) or removed (no policy selects a local pod); weftd's totals only grow:
 *   the enforcer says when it loaded the table whole ({@link PolicyDrops.restarted}), and a
 *   reading below the last one (a table deleted by someone else) is taken as a new start too.
 *   What was dropped between the last reading and such a reload is not counted.
 */
import type { Logger } from '../log.ts';
import { TrafficRulesError } from '../masq/runner.ts';
import type { Runner } from '../masq/runner.ts';
import { parseDropCounters } from './drop-counters.ts';
import type { DropCounts } from './drop-counters.ts';
import { NFT_POLICY_TABLE } from './nft-script.ts';

/** Scrapes this close together share one reading of the kernel's counters. */
export const READ_CACHE_MS = 1000;

export interface PolicyDropsOptions {
  /** Runs nft in the node's namespace. */
  run: Runner;
  log: Logger;
  /** The clock (ms), for tests; default performance.now. */
  now?: () => number;
}

/** weftd's totals of the drop counters: read on demand, cached briefly, never going down. */
export class PolicyDrops {
  readonly #options: PolicyDropsOptions;
  readonly #now: () => number;
  /** The kernel's last reading, and what the counters that started again before it had counted. */
  #last: DropCounts = { ingress: 0, egress: 0 };
  readonly #before: DropCounts = { ingress: 0, egress: 0 };
  #readAt = -Infinity;
  /** Counts the restarts: a reading begun before one is of the counters gone, already added. */
  #restarts = 0;
  #reading: Promise<DropCounts> | undefined;
  #failure = '';

  constructor(options: PolicyDropsOptions) {
    this.#options = options;
    this.#now = options.now ?? (() => performance.now());
  }

  /**
   * Packets dropped by network policy since weftd started, by direction. Never rejects: when nft
   * cannot be read the last totals are given, and a warning says why (once per distinct failure).
   */
  totals(): Promise<DropCounts> {
    if (this.#reading) return this.#reading;
    if (this.#now() - this.#readAt < READ_CACHE_MS) return Promise.resolve(this.#totals());
    this.#reading = this.#read().finally(() => {
      this.#reading = undefined;
      this.#readAt = this.#now();
    });
    return this.#reading;
  }

  /** The table was loaded whole or removed: its counters start again at 0, what they had counted is kept. */
  restarted(): void {
    for (const dir of ['ingress', 'egress'] as const) this.#before[dir] += this.#last[dir];
    this.#last = { ingress: 0, egress: 0 };
    this.#restarts++;
    this.#readAt = -Infinity;
  }

  #totals(): DropCounts {
    return { ingress: this.#before.ingress + this.#last.ingress, egress: this.#before.egress + this.#last.egress };
  }

  async #read(): Promise<DropCounts> {
    const argv = ['nft', '-j', 'list', 'counters', 'table', 'inet', NFT_POLICY_TABLE];
    const restarts = this.#restarts;
    try {
      const r = await this.#options.run(argv);
      const gone = r.code !== 0 && /No such file or directory/i.test(r.stderr);
      if (r.code !== 0 && !gone) throw new TrafficRulesError('list the policy drop counters', argv, r);
      // No table (no policy selects a pod of this node): the counters start again when it comes.
      const now = gone ? { ingress: 0, egress: 0 } : parseDropCounters(r.stdout);
      if (restarts !== this.#restarts) return this.#totals();
      for (const dir of ['ingress', 'egress'] as const) {
        if (now[dir] < this.#last[dir]) this.#before[dir] += this.#last[dir];
      }
      this.#last = now;
      this.#failure = '';
    } catch (e) {
      if (String(e) !== this.#failure) {
        this.#options.log.warn('network policy: failed to read the drop counters; weft_policy_drops_total stays where it was', { err: e });
      }
      this.#failure = String(e);
    }
    return this.#totals();
  }
}
