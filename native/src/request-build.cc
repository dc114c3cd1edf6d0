// Op to a libnl-built netlink message, on the worker thread: buildRequest picks the builder for
// the op's kind (request-*.cc, tc.cc); and the text-to-libnl address helpers they share.
#include "request-build.h"

#include <arpa/inet.h>

#include <cerrno>
#include <cstdio>

namespace weft {

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

nl_msg* fromLibnl(int rc, nl_msg** msg, Failure& fail) {
  if (rc < 0) {
    fail = {EINVAL, std::string("cannot build request: ") + nl_geterror(rc)};
    return nullptr;
  }
  return *msg;
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
