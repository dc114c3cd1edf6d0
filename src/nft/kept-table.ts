/**
 * A table of Weft's own kept in the kernel as its owner renders it, by difference, and repaired
 * when something else changes it: network policy's `inet weft-policy` and the Service proxy's
 * `inet weft-services` (the masquerade rules, replaced whole, keep theirs in masq/manager.ts).
 *
 * - Apply: the owner bumps a generation with every change and kicks; one render of the whole
 *   model then goes out in one `nft -f` transaction holding only what differs from the last one
 *   (ruleset.ts, tableUpdate), the whole table after a failure or a drift; a large table the kernel
 *   does not hold yet in two transactions side by side (cold-load.ts: each half of its data
 *   sets' elements is read by an nft of its own). Changes arriving during an apply are taken by
 *   the next one; a failed apply is retried with backoff. Callers can wait for an apply covering
 *   their change ({@link KeptTable.appliedThrough}).
 * - Repair: right after an apply that sent something, the table is listed (in the background, so
 *   the next change never waits for it) as `nft -j` prints it, read into a digest per chain, set
 *   and map (listing.ts: sets compared as sets, the clients the kernel records left out);
 *   {@link KeptTable.check} lists it again and, when they differ, puts back what differs alone
 *   (ruleset.ts, tableRepair), so the clients of ClientIP affinity's sets stay; the table is
 *   loaded whole when it is gone or the repair fails. The owner calls check from masq/runner.ts's
 *   runWatchedChecks, woken by nft/changes.ts. A large table's listing costs seconds of nft's
 *   CPU: with a duty cycle ({@link KeptTableOptions.listDutyCycle}) a listing waits until the
 *   ones before took at most that share of the time since, applies meanwhile being covered by one
 *   listing after the last. A check called before that listing stands waits for it; a listing
 *   finding the table gone is drift. Any other change made between an apply and its listing is
 *   taken as the apply's own.
 * - Chains an apply leaves unused are flushed by it and deleted by a transaction of their own
 *   once {@link KeptTableOptions.staleChainMs} has passed, as kube-proxy does: kernels before 6.2
 *   notice late that a verdict map's element removed with the chain no longer points at it.
 */
import { WeftError } from '../errors.ts';
import type { Logger } from '../log.ts';
import { mustRun, TrafficRulesError } from '../masq/runner.ts';
import type { Runner } from '../masq/runner.ts';
import { Backoff, sleep } from '../retry.ts';
import { shapeDrift, ShapeReader } from './listing.ts';
import type { ShapeDrift, TableShape } from './listing.ts';
import { listTables, loadSideBySide } from './cold-load.ts';
import { goneChains, staleChainsDeletion, tableRepair, tableScriptPieces, tableUpdate } from './ruleset.ts';
import type { NftRuleset } from './ruleset.ts';

export interface KeptTableOptions {
  /** `<family> <name>`, e.g. `inet weft-policy`. */
  table: string;
  /** The owner, as log lines name it (`network policy`). */
  what: string;
  log: Logger;
  run: Runner;
  /** The rules wanted now; undefined: no table. */
  render: () => NftRuleset | undefined;
  /** Whether the inputs are complete (the first apply waits for them). */
  ready: () => boolean;
  /**
   * Runs the table's own transactions (`nft -f`, one each, rejecting when nft refused it) so that
   * the owner's watch of the ruleset is not woken by them (nft/changes.ts' quiet); default: as they are.
   */
  quiet?: <T>(work: () => Promise<T>, commits?: number) => Promise<T>;
  /** How long a chain left unused stays, flushed, before its deletion; default kube-proxy's 1 s. */
  staleChainMs?: number;
  /**
   * Called after each apply that sent something, with what was applied before and now, how long it
   * took and whether it loaded the table whole (its counters then start again at 0); the apply
   * (and {@link KeptTable.appliedThrough}) ends when what it returns settles. It must not reject.
   */
  applied?: (
    before: NftRuleset | undefined, now: NftRuleset | undefined, timings: { renderMs: number; nftMs: number; whole: boolean },
  ) => void | Promise<void>;
  /**
   * The largest share of the time the table's listings may take (0.1: a listing of 2 s is
   * followed by 18 s without one); default 1, a listing whenever one is wanted. Listings shorter
   * than {@link CHEAP_LIST_MS} are never held back: a change then waits that little for its repair.
   */
  listDutyCycle?: number;
}

