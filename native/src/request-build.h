// What the request builders share (worker thread): ownership of libnl objects, text to libnl
// addresses (request-build.cc), and one builder per object family, which buildRequest
// (request-build.cc) picks by op kind.
#pragma once

#include "common.h"

#include <string>

namespace weft {

// Puts a libnl object back when the scope ends (libnl objects are reference counted).
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

// An IP address in text form to a libnl address; family 0 accepts either. `what` names the
// address in the failure.
nl_addr* ipAddr(const std::string& text, int family, int prefixLen, Failure& fail, const char* what);
// "aa:bb:cc:dd:ee:ff" to a libnl link-layer address.
nl_addr* macAddr(const std::string& text, Failure& fail);
// The message a libnl builder made (its return code `rc`), or nullptr with `fail` filled.
// Takes the message by address: it is read only after the builder (the first argument) has run.
nl_msg* fromLibnl(int rc, nl_msg** msg, Failure& fail);

// One builder per object family; each returns nullptr with `fail` filled when it cannot build.
nl_msg* buildLink(const Op& op, Failure& fail);     // request-link.cc
nl_msg* buildAddr(const Op& op, Failure& fail);     // request-addr.cc
nl_msg* buildRoute(const Op& op, Failure& fail);    // request-route.cc
nl_msg* buildNexthop(const Op& op, Failure& fail);  // request-route.cc
nl_msg* buildNeigh(const Op& op, Failure& fail);    // request-neigh.cc
// The traffic-control requests (tc.cc): an ifb link, tbf and ingress qdiscs, a redirect filter.
nl_msg* buildTc(const Op& op, Failure& fail);

}  // namespace weft
