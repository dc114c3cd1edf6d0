// Traffic control: the requests that shape a pod's bandwidth as the reference `bandwidth` CNI
// plugin does (an ifb device, tbf and ingress qdiscs, a u32 filter redirecting to the ifb), and
// the qdisc and filter messages read back for CHECK.
#include "request-build.h"

#include <linux/if.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <linux/tc_act/tc_mirred.h>
#include <netlink/route/act/mirred.h>
#include <netlink/route/action.h>
#include <netlink/route/classifier.h>
#include <netlink/route/cls/u32.h>
#include <netlink/route/qdisc.h>
#include <netlink/route/tc.h>

#include <arpa/inet.h>

#include <cerrno>
#include <cstring>

namespace weft {

namespace {

nl_msg* outOfMemory(nl_msg* msg, Failure& fail) {
  if (msg) nlmsg_free(msg);
  fail = {ENOMEM, "out of memory"};
  return nullptr;
}

// `ip link add <name> mtu <mtu> txqueuelen 0 up type ifb`: the queue length is 0 as the
// reference plugin leaves it, so either path makes the same device.
nl_msg* buildIfb(const Op& op, Failure& fail) {
  LinkOwned link(rtnl_link_alloc());
  if (!link.p) return outOfMemory(nullptr, fail);
  rtnl_link_set_name(link.p, op.name.c_str());
  if (op.mtu) rtnl_link_set_mtu(link.p, op.mtu);
  rtnl_link_set_txqlen(link.p, 0);
  if (op.up.value_or(false)) rtnl_link_set_flags(link.p, IFF_UP);
  if (int rc = rtnl_link_set_type(link.p, "ifb"); rc < 0) return fromLibnl(rc, nullptr, fail);
  nl_msg* msg = nullptr;
  return fromLibnl(rtnl_link_build_add_request(link.p, NLM_F_CREATE | NLM_F_EXCL, &msg), &msg, fail);
}

// `tc qdisc add dev <#index> root handle 1: tbf rate <rate> burst ... limit ...` with the buffer
// (ticks) and limit (bytes) given as computed: libnl's tbf object takes a 32-bit rate and derives
// the buffer with its own rounding, so only the header is libnl's and the options are put here.
nl_msg* buildTbf(const Op& op, Failure& fail) {
  Owned<rtnl_qdisc, rtnl_qdisc_put> q(rtnl_qdisc_alloc());
  if (!q.p) return outOfMemory(nullptr, fail);
  rtnl_tc_set_ifindex(TC_CAST(q.p), op.index);
  rtnl_tc_set_parent(TC_CAST(q.p), TC_H_ROOT);
  rtnl_tc_set_handle(TC_CAST(q.p), TC_HANDLE(1, 0));
  nl_msg* msg = nullptr;
  if (!fromLibnl(rtnl_qdisc_build_add_request(q.p, NLM_F_CREATE | NLM_F_EXCL, &msg), &msg, fail)) return nullptr;
  tc_tbf_qopt opt = {};
  opt.rate.rate = op.rate > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(op.rate);
  opt.limit = op.limit;
  opt.buffer = op.buffer;
  nlattr* options = nullptr;
  if (nla_put_string(msg, TCA_KIND, "tbf") < 0 || !(options = nla_nest_start(msg, TCA_OPTIONS)) ||
      nla_put(msg, TCA_TBF_PARMS, sizeof opt, &opt) < 0 ||
      (op.rate > UINT32_MAX && nla_put_u64(msg, TCA_TBF_RATE64, op.rate) < 0))
    return outOfMemory(msg, fail);
  nla_nest_end(msg, options);
  return msg;
}

// `tc qdisc add dev <#index> handle ffff: ingress`.
nl_msg* buildIngress(const Op& op, Failure& fail) {
  Owned<rtnl_qdisc, rtnl_qdisc_put> q(rtnl_qdisc_alloc());
  if (!q.p) return outOfMemory(nullptr, fail);
  rtnl_tc_set_ifindex(TC_CAST(q.p), op.index);
  rtnl_tc_set_parent(TC_CAST(q.p), TC_H_INGRESS);
  rtnl_tc_set_handle(TC_CAST(q.p), TC_HANDLE(0xffff, 0));
  if (int rc = rtnl_tc_set_kind(TC_CAST(q.p), "ingress"); rc < 0) return fromLibnl(rc, nullptr, fail);
  nl_msg* msg = nullptr;
  return fromLibnl(rtnl_qdisc_build_add_request(q.p, NLM_F_CREATE | NLM_F_EXCL, &msg), &msg, fail);
}

// `tc filter add dev <#index> parent ffff: protocol all prio 1 u32 match u32 0 0 flowid 1:1
// action mirred egress redirect dev <#target> action mirred egress redirect dev <#target> pass`:
// the two actions the reference plugin installs (its netlink library puts one for the filter's
// redirect index before the one it lists), so `tc filter show` reads the same on either path.
nl_msg* buildRedirect(const Op& op, Failure& fail) {
  Owned<rtnl_cls, rtnl_cls_put> cls(rtnl_cls_alloc());
  if (!cls.p) return outOfMemory(nullptr, fail);
  rtnl_tc_set_ifindex(TC_CAST(cls.p), op.index);
  rtnl_tc_set_parent(TC_CAST(cls.p), TC_HANDLE(0xffff, 0));
  rtnl_cls_set_prio(cls.p, 1);
  rtnl_cls_set_protocol(cls.p, ETH_P_ALL);
  if (int rc = rtnl_tc_set_kind(TC_CAST(cls.p), "u32"); rc < 0) return fromLibnl(rc, nullptr, fail);
  int rc = rtnl_u32_set_classid(cls.p, TC_HANDLE(1, 1));
  if (rc >= 0) rc = rtnl_u32_set_cls_terminal(cls.p);
  if (rc >= 0) rc = rtnl_u32_add_key_uint32(cls.p, 0, 0, 0, 0);
  for (int policy : {TC_ACT_STOLEN, TC_ACT_OK}) {
    if (rc < 0) break;
    Owned<rtnl_act, rtnl_act_put> act(rtnl_act_alloc());
    if (!act.p) return outOfMemory(nullptr, fail);
    rc = rtnl_tc_set_kind(TC_CAST(act.p), "mirred");
    if (rc >= 0) rc = rtnl_mirred_set_action(act.p, TCA_EGRESS_REDIR);
    if (rc >= 0) rc = rtnl_mirred_set_policy(act.p, policy);
    if (rc >= 0) rc = rtnl_mirred_set_ifindex(act.p, static_cast<uint32_t>(op.target));
    if (rc >= 0) rc = rtnl_u32_add_action(cls.p, act.p);
  }
  if (rc < 0) return fromLibnl(rc, nullptr, fail);
  nl_msg* msg = nullptr;
  return fromLibnl(rtnl_cls_build_add_request(cls.p, NLM_F_CREATE | NLM_F_EXCL, &msg), &msg, fail);
}

}  // namespace

nl_msg* buildTc(const Op& op, Failure& fail) {
  switch (op.kind) {
    case OpKind::LinkAddIfb:
      if (op.name.empty()) return fail = {EINVAL, "an ifb device needs a name"}, nullptr;
      return buildIfb(op, fail);
    case OpKind::QdiscAddTbf:
      if (!op.index || !op.rate || !op.buffer || !op.limit)
        return fail = {EINVAL, "a tbf qdisc needs a device, rate, buffer and limit"}, nullptr;
      return buildTbf(op, fail);
    case OpKind::QdiscAddIngress:
      if (!op.index) return fail = {EINVAL, "an ingress qdisc needs a device"}, nullptr;
      return buildIngress(op, fail);
    default:
      if (!op.index || !op.target) return fail = {EINVAL, "a redirect filter needs a device and a target device"}, nullptr;
      return buildRedirect(op, fail);
  }
}

std::optional<Record> qdiscFromMessage(const struct nlmsghdr* hdr) {
  if (hdr->nlmsg_len < NLMSG_LENGTH(sizeof(struct tcmsg))) return std::nullopt;
  const auto* tcm = static_cast<const struct tcmsg*>(NLMSG_DATA(hdr));
  QdiscRec r;
  r.index = tcm->tcm_ifindex;
  r.handle = tcm->tcm_handle;
  r.parent = tcm->tcm_parent;
  struct nlattr* tb[TCA_MAX + 1] = {};
  if (nlmsg_parse(const_cast<struct nlmsghdr*>(hdr), sizeof(struct tcmsg), tb, TCA_MAX, nullptr) < 0) return std::nullopt;
  if (tb[TCA_KIND]) {
    const char* kind = static_cast<const char*>(nla_data(tb[TCA_KIND]));
    r.kind = std::string(kind, strnlen(kind, nla_len(tb[TCA_KIND])));
  }
  if (r.kind == "tbf" && tb[TCA_OPTIONS]) {
    struct nlattr* opts[TCA_TBF_MAX + 1] = {};
    if (nla_parse_nested(opts, TCA_TBF_MAX, tb[TCA_OPTIONS], nullptr) == 0 && opts[TCA_TBF_PARMS] &&
        nla_len(opts[TCA_TBF_PARMS]) >= static_cast<int>(sizeof(tc_tbf_qopt))) {
      tc_tbf_qopt opt;
      memcpy(&opt, nla_data(opts[TCA_TBF_PARMS]), sizeof opt);
      TbfInfo t;
      t.rate = opts[TCA_TBF_RATE64] && nla_len(opts[TCA_TBF_RATE64]) >= 8 ? nla_get_u64(opts[TCA_TBF_RATE64]) : opt.rate.rate;
      t.limit = opt.limit;
      t.buffer = opt.buffer;
      r.tbf = t;
    }
  }
  return Record(std::move(r));
}

std::optional<Record> filterFromMessage(const struct nlmsghdr* hdr) {
  if (hdr->nlmsg_len < NLMSG_LENGTH(sizeof(struct tcmsg))) return std::nullopt;
  const auto* tcm = static_cast<const struct tcmsg*>(NLMSG_DATA(hdr));
  FilterRec r;
  r.index = tcm->tcm_ifindex;
  r.handle = tcm->tcm_handle;
  r.parent = tcm->tcm_parent;
  r.priority = static_cast<int>(TC_H_MAJ(tcm->tcm_info) >> 16);
  r.protocol = ntohs(static_cast<uint16_t>(TC_H_MIN(tcm->tcm_info)));
  struct nlattr* tb[TCA_MAX + 1] = {};
  if (nlmsg_parse(const_cast<struct nlmsghdr*>(hdr), sizeof(struct tcmsg), tb, TCA_MAX, nullptr) < 0) return std::nullopt;
  if (tb[TCA_KIND]) {
    const char* kind = static_cast<const char*>(nla_data(tb[TCA_KIND]));
    r.kind = std::string(kind, strnlen(kind, nla_len(tb[TCA_KIND])));
  }
  if (r.kind != "u32" || !tb[TCA_OPTIONS]) return Record(std::move(r));
  struct nlattr* opts[TCA_U32_MAX + 1] = {};
  if (nla_parse_nested(opts, TCA_U32_MAX, tb[TCA_OPTIONS], nullptr) < 0 || !opts[TCA_U32_ACT]) return Record(std::move(r));
  struct nlattr* action;
  int rem;
  nla_for_each_nested(action, opts[TCA_U32_ACT], rem) {
    struct nlattr* act[TCA_ACT_MAX + 1] = {};
    if (nla_parse_nested(act, TCA_ACT_MAX, action, nullptr) < 0 || !act[TCA_ACT_KIND] || !act[TCA_ACT_OPTIONS]) continue;
    if (strncmp(static_cast<const char*>(nla_data(act[TCA_ACT_KIND])), "mirred", nla_len(act[TCA_ACT_KIND])) != 0) continue;
    struct nlattr* mirred[TCA_MIRRED_MAX + 1] = {};
    if (nla_parse_nested(mirred, TCA_MIRRED_MAX, act[TCA_ACT_OPTIONS], nullptr) < 0 || !mirred[TCA_MIRRED_PARMS] ||
        nla_len(mirred[TCA_MIRRED_PARMS]) < static_cast<int>(sizeof(tc_mirred)))
      continue;
    tc_mirred parms;
    memcpy(&parms, nla_data(mirred[TCA_MIRRED_PARMS]), sizeof parms);
    if (parms.eaction == TCA_EGRESS_REDIR) r.redirects.push_back(static_cast<int>(parms.ifindex));
  }
  return Record(std::move(r));
}

}  // namespace weft