/**
 * A listing this short is never held back by the duty cycle: while listing costs so little, a
 * drift right after an apply is caught as before, not absorbed into a late listing.
 */
export const CHEAP_LIST_MS = 100;

/** kube-proxy's wait between flushing a chain left unused and deleting it. */
export const STALE_CHAIN_MS = 1000;

/** One nftables table kept as rendered, applied by difference and repaired. */
export class KeptTable {
  readonly #options: KeptTableOptions;
  /** What was last applied; undefined: no table, or unknown (the next apply loads it whole). */
  #applied: NftRuleset | undefined;
  #appliedKnown = false;
  /** The listing right after our last apply (undefined: no table). */
  #golden: TableShape | undefined;
  /** What the last check found drifted, put back by the next apply. */
  #repair: ShapeDrift | undefined;
  /** Chains flushed by an apply or a repair, to be deleted (performance.now() ms when flushed). */
  readonly #staleChains = new Map<string, number>();
  #staleTimer: NodeJS.Timeout | undefined;
  /** Applies sent, so a listing taken across one is not mistaken for drift. */
  #applies = 0;
  /** The apply {@link #golden} was listed after (-1: none yet, or being listed). */
  #goldenOf = -1;
  #goldenTask: Promise<void> | undefined;
  /** When the last listing ended and how long it took (performance.now() ms). */
  #listedAt = 0;
  #listMs = 0;
  /** An apply came while {@link #goldenTask} listed: list again when it ends. */
  #goldenAgain = false;
  /** Bumped by every change; an apply covers the generation it started with. */
  #generation = 0;
  #appliedGeneration = -1;
  #applyWaiters: { generation: number; resolve: () => void; reject: (e: unknown) => void }[] = [];
  #applying: Promise<void> | undefined;
  #again = false;
  #failure: unknown;
  readonly #stop = new AbortController();
  readonly #synced = Promise.withResolvers<void>();

  constructor(options: KeptTableOptions) {
    this.#options = options;
    this.#synced.promise.catch(() => {});
  }

