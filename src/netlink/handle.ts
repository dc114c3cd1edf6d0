/**
 * The typed netlink API: one {@link NetlinkHandle} per network namespace, verbs named after
 * iproute2. Every call runs in order on the handle's own native thread and returns a Promise;
 * the JS thread never blocks on the kernel. Failures are {@link NetlinkError}s carrying the
 * kernel's own errno (ESRCH for a missing route, ENOENT for a missing neighbour, ...).
 */
import { NetlinkError } from '../errors.ts';
import { loadAddon } from './native.ts';
import type { RawChunks, RawEvent, RawFailure, RawHandle, RawOp } from './native.ts';
import { packetsFromRaw, rawNflogOptions } from './nflog.ts';
import type { LoggedPacket, NflogOptions, NflogReader } from './nflog.ts';
import {
  AF_BRIDGE,
  afOf,
  addrFromRaw,
  fdbFromRaw,
  linkFromRaw,
  neighFromRaw,
  nexthopFromRaw,
  qdiscFromRaw,
  tcFilterFromRaw,
  NTF_SELF,
  NUD_PERMANENT,
  routeFromRaw,
} from './records.ts';
import type { Addr, Family, Fdb, Link, Neigh, Nexthop, Qdisc, Route, TcFilter } from './records.ts';

export interface RouteSpec {
  /** CIDR text, e.g. `10.244.2.0/24`; `0.0.0.0/0` or `::/0` for a default route. */
  dst: string;
  gateway?: string;
  linkIndex?: number;
  /** Default: main (254). */
  table?: number;
  /** rtm_protocol; default boot (3) on add/replace, any on delete. */
  protocol?: number;
  /** Default: derived by the kernel (universe with a gateway, link without); any on delete. */
  scope?: number;
  /** Route type (RTN_*), default unicast. */
  type?: number;
  metric?: number;
  onlink?: boolean;
  prefsrc?: string;
  /** Through this nexthop object (`nhid N`), instead of a gateway and device of its own. */
  nhid?: number;
}

export interface NexthopSpec {
  id: number;
  /** The gateway; its family is the nexthop's. */
  gateway?: string;
  linkIndex?: number;
  onlink?: boolean;
  /** nh_protocol; default boot (3). */
  protocol?: number;
}

export interface NeighSpec {
  linkIndex: number;
  ip: string;
  mac?: string;
  /** NUD_* state; default permanent. */
  state?: number;
}

export interface FdbSpec {
  linkIndex: number;
  mac: string;
  /** Remote VTEP address. */
  dst: string;
  /** Default: permanent. */
  state?: number;
  /** Default: NTF_SELF (an entry of the device itself, as on a vxlan device). */
  flags?: number;
}

export interface AddrSpec {
  linkIndex: number;
  address: string;
  prefixLen: number;
  scope?: number;
  /** IFA_F_* flags, e.g. IFA_F_NODAD (`nodad`). */
  flags?: number;
  /**
   * Seconds until the kernel deletes the address by itself (`valid_lft N`); absent: forever. A
   * replace sets it anew, counting from then.
   */
  validLft?: number;
  /** Seconds it stays preferred (`preferred_lft N`), at most validLft; default validLft. */
  preferredLft?: number;
}

export interface VethSpec {
  /** Name of the end created in the handle's namespace. */
  name: string;
  /** Name of the other end. */
  peerName: string;
  /** An open file descriptor of the namespace the peer is created in; default the handle's. */
  peerNetnsFd?: number;
  mtu?: number;
  /** Bridge (index) the `name` end is enslaved to at creation. */
  master?: number;
  /** Bring the `name` end up at creation (the peer stays down). */
  up?: boolean;
}

export interface VxlanSpec {
  name: string;
  vni: number;
  /** Source address of the tunnel (IPv4 or IPv6). */
  local?: string;
  /** Underlay device index. */
  vtepIndex?: number;
  /** 0 or absent: the kernel default (8472). */
  port?: number;
  learning?: boolean;
  gbp?: boolean;
  l2miss?: boolean;
  l3miss?: boolean;
  proxy?: boolean;
  mac?: string;
  mtu?: number;
  up?: boolean;
}

export interface LinkChanges {
  up?: boolean;
  mtu?: number;
  mac?: string;
  /** Index of the bridge to enslave the link to; 0 releases it. */
  master?: number;
  /** The link's group (IFLA_GROUP, `ip link set ... group N`); 1 or more. */
  group?: number;
}

