/**
 * Plain records of kernel state, with the equality and identity that diffing needs. Addresses
 * are text in canonical form (inet_ntop), MACs lower-case `aa:bb:cc:dd:ee:ff`, route
 * destinations CIDR text (`10.244.2.0/24`, `0.0.0.0/0` for a default route).
 */
import type { RawAddr, RawFilter, RawLink, RawNeigh, RawNexthop, RawQdisc, RawRoute } from './native.ts';

export const AF_INET = 2;
export const AF_INET6 = 10;
export const AF_BRIDGE = 7;

export const NUD_PERMANENT = 0x80;
export const NTF_SELF = 0x02;
export const RTNH_F_ONLINK = 0x04;
export const IFF_UP = 0x1;
/** The link has carrier (IFF_LOWER_UP). */
export const IFF_LOWER_UP = 0x10000;

export const RT_TABLE_MAIN = 254;
export const RT_SCOPE_UNIVERSE = 0;
export const RT_SCOPE_LINK = 253;
export const RT_SCOPE_HOST = 254;
export const RTN_UNICAST = 1;
export const RTN_BLACKHOLE = 6;
export const RTN_UNREACHABLE = 7;
export const RTN_PROHIBIT = 8;
export const RTPROT_BOOT = 3;
export const RTPROT_KERNEL = 2;

export const IFA_F_TEMPORARY = 0x01;
/** `nodad`: no duplicate address detection (addresses unique by allocation). */
export const IFA_F_NODAD = 0x02;
/** DAD found another host with the address (IPv6). */
export const IFA_F_DADFAILED = 0x08;
/** DAD still running: the address is not usable yet (IPv6). */
export const IFA_F_TENTATIVE = 0x40;
export const IFA_F_DEPRECATED = 0x20;
export const IFA_F_PERMANENT = 0x80;

export type Family = 4 | 6;

export function familyOf(af: number): Family {
  return af === AF_INET6 ? 6 : 4;
}

export function afOf(family: Family): number {
  return family === 6 ? AF_INET6 : AF_INET;
}

export interface VxlanAttrs {
  vni: number;
  /** Local (source) address, "" when unset. */
  local: string;
  /** Index of the underlay (VTEP) device, 0 when unset. */
  vtepIndex: number;
  /** UDP destination port; the kernel reports its default (8472) when none was set. */
  port: number;
  learning: boolean;
  gbp: boolean;
  l2miss: boolean;
  l3miss: boolean;
  /** ARP/NDP proxy: the device answers from its neighbour table (needed for L3 miss reports). */
  proxy: boolean;
}

export interface Link {
  index: number;
  name: string;
  /** Link kind from IFLA_INFO_KIND ("vxlan", "veth", "bridge"...), "" for plain devices. */
  kind: string;
  mac: string;
  mtu: number;
  up: boolean;
  flags: number;
  operState: number;
  master: number;
  /** IFLA_LINK: a veth's peer (its index in the peer's namespace), a vlan's lower device; 0 for none. */
  ifLink: number;
  vxlan?: VxlanAttrs;
}

export interface Addr {
  linkIndex: number;
  family: Family;
  address: string;
  prefixLen: number;
  scope: number;
  /** IFA_F_* flags. */
  flags: number;
  label: string;
  /** Seconds left until the kernel deletes it; {@link INFINITY_LIFE_TIME}: never. */
  validLft: number;
}

export interface Route {
  family: Family;
  /** CIDR text; `0.0.0.0/0` or `::/0` for a default route. */
  dst: string;
  gateway?: string;
  /** Output device; absent when the kernel picks it. */
  linkIndex?: number;
  table: number;
  protocol: number;
  scope: number;
  type: number;
  metric: number;
  onlink: boolean;
  prefsrc?: string;
  /**
   * The nexthop object the route goes through (`ip route ... nhid N`). The next hop's gateway,
   * device and onlink are then the object's (reported here too, for reading); what tells two such
   * routes apart is the id.
   */
  nhid?: number;
}

/** A nexthop object (`ip nexthop`, Linux 5.3+): one gateway on one device, shared by routes. */
export interface Nexthop {
  id: number;
  family: Family;
  gateway: string;
  linkIndex: number;
  onlink: boolean;
  protocol: number;
}

