// Kernel objects (parsed by libnl) to plain records, and records to JS objects.
#include "common.h"

#include <arpa/inet.h>
#include <linux/if_arp.h>
#include <linux/nexthop.h>
#include <linux/rtnetlink.h>
#include <netlink/route/link/vxlan.h>
#include <netlink/route/nexthop.h>

#include <cerrno>
#include <cstring>

namespace weft {

std::string addrToString(struct nl_addr* addr) {
  if (addr == nullptr) return "";
  const auto* bin = static_cast<const unsigned char*>(nl_addr_get_binary_addr(addr));
  unsigned len = nl_addr_get_len(addr);
  int family = nl_addr_get_family(addr);
  char buf[INET6_ADDRSTRLEN];
  if (family == AF_INET && len == 4) return inet_ntop(AF_INET, bin, buf, sizeof buf);
  if (family == AF_INET6 && len == 16) return inet_ntop(AF_INET6, bin, buf, sizeof buf);
  if (len == 0) return "";
  std::string out;
  out.reserve(len * 3);
  static const char hex[] = "0123456789abcdef";
  for (unsigned i = 0; i < len; i++) {
    if (i) out.push_back(':');
    out.push_back(hex[bin[i] >> 4]);
    out.push_back(hex[bin[i] & 15]);
  }
  return out;
}

static LinkRec linkFrom(struct rtnl_link* l) {
  LinkRec r;
  r.index = rtnl_link_get_ifindex(l);
  if (const char* n = rtnl_link_get_name(l)) r.name = n;
  if (const char* k = rtnl_link_get_type(l)) r.kind = k;
  r.mac = addrToString(rtnl_link_get_addr(l));
  r.mtu = rtnl_link_get_mtu(l);
  r.flags = rtnl_link_get_flags(l);
  r.operstate = rtnl_link_get_operstate(l);
  r.master = rtnl_link_get_master(l);
  r.ifLink = rtnl_link_get_link(l);
  if (r.kind == "vxlan") {
    VxlanInfo v;
    rtnl_link_vxlan_get_id(l, &v.vni);
    struct nl_addr* local = nullptr;
    if (rtnl_link_vxlan_get_local(l, &local) == 0) {
      v.local = addrToString(local);
      nl_addr_put(local);
    }
    rtnl_link_vxlan_get_link(l, &v.link);
    uint32_t port = 0;
    if (rtnl_link_vxlan_get_port(l, &port) == 0) v.port = static_cast<uint16_t>(port);
    v.learning = rtnl_link_vxlan_get_learning(l) == 1;
    uint32_t fl = 0;
    if (rtnl_link_vxlan_get_flags(l, &fl) == 0) v.gbp = (fl & RTNL_LINK_VXLAN_F_GBP) != 0;
    v.l2miss = rtnl_link_vxlan_get_l2miss(l) == 1;
    v.l3miss = rtnl_link_vxlan_get_l3miss(l) == 1;
    v.proxy = rtnl_link_vxlan_get_proxy(l) == 1;
    r.vxlan = v;
  }
  return r;
}

static AddrRec addrFrom(struct rtnl_addr* a) {
  AddrRec r;
  r.index = rtnl_addr_get_ifindex(a);
  r.family = rtnl_addr_get_family(a);
  r.local = addrToString(rtnl_addr_get_local(a));
  r.prefixLen = rtnl_addr_get_prefixlen(a);
  r.scope = rtnl_addr_get_scope(a);
  r.flags = rtnl_addr_get_flags(a);
  if (const char* l = rtnl_addr_get_label(a)) r.label = l;
  r.validLft = rtnl_addr_get_valid_lifetime(a);
  r.preferredLft = rtnl_addr_get_preferred_lifetime(a);
  return r;
}

static RouteRec routeFrom(struct rtnl_route* rt) {
  RouteRec r;
  r.family = rtnl_route_get_family(rt);
  struct nl_addr* dst = rtnl_route_get_dst(rt);
  r.dstLen = dst ? static_cast<int>(nl_addr_get_prefixlen(dst)) : 0;
  r.dst = (dst && nl_addr_get_len(dst) > 0) ? addrToString(dst) : "";
  r.table = rtnl_route_get_table(rt);
  r.protocol = rtnl_route_get_protocol(rt);
  r.scope = rtnl_route_get_scope(rt);
  r.type = rtnl_route_get_type(rt);
  r.priority = rtnl_route_get_priority(rt);
  r.flags = rtnl_route_get_flags(rt);
  r.prefsrc = addrToString(rtnl_route_get_pref_src(rt));
  r.nexthops = rtnl_route_get_nnexthops(rt);
  if (r.nexthops > 0) {
    struct rtnl_nexthop* nh = rtnl_route_nexthop_n(rt, 0);
    r.oif = rtnl_route_nh_get_ifindex(nh);
    r.gateway = addrToString(rtnl_route_nh_get_gateway(nh));
    r.nhFlags = rtnl_route_nh_get_flags(nh);
  }
  return r;
}

static NeighRec neighFrom(struct rtnl_neigh* n) {
  NeighRec r;
  r.family = rtnl_neigh_get_family(n);
  r.index = rtnl_neigh_get_ifindex(n);
  r.ip = addrToString(rtnl_neigh_get_dst(n));
  r.mac = addrToString(rtnl_neigh_get_lladdr(n));
  r.state = rtnl_neigh_get_state(n);
  if (r.state < 0) r.state = 0;
  r.flags = static_cast<int>(rtnl_neigh_get_flags(n));
  r.vlan = rtnl_neigh_get_vlan(n);
  if (r.vlan < 0) r.vlan = 0;
  r.master = rtnl_neigh_get_master(n);
  return r;
}

std::optional<Record> recordFromObject(struct nl_object* obj) {
  const char* type = nl_object_get_type(obj);
  if (type == nullptr) return std::nullopt;
  if (strcmp(type, "route/route") == 0) return Record(routeFrom(reinterpret_cast<rtnl_route*>(obj)));
  if (strcmp(type, "route/neigh") == 0) return Record(neighFrom(reinterpret_cast<rtnl_neigh*>(obj)));
  if (strcmp(type, "route/addr") == 0) return Record(addrFrom(reinterpret_cast<rtnl_addr*>(obj)));
  if (strcmp(type, "route/link") == 0) return Record(linkFrom(reinterpret_cast<rtnl_link*>(obj)));
  return std::nullopt;
}

std::optional<Record> routeFromMessage(struct nlmsghdr* hdr) {
  struct rtnl_route* rt = nullptr;
  if (rtnl_route_parse(hdr, &rt) < 0) return std::nullopt;
  RouteRec r = routeFrom(rt);
  rtnl_route_put(rt);
  if (struct nlattr* id = nlmsg_find_attr(hdr, sizeof(struct rtmsg), RTA_NH_ID); id && nla_len(id) >= 4) r.nhid = nla_get_u32(id);
  return Record(std::move(r));
}

std::optional<Record> nexthopFromMessage(const struct nlmsghdr* hdr) {
  if (hdr->nlmsg_len < NLMSG_LENGTH(sizeof(struct nhmsg))) return std::nullopt;
  const auto* nhm = static_cast<const struct nhmsg*>(NLMSG_DATA(hdr));
  NexthopRec r;
  r.family = nhm->nh_family;
  r.protocol = nhm->nh_protocol;
  r.flags = nhm->nh_flags;
  struct nlattr* tb[NHA_MAX + 1] = {};
  if (nlmsg_parse(const_cast<struct nlmsghdr*>(hdr), sizeof(struct nhmsg), tb, NHA_MAX, nullptr) < 0) return std::nullopt;
  if (!tb[NHA_ID] || nla_len(tb[NHA_ID]) < 4) return std::nullopt;
  r.id = nla_get_u32(tb[NHA_ID]);
  if (tb[NHA_OIF] && nla_len(tb[NHA_OIF]) >= 4) r.oif = static_cast<int>(nla_get_u32(tb[NHA_OIF]));
  if (tb[NHA_GATEWAY]) {
    char buf[INET6_ADDRSTRLEN];
    int len = nla_len(tb[NHA_GATEWAY]);
    if (len == 4 && inet_ntop(AF_INET, nla_data(tb[NHA_GATEWAY]), buf, sizeof buf)) r.gateway = buf;
    else if (len == 16 && inet_ntop(AF_INET6, nla_data(tb[NHA_GATEWAY]), buf, sizeof buf)) r.gateway = buf;
  }
  r.blackhole = tb[NHA_BLACKHOLE] != nullptr;
  r.group = tb[NHA_GROUP] != nullptr;
  return Record(std::move(r));
}

// ---- to JS ---------------------------------------------------------------------------------------
//
// Dumps turn tens of thousands of records into objects, so property names are created once per
// batch (JsKeys) and each object is defined in one napi_define_properties call.

#define WEFT_KEYS(X)                                                                                  \
  X(type) X(index) X(name) X(kind) X(mac) X(mtu) X(flags) X(operstate) X(master) X(vxlan) X(vni)    \
  X(local) X(link) X(port) X(learning) X(gbp) X(l2miss) X(l3miss) X(proxy) X(family) X(prefixLen)  \
  X(scope) X(label) X(validLft) X(preferredLft) X(dst) X(dstLen) X(table) X(protocol) X(routeType) \
  X(priority) X(oif) X(gateway) X(prefsrc) X(nhFlags) X(nexthops) X(ip) X(state) X(vlan) X(action) \
  X(record) X(ifLink) X(nhid) X(id) X(blackhole) X(group) X(handle) X(parent) X(tbf) X(rate) X(limit) X(buffer) X(redirects)

struct JsKeys {
#define WEFT_DECLARE(k) napi_value k;
  WEFT_KEYS(WEFT_DECLARE)
#undef WEFT_DECLARE
  napi_value tLink, tAddr, tRoute, tNeigh, tNexthop, tQdisc, tFilter;
  explicit JsKeys(napi_env env) {
#define WEFT_CREATE(k) napi_create_string_utf8(env, #k, NAPI_AUTO_LENGTH, &k);
    WEFT_KEYS(WEFT_CREATE)
#undef WEFT_CREATE
    napi_create_string_utf8(env, "link", NAPI_AUTO_LENGTH, &tLink);
    napi_create_string_utf8(env, "addr", NAPI_AUTO_LENGTH, &tAddr);
    napi_create_string_utf8(env, "route", NAPI_AUTO_LENGTH, &tRoute);
    napi_create_string_utf8(env, "neigh", NAPI_AUTO_LENGTH, &tNeigh);
    napi_create_string_utf8(env, "nexthop", NAPI_AUTO_LENGTH, &tNexthop);
    napi_create_string_utf8(env, "qdisc", NAPI_AUTO_LENGTH, &tQdisc);
    napi_create_string_utf8(env, "filter", NAPI_AUTO_LENGTH, &tFilter);
  }
};

namespace {

class ObjBuilder {
 public:
  explicit ObjBuilder(napi_env env) : env_(env) {}
  ObjBuilder& val(napi_value key, napi_value v) {
    napi_property_descriptor& d = props_[n_++];
    d = napi_property_descriptor{};
    d.name = key;
    d.value = v;
    d.attributes = static_cast<napi_property_attributes>(napi_writable | napi_enumerable | napi_configurable);
    return *this;
  }
  ObjBuilder& num(napi_value key, double v) {
    napi_value x;
    napi_create_double(env_, v, &x);
    return val(key, x);
  }
  ObjBuilder& str(napi_value key, const std::string& v) {
    napi_value x;
    napi_create_string_utf8(env_, v.data(), v.size(), &x);
    return val(key, x);
  }
  ObjBuilder& strIfSet(napi_value key, const std::string& v) { return v.empty() ? *this : str(key, v); }
  ObjBuilder& flag(napi_value key, bool v) {
    napi_value x;
    napi_get_boolean(env_, v, &x);
    return val(key, x);
  }
  napi_value build() {
    napi_value o;
    napi_create_object(env_, &o);
    napi_define_properties(env_, o, n_, props_);
    return o;
  }

