/**
 * The running data plane of one node: the LeaseTable's remote leases, planned one by one by the
 * backend into the desired state, kept in the kernel by the reconciler. A lease event re-plans
 * only its peer (the reconciler's fast path); a device that disappears is set up again and
 * everything re-planned, since its index changed.
 *
 * Nothing touches the kernel before the lease source has delivered its first listing: the first
 * full pass removes entries of ours that no lease wants (nodes that left while we were down,
 * flannel #2554), which must not happen against an empty table. A peer's warnings (wrong backend
 * type, unusable data) are logged once per distinct message, not on every pass. A known peer
 * whose new lease plans to nothing (a VTEP MAC that is no MAC, a backend type this node does not
 * run) keeps the entries of its last good lease until it is valid again or removed: garbage from
 * a peer must not cut it off.
 */
import { release } from 'node:os';
import type { Lease } from '../lease/lease.ts';
import type { LeaseEvent, LeaseTable } from '../lease/table.ts';
import type { Logger } from '../log.ts';
import type { NetlinkHandle } from '../netlink/handle.ts';
import { DesiredState } from '../reconcile/desired.ts';
import { Reconciler } from '../reconcile/loop.ts';
import { failureCounts } from '../reconcile/reconcile.ts';
import type { MissEvent, PassInfo } from '../reconcile/loop.ts';
import type { KernelState } from '../reconcile/state.ts';
import type { Backend } from './backend.ts';
import type { SideEntry } from './plan.ts';
import { ensureNeighbourRoom, NEIGH_HEADROOM } from './neigh-table.ts';
import { ownBlackhole } from './plan.ts';

export interface NetworkOptions {
  handle: NetlinkHandle;
  backend: Backend;
  table: LeaseTable;
  own: Lease;
  log: Logger;
  /** Milliseconds between full passes (--resync-period). */
  resyncPeriodMs: number;
  /** --ip-blackhole-route: keep `blackhole <own subnet>` below cni0's route (plan.ts ownBlackhole). */
  blackhole?: boolean;
  /**
   * Write gatewayed routes through nexthop objects when the kernel has them (default); false
   * keeps their classic form, and removes nexthop objects of ours left from a run that used them.
   */
  nexthops?: boolean;
  /** vxlan on-demand mode: answers the devices' misses (on-demand.ts). */
  onMiss?: (miss: MissEvent) => void;
  onPass?: (info: PassInfo) => void;
}

/** The desired-state owner of the own subnet's blackhole routes; no peer can be named so. */
const OWN_BLACKHOLE = ' own subnet blackhole';
/** The owner of what the backend wants whatever the leases (Backend.base). */
const BACKEND_BASE = ' backend';

export class Network {
  readonly #options: NetworkOptions;
  readonly #desired = new DesiredState();
  readonly #reconciler: Reconciler;
  readonly #warned = new Map<string, string>();
  /** Each peer's last lease that planned without a warning. */
  readonly #lastGood = new Map<string, Lease>();
  /** What each lease wants outside rtnetlink (Plan.side: wireguard peers, extension commands), for the backend's side kinds. */
  readonly #side = new Map<string, readonly SideEntry[]>();
  #own: Lease;
  /** Lease batches and device repairs, one at a time and in order. */
  #work: Promise<void> = Promise.resolve();
  #unsubscribe: (() => void) | undefined;
  /** The periodic pass's period last logged. */
  #periodSaid: number | undefined;
  /** Peers the neighbour table was last sized for (neigh-table.ts), plus headroom. */
  #neighRoom = 0;