/** One kernel change, for {@link NetlinkHandle.batch}. */
export type Operation =
  | { op: 'routeAdd' | 'routeReplace' | 'routeDel'; route: RouteSpec }
  | { op: 'nexthopAdd' | 'nexthopReplace' | 'nexthopDel'; nexthop: NexthopSpec }
  | { op: 'neighAdd' | 'neighReplace' | 'neighDel'; neigh: NeighSpec }
  | { op: 'fdbAdd' | 'fdbAppend' | 'fdbReplace' | 'fdbDel'; fdb: FdbSpec }
  | { op: 'addrAdd' | 'addrReplace' | 'addrDel'; addr: AddrSpec }
  | { op: 'linkAddVxlan'; vxlan: VxlanSpec }
  | { op: 'linkAddBridge'; name: string; mtu?: number }
  | { op: 'linkAddType'; name: string; kind: string; mtu?: number }
  | { op: 'linkAddVeth'; veth: VethSpec }
  | { op: 'linkSet'; index: number; changes: LinkChanges }
  | { op: 'linkSetHairpin'; index: number; on: boolean }
  | { op: 'linkDelGroup'; group: number }
  | { op: 'linkDel'; index: number }
  | { op: 'linkAddIfb'; name: string; mtu?: number; up?: boolean }
  | { op: 'qdiscAddTbf'; tbf: TbfSpec }
  | { op: 'qdiscAddIngress'; linkIndex: number }
  | { op: 'filterAddRedirect'; linkIndex: number; target: number };

/** A root tbf qdisc (handle 1:) as the bandwidth CNI plugin sets it: the kernel's units, no peak rate. */
export interface TbfSpec {
  linkIndex: number;
  /** Bytes per second. */
  rate: number;
  /** Bytes queued before packets are dropped. */
  limit: number;
  /** The bucket, as transmit time in scheduler ticks (/proc/net/psched). */
  buffer: number;
}

export type EventAction = 'new' | 'del';

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

export type MonitorGroup = 'link' | 'addr' | 'route' | 'neigh' | 'nexthop';

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

export interface RouteFilter {
  family?: Family;
  table?: number;
  protocol?: number;
  linkIndex?: number;
}

/** Which conntrack entries {@link NetlinkHandle.conntrackDelete} removes: all set fields match. */
export interface ConntrackFilter {
  family: Family;
  protocol: 'tcp' | 'udp' | 'sctp';
  /** The original direction's destination (a Service address); absent: any. */
  origDst?: string;
  /** The original direction's destination port; absent: any. */
  origDstPort?: number;
  /** The reply direction's source: the address the entry was DNATed to (an endpoint). */
  replySrc?: string;
}

const IPPROTO = { tcp: 6, udp: 17, sctp: 132 } as const;

/** Operations per call into the addon in {@link NetlinkHandle.batch}. */
const BATCH_SLICE = 1024;

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
async function collect<T>(each: (sink: (t: T) => void) => Promise<void>): Promise<T[]> {
  const out: T[] = [];
  await each((t) => out.push(t));
  return out;
}

function splitCidr(cidr: string): { ip: string; len: number } {
  const slash = cidr.lastIndexOf('/');
  const ip = slash < 0 ? cidr : cidr.slice(0, slash);
  const len = slash < 0 ? (ip.includes(':') ? 128 : 32) : Number(cidr.slice(slash + 1));
  return { ip, len };
}

function isDefault(ip: string): boolean {
  return ip === '0.0.0.0' || ip === '::';
}

