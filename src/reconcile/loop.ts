/**
 * The reconcile loop, one pass at a time. Two kinds of pass:
 *
 * - a full pass (observe → diff → apply) on start-up, on a receive overrun, when a device of ours
 *   goes, on a foreign route under one of our keys, on {@link Reconciler.trigger}, and on the
 *   periodic resync. Triggers are coalesced: any number arriving during a pass cause exactly one
 *   more pass after it.
 * - a fast pass for a change of one owner's desired entries ({@link Reconciler.update}, i.e. a
 *   lease event) and for the repair of one deleted entry of ours seen in a kernel event: only the
 *   operations for those entries, no dump. A full pass supersedes fast work queued before it.
 *
 * The fast path is what keeps a lease event's way into the kernel in the low milliseconds with
 * thousands of peers; the full pass is what keeps the fast path honest.
 *
 * When a device of ours is deleted, every entry on it is planned with its old interface index:
 * a pass then would be thousands of failing operations (three per peer). So the loop holds all
 * passes from that event on, asks the backend to rebuild (onDeviceGone, again at every periodic
 * resync until it succeeds), and runs one full pass when told the device is back ({@link
 * Reconciler.resume}). Work queued meanwhile is kept and folded into that pass.
 *
 * State outside rtnetlink that a backend keeps (wireguard peers, extension commands: side.ts) is
 * part of every full pass, and polled, since no kernel event reports its drift.
 *
 * The periodic pass is a safety net (kernel events cover drift), and at 50,000 leases one costs
 * ~1 s of CPU. So its period adapts: at least --resync-period, and at least {@link
 * RESYNC_COST_FACTOR} times the last full pass took, so the net never costs more than ~1% of a
 * core ({@link resyncPeriodMs}). Any full pass restarts the countdown.
 */
import type { NetlinkHandle } from '../netlink/handle.ts';
import type { Monitor, MonitorGroup, NetlinkEvent } from '../netlink/monitor.ts';
import type { Operation } from '../netlink/specs.ts';
import { fdbKey, IFF_LOWER_UP, neighKey, nexthopEqual, routeEqual, routeKey } from '../netlink/records.ts';
import type { Link } from '../netlink/records.ts';
import { replaceOps } from './desired.ts';
import type { DesiredState } from './desired.ts';
import { apply, reconcileOnce } from './reconcile.ts';
import type { PassReport } from './reconcile.ts';
import { reconcileSides } from './side.ts';
import type { SideKind } from './side.ts';
import type { KernelState, Ownership } from './state.ts';

/**
 * The monitor socket's receive buffer. The kernel queues a notification for every entry a batch
 * writes (filtered only once read), and the system default (~200 KB) overflowed during the
 * start-up pass at 5,000 leases: each overrun cost a needless full pass right after it.
 */
export const MONITOR_RCVBUF = 8 << 20;

/** A full pass may take at most 1/RESYNC_COST_FACTOR of the time between periodic passes. */
export const RESYNC_COST_FACTOR = 100;
/** The adapted period never exceeds this (nor goes below the configured one). */
export const RESYNC_PERIOD_MAX_MS = 15 * 60_000;

/**
 * Milliseconds until the next periodic pass: the configured period, stretched to
 * {@link RESYNC_COST_FACTOR} times the last full pass's duration, capped at {@link
 * RESYNC_PERIOD_MAX_MS} (or the configured period, if that is longer).
 */
export function resyncPeriodMs(configuredMs: number, lastFullPassMs: number): number {
  return Math.max(configuredMs, Math.min(RESYNC_PERIOD_MAX_MS, Math.ceil(RESYNC_COST_FACTOR * lastFullPassMs)));
}

export interface PassInfo extends PassReport {
  /** Why this pass ran: the triggers coalesced into it. */
  reasons: string[];
  durationMs: number;
  /** `full`: dump, diff, apply; `fast`: only the operations of changed or repaired entries. */
  kind: 'full' | 'fast';
  /** Full passes: milliseconds until the next periodic one ({@link resyncPeriodMs}). */
  nextResyncMs?: number;
}