 private:
  napi_env env_;
  napi_property_descriptor props_[20];
  size_t n_ = 0;
};

napi_value linkToJs(napi_env env, const JsKeys& k, const LinkRec& r) {
  ObjBuilder o(env);
  o.val(k.type, k.tLink).num(k.index, r.index).str(k.name, r.name).str(k.kind, r.kind).str(k.mac, r.mac);
  o.num(k.mtu, r.mtu).num(k.flags, r.flags).num(k.operstate, r.operstate).num(k.master, r.master).num(k.ifLink, r.ifLink);
  if (r.vxlan) {
    const VxlanInfo& v = *r.vxlan;
    ObjBuilder x(env);
    x.num(k.vni, v.vni).str(k.local, v.local).num(k.link, v.link).num(k.port, v.port).flag(k.learning, v.learning);
    x.flag(k.gbp, v.gbp).flag(k.l2miss, v.l2miss).flag(k.l3miss, v.l3miss).flag(k.proxy, v.proxy);
    o.val(k.vxlan, x.build());
  }
  return o.build();
}

napi_value addrToJs(napi_env env, const JsKeys& k, const AddrRec& r) {
  ObjBuilder o(env);
  o.val(k.type, k.tAddr).num(k.index, r.index).num(k.family, r.family).str(k.local, r.local);
  o.num(k.prefixLen, r.prefixLen).num(k.scope, r.scope).num(k.flags, r.flags).str(k.label, r.label);
  o.num(k.validLft, r.validLft).num(k.preferredLft, r.preferredLft);
  return o.build();
}

napi_value routeToJs(napi_env env, const JsKeys& k, const RouteRec& r) {
  ObjBuilder o(env);
  o.val(k.type, k.tRoute).num(k.family, r.family).str(k.dst, r.dst).num(k.dstLen, r.dstLen);
  o.num(k.table, r.table).num(k.protocol, r.protocol).num(k.scope, r.scope).num(k.routeType, r.type);
  o.num(k.priority, r.priority).num(k.flags, r.flags).num(k.oif, r.oif).strIfSet(k.gateway, r.gateway);
  o.strIfSet(k.prefsrc, r.prefsrc).num(k.nhFlags, r.nhFlags).num(k.nexthops, r.nexthops);
  if (r.nhid) o.num(k.nhid, r.nhid);
  return o.build();
}

napi_value neighToJs(napi_env env, const JsKeys& k, const NeighRec& r) {
  ObjBuilder o(env);
  o.val(k.type, k.tNeigh).num(k.family, r.family).num(k.index, r.index).strIfSet(k.ip, r.ip);
  o.strIfSet(k.mac, r.mac).num(k.state, r.state).num(k.flags, r.flags).num(k.vlan, r.vlan).num(k.master, r.master);
  return o.build();
}

napi_value nexthopToJs(napi_env env, const JsKeys& k, const NexthopRec& r) {
  ObjBuilder o(env);
  o.val(k.type, k.tNexthop).num(k.id, r.id).num(k.family, r.family).num(k.protocol, r.protocol).num(k.flags, r.flags);
  o.num(k.oif, r.oif).strIfSet(k.gateway, r.gateway).flag(k.blackhole, r.blackhole).flag(k.group, r.group);
  return o.build();
}

napi_value qdiscToJs(napi_env env, const JsKeys& k, const QdiscRec& r) {
  ObjBuilder o(env);
  o.val(k.type, k.tQdisc).num(k.index, r.index).num(k.handle, r.handle).num(k.parent, r.parent).str(k.kind, r.kind);
  if (r.tbf) {
    ObjBuilder t(env);
    t.num(k.rate, static_cast<double>(r.tbf->rate)).num(k.limit, r.tbf->limit).num(k.buffer, r.tbf->buffer);
    o.val(k.tbf, t.build());
  }
  return o.build();
}

napi_value filterToJs(napi_env env, const JsKeys& k, const FilterRec& r) {
  ObjBuilder o(env);
  o.val(k.type, k.tFilter).num(k.index, r.index).num(k.handle, r.handle).num(k.parent, r.parent);
  o.num(k.priority, r.priority).num(k.protocol, r.protocol).str(k.kind, r.kind);
  napi_value redirects;
  napi_create_array_with_length(env, r.redirects.size(), &redirects);
  for (size_t i = 0; i < r.redirects.size(); i++) {
    napi_value x;
    napi_create_int32(env, r.redirects[i], &x);
    napi_set_element(env, redirects, static_cast<uint32_t>(i), x);
  }
  o.val(k.redirects, redirects);
  return o.build();
}

napi_value toJs(napi_env env, const JsKeys& k, const Record& rec) {
  struct Visitor {
    napi_env env;
    const JsKeys& k;
    napi_value operator()(const LinkRec& r) const { return linkToJs(env, k, r); }
    napi_value operator()(const AddrRec& r) const { return addrToJs(env, k, r); }
    napi_value operator()(const RouteRec& r) const { return routeToJs(env, k, r); }
    napi_value operator()(const NeighRec& r) const { return neighToJs(env, k, r); }
    napi_value operator()(const NexthopRec& r) const { return nexthopToJs(env, k, r); }
    napi_value operator()(const QdiscRec& r) const { return qdiscToJs(env, k, r); }
    napi_value operator()(const FilterRec& r) const { return filterToJs(env, k, r); }
  };
  return std::visit(Visitor{env, k}, rec);
}

const char* actionName(Event::Action a) {
  switch (a) {
    case Event::Action::New: return "new";
    case Event::Action::Del: return "del";
    case Event::Action::Get: return "get";
    case Event::Action::Overrun: return "overrun";
  }
  return "";
}

}  // namespace

Napi::Array recordsToJs(Napi::Env env, const Records& recs, size_t from, size_t count) {
  JsKeys k(env);
  size_t end = from + std::min(count, recs.size() - std::min(from, recs.size()));
  Napi::Array arr = Napi::Array::New(env, end - from);
  for (size_t i = from; i < end; i++) napi_set_element(env, arr, static_cast<uint32_t>(i - from), toJs(env, k, recs[i]));
  return arr;
}

Napi::Value recordToJs(Napi::Env env, const Record& rec) {
  JsKeys k(env);
  return Napi::Value(env, toJs(env, k, rec));
}

Napi::Array eventsToJs(Napi::Env env, const std::vector<Event>& events) {
  JsKeys k(env);
  Napi::Array arr = Napi::Array::New(env, events.size());
  for (size_t i = 0; i < events.size(); i++) {
    const Event& ev = events[i];
    ObjBuilder o(env);
    o.str(k.action, actionName(ev.action));
    if (ev.record) o.val(k.record, toJs(env, k, *ev.record));
    napi_set_element(env, arr, static_cast<uint32_t>(i), o.build());
  }
  return arr;
}

std::string errnoName(int err) {
  const char* name = strerrorname_np(err);
  return name ? name : "E" + std::to_string(err);
}

Napi::Object failureToJs(Napi::Env env, const Failure& f) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("errno", errnoName(f.err));
  o.Set("message", f.detail.empty() ? std::string(strerror(f.err)) : f.detail);
  return o;
}

Napi::Error failureError(Napi::Env env, const Failure& f) {
  std::string name = errnoName(f.err);
  Napi::Error e = Napi::Error::New(env, f.detail.empty() ? name : name + ": " + f.detail);
  e.Set("errno", name);
  e.Set("detail", f.detail.empty() ? std::string(strerror(f.err)) : f.detail);
  return e;
}

}  // namespace weft