export interface Neigh {
  family: Family;
  linkIndex: number;
  ip: string;
  mac: string;
  /** NUD_* state bits. */
  state: number;
}

/** A bridge forwarding entry on a device, e.g. a remote VTEP on a vxlan device. */
export interface Fdb {
  linkIndex: number;
  mac: string;
  /** Remote VTEP address (NDA_DST), "" when none. */
  dst: string;
  state: number;
  /** NTF_* flags; NTF_SELF for entries of the device itself. */
  flags: number;
}

export function linkFromRaw(r: RawLink): Link {
  const link: Link = {
    index: r.index,
    name: r.name,
    kind: r.kind,
    mac: r.mac,
    mtu: r.mtu,
    up: (r.flags & IFF_UP) !== 0,
    flags: r.flags,
    operState: r.operstate,
    master: r.master,
    ifLink: r.ifLink,
  };
  if (r.vxlan) {
    const v = r.vxlan;
    link.vxlan = {
      vni: v.vni,
      local: v.local,
      vtepIndex: v.link,
      port: v.port,
      learning: v.learning,
      gbp: v.gbp,
      l2miss: v.l2miss,
      l3miss: v.l3miss,
      proxy: v.proxy,
    };
  }
  return link;
}

/** An address lifetime that never runs out (`forever`). */
export const INFINITY_LIFE_TIME = 0xffffffff;

export function addrFromRaw(r: RawAddr): Addr {
  return {
    linkIndex: r.index,
    family: familyOf(r.family),
    address: r.local,
    prefixLen: r.prefixLen,
    scope: r.scope,
    flags: r.flags,
    label: r.label,
    validLft: r.validLft,
  };
}

function isRejectType(type: number): boolean {
  return type === RTN_BLACKHOLE || type === RTN_UNREACHABLE || type === RTN_PROHIBIT;
}

export function routeFromRaw(r: RawRoute): Route {
  const family = familyOf(r.family);
  const route: Route = {
    family,
    dst: `${r.dst || (family === 6 ? '::' : '0.0.0.0')}/${r.dstLen}`,
    table: r.table,
    protocol: r.protocol,
    scope: r.scope,
    type: r.routeType,
    metric: r.priority,
    onlink: ((r.flags | r.nhFlags) & RTNH_F_ONLINK) !== 0,
  };
  if (r.gateway) route.gateway = r.gateway;
  // Reject routes have no output device; IPv6 reports the loopback device for them.
  if (r.oif && !isRejectType(r.routeType)) route.linkIndex = r.oif;
  if (r.prefsrc) route.prefsrc = r.prefsrc;
  if (r.nhid) route.nhid = r.nhid;
  return route;
}

/** A single-gateway nexthop object; groups and blackholes (which Weft never writes) are undefined. */
export function nexthopFromRaw(r: RawNexthop): Nexthop | undefined {
  if (r.group || r.blackhole) return undefined;
  return {
    id: r.id,
    family: familyOf(r.family),
    gateway: r.gateway ?? '',
    linkIndex: r.oif,
    onlink: (r.flags & RTNH_F_ONLINK) !== 0,
    protocol: r.protocol,
  };
}

/** TC_H_ROOT and TC_H_INGRESS: the parents of a device's root and ingress qdiscs. */
export const TC_H_ROOT = 0xffffffff;
export const TC_H_INGRESS = 0xfffffff1;

/** A queueing discipline (`tc qdisc show`); handles as 32-bit `major:minor` numbers. */
export interface Qdisc {
  linkIndex: number;
  handle: number;
  parent: number;
  kind: string;
  /** A tbf's rate (bytes/s), limit (bytes) and buffer (ticks), as the kernel holds them. */
  tbf?: { rate: number; limit: number; buffer: number };
}

export function qdiscFromRaw(r: RawQdisc): Qdisc {
  const q: Qdisc = { linkIndex: r.index, handle: r.handle, parent: r.parent, kind: r.kind };
  if (r.tbf) q.tbf = { rate: r.tbf.rate, limit: r.tbf.limit, buffer: r.tbf.buffer };
  return q;
}