export interface ReconcilerOptions {
  handle: NetlinkHandle;
  /** The desired state; full passes read all of it, {@link Reconciler.update} changes it. */
  desired: DesiredState;
  /** Current ownership (device indexes change when a device is recreated). */
  ownership: () => Ownership;
  /** Milliseconds between periodic passes, at least (see {@link resyncPeriodMs}). */
  resyncPeriodMs: number;
  /** Called after every pass, for logs and metrics. */
  onPass?: (info: PassInfo) => void;
  /** Called when a pass throws (e.g. the dump failed); the next trigger tries again. */
  onError?: (e: unknown) => void;
  /**
   * Called when a device of ours disappears, or a fast pass finds it gone (ENODEV), and at each
   * periodic resync until {@link Reconciler.resume}: the backend must recreate it, then call
   * resume. `why` says what was seen.
   */
  onDeviceGone?: (why: string) => void;
  /** Called when a device of ours changed (its MAC, MTU or state may have been altered). */
  onDeviceChanged?: (link: Link) => void;
  /** Called with the L2/L3 misses a device of ours reports (vxlan on-demand mode). */
  onMiss?: (miss: MissEvent) => void;
  /** State outside rtnetlink (wireguard peers): part of every full pass, and polled. */
  sides?: readonly SideKind[];
}

/** A vxlan device asking for a neighbour's MAC (l3miss) or a MAC's remote (l2miss). */
export type MissEvent = Extract<NetlinkEvent, { kind: 'l3miss' | 'l2miss' }>;

export class Reconciler {
  readonly #opts: ReconcilerOptions;
  #reasons: string[] = [];
  #fastOps: Operation[] = [];
  #fastReasons: string[] = [];
  /** Links not ours last seen up with carrier, by index (see #onOtherLink). */
  readonly #linksUp = new Set<number>();
  #running: Promise<void> | undefined;
  #busy = false;
  #monitor: Monitor | undefined;
  #timer: NodeJS.Timeout | undefined;
  #polls: NodeJS.Timeout[] = [];
  /** The current period between periodic passes. */
  #period = 0;
  #stopped = false;
  /** Entries of ours put back after a kernel event said someone deleted or changed them. */
  #repairs = 0;
  /** Why a device of ours is gone (deleted and not rebuilt yet): passes are held meanwhile. */
  #gone: string | undefined;

  constructor(opts: ReconcilerOptions) {
    this.#opts = opts;
  }

