/**
 * What a caller hands {@link NetlinkHandle} to change the kernel: one spec per kind of object
 * (route, nexthop, neighbour, FDB entry, address, link, qdisc) and the {@link Operation} union that
 * {@link NetlinkHandle.batch} takes. Plain data; the addon's shapes are made from them in operation.ts.
 */

/** A route as `ip route add|replace|del` names it. */
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

/** A single-gateway nexthop object as `ip nexthop replace|del` names it. */
export interface NexthopSpec {
  id: number;
  /** The gateway; its family is the nexthop's. */
  gateway?: string;
  linkIndex?: number;
  onlink?: boolean;
  /** nh_protocol; default boot (3). */
  protocol?: number;
}

/** A neighbour entry as `ip neigh add|replace|del` names it. */
export interface NeighSpec {
  linkIndex: number;
  ip: string;
  mac?: string;
  /** NUD_* state; default permanent. */
  state?: number;
}

/** A bridge FDB entry as `bridge fdb append|replace|del` names it. */
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

/** An address as `ip addr add|replace|del` names it. */
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

/** A veth pair as `ip link add ... type veth peer ...` creates it. */
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

/** A vxlan device as `ip link add ... type vxlan` creates it. */
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

/** What `ip link set` changes on a link; absent fields stay as they are. */
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
