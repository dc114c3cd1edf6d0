/**
 * Kernel notifications (`ip monitor`): the events {@link NetlinkHandle.monitor} reports, typed from
 * the addon's batches, and the subscription that delivers them.
 */
import type { RawEvent, RawHandle } from './native.ts';
import { rejected } from './operation.ts';
import { AF_BRIDGE, addrFromRaw, fdbFromRaw, linkFromRaw, neighFromRaw, nexthopFromRaw, routeFromRaw } from './records.ts';
import type { Addr, Fdb, Link, Neigh, Nexthop, Route } from './records.ts';

/** Whether the kernel added (or changed) the object, or deleted it. */
export type EventAction = 'new' | 'del';

/** One kernel notification, typed. */
export type NetlinkEvent =
  | { kind: 'link'; action: EventAction; link: Link }
  | { kind: 'addr'; action: EventAction; addr: Addr }
  | { kind: 'route'; action: EventAction; route: Route }
  | { kind: 'neigh'; action: EventAction; neigh: Neigh }
  | { kind: 'fdb'; action: EventAction; fdb: Fdb }
  | { kind: 'nexthop'; action: EventAction; nexthop: Nexthop }
  /** A vxlan L3 miss: the kernel asks for the MAC of `ip` on device `linkIndex`. */
  | { kind: 'l3miss'; linkIndex: number; ip: string }
  /** A vxlan L2 miss: the kernel asks for the remote VTEP of `mac` on device `linkIndex`. */
  | { kind: 'l2miss'; linkIndex: number; mac: string }
  /** The kernel dropped notifications (ENOBUFS): the listener should resync from a dump. */
  | { kind: 'overrun' };

/** The kinds of object a monitor can follow (`ip monitor <object>`). */
export type MonitorGroup = 'link' | 'addr' | 'route' | 'neigh' | 'nexthop';

/** How a monitor listens; see {@link NetlinkHandle.monitor}. */
export interface MonitorOptions {
  /** Receive buffer of the monitor socket in bytes; default the system's. */
  rcvbuf?: number;
  /**
   * Report FDB entries added or changed (default true). The vxlan driver reports every FDB entry
   * written, the handle's own too (it stamps no sender on them), so a caller that only acts on
   * deletions saves decoding one event per entry it writes.
   */
  fdbAdds?: boolean;
}

/** A running subscription to kernel notifications; see {@link NetlinkHandle.monitor}. */
export interface Monitor {
  stop(): void;
}

/** The event the addon reported as `e`, or undefined for one Weft does not report. */
function eventFromRaw(e: RawEvent): NetlinkEvent | undefined {
  if (e.action === 'overrun') return { kind: 'overrun' };
  const r = e.record;
  if (r === undefined) return undefined;
  if (e.action === 'get') {
    if (r.type !== 'neigh') return undefined;
    if (r.ip) return { kind: 'l3miss', linkIndex: r.index, ip: r.ip };
    return { kind: 'l2miss', linkIndex: r.index, mac: r.mac ?? '' };
  }
  const action = e.action;
  switch (r.type) {
    case 'link':
      return { kind: 'link', action, link: linkFromRaw(r) };
    case 'addr':
      return { kind: 'addr', action, addr: addrFromRaw(r) };
    case 'route':
      return { kind: 'route', action, route: routeFromRaw(r) };
    case 'nexthop': {
      const nexthop = nexthopFromRaw(r);
      return nexthop && { kind: 'nexthop', action, nexthop };
    }
    case 'neigh':
      return r.family === AF_BRIDGE
        ? { kind: 'fdb', action, fdb: fdbFromRaw(r) }
        : { kind: 'neigh', action, neigh: neighFromRaw(r) };
  }
}

/**
 * Subscribes `raw` to `groups` and hands `listener` each non-empty batch of events; see
 * {@link NetlinkHandle.monitor}.
 */
export async function startMonitor(
  raw: RawHandle,
  groups: readonly MonitorGroup[],
  listener: (events: NetlinkEvent[]) => void,
  options: MonitorOptions,
): Promise<Monitor> {
  try {
    await raw.monitor(
      [...groups],
      (batch) => {
        const events: NetlinkEvent[] = [];
        for (const e of batch) {
          const ev = eventFromRaw(e);
          if (ev) events.push(ev);
        }
        if (events.length > 0) listener(events);
      },
      options.rcvbuf ?? 0,
      options.fdbAdds ?? true,
    );
  } catch (e) {
    throw rejected('subscribe to', groups.join(','), e);
  }
  return { stop: () => raw.unmonitor() };
}
