/**
 * weftd's Prometheus metrics, rendered in the text exposition format (version 0.0.4). The parts
 * report through small hooks — the reconciler's onPass, the lease sources' {@link SourceObserver},
 * the logger's onRecord — so no component knows about metrics.
 *
 * Weft's handful of counters, gauges and one histogram need no client library: prom-client cost
 * weftd ~150 ms of start-up and ~17 MB of resident memory for what these ~80 lines do.
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
 * - weft_ready: 1 once /readyz answers 200 (first full reconcile done), else 0
 * - weft_lease_expiry_timestamp_seconds: when our own lease runs out unless renewed (etcd mode only)
 * - weft_reconcile_failures_total: kernel operations of reconcile passes that failed
 * - weft_cni_errors_total{verb}: CNI requests weftd's CNI server answered with an error
 * - weft_egress_unplaced{reason}: egress policies and inbound EIPs placed on no gateway, by the
 *   reason their status gives; served only by the weftd leading the egress controller
 * - weft_policy_verdicts_total{verdict,policy,namespace}: network policy verdicts logged
 *   (policy/verdict-log.ts), as many as the kernel let through its per-pod rate limit
 * - weft_policy_drops_total{direction}: packets network policy dropped on this node, all of them,
 *   read from the kernel's counters when scraped (policy/drops.ts); 0 where policy is not enforced
 *
 * weft-alerts.yaml and weft-dashboard.json beside daemonset.yaml are written against these names.
 */
import type { LogLevel } from '../config/flags.ts';
import type { CniServerOptions } from '../cni/server.ts';
import type { SourceObserver } from '../lease/source.ts';
import type { Fields } from '../log.ts';
import type { PassInfo } from '../reconcile/loop.ts';

const BUCKETS = [0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5];

/** A label value with the exposition format's escapes. */
const escape = (value: string) => value.replaceAll('\\', '\\\\').replaceAll('"', '\\"').replaceAll('\n', '\\n');

/** `{name="value"}` with the exposition format's escapes; empty for no label. */
function labels(name: string | undefined, value: string | undefined, extra = ''): string {
  const parts = [];
  if (name !== undefined) parts.push(`${name}="${escape(value!)}"`);
  if (extra) parts.push(extra);
  return parts.length ? `{${parts.join(',')}}` : '';
}

/** One metric family: values by the value of its one label (or '' when it has none). */
class Family {
  readonly values = new Map<string, number>();
  readonly name: string;
  readonly type: 'counter' | 'gauge';
  readonly help: string;
  readonly label: string | undefined;

  constructor(name: string, type: 'counter' | 'gauge', help: string, label?: string) {
    this.name = name;
    this.type = type;
    this.help = help;
    this.label = label;
  }

  inc(value = '', by = 1): void {
    this.values.set(value, (this.values.get(value) ?? 0) + by);
  }

  set(value: string, v: number): void {
    this.values.set(value, v);
  }

  render(): string {
    let out = `# HELP ${this.name} ${this.help}\n# TYPE ${this.name} ${this.type}\n`;
    // A counter without labels is exposed at 0 before its first increment, as client libraries do.
    if (this.values.size === 0 && this.label === undefined) out += `${this.name} 0\n`;
    for (const [value, v] of this.values) out += `${this.name}${labels(this.label, this.label === undefined ? undefined : value)} ${v}\n`;
    return out;
  }
}

/** A counter with several labels: values by the labels' values. */
class CounterVec {
  readonly #values = new Map<string, { labels: readonly string[]; value: number }>();
  readonly name: string;
  readonly help: string;
  readonly labelNames: readonly string[];

  constructor(name: string, help: string, labelNames: readonly string[]) {
    this.name = name;
    this.help = help;
    this.labelNames = labelNames;
  }

  inc(values: readonly string[]): void {
    const key = JSON.stringify(values);
    const series = this.#values.get(key) ?? { labels: values, value: 0 };
    series.value += 1;
    this.#values.set(key, series);
  }