  /**
   * Subscribes to kernel events, then runs the first pass (which also removes stale entries of
   * ours left from before a restart) and resolves when it is done.
   */
  async start(signal?: AbortSignal): Promise<void> {
    // Only deleted FDB entries matter here (#onEvents), and every one written would echo back.
    const groups: MonitorGroup[] = ['link', 'route', 'neigh', ...(this.#opts.desired.usesNexthops ? ['nexthop' as const] : [])];
    this.#monitor = await this.#opts.handle.monitor(groups, (events) => this.#onEvents(events), { fdbAdds: false, rcvbuf: MONITOR_RCVBUF });
    signal?.addEventListener('abort', () => this.stop(), { once: true });
    this.#schedule(this.#opts.resyncPeriodMs);
    for (const side of this.#opts.sides ?? []) {
      const poll = setInterval(() => this.trigger(`poll of ${side.name}`), side.pollMs);
      poll.unref();
      this.#polls.push(poll);
    }
    this.trigger('start-up');
    await this.idle();
  }

  stop(): void {
    this.#stopped = true;
    this.#monitor?.stop();
    this.#monitor = undefined;
    clearTimeout(this.#timer);
    for (const poll of this.#polls.splice(0)) clearInterval(poll);
  }

  /** The next periodic pass in `ms` (replacing the one scheduled). */
  #schedule(ms: number): void {
    clearTimeout(this.#timer);
    if (this.#stopped) return;
    this.#period = ms;
    this.#timer = setTimeout(() => {
      if (this.#gone !== undefined) this.#opts.onDeviceGone?.(this.#gone);
      this.trigger('periodic resync');
      this.#schedule(this.#period);
    }, ms);
    this.#timer.unref();
  }

  /** Asks for a full pass; coalesced with any other pending request. */
  trigger(reason: string): void {
    if (this.#stopped) return;
    this.#reasons.push(reason);
    this.#kick();
  }

  /** Holds every pass until {@link resume}, and asks for the device to be rebuilt. */
  #deviceGone(why: string): void {
    if (this.#gone !== undefined) return;
    this.#gone = why;
    this.#opts.onDeviceGone?.(why);
  }

  /** Ends the hold of a deleted device (rebuilt now, and re-planned) with a full pass. */
  resume(reason: string): void {
    this.#gone = undefined;
    this.trigger(reason);
  }

  /** Sets what `owner` wants (undefined: nothing) and applies the change in a fast pass. */
  update(owner: string, state: KernelState | undefined, reason: string): void {
    this.#fast(this.#opts.desired.set(owner, state), reason);
  }

  #fast(ops: Operation[], reason: string): void {
    if (this.#stopped || ops.length === 0) return;
    this.#fastOps.push(...ops);
    this.#fastReasons.push(reason);
    this.#kick();
  }

  #kick(): void {
    if (!this.#busy && this.#gone === undefined) {
      this.#busy = true;
      this.#running = this.#drain();
    }
  }

  /** How many entries were repaired after kernel events (for weftd's admin socket). */
  get repairs(): number {
    return this.#repairs;
  }

  /** Resolves once no pass is running or pending. */
  async idle(): Promise<void> {
    while (this.#busy) await this.#running;
  }

  async #drain(): Promise<void> {
    while ((this.#reasons.length > 0 || this.#fastOps.length > 0) && !this.#stopped && this.#gone === undefined) {
      const start = performance.now();
      const full = this.#reasons.length > 0;
      let reasons: string[];
      if (full) {
        // Reads the whole desired state, so fast work queued until now is covered by it.
        reasons = [...this.#reasons, ...this.#fastReasons];
        this.#reasons = [];
        this.#fastOps = [];
        this.#fastReasons = [];
      } else {
        reasons = this.#fastReasons;
        this.#fastReasons = [];
      }
      try {
        let report: PassReport;
        if (full) {
          report = await reconcileOnce(this.#opts.handle, this.#opts.desired.wanted(), this.#opts.ownership());
          if (this.#opts.sides?.length) report.side = await reconcileSides(this.#opts.sides);
        } else {
          const ops = this.#fastOps;
          this.#fastOps = [];
          report = { ops, failures: await apply(this.#opts.handle, ops) };
        }
        const durationMs = performance.now() - start;
        if (full) this.#schedule(resyncPeriodMs(this.#opts.resyncPeriodMs, durationMs));
        this.#opts.onPass?.({
          ...report,
          reasons,
          durationMs,
          kind: full ? 'full' : 'fast',
          ...(full ? { nextResyncMs: this.#period } : {}),
        });
        // A device being deleted refuses repairs before its deletion is reported: hold then too.
        if (!full && report.failures.some((f) => f.errno === 'ENODEV')) this.#deviceGone('a repair found a device of ours gone (ENODEV)');
        if (!full && report.failures.length > 0) this.trigger('operations of a fast pass failed');
      } catch (e) {
        try {
          this.#opts.onError?.(e);
        } catch {
          // The reporter failed too; there is nobody left to tell. The loop must go on.
        }
      }
    }
    // Cleared in the same synchronous step as the last empty check: a trigger arriving any later
    // starts a new drain, none can fall between the two.
    this.#busy = false;
  }

  /**
   * A link not ours came up, or got its carrier back: the kernel dropped the IPv4 routes through
   * it when it went down, and the nexthop objects on it (with their routes) when it lost carrier,
   * all without telling anyone; so routes we want through it are put back by a full pass.
   */
  #onOtherLink(link: Link, deleted: boolean): void {
    const wasUp = this.#linksUp.has(link.index);
    if (deleted || !link.up || (link.flags & IFF_LOWER_UP) === 0) {
      this.#linksUp.delete(link.index);
      return;
    }
    this.#linksUp.add(link.index);
    if (!wasUp && this.#opts.desired.routesVia(link.index)) this.trigger(`link ${link.name} came up`);
  }

  /** Which kernel events can mean the kernel drifted from what we want. */
  #onEvents(events: NetlinkEvent[]): void {
    const own = this.#opts.ownership();
    const devices = new Set(own.devices);
    // A deleted device first: the events around it (its neighbours flushed) must not be repaired
    // onto its old index before the rebuild.
    for (const e of events) {
      if (e.kind === 'link' && e.action === 'del' && devices.has(e.link.index)) {
        this.#deviceGone(`device ${e.link.name} deleted`);
        this.trigger(`device ${e.link.name} deleted`);
      }
    }
    const desired = this.#opts.desired;
    const repair = (entry: Partial<KernelState>, why: string) => {
      this.#repairs++;
      this.#fast(
        replaceOps({ routes: entry.routes ?? [], neighs: entry.neighs ?? [], fdb: entry.fdb ?? [], nexthops: entry.nexthops ?? [] }),
        why,
      );
    };
    for (const e of events) {
      switch (e.kind) {
        case 'overrun':
          this.trigger('kernel event overrun');
          break;
        case 'link':
          if (!devices.has(e.link.index)) {
            this.#onOtherLink(e.link, e.action === 'del');
            break;
          }
          if (e.action !== 'del') this.#opts.onDeviceChanged?.(e.link);
          break;
        case 'route': {
          // Deleted while wanted: write it back. Replaced by something else, or an unwanted route
          // carrying our tag: a full pass sorts out what else is under that key.
          const want = desired.route(routeKey(e.route));
          if (e.action === 'del') {
            if (want && routeEqual(want, e.route)) repair({ routes: [want] }, `route ${e.route.dst} deleted`);
          } else if (want ? !routeEqual(want, e.route) : e.route.protocol === own.protocol) {
            this.trigger(`route ${e.route.dst} changed`);
          }
          break;
        }
        case 'neigh':
          if (devices.has(e.neigh.linkIndex)) {
            const want = desired.neigh(neighKey(e.neigh));
            if (want && (e.action === 'del' || want.mac !== e.neigh.mac)) {
              repair({ neighs: [want] }, `neighbour ${e.neigh.ip} ${e.action === 'del' ? 'deleted' : 'changed'}`);
            }
          }
          break;
        case 'fdb':
          if (e.action === 'del' && devices.has(e.fdb.linkIndex) && desired.wantsFdb(fdbKey(e.fdb))) {
            repair({ fdb: [e.fdb] }, `fdb entry ${e.fdb.mac} deleted`);
          }
          break;
        case 'nexthop': {
          // Deleting a nexthop object deletes the IPv4 routes through it without a word: a full
          // pass puts both back. One changed under our id is written back as it was.
          const want = desired.nexthop(e.nexthop.id);
          if (!want) break;
          if (e.action === 'del') this.trigger(`nexthop ${e.nexthop.id} deleted`);
          else if (!nexthopEqual(want, e.nexthop)) repair({ nexthops: [want] }, `nexthop ${e.nexthop.id} changed`);
          break;
        }
        case 'l3miss':
        case 'l2miss':
          if (devices.has(e.linkIndex)) this.#opts.onMiss?.(e);
          break;
        default:
          break;
      }
    }
  }
}
