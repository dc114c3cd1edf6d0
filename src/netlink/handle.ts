/**
 * The typed netlink API: one {@link NetlinkHandle} per network namespace, verbs named after
 * iproute2. Every call runs in order on the handle's own native thread and returns a Promise;
 * the JS thread never blocks on the kernel. Failures are {@link NetlinkError}s carrying the
 * kernel's own errno (ESRCH for a missing route, ENOENT for a missing neighbour, ...).
 *
 * This file holds the class: its lifecycle, the write path (one operation or a batch) and each
 * verb's contract. The specs it takes are in specs.ts, their translation for the addon in
 * operation.ts; reads are in dump.ts, notifications in monitor.ts and nflog.ts, and the verbs
 * past rtnetlink in address-claim.ts and conntrack.ts.
 */
import type { NetlinkError } from '../errors.ts';
import * as claim from './address-claim.ts';
import * as conntrack from './conntrack.ts';
import type { ConntrackFilter } from './conntrack.ts';
import * as dump from './dump.ts';
import type { RouteFilter } from './dump.ts';
import { startMonitor } from './monitor.ts';
import type { Monitor, MonitorGroup, MonitorOptions, NetlinkEvent } from './monitor.ts';
import { loadAddon } from './native.ts';
import type { RawHandle } from './native.ts';
import { bindNflog } from './nflog.ts';
import type { LoggedPacket, NflogOptions, NflogReader } from './nflog.ts';
import { failure, rawOp, rejected } from './operation.ts';
import type { Addr, Family, Fdb, Link, Neigh, Nexthop, Qdisc, Route, TcFilter } from './records.ts';
import type { AddrSpec, FdbSpec, LinkChanges, NeighSpec, NexthopSpec, Operation, RouteSpec, VethSpec, VxlanSpec } from './specs.ts';

/** Operations per call into the addon in {@link NetlinkHandle.batch}. */
const BATCH_SLICE = 1024;

/** The kernel verbs of one network namespace; see {@link NetlinkHandle.open}. */
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
  linkByName(name: string): Promise<Link> {
    return dump.linkGet(this.#raw, name);
  }

  /** `ip link show` of the device with index `index`. */
  linkByIndex(index: number): Promise<Link> {
    return dump.linkGet(this.#raw, index);
  }

  /** `ip -d link show`. */
  linkList(): Promise<Link[]> {
    return dump.linkList(this.#raw);
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
  addrList(filter: { family?: Family; linkIndex?: number } = {}): Promise<Addr[]> {
    return dump.addrList(this.#raw, filter);
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
  announce(ifindex: number, address: string): Promise<void> {
    return claim.announce(this.#raw, ifindex, address);
  }

  /**
   * `conntrack -D -f ipv4|ipv6 -p <protocol> [--orig-dst <origDst>] [--orig-port-dst <port>]
   * [--reply-src <replySrc>]` over ctnetlink, for every filter in one dump of the handle's
   * namespace's table; resolves to the number of entries deleted (none is not an error).
   */
  conntrackDelete(filters: readonly ConntrackFilter[]): Promise<number> {
    return conntrack.conntrackDelete(this.#raw, filters);
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
  addressProbe(ifindex: number, addresses: readonly string[], waitMs: number, probes = 3): Promise<string[][]> {
    return claim.addressProbe(this.#raw, ifindex, addresses, waitMs, probes);
  }

  // ---- routes ----

  /**
   * `ip route show table all`, as a raw dump: routes that differ only in next hop stay
   * separate records (libnl's cache would merge them). Filtering happens before JS sees them.
   */
  routeList(filter: RouteFilter = {}): Promise<Route[]> {
    return dump.collect((sink) => this.routeEach(filter, sink));
  }

  /** {@link routeList}, each route handed to `sink` as it is read instead of kept in an array. */
  routeEach(filter: RouteFilter, sink: (r: Route) => void): Promise<void> {
    return dump.routeEach(this.#raw, filter, sink);
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
  routeGet(dst: string, linkIndex?: number): Promise<Route> {
    return dump.routeGet(this.#raw, dst, linkIndex);
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
    return dump.collect((sink) => this.nexthopEach(sink));
  }

  /** {@link nexthopList}, each object handed to `sink` as it is read. */
  nexthopEach(sink: (n: Nexthop) => void): Promise<void> {
    return dump.nexthopEach(this.#raw, sink);
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
    return dump.collect((sink) => this.neighEach(filter, sink));
  }

  /** {@link neighList}, each neighbour handed to `sink` as it is read. */
  neighEach(filter: { family?: Family; linkIndex?: number }, sink: (n: Neigh) => void): Promise<void> {
    return dump.neighEach(this.#raw, filter, sink);
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
    return dump.collect((sink) => this.fdbEach(filter, sink));
  }

  /** {@link fdbList}, each entry handed to `sink` as it is read. */
  fdbEach(filter: { linkIndex?: number }, sink: (f: Fdb) => void): Promise<void> {
    return dump.fdbEach(this.#raw, filter, sink);
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
  qdiscList(filter: { linkIndex?: number } = {}): Promise<Qdisc[]> {
    return dump.qdiscList(this.#raw, filter);
  }

  /** `tc filter show dev <#linkIndex> parent <parent>`. */
  filterList(linkIndex: number, parent: number): Promise<TcFilter[]> {
    return dump.filterList(this.#raw, linkIndex, parent);
  }

  // ---- notifications ----

  /**
   * `ip monitor link address route neigh`: calls `listener` with batches of events as the kernel
   * reports them, including vxlan L2/L3 misses and receive overruns. One monitor per handle.
   * Keeps the event loop alive until {@link Monitor.stop}.
   */
  monitor(
    groups: readonly MonitorGroup[],
    listener: (events: NetlinkEvent[]) => void,
    options: MonitorOptions = {},
  ): Promise<Monitor> {
    return startMonitor(this.#raw, groups, listener, options);
  }

  /**
   * Binds NFLOG group `group` (what `ulogd` binds for nftables' `log group N`) in the handle's
   * namespace and calls `listener` with batches of the packets logged there, and `lost` when the
   * kernel dropped some because weftd read too slowly. Rejects with errno EPERM when another
   * socket holds the group (the kernel's answer). One group per handle; keeps the event loop alive until stopped.
   */
  nflog(
    group: number,
    listener: (packets: LoggedPacket[], lost: boolean) => void,
    options: NflogOptions = {},
  ): Promise<NflogReader> {
    return bindNflog(this.#raw, group, listener, options);
  }

  /**
   * The nftables ruleset's generation in the handle's namespace (NFT_MSG_GETGEN): the kernel
   * advances it by one with every transaction committed there, whichever program commits it.
   */
  async nftGeneration(): Promise<number> {
    try {
      return await this.#raw.nftGeneration();
    } catch (e) {
      throw rejected('read', 'the nftables generation', e);
    }
  }
}
