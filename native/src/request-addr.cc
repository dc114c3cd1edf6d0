// Address requests: `ip address add|replace|del`, lifetimes included.
#include "request-build.h"

#include <cerrno>

namespace weft {

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

}  // namespace weft