  render(): string {
    let out = `# HELP ${this.name} ${this.help}\n# TYPE ${this.name} counter\n`;
    for (const { labels: values, value } of this.#values.values()) {
      out += `${this.name}{${this.labelNames.map((n, i) => `${n}="${escape(values[i]!)}"`).join(',')}} ${value}\n`;
    }
    return out;
  }
}

/** Cumulative buckets, sum and count, per value of its one label. */
class HistogramFamily {
  readonly #series = new Map<string, { counts: number[]; sum: number; count: number }>();
  readonly name: string;
  readonly help: string;
  readonly label: string;

  constructor(name: string, help: string, label: string) {
    this.name = name;
    this.help = help;
    this.label = label;
  }

  observe(value: string, v: number): void {
    let s = this.#series.get(value);
    if (!s) this.#series.set(value, (s = { counts: BUCKETS.map(() => 0), sum: 0, count: 0 }));
    for (const [i, le] of BUCKETS.entries()) if (v <= le) s.counts[i]! += 1;
    s.sum += v;
    s.count += 1;
  }

  render(): string {
    let out = `# HELP ${this.name} ${this.help}\n# TYPE ${this.name} histogram\n`;
    for (const [value, s] of this.#series) {
      for (const [i, le] of BUCKETS.entries()) out += `${this.name}_bucket${labels(this.label, value, `le="${le}"`)} ${s.counts[i]}\n`;
      out += `${this.name}_bucket${labels(this.label, value, 'le="+Inf"')} ${s.count}\n`;
      out += `${this.name}_sum${labels(this.label, value)} ${s.sum}\n${this.name}_count${labels(this.label, value)} ${s.count}\n`;
    }
    return out;
  }
}