/** A classifier (`tc filter show`), with the devices its mirred actions redirect egress to. */
export interface TcFilter {
  linkIndex: number;
  handle: number;
  parent: number;
  priority: number;
  protocol: number;
  kind: string;
  redirects: number[];
}

export function tcFilterFromRaw(r: RawFilter): TcFilter {
  const { index, handle, parent, priority, protocol, kind, redirects } = r;
  return { linkIndex: index, handle, parent, priority, protocol, kind, redirects };
}

export function neighFromRaw(r: RawNeigh): Neigh {
  return { family: familyOf(r.family), linkIndex: r.index, ip: r.ip ?? '', mac: r.mac ?? '', state: r.state };
}

export function fdbFromRaw(r: RawNeigh): Fdb {
  return { linkIndex: r.index, mac: r.mac ?? '', dst: r.ip ?? '', state: r.state, flags: r.flags };
}

/*
 * The keys below are held for every desired entry: join() builds each as one flat string, where a
 * template would leave a tree of V8 cons strings behind (see formatIP).
 */

/** What identifies a route in a table: the kernel replaces on this key. */
export function routeKey(r: Pick<Route, 'table' | 'dst' | 'metric'>): string {
  return [r.table, r.dst, r.metric].join('|');
}

/** Equal as the kernel holds them: routes through nexthop objects by the id, others by their next hop. */
export function routeEqual(a: Route, b: Route): boolean {
  const nextHop = a.nhid !== undefined || b.nhid !== undefined
    ? a.nhid === b.nhid
    : a.gateway === b.gateway && a.linkIndex === b.linkIndex && a.onlink === b.onlink;
  return (
    nextHop &&
    a.family === b.family &&
    a.dst === b.dst &&
    a.table === b.table &&
    a.protocol === b.protocol &&
    a.scope === b.scope &&
    a.type === b.type &&
    a.metric === b.metric &&
    a.prefsrc === b.prefsrc
  );
}

/** What makes a nexthop object the same next hop: its gateway, device and onlink flag. */
export function nexthopKey(n: Pick<Nexthop, 'gateway' | 'linkIndex' | 'onlink'>): string {
  return [n.gateway, n.linkIndex, n.onlink ? 1 : 0].join('|');
}

export function nexthopEqual(a: Nexthop, b: Nexthop): boolean {
  return (
    a.id === b.id && a.family === b.family && a.gateway === b.gateway &&
    a.linkIndex === b.linkIndex && a.onlink === b.onlink && a.protocol === b.protocol
  );
}

export function neighKey(n: Pick<Neigh, 'linkIndex' | 'ip'>): string {
  return [n.linkIndex, n.ip].join('|');
}

export function neighEqual(a: Neigh, b: Neigh): boolean {
  return a.family === b.family && a.linkIndex === b.linkIndex && a.ip === b.ip && a.mac === b.mac && a.state === b.state;
}

export function fdbKey(f: Pick<Fdb, 'linkIndex' | 'mac' | 'dst'>): string {
  return [f.linkIndex, f.mac, f.dst].join('|');
}

export function fdbEqual(a: Fdb, b: Fdb): boolean {
  return a.linkIndex === b.linkIndex && a.mac === b.mac && a.dst === b.dst && a.state === b.state && a.flags === b.flags;
}

export function addrEqual(a: Addr, b: Addr): boolean {
  return (
    a.linkIndex === b.linkIndex &&
    a.family === b.family &&
    a.address === b.address &&
    a.prefixLen === b.prefixLen &&
    a.scope === b.scope
  );
}

/** `ip route`-style text of a route, for messages and logs. */
export function formatRoute(r: Pick<Route, 'dst' | 'gateway' | 'linkIndex' | 'onlink' | 'nhid'>): string {
  let s = r.dst;
  if (r.nhid) s += ` nhid ${r.nhid}`;
  if (r.gateway) s += ` via ${r.gateway}`;
  if (r.linkIndex) s += ` dev #${r.linkIndex}`;
  if (r.onlink) s += ' onlink';
  return s;
}
