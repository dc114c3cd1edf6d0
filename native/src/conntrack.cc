// libnl-nf-3 dumps the table and builds each delete (tuple and id), so no ctnetlink codec lives
// here. The kernel's own filtered flush (CTA_FILTER) would save the dump but is not in every
// kernel a node may run, and the dump is what kube-proxy does too.
#include "conntrack.h"
#include "worker.h"

#include <arpa/inet.h>

#include <netlink/netfilter/ct.h>
#include <netlink/netfilter/nfnl.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <vector>

namespace weft {

namespace {

struct Binary {
  int family = 0;
  unsigned char bytes[16] = {};
  unsigned len = 0;  // 0: any address
};

bool parseAddress(const std::string& text, int family, Binary& out) {
  if (text.empty()) return true;
  out.family = family;
  out.len = family == AF_INET ? 4 : 16;
  return inet_pton(family, text.c_str(), out.bytes) == 1;
}

bool sameAddress(struct nl_addr* a, const Binary& want) {
  if (want.len == 0) return true;
  return a && nl_addr_get_family(a) == want.family && nl_addr_get_len(a) == want.len &&
         memcmp(nl_addr_get_binary_addr(a), want.bytes, want.len) == 0;
}

struct Wanted {
  const ConntrackFilter* filter;
  Binary origDst;
  Binary replySrc;
};

bool matches(struct nfnl_ct* ct, const Wanted& w) {
  const ConntrackFilter& f = *w.filter;
  if (nfnl_ct_get_family(ct) != f.family || nfnl_ct_get_proto(ct) != f.protocol) return false;
  if (f.origDstPort && (!nfnl_ct_test_dst_port(ct, 0) || nfnl_ct_get_dst_port(ct, 0) != f.origDstPort)) return false;
  return sameAddress(nfnl_ct_get_dst(ct, 0), w.origDst) && sameAddress(nfnl_ct_get_src(ct, 1), w.replySrc);
}

// The filters by what they name first, so an entry is held against the few that can match it:
// at start every UDP Service's addresses are filters, and tables hold 100,000s of entries.
struct Match {
  std::unordered_map<std::string, std::vector<Wanted>> byOrigDst;  // the address's bytes
  std::unordered_map<int, std::vector<Wanted>> byPort;             // no address: by port
  std::vector<Wanted> rest;                                        // neither
  std::vector<struct nfnl_ct*> found;  // each holds a reference

  void add(const Wanted& w) {
    if (w.origDst.len) byOrigDst[std::string(reinterpret_cast<const char*>(w.origDst.bytes), w.origDst.len)].push_back(w);
    else if (w.filter->origDstPort) byPort[w.filter->origDstPort].push_back(w);
    else rest.push_back(w);
  }
  bool empty() const { return byOrigDst.empty() && byPort.empty() && rest.empty(); }
};

bool anyMatches(struct nfnl_ct* ct, const std::vector<Wanted>* wanted) {
  if (!wanted) return false;
  for (const Wanted& w : *wanted) {
    if (matches(ct, w)) return true;
  }
  return false;
}

template <typename Map, typename Key>
const std::vector<Wanted>* lookup(const Map& map, const Key& key) {
  auto it = map.find(key);
  return it == map.end() ? nullptr : &it->second;
}

void collect(struct nl_object* obj, void* arg) {
  auto* m = static_cast<Match*>(arg);
  auto* ct = reinterpret_cast<struct nfnl_ct*>(obj);
  struct nl_addr* dst = nfnl_ct_get_dst(ct, 0);
  std::string dstKey = dst ? std::string(static_cast<const char*>(nl_addr_get_binary_addr(dst)), nl_addr_get_len(dst)) : "";
  int port = nfnl_ct_test_dst_port(ct, 0) ? nfnl_ct_get_dst_port(ct, 0) : 0;
  if (anyMatches(ct, lookup(m->byOrigDst, dstKey)) || anyMatches(ct, lookup(m->byPort, port)) || anyMatches(ct, &m->rest)) {
    nl_object_get(obj);
    m->found.push_back(ct);
  }
}

}  // namespace

Failure conntrackDelete(const std::vector<ConntrackFilter>& filters, uint32_t& deleted) {
  deleted = 0;
  Match match;
  for (const ConntrackFilter& f : filters) {
    Wanted w{&f, {}, {}};
    if (f.family != AF_INET && f.family != AF_INET6) return {EINVAL, "family must be 4 or 6"};
    if (!parseAddress(f.origDst, f.family, w.origDst)) return {EINVAL, "invalid origDst " + f.origDst};
    if (!parseAddress(f.replySrc, f.family, w.replySrc)) return {EINVAL, "invalid replySrc " + f.replySrc};
    match.add(w);
  }
  if (match.empty()) return {};
  std::unique_ptr<struct nl_sock, void (*)(struct nl_sock*)> sk(nl_socket_alloc(), nl_socket_free);
  if (!sk) return {ENOMEM, "cannot allocate a netfilter socket"};
  int rc = nl_connect(sk.get(), NETLINK_NETFILTER);
  if (rc < 0) return {errnoFromNl(rc), std::string("connect to ctnetlink: ") + nl_geterror(rc)};
  nl_socket_enable_msg_peek(sk.get());
  struct nl_cache* cache = nullptr;
  rc = nfnl_ct_alloc_cache(sk.get(), &cache);
  if (rc < 0) return {errnoFromNl(rc), std::string("dump conntrack: ") + nl_geterror(rc)};
  nl_cache_foreach(cache, collect, &match);
  nl_cache_free(cache);
  Failure failure;
  for (struct nfnl_ct* ct : match.found) {
    if (!failure) {
      rc = nfnl_ct_del(sk.get(), ct, 0);
      if (rc == 0) deleted++;
      else if (rc != -NLE_OBJ_NOTFOUND) failure = {errnoFromNl(rc), std::string("delete conntrack entry: ") + nl_geterror(rc)};
    }
    nfnl_ct_put(ct);
  }
  return failure;
}

}  // namespace weft