export class Metrics {
  /** Reads the number of remote leases when scraped; set once the LeaseTable exists. */
  leaseCount: () => number = () => 0;
  /** Reads readiness when scraped (what /readyz answers). */
  ready: () => boolean = () => false;
  /** Reads when our own lease expires when scraped; undefined where leases do not expire (kube). */
  leaseExpiry: () => Date | undefined = () => undefined;
  /** Reads the packets network policy dropped when scraped (it never rejects); unset without --network-policy. */
  policyDrops: (() => Promise<Readonly<Record<string, number>>>) | undefined;
  readonly #ready = new Family('weft_ready', 'gauge', 'Whether weftd is ready: its first full reconcile is done');
  readonly #leaseExpiry = new Family('weft_lease_expiry_timestamp_seconds', 'gauge', 'When our own lease expires unless renewed');
  readonly #leases = new Family('weft_leases', 'gauge', 'Remote leases known');
  readonly #kernelEntries = new Family(
    'weft_kernel_entries',
    'gauge',
    'Routes, neighbour and FDB entries of Weft: desired, and present at the last full pass',
    'state',
  );
  readonly #runs = new Family('weft_reconcile_runs_total', 'counter', 'Reconcile passes', 'kind');
  readonly #duration = new HistogramFamily('weft_reconcile_duration_seconds', 'Duration of reconcile passes', 'kind');
  readonly #repairs = new Family('weft_repairs_total', 'counter', 'Kernel entries restored or removed because the kernel drifted');
  readonly #watchRestarts = new Family('weft_watch_restarts_total', 'counter', 'Lease watches restarted or relisted', 'source');
  readonly #renewals = new Family('weft_lease_renewals_total', 'counter', 'Renewals of our own lease', 'source');
  readonly #failures = new Family('weft_reconcile_failures_total', 'counter', 'Kernel operations of reconcile passes that failed');
  readonly #cniErrors = new Family('weft_cni_errors_total', 'counter', 'CNI requests answered with an error, by verb', 'verb');
  readonly #unplaced = new Family('weft_egress_unplaced', 'gauge', 'Egress policies and inbound EIPs placed on no gateway', 'reason');
  readonly #verdicts = new CounterVec('weft_policy_verdicts_total', 'Network policy verdicts logged', ['verdict', 'policy', 'namespace']);
  readonly #drops = new Family(
    'weft_policy_drops_total', 'counter', 'Packets dropped by network policy on this node, by direction', 'direction',
  );
  readonly #errors = new Family('weft_errors_total', 'counter', 'Warnings and errors logged with an error, by its code', 'kind');

  constructor() {
    // Both directions exist from the start, so a rate over them draws before the first drop (and where nothing is enforced).
    for (const direction of ['ingress', 'egress']) this.#drops.set(direction, 0);
  }

  /** The reconciler's onPass. */
  pass(p: PassInfo): void {
    this.#runs.inc(p.kind);
    this.#failures.inc('', p.failures.length);
    this.#duration.observe(p.kind, p.durationMs / 1000);
    if (!p.reasons.some((r) => r === 'start-up' || r === 'own lease changed' || r.startsWith('lease '))) {
      this.#repairs.inc('', p.ops.length - p.failures.length);
    }
    if (p.kind !== 'full') return;
    if (p.desired !== undefined) this.#kernelEntries.set('desired', p.desired);
    if (p.observed !== undefined) this.#kernelEntries.set('present', p.observed);
  }

  /** Hooks for a lease source named `source`; its watch restarts are exposed at 0 from here on. */
  sourceObserver(source: string): SourceObserver {
    this.#watchRestarts.inc(source, 0);
    return {
      watchRestarted: () => this.#watchRestarts.inc(source),
      leaseRenewed: () => this.#renewals.inc(source),
    };
  }

  /**
   * Hooks for weftd's CNI server. Its verbs are exposed at 0 from here on, so a rate over them
   * exists before the first failure.
   */
  cniObserver(): NonNullable<CniServerOptions['observer']> {
    for (const verb of ['ADD', 'DEL', 'CHECK']) this.#cniErrors.inc(verb, 0);
    return {
      answered: (verb, ok) => {
        if (!ok) this.#cniErrors.inc(verb);
      },
    };
  }

  /** The egress controller's onPlaced: what it could not place, or undefined when it stops leading. */
  egressPlaced(unplaced: ReadonlyMap<string, number> | undefined): void {
    this.#unplaced.values.clear();
    for (const [reason, n] of unplaced ?? []) this.#unplaced.set(reason, n);
  }

  /** Network policy's verdictCounted: one verdict logged. */
  policyVerdict(verdict: string, policy: string, namespace: string): void {
    this.#verdicts.inc([verdict, policy, namespace]);
  }

  /** The logger's onRecord: counts warnings and errors that carry an error. */
  record(level: LogLevel, _msg: string, fields: Fields): void {
    if (level !== 'warn' && level !== 'error') return;
    const err = fields.err as { code?: unknown; name?: unknown } | undefined;
    if (!err || typeof err !== 'object') return;
    const kind = typeof err.code === 'string' ? err.code : typeof err.name === 'string' ? err.name : 'Error';
    this.#errors.inc(kind);
  }

  /** The text exposition format, with what is read from the kernel when scraped read first. */
  async scrape(): Promise<string> {
    for (const [direction, n] of Object.entries((await this.policyDrops?.()) ?? {})) this.#drops.set(direction, n);
    return this.text();
  }

  /** The text exposition format, of what was last read from the kernel (see {@link scrape}). */
  text(): string {
    this.#leases.set('', this.leaseCount());
    this.#ready.set('', this.ready() ? 1 : 0);
    const expiry = this.leaseExpiry();
    if (expiry !== undefined) this.#leaseExpiry.set('', expiry.getTime() / 1000);
    return [
      this.#leases, this.#ready, ...(expiry !== undefined ? [this.#leaseExpiry] : []), this.#kernelEntries, this.#runs, this.#duration,
      this.#repairs, this.#failures, this.#watchRestarts, this.#renewals, this.#cniErrors, this.#unplaced, this.#verdicts, this.#drops,
      this.#errors,
    ]
      .map((f) => f.render())
      .join('\n');
  }

  readonly contentType = 'text/plain; version=0.0.4; charset=utf-8';
}