function rawOp(o: Operation): RawOp {
  switch (o.op) {
    case 'routeAdd':
    case 'routeReplace':
    case 'routeDel': {
      const r = o.route;
      const { ip, len } = splitCidr(r.dst);
      return {
        op: o.op,
        family: ip.includes(':') ? afOf(6) : afOf(4),
        dst: len === 0 && isDefault(ip) ? undefined : ip,
        dstLen: len,
        gateway: r.gateway,
        index: r.linkIndex,
        table: r.table,
        protocol: r.protocol,
        scope: r.scope,
        routeType: r.type,
        priority: r.metric,
        onlink: r.onlink,
        prefsrc: r.prefsrc,
        nhid: r.nhid,
      };
    }
    case 'nexthopAdd':
    case 'nexthopReplace':
    case 'nexthopDel': {
      const n = o.nexthop;
      return { op: o.op, id: n.id, gateway: n.gateway, index: n.linkIndex, onlink: n.onlink, protocol: n.protocol };
    }
    case 'neighAdd':
    case 'neighReplace':
    case 'neighDel': {
      const n = o.neigh;
      return {
        op: o.op,
        family: n.ip.includes(':') ? afOf(6) : afOf(4),
        index: n.linkIndex,
        dst: n.ip,
        mac: n.mac,
        state: o.op === 'neighDel' ? undefined : (n.state ?? NUD_PERMANENT),
      };
    }
    case 'fdbAdd':
    case 'fdbAppend':
    case 'fdbReplace':
    case 'fdbDel': {
      const f = o.fdb;
      const op = { fdbAdd: 'neighAdd', fdbAppend: 'neighAppend', fdbReplace: 'neighReplace', fdbDel: 'neighDel' }[o.op];
      return {
        op,
        family: AF_BRIDGE,
        index: f.linkIndex,
        dst: f.dst,
        mac: f.mac,
        state: o.op === 'fdbDel' ? undefined : (f.state ?? NUD_PERMANENT),
        flags: f.flags ?? NTF_SELF,
      };
    }
    case 'addrAdd':
    case 'addrReplace':
    case 'addrDel': {
      const a = o.addr;
      return {
        op: o.op, index: a.linkIndex, local: a.address, prefixLen: a.prefixLen, scope: a.scope, flags: a.flags,
        validLft: a.validLft, preferredLft: a.validLft === undefined ? undefined : (a.preferredLft ?? a.validLft),
      };
    }
    case 'linkAddVxlan': {
      const v = o.vxlan;
      return {
        op: o.op,
        name: v.name,
        vni: v.vni,
        local: v.local,
        vtepIndex: v.vtepIndex,
        port: v.port,
        learning: v.learning ?? false,
        gbp: v.gbp,
        l2miss: v.l2miss,
        l3miss: v.l3miss,
        proxy: v.proxy,
        mac: v.mac,
        mtu: v.mtu,
        up: v.up,
      };
    }
    case 'linkAddBridge':
      return { op: o.op, name: o.name, mtu: o.mtu };
    case 'linkAddType':
      return { op: o.op, name: o.name, linkKind: o.kind, mtu: o.mtu };
    case 'linkAddVeth':
      return {
        op: o.op,
        name: o.veth.name,
        peerName: o.veth.peerName,
        peerNsFd: o.veth.peerNetnsFd,
        mtu: o.veth.mtu,
        master: o.veth.master,
        up: o.veth.up,
      };
    case 'linkSet':
      return {
        op: o.op,
        index: o.index,
        up: o.changes.up,
        mtu: o.changes.mtu,
        mac: o.changes.mac,
        master: o.changes.master,
        group: o.changes.group,
      };
    case 'linkSetHairpin':
      return { op: o.op, index: o.index, on: o.on };
    case 'linkDelGroup':
      return { op: o.op, group: o.group };
    case 'linkDel':
      return { op: o.op, index: o.index };
    case 'linkAddIfb':
      return { op: o.op, name: o.name, mtu: o.mtu, up: o.up };
    case 'qdiscAddTbf':
      return { op: o.op, index: o.tbf.linkIndex, rate: o.tbf.rate, limit: o.tbf.limit, buffer: o.tbf.buffer };
    case 'qdiscAddIngress':
      return { op: o.op, index: o.linkIndex };
    case 'filterAddRedirect':
      return { op: o.op, index: o.linkIndex, target: o.target };
  }
}

