// Requests: JS objects to Op (main thread), Op to a libnl-built netlink message (worker thread).
#include "common.h"

#include <arpa/inet.h>
#include <linux/if.h>
#include <linux/neighbour.h>
#include <linux/rtnetlink.h>
#include <linux/if_link.h>
#include <linux/nexthop.h>
#include <netlink/route/link/veth.h>
#include <netlink/route/link/vxlan.h>
#include <netlink/route/nexthop.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace weft {

namespace {

struct OpName {
  const char* name;
  OpKind kind;
};

const OpName kOpNames[] = {
    {"linkAddVxlan", OpKind::LinkAddVxlan}, {"linkAddBridge", OpKind::LinkAddBridge},
    {"linkAddType", OpKind::LinkAddType},
    {"linkAddVeth", OpKind::LinkAddVeth},   {"linkSetHairpin", OpKind::LinkSetHairpin},
    {"linkSet", OpKind::LinkSet},           {"linkDelGroup", OpKind::LinkDelGroup},
    {"linkDel", OpKind::LinkDel},           {"addrAdd", OpKind::AddrAdd},
    {"addrReplace", OpKind::AddrReplace},   {"addrDel", OpKind::AddrDel},
    {"routeAdd", OpKind::RouteAdd},         {"routeReplace", OpKind::RouteReplace},
    {"routeDel", OpKind::RouteDel},         {"neighAdd", OpKind::NeighAdd},
    {"neighReplace", OpKind::NeighReplace}, {"neighAppend", OpKind::NeighAppend},
    {"neighDel", OpKind::NeighDel},         {"nexthopAdd", OpKind::NexthopAdd},
    {"nexthopReplace", OpKind::NexthopReplace}, {"nexthopDel", OpKind::NexthopDel},
    {"linkAddIfb", OpKind::LinkAddIfb},     {"qdiscAddTbf", OpKind::QdiscAddTbf},
    {"qdiscAddIngress", OpKind::QdiscAddIngress}, {"filterAddRedirect", OpKind::FilterAddRedirect},
};

// Typed field readers: a present field of the wrong type marks the op invalid, naming the field.
struct Reader {
  Napi::Object obj;
  Op& op;

