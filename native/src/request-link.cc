// Link requests: `ip link add` (vxlan, bridge, veth, any kind by name), `ip link set`, a bridge
// port's hairpin mode, and `ip link delete` of one device or of a whole group.
#include "request-build.h"

#include <linux/if.h>
#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <netlink/route/link/veth.h>
#include <netlink/route/link/vxlan.h>

#include <cerrno>

namespace weft {

namespace {

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

}  // namespace

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

}  // namespace weft
