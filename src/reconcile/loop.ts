/**
 * The reconcile loop: runs a pass (observe → diff → apply) whenever something may have moved the
 * kernel away from the desired state, and never two at once. Triggers are coalesced: any number
 * arriving during a pass cause exactly one more pass after it.
 *
 * Triggers: {@link Reconciler.trigger} (lease batches, desired-state changes), kernel monitor
 * events that touch Weft's entries (a deleted route, neighbour or FDB entry of ours, a foreign
 * change under one of our route keys, a receive overrun), and the periodic resync.
 */
import type { NetlinkHandle, NetlinkEvent, Monitor } from '../netlink/handle.ts';
import { fdbKey, neighKey, routeEqual, routeKey } from '../netlink/records.ts';
import type { Route } from '../netlink/records.ts';
import { reconcileOnce } from './reconcile.ts';
import type { PassReport } from './reconcile.ts';
import type { KernelState, Ownership } from './state.ts';

export interface PassInfo extends PassReport {
  /** Why this pass ran: the triggers coalesced into it. */
  reasons: string[];
  durationMs: number;
}

export interface ReconcilerOptions {
  handle: NetlinkHandle;
  /** Current desired state; read at the start of every pass. */
  desired: () => KernelState;
  /** Current ownership (device indexes change when a device is recreated). */
  ownership: () => Ownership;
  /** Milliseconds between periodic passes. */
  resyncPeriodMs: number;
  /** Called after every pass, for logs and metrics. */
  onPass?: (info: PassInfo) => void;
  /** Called when a pass throws (e.g. the dump failed); the next trigger tries again. */
  onError?: (e: unknown) => void;
  /** Called when a device of ours disappears: the backend must recreate it. */
  onDeviceGone?: (linkIndex: number) => void;
}

export class Reconciler {
  readonly #opts: ReconcilerOptions;
  #reasons: string[] = [];
  #running: Promise<void> | undefined;
  #busy = false;
  #monitor: Monitor | undefined;
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;
  /** Index of the last desired state, to tell a foreign change from our own echo. */
  #wanted = { routes: new Map<string, Route>(), neighs: new Map<string, string>(), fdb: new Set<string>() };

  constructor(opts: ReconcilerOptions) {
    this.#opts = opts;
  }

  /**
   * Subscribes to kernel events, then runs the first pass (which also removes stale entries of
   * ours left from before a restart) and resolves when it is done.
   */
  async start(signal?: AbortSignal): Promise<void> {
    this.#monitor = await this.#opts.handle.monitor(['link', 'route', 'neigh'], (events) => this.#onEvents(events));
    signal?.addEventListener('abort', () => this.stop(), { once: true });
    this.#timer = setInterval(() => this.trigger('periodic resync'), this.#opts.resyncPeriodMs);
    this.#timer.unref();
    this.trigger('start-up');
    await this.idle();
  }

  stop(): void {
    this.#stopped = true;
    this.#monitor?.stop();
    this.#monitor = undefined;
    clearInterval(this.#timer);
  }

  /** Asks for a pass; coalesced with any other pending request. */
  trigger(reason: string): void {
    if (this.#stopped) return;
    this.#reasons.push(reason);
    if (!this.#busy) {
      this.#busy = true;
      this.#running = this.#drain();
    }
  }

  /** Resolves once no pass is running or pending. */
  async idle(): Promise<void> {
    while (this.#busy) await this.#running;
  }

  async #drain(): Promise<void> {
    while (this.#reasons.length > 0 && !this.#stopped) {
      const reasons = this.#reasons;
      this.#reasons = [];
      const start = performance.now();
      try {
        const desired = this.#opts.desired();
        this.#index(desired);
        const report = await reconcileOnce(this.#opts.handle, desired, this.#opts.ownership());
        this.#opts.onPass?.({ ...report, reasons, durationMs: performance.now() - start });
      } catch (e) {
        this.#opts.onError?.(e);
      }
    }
    // Cleared in the same synchronous step as the last empty check: a trigger arriving any later
    // starts a new drain, none can fall between the two.
    this.#busy = false;
  }

  #index(desired: KernelState): void {
    this.#wanted = {
      routes: new Map(desired.routes.map((r) => [routeKey(r), r])),
      neighs: new Map(desired.neighs.map((n) => [neighKey(n), n.mac])),
      fdb: new Set(desired.fdb.map(fdbKey)),
    };
  }

  /** Which kernel events can mean the kernel drifted from what we want. */
  #onEvents(events: NetlinkEvent[]): void {
    const own = this.#opts.ownership();
    const devices = new Set(own.devices);
    for (const e of events) {
      switch (e.kind) {
        case 'overrun':
          this.trigger('kernel event overrun');
          break;
        case 'link':
          if (e.action === 'del' && devices.has(e.link.index)) {
            this.#opts.onDeviceGone?.(e.link.index);
            this.trigger(`device ${e.link.name} deleted`);
          }
          break;
        case 'route': {
          // Deleted while wanted; replaced by something else; or an unwanted route carrying our tag.
          const want = this.#wanted.routes.get(routeKey(e.route));
          const drifted = e.action === 'del'
            ? want !== undefined
            : want !== undefined ? !routeEqual(want, e.route) : e.route.protocol === own.protocol;
          if (drifted) this.trigger(`route ${e.route.dst} ${e.action === 'del' ? 'deleted' : 'changed'}`);
          break;
        }
        case 'neigh':
          if (devices.has(e.neigh.linkIndex)) {
            const mac = this.#wanted.neighs.get(neighKey(e.neigh));
            if (e.action === 'del' ? mac !== undefined : mac !== undefined && mac !== e.neigh.mac) {
              this.trigger(`neighbour ${e.neigh.ip} ${e.action === 'del' ? 'deleted' : 'changed'}`);
            }
          }
          break;
        case 'fdb':
          if (e.action === 'del' && devices.has(e.fdb.linkIndex) && this.#wanted.fdb.has(fdbKey(e.fdb))) {
            this.trigger(`fdb entry ${e.fdb.mac} deleted`);
          }
          break;
        default:
          break;
      }
    }
  }
}
