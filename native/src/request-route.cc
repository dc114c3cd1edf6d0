// Route requests: `ip route add|replace|del` (through a gateway, a device or a nexthop object)
// and the nexthop objects themselves (`ip nexthop add|replace|del`).
#include "request-build.h"

#include <arpa/inet.h>
#include <linux/nexthop.h>
#include <linux/rtnetlink.h>
#include <netlink/route/nexthop.h>

#include <cerrno>

namespace weft {

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
  if (op.nhid && (op.index || !op.gateway.empty())) {
    return fail = {EINVAL, "a route through a nexthop object has no gateway or device of its own"}, nullptr;
  }
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

}  // namespace weft