  constructor(options: NetworkOptions) {
    this.#options = options;
    this.#own = options.own;
    this.#reconciler = new Reconciler({
      handle: options.handle,
      desired: this.#desired,
      ownership: () => options.backend.ownership(),
      resyncPeriodMs: options.resyncPeriodMs,
      onPass: (p) => {
        if (p.kind === 'full' && p.ops.length > 0) {
          options.log.info('reconciled', {
            reasons: p.reasons.join(', '),
            ops: p.ops.length,
            failures: p.failures.length,
            ms: Math.round(p.durationMs),
          });
        }
        const side = p.side;
        if (side && side.ops.length > 0) {
          options.log.info('reconciled state outside rtnetlink', { reasons: p.reasons.join(', '), ops: side.ops });
        }
        if (side && side.failures.length > 0) {
          options.log.warn('changes outside rtnetlink failed; a later pass retries them', {
            failures: side.failures.length,
            first: side.failures[0],
          });
        }
        // A fast pass that failed is followed by a full pass (or a rebuild), which says what stays refused.
        if (p.nextResyncMs !== undefined) this.#periodChanged(p.nextResyncMs, p.durationMs);
        if (p.kind === 'full' && p.failures.length > 0) {
          options.log.warn('the kernel refused operations of a pass; a later pass retries them', {
            failures: p.failures.length,
            counts: failureCounts(p.failures),
            first: p.failures[0],
          });
        }
        options.onPass?.(p);
      },
      onError: (e) => options.log.error('reconcile pass failed; the next trigger retries', { err: e }),
      onDeviceGone: (why) => this.#queue(() => this.#repair(why)),
      ...(options.backend.sides ? { sides: options.backend.sides(() => this.#side.values()) } : {}),
      ...(options.onMiss ? { onMiss: options.onMiss } : {}),
      onDeviceChanged: (link) => {
        const why = options.backend.drifted(link);
        if (why) this.#queue(() => this.#repair(`device ${link.name} was changed by someone else (${why})`));
      },
    });
  }

  /**
   * Waits for the lease table's first listing, plans every lease, then starts the reconciler and
   * resolves after its first full pass (the point at which the node is ready).
   */
  async start(signal: AbortSignal): Promise<void> {
    const table = this.#options.table;
    if (!table.synced) {
      this.#options.log.info('waiting for the lease source to list the leases before touching the kernel');
      await new Promise<void>((resolve, reject) => {
        const off = table.subscribe(() => {
          if (table.synced) {
            off();
            resolve();
          }
        });
        signal.addEventListener('abort', () => {
          off();
          reject(signal.reason as Error);
        }, { once: true });
      });
    }
    if (this.#options.nexthops ?? true) await this.#detectNexthops();
    this.#unsubscribe = table.subscribe((batch) => this.#queue(() => this.#onBatch(batch)));
    await this.#serial(() => this.#planAll());
    await this.#sizeNeighbourTable();
    await this.#reconciler.start(signal);
  }

  /** Says when the periodic pass's period moved to half or twice what was last said, or more. */
  #periodChanged(ms: number, passMs: number): void {
    const said = this.#periodSaid ?? this.#options.resyncPeriodMs;
    if (ms < 2 * said && 2 * ms > said) return;
    this.#periodSaid = ms;
    this.#options.log.info('periodic full passes adapted to what one costs', {
      everySeconds: Math.round(ms / 1000),
      lastPassMs: Math.round(passMs),
      configuredSeconds: this.#options.resyncPeriodMs / 1000,
    });
  }

  /** Nexthop objects where the kernel lists them (Linux 5.3+); ours found there are adopted. */
  async #detectNexthops(): Promise<void> {
    let existing;
    try {
      existing = await this.#options.handle.nexthopList();
    } catch (e) {
      this.#options.log.info(
        'this kernel has no nexthop objects (Linux 5.3+): routes keep a gateway each, which the kernel adds in time growing with the table',
        { err: e },
      );
      return;
    }
    const protocol = this.#options.backend.ownership().protocol;
    this.#desired.useNexthops(existing, protocol);
    this.#options.log.info('routes go through nexthop objects', { adopted: existing.filter((n) => n.protocol === protocol).length });
  }

  stop(): void {
    this.#unsubscribe?.();
    this.#reconciler.stop();
  }

  /** Our own lease changed (re-acquired with another subnet): configure and re-plan everything. */
  setOwn(own: Lease): Promise<void> {
    return this.#serial(async () => {
      this.#own = own;
      await this.#options.backend.configure(own);
      await this.#planAll();
      this.#reconciler.trigger('own lease changed');
    });
  }

  /** What the node wants in the kernel, in all and per peer (weftd's admin socket). */
  get desired(): { all(): KernelState; of(peer: string): KernelState | undefined } {
    return this.#desired;
  }

  /** Peers the backend does not program, with its warnings. */
  get skipped(): ReadonlyMap<string, string> {
    return this.#warned;
  }

  /** Entries repaired after kernel events so far. */
  get repairs(): number {
    return this.#reconciler.repairs;
  }

  /** Resolves when queued lease batches and the passes they caused are done. */
  async idle(): Promise<void> {
    await this.#work;
    await this.#reconciler.idle();
  }

  #serial(fn: () => Promise<void>): Promise<void> {
    const run = this.#work.then(fn);
    this.#work = run.catch((e: unknown) => this.#options.log.error('data plane update failed', { err: e }));
    return run;
  }

  /** {@link #serial} for callers that do not wait: the failure is logged there. */
  #queue(fn: () => Promise<void>): void {
    this.#serial(fn).catch(() => {});
  }

  /** The kernel entries `lease` wants; its side entries go to {@link #side}, with whether they changed. */
  async #plan(lease: Lease): Promise<{ state: KernelState; sideChanged: boolean }> {
    let { state, warnings, side } = await this.#options.backend.plan(this.#own, lease);
    const last = this.#lastGood.get(lease.peer);
    if (warnings.length === 0) {
      this.#lastGood.set(lease.peer, lease);
    } else if (last && last !== lease) {
      const kept = await this.#options.backend.plan(this.#own, last);
      if (kept.warnings.length === 0) {
        ({ state, side } = kept);
        warnings = warnings.map((w) => `${w}; keeping its last good entries`);
      }
    }
    const sideChanged = this.#setSide(lease.peer, side);
    const text = warnings.join('; ');
    if (text === '') {
      this.#warned.delete(lease.peer);
    } else if (this.#warned.get(lease.peer) !== text) {
      this.#warned.set(lease.peer, text);
      for (const w of warnings) this.#options.log.warn(w, { peer: lease.peer });
    }
    return { state, sideChanged };
  }

  /** Sets the side entries `owner` wants (none: undefined); whether that changed them. */
  #setSide(owner: string, side: readonly SideEntry[] | undefined): boolean {
    const before = this.#side.get(owner);
    if (side && side.length > 0) this.#side.set(owner, side);
    else this.#side.delete(owner);
    return JSON.stringify(before ?? []) !== JSON.stringify(side ?? []);
  }

  async #planAll(): Promise<void> {
    this.#desired.put(OWN_BLACKHOLE, this.#options.blackhole ? ownBlackhole(this.#own) : undefined);
    this.#desired.put(BACKEND_BASE, this.#options.backend.base?.());
    const leases = this.#options.table.leases();
    const peers = new Set(leases.map((l) => l.peer));
    for (const l of leases) this.#desired.put(l.peer, (await this.#plan(l)).state);
    for (const peer of this.#warned.keys()) if (!peers.has(peer)) this.#warned.delete(peer);
    for (const peer of this.#lastGood.keys()) if (!peers.has(peer)) this.#lastGood.delete(peer);
    for (const peer of this.#side.keys()) if (!peers.has(peer)) this.#side.delete(peer);
  }

  /** Room in the neighbour table for the peers' entries, checked again as they grow by a headroom's worth. */
  async #sizeNeighbourTable(): Promise<void> {
    if (this.#options.table.size < this.#neighRoom) return;
    this.#neighRoom = this.#options.table.size + NEIGH_HEADROOM;
    const perFamily = { 4: 0, 6: 0 };
    for (const n of this.#desired.all().neighs) perFamily[n.family]++;
    for (const family of [4, 6] as const) {
      if (perFamily[family] > 0) await ensureNeighbourRoom(family, perFamily[family], release(), this.#options.log);
    }
  }

  async #onBatch(batch: readonly LeaseEvent[]): Promise<void> {
    for (const e of batch) {
      const why = `lease ${e.lease.peer} ${e.type === 'removed' ? 'removed' : e.previous ? 'changed' : 'added'}`;
      if (e.type === 'removed') {
        this.#warned.delete(e.lease.peer);
        this.#lastGood.delete(e.lease.peer);
        this.#reconciler.update(e.lease.peer, undefined, why);
        // Side entries have no fast path: a full pass diffs them (such a node has few other entries).
        if (this.#setSide(e.lease.peer, undefined)) this.#reconciler.trigger(why);
      } else {
        const { state, sideChanged } = await this.#plan(e.lease);
        this.#reconciler.update(e.lease.peer, state, why);
        if (sideChanged) this.#reconciler.trigger(why);
      }
    }
    await this.#sizeNeighbourTable();
  }

  async #repair(why: string): Promise<void> {
    this.#options.log.warn(`${why}; setting it up again`);
    await this.#options.backend.repair(this.#own);
    await this.#planAll();
    this.#reconciler.resume('device recreated');
  }
}