/** Human words for an operation, for error messages: the verb and the object. */
export function describe(o: Operation): { verb: string; object: string } {
  switch (o.op) {
    case 'routeAdd':
    case 'routeReplace':
    case 'routeDel': {
      const r = o.route;
      const parts = [
        r.dst,
        r.nhid ? `nhid ${r.nhid}` : '',
        r.gateway ? `via ${r.gateway}` : '',
        r.linkIndex ? `dev #${r.linkIndex}` : '',
        r.onlink ? 'onlink' : '',
      ];
      return { verb: `${o.op.slice(5).toLowerCase()} route`, object: parts.filter(Boolean).join(' ') };
    }
    case 'nexthopAdd':
    case 'nexthopReplace':
    case 'nexthopDel': {
      const n = o.nexthop;
      const parts = [`id ${n.id}`, n.gateway ? `via ${n.gateway}` : '', n.linkIndex ? `dev #${n.linkIndex}` : '', n.onlink ? 'onlink' : ''];
      return { verb: `${o.op.slice(7).toLowerCase()} nexthop`, object: parts.filter(Boolean).join(' ') };
    }
    case 'neighAdd':
    case 'neighReplace':
    case 'neighDel':
      return {
        verb: `${o.op.slice(5).toLowerCase()} neighbour`,
        object: `${o.neigh.ip}${o.neigh.mac ? ` lladdr ${o.neigh.mac}` : ''} dev #${o.neigh.linkIndex}`,
      };
    case 'fdbAdd':
    case 'fdbAppend':
    case 'fdbReplace':
    case 'fdbDel':
      return {
        verb: `${o.op.slice(3).toLowerCase()} fdb entry`,
        object: `${o.fdb.mac} dst ${o.fdb.dst} dev #${o.fdb.linkIndex}`,
      };
    case 'addrAdd':
    case 'addrReplace':
    case 'addrDel':
      return {
        verb: `${o.op.slice(4).toLowerCase()} address`,
        object: `${o.addr.address}/${o.addr.prefixLen} dev #${o.addr.linkIndex}`,
      };
    case 'linkAddVxlan':
      return { verb: 'add vxlan link', object: `${o.vxlan.name} id ${o.vxlan.vni}` };
    case 'linkAddBridge':
      return { verb: 'add bridge', object: o.name };
    case 'linkAddType':
      return { verb: `add ${o.kind} link`, object: o.name };
    case 'linkAddVeth':
      return { verb: 'add veth pair', object: `${o.veth.name} peer ${o.veth.peerName}` };
    case 'linkSet':
      return { verb: 'set link', object: `#${o.index}` };
    case 'linkSetHairpin':
      return { verb: 'set hairpin mode of', object: `#${o.index}` };
    case 'linkDelGroup':
      return { verb: 'delete links of', object: `group ${o.group}` };
    case 'linkDel':
      return { verb: 'delete link', object: `#${o.index}` };
    case 'linkAddIfb':
      return { verb: 'add ifb link', object: o.name };
    case 'qdiscAddTbf':
      return { verb: 'add tbf qdisc', object: `rate ${o.tbf.rate}B/s dev #${o.tbf.linkIndex}` };
    case 'qdiscAddIngress':
      return { verb: 'add ingress qdisc', object: `dev #${o.linkIndex}` };
    case 'filterAddRedirect':
      return { verb: 'add redirect filter', object: `dev #${o.linkIndex} to #${o.target}` };
  }
}

function failure(o: Operation, f: RawFailure): NetlinkError {
  const { verb, object } = describe(o);
  return new NetlinkError(verb, f.errno, object, `${f.errno} (${f.message})`);
}

function rejected(verb: string, object: string, e: unknown): NetlinkError {
  const err = e as { errno?: string; detail?: string; message?: string };
  const errno = err.errno ?? 'EIO';
  return new NetlinkError(verb, errno, object, `${errno} (${err.detail ?? err.message ?? 'unknown error'})`);
}

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

/** A running subscription to kernel notifications; see {@link NetlinkHandle.monitor}. */
export interface Monitor {
  stop(): void;
}

export class NetlinkHandle {
  readonly netnsPath: string;
  readonly #raw: RawHandle;

  private constructor(netnsPath: string, raw: RawHandle) {
    this.netnsPath = netnsPath;
    this.#raw = raw;
  }

  /**
   * A handle bound to the network namespace at `netnsPath` (e.g. `/run/netns/node1`), or to the
   * caller's namespace when omitted. The process itself never changes namespace.
   */
  static open(netnsPath = ''): NetlinkHandle {
    try {
      return new NetlinkHandle(netnsPath, new (loadAddon().Handle)(netnsPath));
    } catch (e) {
      throw rejected('open netlink handle in', netnsPath || 'the current namespace', e);
    }
  }

  /** Releases the native thread and socket; pending calls still settle. Idempotent. */
  close(): void {
    this.#raw.close();
  }

