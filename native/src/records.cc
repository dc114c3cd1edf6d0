// Kernel objects (parsed by libnl) to plain records, and records to JS objects.
#include "common.h"

#include <arpa/inet.h>
#include <linux/if_arp.h>
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

// ---- to JS ---------------------------------------------------------------------------------------

static void setStr(Napi::Object& o, const char* key, const std::string& s) {
  if (!s.empty()) o.Set(key, s);
}

static Napi::Object linkToJs(Napi::Env env, const LinkRec& r) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("type", "link");
  o.Set("index", r.index);
  o.Set("name", r.name);
  o.Set("kind", r.kind);
  o.Set("mac", r.mac);
  o.Set("mtu", r.mtu);
  o.Set("flags", r.flags);
  o.Set("operstate", r.operstate);
  o.Set("master", r.master);
  if (r.vxlan) {
    Napi::Object v = Napi::Object::New(env);
    v.Set("vni", r.vxlan->vni);
    v.Set("local", r.vxlan->local);
    v.Set("link", r.vxlan->link);
    v.Set("port", r.vxlan->port);
    v.Set("learning", r.vxlan->learning);
    v.Set("gbp", r.vxlan->gbp);
    v.Set("l2miss", r.vxlan->l2miss);
    v.Set("l3miss", r.vxlan->l3miss);
    v.Set("proxy", r.vxlan->proxy);
    o.Set("vxlan", v);
  }
  return o;
}

static Napi::Object addrToJs(Napi::Env env, const AddrRec& r) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("type", "addr");
  o.Set("index", r.index);
  o.Set("family", r.family);
  o.Set("local", r.local);
  o.Set("prefixLen", r.prefixLen);
  o.Set("scope", r.scope);
  o.Set("flags", r.flags);
  o.Set("label", r.label);
  o.Set("validLft", r.validLft);
  o.Set("preferredLft", r.preferredLft);
  return o;
}

static Napi::Object routeToJs(Napi::Env env, const RouteRec& r) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("type", "route");
  o.Set("family", r.family);
  o.Set("dst", r.dst);
  o.Set("dstLen", r.dstLen);
  o.Set("table", r.table);
  o.Set("protocol", r.protocol);
  o.Set("scope", r.scope);
  o.Set("routeType", r.type);
  o.Set("priority", r.priority);
  o.Set("flags", r.flags);
  o.Set("oif", r.oif);
  setStr(o, "gateway", r.gateway);
  setStr(o, "prefsrc", r.prefsrc);
  o.Set("nhFlags", r.nhFlags);
  o.Set("nexthops", r.nexthops);
  return o;
}

static Napi::Object neighToJs(Napi::Env env, const NeighRec& r) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("type", "neigh");
  o.Set("family", r.family);
  o.Set("index", r.index);
  setStr(o, "ip", r.ip);
  setStr(o, "mac", r.mac);
  o.Set("state", r.state);
  o.Set("flags", r.flags);
  o.Set("vlan", r.vlan);
  o.Set("master", r.master);
  return o;
}

Napi::Value recordToJs(Napi::Env env, const Record& rec) {
  struct Visitor {
    Napi::Env env;
    Napi::Value operator()(const LinkRec& r) const { return linkToJs(env, r); }
    Napi::Value operator()(const AddrRec& r) const { return addrToJs(env, r); }
    Napi::Value operator()(const RouteRec& r) const { return routeToJs(env, r); }
    Napi::Value operator()(const NeighRec& r) const { return neighToJs(env, r); }
  };
  return std::visit(Visitor{env}, rec);
}

Napi::Value eventToJs(Napi::Env env, const Event& ev) {
  Napi::Object o = Napi::Object::New(env);
  switch (ev.action) {
    case Event::Action::New: o.Set("action", "new"); break;
    case Event::Action::Del: o.Set("action", "del"); break;
    case Event::Action::Get: o.Set("action", "get"); break;
    case Event::Action::Overrun: o.Set("action", "overrun"); break;
  }
  if (ev.record) o.Set("record", recordToJs(env, *ev.record));
  return o;
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

}  // namespace weft