  bool has(const char* key) const {
    Napi::Value v = obj.Get(key);
    return !v.IsUndefined() && !v.IsNull();
  }
  void fail(const char* key, const char* want) {
    if (op.invalid.empty()) op.invalid = std::string("field ") + key + " must be " + want;
  }
  void str(const char* key, std::string& out) {
    if (!has(key)) return;
    Napi::Value v = obj.Get(key);
    if (!v.IsString()) return fail(key, "a string");
    out = v.As<Napi::String>().Utf8Value();
  }
  template <typename T>
  void num(const char* key, T& out, double lo, double hi) {
    if (!has(key)) return;
    Napi::Value v = obj.Get(key);
    if (!v.IsNumber()) return fail(key, "a number");
    double d = v.As<Napi::Number>().DoubleValue();
    if (d != static_cast<double>(static_cast<int64_t>(d)) || d < lo || d > hi) return fail(key, "an integer in range");
    out = static_cast<T>(d);
  }
  void flag(const char* key, bool& out) {
    if (!has(key)) return;
    Napi::Value v = obj.Get(key);
    if (!v.IsBoolean()) return fail(key, "a boolean");
    out = v.As<Napi::Boolean>().Value();
  }
};

using MsgPtr = std::unique_ptr<nl_msg, void (*)(nl_msg*)>;
template <typename T, void (*Put)(T*)>
struct Owned {
  T* p;
  explicit Owned(T* ptr) : p(ptr) {}
  ~Owned() { if (p) Put(p); }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
};
using AddrOwned = Owned<nl_addr, nl_addr_put>;
using LinkOwned = Owned<rtnl_link, rtnl_link_put>;
using RouteOwned = Owned<rtnl_route, rtnl_route_put>;
using NeighOwned = Owned<rtnl_neigh, rtnl_neigh_put>;
using AddrObjOwned = Owned<rtnl_addr, rtnl_addr_put>;

// An IP address in text form to a libnl address; family 0 accepts either.
nl_addr* ipAddr(const std::string& text, int family, int prefixLen, Failure& fail, const char* what) {
  unsigned char buf[16];
  int fam = 0;
  if ((family == 0 || family == AF_INET) && inet_pton(AF_INET, text.c_str(), buf) == 1) fam = AF_INET;
  else if ((family == 0 || family == AF_INET6) && inet_pton(AF_INET6, text.c_str(), buf) == 1) fam = AF_INET6;
  if (fam == 0) {
    fail = {EINVAL, std::string("invalid ") + what + " address \"" + text + "\""};
    return nullptr;
  }
  nl_addr* a = nl_addr_build(fam, buf, fam == AF_INET ? 4 : 16);
  if (a == nullptr) {
    fail = {ENOMEM, "out of memory"};
    return nullptr;
  }
  int maxLen = fam == AF_INET ? 32 : 128;
  if (prefixLen < 0 || prefixLen > maxLen) {
    nl_addr_put(a);
    fail = {EINVAL, std::string("invalid ") + what + " prefix length " + std::to_string(prefixLen)};
    return nullptr;
  }
  nl_addr_set_prefixlen(a, prefixLen);
  return a;
}

nl_addr* macAddr(const std::string& text, Failure& fail) {
  unsigned char b[6];
  unsigned v[6];
  char tail;
  if (sscanf(text.c_str(), "%2x:%2x:%2x:%2x:%2x:%2x%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &tail) != 6) {
    fail = {EINVAL, "invalid MAC address \"" + text + "\""};
    return nullptr;
  }
  for (int i = 0; i < 6; i++) b[i] = static_cast<unsigned char>(v[i]);
  return nl_addr_build(AF_LLC, b, 6);
}

// Takes the message by address: it is read only after the builder (the first argument) has run.
nl_msg* fromLibnl(int rc, nl_msg** msg, Failure& fail) {
  if (rc < 0) {
    fail = {EINVAL, std::string("cannot build request: ") + nl_geterror(rc)};
    return nullptr;
  }
  return *msg;
}

// `ip link set <index> type bridge_slave hairpin on|off`: RTM_SETLINK of family AF_BRIDGE
// with IFLA_PROTINFO { IFLA_BRPORT_MODE }, built by hand (libnl's bridge module would add
// attributes of its own to the change).
nl_msg* buildHairpin(const Op& op, Failure& fail) {
  ifinfomsg ifi = {};
  ifi.ifi_family = AF_BRIDGE;
  ifi.ifi_index = op.index;
  nl_msg* msg = nlmsg_alloc_simple(RTM_SETLINK, 0);
  if (!msg) return fail = {ENOMEM, "out of memory"}, nullptr;
  nlattr* info = nullptr;
  if (nlmsg_append(msg, &ifi, sizeof ifi, NLMSG_ALIGNTO) < 0 || !(info = nla_nest_start(msg, IFLA_PROTINFO | NLA_F_NESTED)) ||
      nla_put_u8(msg, IFLA_BRPORT_MODE, op.on ? 1 : 0) < 0) {
    nlmsg_free(msg);
    return fail = {ENOMEM, "out of memory"}, nullptr;
  }
  nla_nest_end(msg, info);
  return msg;
}

// `ip link delete group <group>`: RTM_DELLINK without an index, so the kernel unregisters every
// device of the group in one batch (one RCU grace period for all of them, not one each).
nl_msg* buildDelGroup(const Op& op, Failure& fail) {
  ifinfomsg ifi = {};
  nl_msg* msg = nlmsg_alloc_simple(RTM_DELLINK, 0);
  if (!msg) return fail = {ENOMEM, "out of memory"}, nullptr;
  if (nlmsg_append(msg, &ifi, sizeof ifi, NLMSG_ALIGNTO) < 0 || nla_put_u32(msg, IFLA_GROUP, op.group) < 0) {
    nlmsg_free(msg);
    return fail = {ENOMEM, "out of memory"}, nullptr;
  }
  return msg;
}

nl_msg* buildLink(const Op& op, Failure& fail) {
  if (op.kind == OpKind::LinkSetHairpin) return buildHairpin(op, fail);
  if (op.kind == OpKind::LinkDelGroup) return buildDelGroup(op, fail);
  LinkOwned link(op.kind == OpKind::LinkAddVxlan ? rtnl_link_vxlan_alloc()
                 : op.kind == OpKind::LinkAddVeth ? rtnl_link_veth_alloc()
                                                  : rtnl_link_alloc());
  if (!link.p) return fail = {ENOMEM, "out of memory"}, nullptr;
  if (op.index) rtnl_link_set_ifindex(link.p, op.index);
  if (!op.name.empty()) rtnl_link_set_name(link.p, op.name.c_str());
  if (op.mtu) rtnl_link_set_mtu(link.p, op.mtu);
  if (op.master >= 0) rtnl_link_set_master(link.p, op.master);
  if (op.group) rtnl_link_set_group(link.p, op.group);
  if (!op.mac.empty()) {
    AddrOwned mac(macAddr(op.mac, fail));
    if (!mac.p) return nullptr;
    rtnl_link_set_addr(link.p, mac.p);
  }
  if (op.up.has_value()) {
    if (*op.up) rtnl_link_set_flags(link.p, IFF_UP);
    else rtnl_link_unset_flags(link.p, IFF_UP);
  }
  nl_msg* msg = nullptr;
  if (op.kind == OpKind::LinkDel) return fromLibnl(rtnl_link_build_delete_request(link.p, &msg), &msg, fail);
  if (op.kind == OpKind::LinkSet) return fromLibnl(rtnl_link_build_add_request(link.p, 0, &msg), &msg, fail);
  if (op.kind == OpKind::LinkAddBridge || op.kind == OpKind::LinkAddType) {
    const char* kind = op.kind == OpKind::LinkAddBridge ? "bridge" : op.linkKind.c_str();
    if (int rc = rtnl_link_set_type(link.p, kind); rc < 0) return fromLibnl(rc, &msg, fail);
    return fromLibnl(rtnl_link_build_add_request(link.p, NLM_F_CREATE | NLM_F_EXCL, &msg), &msg, fail);
  }
  if (op.kind == OpKind::LinkAddVeth) {
    // The peer is created where peerNsFd points, under its own name, in the same request.
    LinkOwned peer(rtnl_link_veth_get_peer(link.p));
    if (!op.peerName.empty()) rtnl_link_set_name(peer.p, op.peerName.c_str());
    if (op.mtu) rtnl_link_set_mtu(peer.p, op.mtu);
    if (op.peerNsFd >= 0) rtnl_link_set_ns_fd(peer.p, op.peerNsFd);
    return fromLibnl(rtnl_link_build_add_request(link.p, NLM_F_CREATE | NLM_F_EXCL, &msg), &msg, fail);
  }

  rtnl_link_vxlan_set_id(link.p, op.vni);
  if (!op.local.empty()) {
    AddrOwned local(ipAddr(op.local, 0, 0, fail, "vxlan local"));
    if (!local.p) return nullptr;
    nl_addr_set_prefixlen(local.p, nl_addr_get_len(local.p) * 8);
    rtnl_link_vxlan_set_local(link.p, local.p);
  }
  if (op.vtepIndex) rtnl_link_vxlan_set_link(link.p, op.vtepIndex);
  if (op.port) rtnl_link_vxlan_set_port(link.p, op.port);
  rtnl_link_vxlan_set_learning(link.p, op.learning ? 1 : 0);
  if (op.gbp) rtnl_link_vxlan_set_flags(link.p, RTNL_LINK_VXLAN_F_GBP, 1);
  if (op.l2miss) rtnl_link_vxlan_set_l2miss(link.p, 1);
  if (op.l3miss) rtnl_link_vxlan_set_l3miss(link.p, 1);
  if (op.proxy) rtnl_link_vxlan_set_proxy(link.p, 1);
  return fromLibnl(rtnl_link_build_add_request(link.p, NLM_F_CREATE | NLM_F_EXCL, &msg), &msg, fail);
}

nl_msg* buildAddr(const Op& op, Failure& fail) {
  AddrObjOwned a(rtnl_addr_alloc());
  if (!a.p) return fail = {ENOMEM, "out of memory"}, nullptr;
  AddrOwned local(ipAddr(op.local, op.family, op.prefixLen, fail, "local"));
  if (!local.p) return nullptr;
  rtnl_addr_set_ifindex(a.p, op.index);
  rtnl_addr_set_family(a.p, nl_addr_get_family(local.p));
  rtnl_addr_set_local(a.p, local.p);
  rtnl_addr_set_prefixlen(a.p, op.prefixLen);
  if (op.scope >= 0) rtnl_addr_set_scope(a.p, op.scope);
  if (op.flags) rtnl_addr_set_flags(a.p, op.flags);
  // IFA_CACHEINFO: the kernel deletes the address by itself when the valid lifetime runs out.
  if (op.validLft) {
    rtnl_addr_set_valid_lifetime(a.p, op.validLft);
    rtnl_addr_set_preferred_lifetime(a.p, op.preferredLft);
  }
  nl_msg* msg = nullptr;
  switch (op.kind) {
    case OpKind::AddrDel: return fromLibnl(rtnl_addr_build_delete_request(a.p, 0, &msg), &msg, fail);
    case OpKind::AddrReplace:
      return fromLibnl(rtnl_addr_build_add_request(a.p, NLM_F_CREATE | NLM_F_REPLACE, &msg), &msg, fail);
    default: return fromLibnl(rtnl_addr_build_add_request(a.p, NLM_F_CREATE | NLM_F_EXCL, &msg), &msg, fail);
  }
}

nl_msg* buildRoute(const Op& op, Failure& fail) {
  RouteOwned rt(rtnl_route_alloc());
  if (!rt.p) return fail = {ENOMEM, "out of memory"}, nullptr;
  int family = op.family;
  nl_addr* dst = nullptr;
  if (!op.dst.empty()) {
    dst = ipAddr(op.dst, family, op.dstLen, fail, "destination");
    if (!dst) return nullptr;
    family = nl_addr_get_family(dst);
  } else {
    if (family != AF_INET && family != AF_INET6) return fail = {EINVAL, "a default route needs its family"}, nullptr;
    unsigned char zero[16] = {};
    dst = nl_addr_build(family, zero, family == AF_INET ? 4 : 16);
    nl_addr_set_prefixlen(dst, 0);
  }
  AddrOwned dstOwned(dst);
  rtnl_route_set_family(rt.p, family);
  rtnl_route_set_dst(rt.p, dst);
  rtnl_route_set_table(rt.p, op.table ? op.table : RT_TABLE_MAIN);
  // libnl defaults to proto static: the protocol is always explicit. A delete matches any
  // protocol and scope unless the caller names them, as `ip route del` does.
  bool del = op.kind == OpKind::RouteDel;
  rtnl_route_set_protocol(rt.p, op.protocol >= 0 ? op.protocol : (del ? RTPROT_UNSPEC : RTPROT_BOOT));
  if (op.scope >= 0) rtnl_route_set_scope(rt.p, op.scope);
  else if (del) rtnl_route_set_scope(rt.p, RT_SCOPE_NOWHERE);
  if (op.type >= 0) rtnl_route_set_type(rt.p, op.type);
  if (op.hasPriority) rtnl_route_set_priority(rt.p, op.priority);
  if (!op.prefsrc.empty()) {
    AddrOwned src(ipAddr(op.prefsrc, family, family == AF_INET ? 32 : 128, fail, "source"));
    if (!src.p) return nullptr;
    rtnl_route_set_pref_src(rt.p, src.p);
  }
  if (op.nhid && (op.index || !op.gateway.empty())) return fail = {EINVAL, "a route through a nexthop object has no gateway or device of its own"}, nullptr;
  if (op.index || !op.gateway.empty()) {
    rtnl_nexthop* nh = rtnl_route_nh_alloc();
    if (!nh) return fail = {ENOMEM, "out of memory"}, nullptr;
    if (op.index) rtnl_route_nh_set_ifindex(nh, op.index);
    if (!op.gateway.empty()) {
      AddrOwned gw(ipAddr(op.gateway, 0, 0, fail, "gateway"));
      if (!gw.p) {
        rtnl_route_nh_free(nh);
        return nullptr;
      }
      nl_addr_set_prefixlen(gw.p, nl_addr_get_len(gw.p) * 8);
      rtnl_route_nh_set_gateway(nh, gw.p);
    }
    if (op.onlink) rtnl_route_nh_set_flags(nh, RTNH_F_ONLINK);
    rtnl_route_add_nexthop(rt.p, nh);  // the route owns it from here
  }
  nl_msg* msg = nullptr;
  int rc;
  switch (op.kind) {
    case OpKind::RouteDel: rc = rtnl_route_build_del_request(rt.p, 0, &msg); break;
    case OpKind::RouteReplace: rc = rtnl_route_build_add_request(rt.p, NLM_F_CREATE | NLM_F_REPLACE, &msg); break;
    default: rc = rtnl_route_build_add_request(rt.p, NLM_F_CREATE | NLM_F_EXCL, &msg); break;
  }
  if (!fromLibnl(rc, &msg, fail)) return nullptr;
  // libnl 3.7 knows no RTA_NH_ID: appended to the message it built.
  if (op.nhid && nla_put_u32(msg, RTA_NH_ID, op.nhid) < 0) {
    nlmsg_free(msg);
    return fail = {ENOMEM, "out of memory"}, nullptr;
  }
  return msg;
}

// `ip nexthop add|replace id <id> via <gateway> dev <index> [onlink] proto <protocol>` and
// `ip nexthop del id <id>`: RTM_NEWNEXTHOP / RTM_DELNEXTHOP built with libnl's generic message
// API (libnl-route-3 3.7 has no nexthop objects).
nl_msg* buildNexthop(const Op& op, Failure& fail) {
  if (op.id == 0) return fail = {EINVAL, "a nexthop needs an id"}, nullptr;
  bool del = op.kind == OpKind::NexthopDel;
  unsigned char gw[16];
  int family = op.family;
  if (!del) {
    if (!op.index) return fail = {EINVAL, "a nexthop needs a device"}, nullptr;
    if (!op.gateway.empty()) {
      if (inet_pton(AF_INET, op.gateway.c_str(), gw) == 1) family = AF_INET;
      else if (inet_pton(AF_INET6, op.gateway.c_str(), gw) == 1) family = AF_INET6;
      else return fail = {EINVAL, "invalid gateway address \"" + op.gateway + "\""}, nullptr;
    }
    if (family != AF_INET && family != AF_INET6) return fail = {EINVAL, "a nexthop without a gateway needs its family"}, nullptr;
  }
  // A delete names the id only: the kernel refuses any other header field in it.
  nhmsg nhm = {};
  if (!del) {
    nhm.nh_family = static_cast<unsigned char>(family);
    nhm.nh_protocol = static_cast<unsigned char>(op.protocol >= 0 ? op.protocol : RTPROT_BOOT);
    nhm.nh_flags = op.onlink ? RTNH_F_ONLINK : 0;
  }
  int flags = del ? 0 : op.kind == OpKind::NexthopReplace ? NLM_F_CREATE | NLM_F_REPLACE : NLM_F_CREATE | NLM_F_EXCL;
  nl_msg* msg = nlmsg_alloc_simple(del ? RTM_DELNEXTHOP : RTM_NEWNEXTHOP, flags);
  if (!msg) return fail = {ENOMEM, "out of memory"}, nullptr;
  bool ok = nlmsg_append(msg, &nhm, sizeof nhm, NLMSG_ALIGNTO) >= 0 && nla_put_u32(msg, NHA_ID, op.id) >= 0;
  if (ok && !del) {
    ok = nla_put_u32(msg, NHA_OIF, static_cast<uint32_t>(op.index)) >= 0 &&
         (op.gateway.empty() || nla_put(msg, NHA_GATEWAY, family == AF_INET ? 4 : 16, gw) >= 0);
  }
  if (!ok) {
    nlmsg_free(msg);
    return fail = {ENOMEM, "out of memory"}, nullptr;
  }
  return msg;
}

nl_msg* buildNeigh(const Op& op, Failure& fail) {
  NeighOwned n(rtnl_neigh_alloc());
  if (!n.p) return fail = {ENOMEM, "out of memory"}, nullptr;
  rtnl_neigh_set_ifindex(n.p, op.index);
  // libnl 3.7 checks the family of NDA_DST against the object's family: set dst first, then
  // switch an FDB entry to AF_BRIDGE.
  if (!op.dst.empty()) {
    AddrOwned dst(ipAddr(op.dst, op.family == AF_BRIDGE ? 0 : op.family, 0, fail, "neighbour"));
    if (!dst.p) return nullptr;
    nl_addr_set_prefixlen(dst.p, nl_addr_get_len(dst.p) * 8);
    rtnl_neigh_set_dst(n.p, dst.p);
  } else if (op.family != AF_BRIDGE) {
    return fail = {EINVAL, "a neighbour entry needs an IP address"}, nullptr;
  }
  if (op.family == AF_BRIDGE) rtnl_neigh_set_family(n.p, AF_BRIDGE);
  if (!op.mac.empty()) {
    AddrOwned mac(macAddr(op.mac, fail));
    if (!mac.p) return nullptr;
    rtnl_neigh_set_lladdr(n.p, mac.p);
  }
  if (op.state >= 0) rtnl_neigh_set_state(n.p, op.state);
  if (op.flags) rtnl_neigh_set_flags(n.p, op.flags);
  if (op.vlan) rtnl_neigh_set_vlan(n.p, op.vlan);
  nl_msg* msg = nullptr;
  switch (op.kind) {
    case OpKind::NeighDel: return fromLibnl(rtnl_neigh_build_delete_request(n.p, 0, &msg), &msg, fail);
    case OpKind::NeighReplace:
      return fromLibnl(rtnl_neigh_build_add_request(n.p, NLM_F_CREATE | NLM_F_REPLACE, &msg), &msg, fail);
    case OpKind::NeighAppend:
      return fromLibnl(rtnl_neigh_build_add_request(n.p, NLM_F_CREATE | NLM_F_APPEND, &msg), &msg, fail);
    default: return fromLibnl(rtnl_neigh_build_add_request(n.p, NLM_F_CREATE | NLM_F_EXCL, &msg), &msg, fail);
  }
}

}  // namespace

Op opFromJs(const Napi::Value& v) {
  Op op;
  if (!v.IsObject()) {
    op.invalid = "operation must be an object";
    return op;
  }
  Reader r{v.As<Napi::Object>(), op};
  std::string name;
  r.str("op", name);
  bool known = false;
  for (const auto& o : kOpNames) {
    if (name == o.name) {
      op.kind = o.kind;
      known = true;
    }
  }
  if (!known) {
    op.invalid = "unknown operation \"" + name + "\"";
    return op;
  }
  r.num("index", op.index, 0, INT32_MAX);
  r.num("family", op.family, 0, 255);
  r.str("name", op.name);
  if (r.has("up")) {
    bool up = false;
    r.flag("up", up);
    op.up = up;
  }
  r.num("mtu", op.mtu, 0, UINT32_MAX);
  r.str("mac", op.mac);
  r.num("master", op.master, 0, INT32_MAX);
  r.num("group", op.group, 1, UINT32_MAX);
  r.flag("on", op.on);
  r.str("peerName", op.peerName);
  r.str("linkKind", op.linkKind);
  r.num("peerNsFd", op.peerNsFd, 0, INT32_MAX);
  r.num("vni", op.vni, 0, 0xffffff);
  r.str("local", op.local);
  r.num("vtepIndex", op.vtepIndex, 0, INT32_MAX);
  r.num("port", op.port, 0, 65535);
  r.flag("learning", op.learning);
  r.flag("gbp", op.gbp);
  r.flag("l2miss", op.l2miss);
  r.flag("l3miss", op.l3miss);
  r.flag("proxy", op.proxy);
  r.num("prefixLen", op.prefixLen, 0, 128);
  r.num("scope", op.scope, 0, 255);
  r.str("dst", op.dst);
  r.num("dstLen", op.dstLen, 0, 128);
  r.str("gateway", op.gateway);
  r.str("prefsrc", op.prefsrc);
  r.num("table", op.table, 0, UINT32_MAX);
  r.num("protocol", op.protocol, 0, 255);
  if (r.has("priority")) {
    r.num("priority", op.priority, 0, UINT32_MAX);
    op.hasPriority = true;
  }
  r.num("routeType", op.type, 0, 255);
  r.flag("onlink", op.onlink);
  r.num("nhid", op.nhid, 0, UINT32_MAX);
  r.num("id", op.id, 0, UINT32_MAX);
  r.num("validLft", op.validLft, 0, UINT32_MAX - 1);
  r.num("preferredLft", op.preferredLft, 0, UINT32_MAX - 1);
  r.num("state", op.state, 0, 0xffff);
  r.num("flags", op.flags, 0, 255);
  r.num("vlan", op.vlan, 0, 4095);
  r.num("rate", op.rate, 0, 9007199254740991.0);
  r.num("limit", op.limit, 0, UINT32_MAX);
  r.num("buffer", op.buffer, 0, UINT32_MAX);
  r.num("target", op.target, 0, INT32_MAX);
  return op;
}

nl_msg* buildRequest(const Op& op, Failure& fail) {
  if (!op.invalid.empty()) {
    fail = {EINVAL, op.invalid};
    return nullptr;
  }
  switch (op.kind) {
    case OpKind::LinkAddVxlan:
    case OpKind::LinkAddBridge:
    case OpKind::LinkAddType:
    case OpKind::LinkAddVeth:
    case OpKind::LinkSet:
    case OpKind::LinkSetHairpin:
    case OpKind::LinkDelGroup:
    case OpKind::LinkDel: return buildLink(op, fail);
    case OpKind::AddrAdd:
    case OpKind::AddrReplace:
    case OpKind::AddrDel: return buildAddr(op, fail);
    case OpKind::RouteAdd:
    case OpKind::RouteReplace:
    case OpKind::RouteDel: return buildRoute(op, fail);
    case OpKind::NexthopAdd:
    case OpKind::NexthopReplace:
    case OpKind::NexthopDel: return buildNexthop(op, fail);
    case OpKind::LinkAddIfb:
    case OpKind::QdiscAddTbf:
    case OpKind::QdiscAddIngress:
    case OpKind::FilterAddRedirect: return buildTc(op, fail);
    default: return buildNeigh(op, fail);
  }
}

}  // namespace weft
