/**
 * Reading the kernel's tables: every dump and get of {@link NetlinkHandle} as a function of the
 * addon's handle, its records typed. Large dumps come in chunks that a sink consumes as they
 * arrive; a refusal rejects as a {@link NetlinkError} naming what was read.
 */
import type { RawChunks, RawHandle } from './native.ts';
import { rejected } from './operation.ts';
import {
  AF_BRIDGE,
  afOf,
  addrFromRaw,
  fdbFromRaw,
  linkFromRaw,
  neighFromRaw,
  nexthopFromRaw,
  qdiscFromRaw,
  routeFromRaw,
  tcFilterFromRaw,
} from './records.ts';
import type { Addr, Family, Fdb, Link, Neigh, Nexthop, Qdisc, Route, TcFilter } from './records.ts';

/** Which routes {@link routeEach} reads: all set fields match. */
export interface RouteFilter {
  family?: Family;
  table?: number;
  protocol?: number;
  linkIndex?: number;
}


/**
 * Records per array a large dump (routes, neighbours, nexthops; over 4,096 records) is handed
 * over in. Each array's objects are converted and dropped before the next is made, so they die in
 * V8's young generation instead of 50,000 of them being promoted at once in a full pass at 50,000
 * leases. (Small dumps stay one array: chunking them only made V8's young generation grow.)
 */
const DUMP_CHUNK = 256;

/**
 * Hands every record of a chunked dump through `from` (undefined: left out) to `sink`, a chunk at
 * a time: a caller that does not keep them lets each chunk's objects die young.
 */
function drain<R, T>(dump: RawChunks<R>, from: (r: R) => T | undefined, sink: (t: T) => void): void {
  let whole: R[] | undefined = Array.isArray(dump) ? dump : undefined;
  const next = () => {
    if (!whole) return (dump as () => R[])();
    const all = whole;
    whole = [];
    return all;
  };
  for (let chunk = next(); chunk.length > 0; chunk = next()) {
    // Indexed: weftd's interpreted code would allocate an iterator result per record.
    for (let i = 0; i < chunk.length; i++) {
      const t = from(chunk[i]!);
      if (t !== undefined) sink(t);
    }
  }
}

/** The records `each` hands over, in one array. */
export async function collect<T>(each: (sink: (t: T) => void) => Promise<void>): Promise<T[]> {
  const out: T[] = [];
  await each((t) => out.push(t));
  return out;
}

/** Reads a chunked dump (a refusal is rejected naming `what`) and hands its records to `sink` through `from`. */
async function each<R, T>(
  what: string,
  dump: () => Promise<RawChunks<R>>,
  from: (r: R) => T | undefined,
  sink: (t: T) => void,
): Promise<void> {
  let chunks;
  try {
    chunks = await dump();
  } catch (e) {
    throw rejected('list', what, e);
  }
  drain(chunks, from, sink);
}

/** `ip link show dev <name>`, or of the device with index `nameOrIndex`. Rejects with kind `not-found` when absent. */
export async function linkGet(raw: RawHandle, nameOrIndex: string | number): Promise<Link> {
  try {
    return linkFromRaw(await raw.linkGet(nameOrIndex));
  } catch (e) {
    throw rejected('get link', typeof nameOrIndex === 'number' ? `#${nameOrIndex}` : nameOrIndex, e);
  }
}

/** `ip -d link show`. */
export async function linkList(raw: RawHandle): Promise<Link[]> {
  try {
    return (await raw.dump('link')).map(linkFromRaw);
  } catch (e) {
    throw rejected('list', 'links', e);
  }
}

/** `ip addr show [dev <#linkIndex>]`, one family or both. */
export async function addrList(raw: RawHandle, filter: { family?: Family; linkIndex?: number }): Promise<Addr[]> {
  try {
    const records = await raw.dump('addr', {
      family: filter.family ? afOf(filter.family) : 0,
      index: filter.linkIndex ?? 0,
    });
    return records.map(addrFromRaw);
  } catch (e) {
    throw rejected('list', 'addresses', e);
  }
}

/** `ip route show table all` as a raw dump, each route handed to `sink` as it is read. */
export function routeEach(raw: RawHandle, filter: RouteFilter, sink: (r: Route) => void): Promise<void> {
  const dump = () => raw.dump('route', {
    family: filter.family ? afOf(filter.family) : 0,
    table: filter.table ?? 0,
    protocol: filter.protocol ?? -1,
    index: filter.linkIndex ?? 0,
    chunk: DUMP_CHUNK,
  });
  return each('routes', dump, routeFromRaw, sink);
}

/** `ip route get <dst> [oif <#linkIndex>]`: the route the kernel would use. */
export async function routeGet(raw: RawHandle, dst: string, linkIndex?: number): Promise<Route> {
  try {
    return routeFromRaw(await raw.routeGet(dst, linkIndex));
  } catch (e) {
    throw rejected('get route to', dst, e);
  }
}

/** `ip nexthop show`, each single-gateway object handed to `sink` as it is read. */
export function nexthopEach(raw: RawHandle, sink: (n: Nexthop) => void): Promise<void> {
  return each('nexthops', () => raw.dump('nexthop', { chunk: DUMP_CHUNK }), nexthopFromRaw, sink);
}

/** `ip neigh show [dev <#linkIndex>]` (bridge FDB entries left out), each neighbour handed to `sink` as it is read. */
export function neighEach(raw: RawHandle, filter: { family?: Family; linkIndex?: number }, sink: (n: Neigh) => void): Promise<void> {
  const dump = () =>
    raw.dump('neigh', { family: filter.family ? afOf(filter.family) : 0, index: filter.linkIndex ?? 0, chunk: DUMP_CHUNK });
  return each('neighbours', dump, (r) => (r.family === AF_BRIDGE ? undefined : neighFromRaw(r)), sink);
}

/** `bridge fdb show [dev <#linkIndex>]`, each entry handed to `sink` as it is read. */
export function fdbEach(raw: RawHandle, filter: { linkIndex?: number }, sink: (f: Fdb) => void): Promise<void> {
  const dump = () => raw.dump('neigh', { family: AF_BRIDGE, index: filter.linkIndex ?? 0, chunk: DUMP_CHUNK });
  return each('fdb entries', dump, fdbFromRaw, sink);
}

/** `tc qdisc show [dev <#linkIndex>]`. */
export async function qdiscList(raw: RawHandle, filter: { linkIndex?: number }): Promise<Qdisc[]> {
  try {
    return (await raw.dump('qdisc', { index: filter.linkIndex })).map(qdiscFromRaw);
  } catch (e) {
    throw rejected('list', 'qdiscs', e);
  }
}

/** `tc filter show dev <#linkIndex> parent <parent>`. */
export async function filterList(raw: RawHandle, linkIndex: number, parent: number): Promise<TcFilter[]> {
  try {
    return (await raw.dump('filter', { index: linkIndex, parent })).map(tcFilterFromRaw);
  } catch (e) {
    throw rejected('list', `filters of #${linkIndex}`, e);
  }
}
