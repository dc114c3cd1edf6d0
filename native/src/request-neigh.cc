// Neighbour requests: `ip neigh add|replace|del` and `bridge fdb add|replace|append|del`.
#include "request-build.h"

#include <linux/neighbour.h>

#include <cerrno>

namespace weft {

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

}  // namespace weft