  #quiet<T>(work: () => Promise<T>, commits = 1): Promise<T> {
    return this.#options.quiet ? this.#options.quiet(work, commits) : work();
  }

  /** Resolves once the first rules are applied; rejects with {@link fail}'s error. */
  synced(): Promise<void> {
    return this.#synced.promise;
  }

  /** The first rules will never come (a watch stopped for good, or the owner stopped). */
  fail(e: unknown): void {
    this.#synced.reject(e);
  }

  /** What the table holds as far as this process knows (undefined: no table, or unknown). */
  get applied(): NftRuleset | undefined {
    return this.#appliedKnown ? this.#applied : undefined;
  }

  /** Marks a change of the inputs; returns its generation. */
  bump(): number {
    return ++this.#generation;
  }

  /** Resolves once an apply covering `generation` is done; rejects with its failure. */
  appliedThrough(generation: number): Promise<void> {
    if (this.#appliedGeneration >= generation) return Promise.resolve();
    const w = Promise.withResolvers<void>();
    this.#applyWaiters.push({ generation, resolve: w.resolve, reject: w.reject });
    this.kick();
    return w.promise;
  }

  /** Starts an apply unless one runs (which then runs once more). */
  kick(): void {
    if (!this.#options.ready() || this.#stop.signal.aborted) return;
    if (this.#applying) {
      this.#again = true;
      return;
    }
    this.#applying = this.#applyLoop().finally(() => {
      this.#applying = undefined;
      // A kick between the loop's last look at #again and here (a waiter of that apply bumping
      // at once) would be lost otherwise.
      if (this.#again) this.kick();
    });
  }

  /** Ends applying (the table stays) once the apply and listing under way are done. */
  async stop(): Promise<void> {
    this.#stop.abort();
    clearTimeout(this.#staleTimer);
    this.#synced.reject(new WeftError('ESTOPPED', `${this.#options.what} stopped`));
    await this.#applying;
    while (this.#goldenTask) await this.#goldenTask;
  }

  /**
   * Compares the table with the listing of our last apply; puts back what differs (the whole
   * table when it is gone, or should be).
   * Called during an apply, or before the listing of the last one stands, it first waits for
   * them: the change it was called for may have come after that listing was taken.
   */
  async check(): Promise<void> {
    // Each may start the other as it ends (a queued apply, a listing to take again); once stopped, neither starts.
    while (this.#applying || this.#goldenTask) await (this.#applying ?? this.#goldenTask);
    if (!this.#appliedKnown || this.#applying || this.#goldenOf !== this.#applies) return;
    const applies = this.#applies;
    if (!(await this.#listGap())) return;
    if (applies !== this.#applies) return;
    const listing = await this.#list();
    // An apply since (or still listing its own result) makes this listing no evidence of drift.
    if (this.#applying || !this.#appliedKnown || applies !== this.#applies) return;
    if (listing === undefined && this.#golden === undefined) return;
    if (listing === undefined || this.#golden === undefined) {
      this.#drifted(listing === undefined ? 'missing' : 'present, wanted absent');
      return;
    }
    const drift = shapeDrift(this.#golden, listing);
    if (drift.changed.length > 0 || drift.extra.length > 0) this.#drifted('altered', drift);
  }

  /** Puts back what `drift` names; the whole table without one, or when it names more than chains, sets and maps. */
  #drifted(state: string, drift?: ShapeDrift): void {
    const { what, table, log } = this.#options;
    const parts = drift && [...drift.changed, ...drift.extra.map((k) => `${k} (foreign)`)];
    const alone = drift !== undefined && [...drift.changed, ...drift.extra].every((k) => /^(chain|set|map) /.test(k));
    log.warn(`${what}: table ${table} was changed by something else; ${alone ? 'putting back what changed' : 'loading it again'}`, {
      state, ...(parts ? { objects: parts.slice(0, 10), count: parts.length } : {}),
    });
    if (alone) this.#repair = drift;
    else this.#appliedKnown = false;
    this.bump();
    this.kick();
  }

  async #applyLoop(): Promise<void> {
    const backoff = new Backoff(500, 10_000);
    do {
      this.#again = false;
      const generation = this.#generation;
      try {
        const loaded = await this.#apply();
        backoff.reset();
        this.#failure = undefined;
        this.#appliedGeneration = generation;
        this.#synced.resolve();
        const waiting = this.#applyWaiters;
        this.#applyWaiters = waiting.filter((w) => w.generation > generation);
        for (const w of waiting) if (w.generation <= generation) w.resolve();
        if (loaded) this.#takeGolden();
      } catch (e) {
        this.#appliedKnown = false;
        if (String(e) !== String(this.#failure)) {
          this.#options.log.error(`${this.#options.what}: failed to apply the rules; trying again`, { err: e });
        }
        this.#failure = e;
        for (const w of this.#applyWaiters.splice(0)) w.reject(e);
        this.#again = true;
        await sleep(backoff.next(), this.#stop.signal).catch(() => {});
      }
    } while (this.#again && !this.#stop.signal.aborted);
  }

  /**
   * Lists what the repair compares with, in the background: a large table takes hundreds of
   * milliseconds (seconds, at 10,000 Services) to list, and the next change must not wait for it.
   * One listing runs at a time: one that an apply overtook is dropped and, once it ends, the
   * table listed again for the latest apply. Until one stands, the repair compares nothing.
   */
  #takeGolden(): void {
    this.#goldenOf = -1;
    if (!this.#applied) {
      this.#golden = undefined;
      this.#goldenOf = this.#applies;
      return;
    }
    if (this.#goldenTask) {
      this.#goldenAgain = true;
      return;
    }
    const applies = this.#applies;
    const started = performance.now();
    this.#goldenTask = this.#listGap().then((go) => (go && applies === this.#applies ? this.#list() : null)).then((listing) => {
      if (listing === null || applies !== this.#applies) return;
      // Our apply left a table: something deleted it since, which this listing must not take as ours.
      if (listing === undefined) return this.#drifted('missing');
      this.#golden = listing;
      this.#goldenOf = applies;
      this.#options.log.debug(`${this.#options.what}: listed the applied rules for the repair`, {
        list_ms: Math.round(performance.now() - started),
        bytes: listing.bytes,
      });
    }, (e: unknown) => {
      if (applies !== this.#applies) return;
      // Without a listing the repair cannot tell drift until the next change, which then loads
      // the table whole (and lists it again); reloading now could loop while nft cannot list.
      const why = 'failed to list the applied rules; the repair is blind until the next change';
      this.#options.log.error(`${this.#options.what}: ${why}`, { err: e });
      this.#appliedKnown = false;
    }).finally(() => {
      this.#goldenTask = undefined;
      if (!this.#goldenAgain || this.#stop.signal.aborted) return;
      this.#goldenAgain = false;
      // An apply under way lists when it is done: a listing now could catch its transaction half sent.
      if (this.#goldenOf === -1 && this.#appliedKnown && !this.#applying) this.#takeGolden();
    });
  }

  /**
   * Renders and sends what differs from the loaded rules (all of it when unknown); returns
   * whether anything was sent.
   */
  async #apply(): Promise<boolean> {
    const { table, run } = this.#options;
    const started = performance.now();
    // Nothing known loaded: a whole load follows, perhaps side by side (cold-load.ts), which asks first whether the table is there.
    const tables = this.#appliedKnown ? undefined : listTables(run, table);
    const next = this.#options.render();
    const deleted = this.#appliedKnown && await this.#deleteStaleChains(next);
    const repair = this.#appliedKnown ? this.#repairScript() : '';
    const changes = this.#appliedKnown ? tableUpdate(table, this.#applied, next, { deferChainDeletion: true }) : undefined;
    const update = changes === undefined ? undefined : repair + changes;
    if (update === '') {
      // The same rules: the next render's delta (see ruleset.ts) is from this one.
      this.#applied = next;
      return deleted;
    }
    // A whole load is made as nft reads it (see tableScriptPieces).
    let bytes = update?.length ?? 0;
    function* counted(pieces: Iterable<string>) {
      for (const piece of pieces) {
        bytes += piece.length;
        yield piece;
      }
    }
    const before = this.#applied;
    this.#applies++;
    const rendered = performance.now();
    const load = (script: string | Iterable<string>) =>
      mustRun(run, `apply nftables table ${table}`, ['nft', '-f', '-'], typeof script === 'string' ? script : counted(script));
    const sideBySide = tables !== undefined && (await loadSideBySide(this.#options, tables, next, load, (work, n) => this.#quiet(work, n)));
    if (!sideBySide) {
      // After a failed part, at once and not at the next retry: one transaction deleting what a part made.
      bytes = update?.length ?? 0;
      await this.#quiet(() => load(update ?? tableScriptPieces(table, next)));
    }
    const nftMs = performance.now() - rendered;
    if (update === undefined) {
      this.#staleChains.clear();
      this.#repair = undefined;
    } else this.#flushed(goneChains(this.#applied, next));
    this.#options.log.debug(`${this.#options.what}: rules applied`, {
      render_ms: Math.round(rendered - started), nft_ms: Math.round(nftMs), bytes, whole: update === undefined, repair: repair !== '',
      transactions: sideBySide ? 2 : 1,
    });
    this.#applied = next;
    this.#appliedKnown = true;
    // A whole script (tableUpdate's too, to or from no table) deletes the table first: its counters start again.
    const whole = update === undefined || !before || !next;
    await this.#options.applied?.(before, next, { renderMs: rendered - started, nftMs, whole });
    return true;
  }

  /** Waits until a listing keeps to the duty cycle; false when stopped meanwhile. */
  async #listGap(): Promise<boolean> {
    const share = this.#options.listDutyCycle ?? 1;
    const wait = this.#listMs < CHEAP_LIST_MS ? 0 : this.#listedAt + this.#listMs * (1 / share - 1) - performance.now();
    if (wait > 0) await sleep(wait, this.#stop.signal).catch(() => {});
    return !this.#stop.signal.aborted;
  }

  /**
   * The repair's lines for what the last check found drifted ('' when nothing): the parts of the
   * applied rules put back, foreign chains flushed (and deleted later), foreign sets deleted.
   */
  #repairScript(): string {
    const drift = this.#repair;
    this.#repair = undefined;
    const applied = this.#applied;
    if (!drift || !applied) return '';
    const names = (keys: string[], kinds: RegExp) => keys.filter((k) => kinds.test(k)).map((k) => k.slice(k.indexOf(' ') + 1));
    const chains = names(drift.changed, /^chain /);
    // Chains of ours that are not in the applied rules were flushed to be deleted (stale): so they stay.
    const foreign = [...chains.filter((c) => !applied.chains.has(c)), ...names(drift.extra, /^chain /)];
    this.#flushed(foreign);
    return tableRepair(this.#options.table, applied, {
      chains: chains.filter((c) => applied.chains.has(c)), sets: names(drift.changed, /^(set|map) /),
      flushChains: foreign, deleteSets: drift.extra.filter((k) => /^(set|map) /.test(k)),
    });
  }

  /** Takes `chains` as flushed now, and has them deleted once they have been for {@link KeptTableOptions.staleChainMs}. */
  #flushed(chains: readonly string[]): void {
    if (chains.length === 0) return;
    const now = performance.now();
    for (const name of chains) this.#staleChains.set(name, now);
    clearTimeout(this.#staleTimer);
    this.#staleTimer = setTimeout(() => this.kick(), (this.#options.staleChainMs ?? STALE_CHAIN_MS) + 1).unref();
  }

  /**
   * Deletes the chains flushed long enough ago that `next` does not bring back, in a transaction
   * of their own; returns whether one was sent. A failure is logged, and the chains (empty and
   * unused) left to the next whole load.
   */
  async #deleteStaleChains(next: NftRuleset | undefined): Promise<boolean> {
    const before = performance.now() - (this.#options.staleChainMs ?? STALE_CHAIN_MS);
    const due: string[] = [];
    for (const [name, at] of this.#staleChains) {
      if (next?.chains.has(name)) this.#staleChains.delete(name);
      else if (at <= before) due.push(name);
    }
    if (due.length === 0) return false;
    for (const name of due) this.#staleChains.delete(name);
    this.#applies++;
    const table = this.#options.table;
    try {
      // Thrown inside quiet(): a refused transaction committed nothing, which the watcher must know.
      const script = staleChainsDeletion(table, due);
      await this.#quiet(() => mustRun(this.#options.run, `delete unused chains of ${table}`, ['nft', '-f', '-'], script));
      this.#options.log.debug(`${this.#options.what}: deleted chains no rule uses any more`, { count: due.length });
    } catch (e) {
      this.#options.log.error(`${this.#options.what}: failed to delete chains no rule uses any more; they stay, empty`, {
        chains: due.slice(0, 10), count: due.length, err: e,
      });
    }
    return true;
  }

  /**
   * What `nft -j list table <table>` prints, read into a digest per object as it comes (a listing
   * at 10,000 Services runs to tens of megabytes, not worth holding), or undefined when the table
   * does not exist.
   */
  async #list(): Promise<TableShape | undefined> {
    const argv = ['nft', '-j', 'list', 'table', ...this.#options.table.split(' ')];
    const started = performance.now();
    const reader = new ShapeReader();
    const r = await this.#options.run(argv, undefined, (text) => reader.take(text)).finally(() => {
      this.#listedAt = performance.now();
      this.#listMs = this.#listedAt - started;
    });
    if (r.code === 0) {
      reader.take(r.stdout);
      return reader.end();
    }
    if (/No such file or directory/i.test(r.stderr)) return undefined;
    throw new TrafficRulesError(`list nftables table ${this.#options.table}`, argv, r);
  }
}