  async #one(o: Operation): Promise<void> {
    const [result] = await this.#raw.apply([rawOp(o)]);
    if (result) throw failure(o, result);
  }

  /**
   * Applies `ops` in order in one native call; one result per op, `null` for success. A failed op
   * does not stop the ones after it. Equals a sequence of `ip -batch` / `bridge -batch` lines.
   */
  async batch(ops: readonly Operation[]): Promise<(NetlinkError | null)[]> {
    const out: (NetlinkError | null)[] = [];
    // Handed over a slice at a time, so the addon's copies of a 15,000-operation batch never
    // exist all at once and die young; the kernel sees the same sequence either way.
    for (let i = 0; i < ops.length; i += BATCH_SLICE) {
      const slice = ops.slice(i, i + BATCH_SLICE);
      const results = await this.#raw.apply(slice.map(rawOp));
      for (let j = 0; j < results.length; j++) out.push(results[j] ? failure(slice[j]!, results[j]!) : null);
    }
    return out;
  }

  // ---- links ----

  /** `ip link show dev <name>`. Rejects with kind `not-found` when absent. */
  async linkByName(name: string): Promise<Link> {
    try {
      return linkFromRaw(await this.#raw.linkGet(name));
    } catch (e) {
      throw rejected('get link', name, e);
    }
  }

  /** `ip link show` of the device with index `index`. */
  async linkByIndex(index: number): Promise<Link> {
    try {
      return linkFromRaw(await this.#raw.linkGet(index));
    } catch (e) {
      throw rejected('get link', `#${index}`, e);
    }
  }

  /** `ip -d link show`. */
  async linkList(): Promise<Link[]> {
    try {
      return (await this.#raw.dump('link')).map(linkFromRaw);
    } catch (e) {
      throw rejected('list', 'links', e);
    }
  }

  /** `ip link add <name> type vxlan id <vni> local <ip> dev <vtep> dstport <port> [no]learning [gbp]`; fails if it exists. */
  vxlanAdd(spec: VxlanSpec): Promise<void> {
    return this.#one({ op: 'linkAddVxlan', vxlan: spec });
  }

  /** `ip link add <name> [mtu N] type bridge`; fails if it exists. */
  bridgeAdd(name: string, mtu?: number): Promise<void> {
    return this.#one({ op: 'linkAddBridge', name, mtu });
  }

  /** `ip link add <name> [mtu N] type <kind>` for kinds without settings of their own (wireguard); fails if it exists. */
  linkAddType(name: string, kind: string, mtu?: number): Promise<void> {
    return this.#one({ op: 'linkAddType', name, kind, mtu });
  }

  /**
   * `ip link add <name> [mtu N] [master <#master>] [up] type veth peer name <peerName> netns
   * <peerNetnsFd>`: both ends in one request, so a pod's end never exists outside its namespace.
   * Fails if either name exists.
   */
  vethAdd(spec: VethSpec): Promise<void> {
    return this.#one({ op: 'linkAddVeth', veth: spec });
  }

  /**
   * `ip link delete group <group>`: every link of the group in one kernel batch (a veth takes its
   * peer along, whichever namespace it is in). Rejects with kind `not-found` when none is in it.
   */
  linkDelGroup(group: number): Promise<void> {
    return this.#one({ op: 'linkDelGroup', group });
  }

  /** `ip link set dev <#index> type bridge_slave hairpin on|off`. */
  linkSetHairpin(index: number, on: boolean): Promise<void> {
    return this.#one({ op: 'linkSetHairpin', index, on });
  }

  /** `ip link set dev <#index> [up|down] [mtu N] [address MAC] [master <#master>] [group N]`. */
  linkSet(index: number, changes: LinkChanges): Promise<void> {
    return this.#one({ op: 'linkSet', index, changes });
  }

  /** `ip link set dev <#index> up`. */
  linkSetUp(index: number): Promise<void> {
    return this.linkSet(index, { up: true });
  }

  /** `ip link set dev <#index> down`. */
  linkSetDown(index: number): Promise<void> {
    return this.linkSet(index, { up: false });
  }

  /** `ip link set dev <#index> mtu <mtu>`. */
  linkSetMtu(index: number, mtu: number): Promise<void> {
    return this.linkSet(index, { mtu });
  }

  /** `ip link set dev <#index> address <mac>`. */
  linkSetMac(index: number, mac: string): Promise<void> {
    return this.linkSet(index, { mac });
  }

  /** `ip link del dev <#index>`. */
  linkDel(index: number): Promise<void> {
    return this.#one({ op: 'linkDel', index });
  }

  // ---- addresses ----

  /** `ip addr show [dev <#linkIndex>]`, one family or both. */
  async addrList(filter: { family?: Family; linkIndex?: number } = {}): Promise<Addr[]> {
    try {
      const raw = await this.#raw.dump('addr', {
        family: filter.family ? afOf(filter.family) : 0,
        index: filter.linkIndex ?? 0,
      });
      return raw.map(addrFromRaw);
    } catch (e) {
      throw rejected('list', 'addresses', e);
    }
  }

  /** `ip addr add <address>/<prefixLen> dev <#linkIndex>`; fails if present. */
  addrAdd(addr: AddrSpec): Promise<void> {
    return this.#one({ op: 'addrAdd', addr });
  }

  /** `ip addr replace <address>/<prefixLen> dev <#linkIndex>`; idempotent. */
  addrReplace(addr: AddrSpec): Promise<void> {
    return this.#one({ op: 'addrReplace', addr });
  }

  /** `ip addr del <address>/<prefixLen> dev <#linkIndex>`. */
  addrDel(addr: AddrSpec): Promise<void> {
    return this.#one({ op: 'addrDel', addr });
  }

  /**
   * Tells the neighbours on link `ifindex` that `address` is at this link's MAC: for IPv4 a
   * gratuitous ARP (`arping -U -I <link> <address>`: a broadcast request with sender = target =
   * the address), for IPv6 an unsolicited neighbour advertisement to ff02::1 with the override flag
   * and the target link-layer address option (`ndisc6`'s unsolicited NA). Sent from a packet
   * socket, so nothing on the link changes; the address need not be on the link yet.
   */
  async announce(ifindex: number, address: string): Promise<void> {
    try {
      await this.#raw.announce(ifindex, address);
    } catch (e) {
      throw rejected('announce', `${address} dev #${ifindex}`, e);
    }
  }

  /**
   * `conntrack -D -f ipv4|ipv6 -p <protocol> [--orig-dst <origDst>] [--orig-port-dst <port>]
   * [--reply-src <replySrc>]` over ctnetlink, for every filter in one dump of the handle's
   * namespace's table; resolves to the number of entries deleted (none is not an error).
   */
  async conntrackDelete(filters: readonly ConntrackFilter[]): Promise<number> {
    if (filters.length === 0) return 0;
    try {
      return await this.#raw.conntrackDelete(filters.map((f) => ({ ...f, protocol: IPPROTO[f.protocol] })));
    } catch (e) {
      throw rejected('delete', `conntrack entries (${filters.length} filters)`, e);
    }
  }

  /**
   * Whether another host on link `ifindex` holds any of `addresses` (`arping -D` for each IPv4 one,
   * `ndisc6`-style duplicate address detection for each IPv6 one, all at once): `probes` rounds
   * spread evenly over `waitMs` (at most 10 s), each an ARP probe with sender 0.0.0.0 (RFC 5227)
   * for every IPv4 address and a neighbour solicitation from :: to the solicited-node group
   * (RFC 4862's DAD, whatever the link's accept_dad) for every IPv6 one. Resolves to, per address,
   * the MACs of the hosts that said it is theirs meanwhile (ARP reply or announcement, neighbour
   * advertisement; none: free to claim; other hosts' probes do not count). Occupies the handle's
   * thread for `waitMs`, so it wants a handle of its own.
   */
  async addressProbe(ifindex: number, addresses: readonly string[], waitMs: number, probes = 3): Promise<string[][]> {
    if (addresses.length === 0) return [];
    try {
      return await this.#raw.addressProbe(ifindex, [...addresses], waitMs, probes);
    } catch (e) {
      throw rejected('probe for', `${addresses.join(' ')} dev #${ifindex}`, e);
    }
  }

  // ---- routes ----

  /**
   * `ip route show table all`, as a raw dump: routes that differ only in next hop stay
   * separate records (libnl's cache would merge them). Filtering happens before JS sees them.
   */
  routeList(filter: RouteFilter = {}): Promise<Route[]> {
    return collect((sink) => this.routeEach(filter, sink));
  }

  /** {@link routeList}, each route handed to `sink` as it is read instead of kept in an array. */
  routeEach(filter: RouteFilter, sink: (r: Route) => void): Promise<void> {
    const dump = () => this.#raw.dump('route', {
      family: filter.family ? afOf(filter.family) : 0,
      table: filter.table ?? 0,
      protocol: filter.protocol ?? -1,
      index: filter.linkIndex ?? 0,
      chunk: DUMP_CHUNK,
    });
    return this.#each('routes', dump, routeFromRaw, sink);
  }

  /** Reads a chunked dump (a refusal is rejected naming `what`) and hands its records to `sink` through `from`. */
  async #each<R, T>(what: string, dump: () => Promise<RawChunks<R>>, from: (r: R) => T | undefined, sink: (t: T) => void): Promise<void> {
    let chunks;
    try {
      chunks = await dump();
    } catch (e) {
      throw rejected('list', what, e);
    }
    drain(chunks, from, sink);
  }

  /** `ip route add ...`; fails with `exists` if the route is there. */
  routeAdd(route: RouteSpec): Promise<void> {
    return this.#one({ op: 'routeAdd', route });
  }

  /** `ip route replace ...`; idempotent. */
  routeReplace(route: RouteSpec): Promise<void> {
    return this.#one({ op: 'routeReplace', route });
  }

  /** `ip route del ...`; fails with `not-found` (ESRCH) when absent. */
  routeDel(route: RouteSpec): Promise<void> {
    return this.#one({ op: 'routeDel', route });
  }

  /** `ip route get <dst> [oif <#linkIndex>]`: the route the kernel would use. */
  async routeGet(dst: string, linkIndex?: number): Promise<Route> {
    try {
      return routeFromRaw(await this.#raw.routeGet(dst, linkIndex));
    } catch (e) {
      throw rejected('get route to', dst, e);
    }
  }

  /**
   * One generic netlink request (`request`: the whole message, header included) and the messages
   * the kernel answered with, the closing ack or NLMSG_DONE left out; rejects with the kernel's
   * errno. `what` names the request in errors. The codec of each family is its user's.
   */
  async genl(what: string, request: Uint8Array): Promise<Buffer[]> {
    try {
      return await this.#raw.genl(request);
    } catch (e) {
      throw rejected(what, 'over generic netlink', e);
    }
  }

  // ---- nexthop objects ----

  /**
   * `ip nexthop show`: single-gateway nexthop objects (groups and blackholes left out). Rejects
   * on a kernel without nexthop objects (before Linux 5.3), typically with EINVAL or EOPNOTSUPP.
   */
  nexthopList(): Promise<Nexthop[]> {
    return collect((sink) => this.nexthopEach(sink));
  }

  /** {@link nexthopList}, each object handed to `sink` as it is read. */
  nexthopEach(sink: (n: Nexthop) => void): Promise<void> {
    return this.#each('nexthops', () => this.#raw.dump('nexthop', { chunk: DUMP_CHUNK }), nexthopFromRaw, sink);
  }

  /** `ip nexthop replace id <id> via <gateway> dev <#linkIndex> [onlink] proto <protocol>`; idempotent. */
  nexthopReplace(nexthop: NexthopSpec): Promise<void> {
    return this.#one({ op: 'nexthopReplace', nexthop });
  }

  /** `ip nexthop del id <id>` (the kernel deletes the routes through it too); `not-found` (ENOENT) when absent. */
  nexthopDel(nexthop: NexthopSpec): Promise<void> {
    return this.#one({ op: 'nexthopDel', nexthop });
  }

  // ---- neighbours ----

  /** `ip neigh show [dev <#linkIndex>]` for one family or both (bridge FDB entries excluded). */
  neighList(filter: { family?: Family; linkIndex?: number } = {}): Promise<Neigh[]> {
    return collect((sink) => this.neighEach(filter, sink));
  }

  /** {@link neighList}, each neighbour handed to `sink` as it is read. */
  neighEach(filter: { family?: Family; linkIndex?: number }, sink: (n: Neigh) => void): Promise<void> {
    const dump = () =>
      this.#raw.dump('neigh', { family: filter.family ? afOf(filter.family) : 0, index: filter.linkIndex ?? 0, chunk: DUMP_CHUNK });
    return this.#each('neighbours', dump, (r) => (r.family === AF_BRIDGE ? undefined : neighFromRaw(r)), sink);
  }

  /** `ip neigh add <ip> lladdr <mac> dev <#linkIndex> nud permanent`; fails if present. */
  neighAdd(neigh: NeighSpec): Promise<void> {
    return this.#one({ op: 'neighAdd', neigh });
  }

  /** `ip neigh replace <ip> lladdr <mac> dev <#linkIndex> nud permanent`; idempotent. */
  neighReplace(neigh: NeighSpec): Promise<void> {
    return this.#one({ op: 'neighReplace', neigh });
  }

  /** `ip neigh del <ip> dev <#linkIndex>`; fails with `not-found` (ENOENT) when absent. */
  neighDel(neigh: NeighSpec): Promise<void> {
    return this.#one({ op: 'neighDel', neigh });
  }

  // ---- bridge FDB ----

  /** `bridge fdb show [dev <#linkIndex>]`. */
  fdbList(filter: { linkIndex?: number } = {}): Promise<Fdb[]> {
    return collect((sink) => this.fdbEach(filter, sink));
  }

  /** {@link fdbList}, each entry handed to `sink` as it is read. */
  fdbEach(filter: { linkIndex?: number }, sink: (f: Fdb) => void): Promise<void> {
    const dump = () => this.#raw.dump('neigh', { family: AF_BRIDGE, index: filter.linkIndex ?? 0, chunk: DUMP_CHUNK });
    return this.#each('fdb entries', dump, fdbFromRaw, sink);
  }

  /** `bridge fdb append <mac> dev <#linkIndex> dst <dst> self permanent`: adds a remote for the MAC. */
  fdbAppend(fdb: FdbSpec): Promise<void> {
    return this.#one({ op: 'fdbAppend', fdb });
  }

  /** `bridge fdb replace <mac> dev <#linkIndex> dst <dst> self permanent`; idempotent. */
  fdbReplace(fdb: FdbSpec): Promise<void> {
    return this.#one({ op: 'fdbReplace', fdb });
  }

  /** `bridge fdb del <mac> dev <#linkIndex> dst <dst> self`. */
  fdbDel(fdb: FdbSpec): Promise<void> {
    return this.#one({ op: 'fdbDel', fdb });
  }

  // ---- traffic control ----

  /** `ip link add <name> [mtu N] txqueuelen 0 [up] type ifb`; fails if it exists. */
  ifbAdd(name: string, options: { mtu?: number; up?: boolean } = {}): Promise<void> {
    return this.#one({ op: 'linkAddIfb', name, ...options });
  }

  /** `tc qdisc show [dev <#linkIndex>]`. */
  async qdiscList(filter: { linkIndex?: number } = {}): Promise<Qdisc[]> {
    try {
      return (await this.#raw.dump('qdisc', { index: filter.linkIndex })).map(qdiscFromRaw);
    } catch (e) {
      throw rejected('list', 'qdiscs', e);
    }
  }

  /** `tc filter show dev <#linkIndex> parent <parent>`. */
  async filterList(linkIndex: number, parent: number): Promise<TcFilter[]> {
    try {
      return (await this.#raw.dump('filter', { index: linkIndex, parent })).map(tcFilterFromRaw);
    } catch (e) {
      throw rejected('list', `filters of #${linkIndex}`, e);
    }
  }

  // ---- notifications ----

  /**
   * `ip monitor link address route neigh`: calls `listener` with batches of events as the kernel
   * reports them, including vxlan L2/L3 misses and receive overruns. One monitor per handle.
   * Keeps the event loop alive until {@link Monitor.stop}.
   */
  async monitor(
    groups: readonly MonitorGroup[],
    listener: (events: NetlinkEvent[]) => void,
    options: MonitorOptions = {},
  ): Promise<Monitor> {
    const raw = this.#raw;
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

  /**
   * Binds NFLOG group `group` (what `ulogd` binds for nftables' `log group N`) in the handle's
   * namespace and calls `listener` with batches of the packets logged there, and `lost` when the
   * kernel dropped some because weftd read too slowly. Rejects with errno EPERM when another
   * socket holds the group (the kernel's answer). One group per handle; keeps the event loop alive until stopped.
   */
  async nflog(group: number, listener: (packets: LoggedPacket[], lost: boolean) => void, options: NflogOptions = {}): Promise<NflogReader> {
    const raw = this.#raw;
    try {
      await raw.nflog(group, (batch) => {
        const { packets, lost } = packetsFromRaw(batch);
        listener(packets, lost);
      }, rawNflogOptions(options));
    } catch (e) {
      throw rejected('bind', `NFLOG group ${group}`, e);
    }
    return { stop: () => raw.unnflog() };
  }
}
