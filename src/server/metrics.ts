/**
 * weftd's Prometheus metrics (prom-client, registry of its own). The parts report through small
 * hooks — the reconciler's onPass, the lease sources' {@link SourceObserver}, the logger's
 * onRecord — so no component imports prom-client.
 *
 * - weft_leases: remote leases in the LeaseTable
 * - weft_kernel_entries{state="desired"|"present"}: Weft's routes, neighbours and FDB entries
 *   wanted, and held by the kernel as the last full pass found them
 * - weft_reconcile_runs_total{kind}, weft_reconcile_duration_seconds{kind}: passes (full / fast)
 * - weft_repairs_total: kernel entries put back or removed by passes that only answered drift
 *   (a deleted route or neighbour, a recreated device, a link back up, the periodic resync), not
 *   by those that also carried start-up or a lease change (the reconciler's pass reasons)
 * - weft_watch_restarts_total{source}, weft_lease_renewals_total{source}
 * - weft_errors_total{kind}: warnings and errors logged with an error, by its code
 */
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { LogLevel } from '../config/flags.ts';
import type { SourceObserver } from '../lease/source.ts';
import type { Fields } from '../log.ts';
import type { PassInfo } from '../reconcile/loop.ts';

export class Metrics {
  readonly registry = new Registry();
  /** Reads the number of remote leases when scraped; set once the LeaseTable exists. */
  leaseCount: () => number = () => 0;
  readonly #kernelEntries: Gauge<'state'>;
  readonly #runs: Counter<'kind'>;
  readonly #duration: Histogram<'kind'>;
  readonly #repairs: Counter;
  readonly #watchRestarts: Counter<'source'>;
  readonly #renewals: Counter<'source'>;
  readonly #errors: Counter<'kind'>;

  constructor() {
    const registers = [this.registry];
    const metrics = this;
    new Gauge({ name: 'weft_leases', help: 'Remote leases known', registers, collect() {
      this.set(metrics.leaseCount());
    } });
    this.#kernelEntries = new Gauge({ name: 'weft_kernel_entries', help: 'Routes, neighbour and FDB entries of Weft: desired, and present at the last full pass', labelNames: ['state'], registers });
    this.#runs = new Counter({ name: 'weft_reconcile_runs_total', help: 'Reconcile passes', labelNames: ['kind'], registers });
    this.#duration = new Histogram({
      name: 'weft_reconcile_duration_seconds', help: 'Duration of reconcile passes', labelNames: ['kind'], registers,
      buckets: [0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5],
    });
    this.#repairs = new Counter({ name: 'weft_repairs_total', help: 'Kernel entries restored or removed because the kernel drifted', registers });
    this.#watchRestarts = new Counter({ name: 'weft_watch_restarts_total', help: 'Lease watches restarted or relisted', labelNames: ['source'], registers });
    this.#renewals = new Counter({ name: 'weft_lease_renewals_total', help: 'Renewals of our own lease', labelNames: ['source'], registers });
    this.#errors = new Counter({ name: 'weft_errors_total', help: 'Warnings and errors logged with an error, by its code', labelNames: ['kind'], registers });
  }

  /** The reconciler's onPass. */
  pass(p: PassInfo): void {
    this.#runs.inc({ kind: p.kind });
    this.#duration.observe({ kind: p.kind }, p.durationMs / 1000);
    if (!p.reasons.some((r) => r === 'start-up' || r === 'own lease changed' || r.startsWith('lease '))) {
      this.#repairs.inc(p.ops.length - p.failures.length);
    }
    if (p.kind !== 'full') return;
    if (p.desired !== undefined) this.#kernelEntries.set({ state: 'desired' }, p.desired);
    if (p.observed !== undefined) this.#kernelEntries.set({ state: 'present' }, p.observed);
  }

  /** Hooks for a lease source named `source`. */
  sourceObserver(source: string): SourceObserver {
    return {
      watchRestarted: () => this.#watchRestarts.inc({ source }),
      leaseRenewed: () => this.#renewals.inc({ source }),
    };
  }

  /** The logger's onRecord: counts warnings and errors that carry an error. */
  record(level: LogLevel, _msg: string, fields: Fields): void {
    if (level !== 'warn' && level !== 'error') return;
    const err = fields.err as { code?: unknown; name?: unknown } | undefined;
    if (!err || typeof err !== 'object') return;
    const kind = typeof err.code === 'string' ? err.code : typeof err.name === 'string' ? err.name : 'Error';
    this.#errors.inc({ kind });
  }

  /** The text exposition format. */
  text(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}
