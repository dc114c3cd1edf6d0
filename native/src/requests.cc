// Requests as JS sends them: each plain object read into an Op on the main thread (opFromJs),
// every field type- and range-checked. A bad field marks the Op invalid, naming the field, and
// the op then fails with EINVAL instead of being built (request-build.cc).
#include "common.h"

#include <cstdint>
#include <string>

namespace weft {

namespace {

struct OpName {
  const char* name;
  OpKind kind;
};

const OpName kOpNames[] = {
    {"linkAddVxlan", OpKind::LinkAddVxlan}, {"linkAddBridge", OpKind::LinkAddBridge},
    {"linkAddType", OpKind::LinkAddType},
    {"linkAddVeth", OpKind::LinkAddVeth},   {"linkSetHairpin", OpKind::LinkSetHairpin},
    {"linkSet", OpKind::LinkSet},           {"linkDelGroup", OpKind::LinkDelGroup},
    {"linkDel", OpKind::LinkDel},           {"addrAdd", OpKind::AddrAdd},
    {"addrReplace", OpKind::AddrReplace},   {"addrDel", OpKind::AddrDel},
    {"routeAdd", OpKind::RouteAdd},         {"routeReplace", OpKind::RouteReplace},
    {"routeDel", OpKind::RouteDel},         {"neighAdd", OpKind::NeighAdd},
    {"neighReplace", OpKind::NeighReplace}, {"neighAppend", OpKind::NeighAppend},
    {"neighDel", OpKind::NeighDel},         {"nexthopAdd", OpKind::NexthopAdd},
    {"nexthopReplace", OpKind::NexthopReplace}, {"nexthopDel", OpKind::NexthopDel},
    {"linkAddIfb", OpKind::LinkAddIfb},     {"qdiscAddTbf", OpKind::QdiscAddTbf},
    {"qdiscAddIngress", OpKind::QdiscAddIngress}, {"filterAddRedirect", OpKind::FilterAddRedirect},
};

// Typed field readers: a present field of the wrong type marks the op invalid, naming the field.
struct Reader {
  Napi::Object obj;
  Op& op;

  bool has(const char* key) const {
    Napi::Value v = obj.Get(key);
    return !v.IsUndefined() && !v.IsNull();
  }
  void fail(const char* key, const char* want) {
    if (op.invalid.empty()) op.invalid = std::string("field ") + key + " must be " + want;
  }
  void str(const char* key, std::string& out) {
    if (!has(key)) return;
    Napi::Value v = obj.Get(key);
    if (!v.IsString()) return fail(key, "a string");
    out = v.As<Napi::String>().Utf8Value();
  }
  template <typename T>
  void num(const char* key, T& out, double lo, double hi) {
    if (!has(key)) return;
    Napi::Value v = obj.Get(key);
    if (!v.IsNumber()) return fail(key, "a number");
    double d = v.As<Napi::Number>().DoubleValue();
    if (d != static_cast<double>(static_cast<int64_t>(d)) || d < lo || d > hi) return fail(key, "an integer in range");
    out = static_cast<T>(d);
  }
  void flag(const char* key, bool& out) {
    if (!has(key)) return;
    Napi::Value v = obj.Get(key);
    if (!v.IsBoolean()) return fail(key, "a boolean");
    out = v.As<Napi::Boolean>().Value();
  }
};

}  // namespace

Op opFromJs(const Napi::Value& v) {
  Op op;
  if (!v.IsObject()) {
    op.invalid = "operation must be an object";
    return op;
  }
  Reader r{v.As<Napi::Object>(), op};
  std::string name;
  r.str("op", name);
  bool known = false;
  for (const auto& o : kOpNames) {
    if (name == o.name) {
      op.kind = o.kind;
      known = true;
    }
  }
  if (!known) {
    op.invalid = "unknown operation \"" + name + "\"";
    return op;
  }
  r.num("index", op.index, 0, INT32_MAX);
  r.num("family", op.family, 0, 255);
  r.str("name", op.name);
  if (r.has("up")) {
    bool up = false;
    r.flag("up", up);
    op.up = up;
  }
  r.num("mtu", op.mtu, 0, UINT32_MAX);
  r.str("mac", op.mac);
  r.num("master", op.master, 0, INT32_MAX);
  r.num("group", op.group, 1, UINT32_MAX);
  r.flag("on", op.on);
  r.str("peerName", op.peerName);
  r.str("linkKind", op.linkKind);
  r.num("peerNsFd", op.peerNsFd, 0, INT32_MAX);
  r.num("vni", op.vni, 0, 0xffffff);
  r.str("local", op.local);
  r.num("vtepIndex", op.vtepIndex, 0, INT32_MAX);
  r.num("port", op.port, 0, 65535);
  r.flag("learning", op.learning);
  r.flag("gbp", op.gbp);
  r.flag("l2miss", op.l2miss);
  r.flag("l3miss", op.l3miss);
  r.flag("proxy", op.proxy);
  r.num("prefixLen", op.prefixLen, 0, 128);
  r.num("scope", op.scope, 0, 255);
  r.str("dst", op.dst);
  r.num("dstLen", op.dstLen, 0, 128);
  r.str("gateway", op.gateway);
  r.str("prefsrc", op.prefsrc);
  r.num("table", op.table, 0, UINT32_MAX);
  r.num("protocol", op.protocol, 0, 255);
  if (r.has("priority")) {
    r.num("priority", op.priority, 0, UINT32_MAX);
    op.hasPriority = true;
  }
  r.num("routeType", op.type, 0, 255);
  r.flag("onlink", op.onlink);
  r.num("nhid", op.nhid, 0, UINT32_MAX);
  r.num("id", op.id, 0, UINT32_MAX);
  r.num("validLft", op.validLft, 0, UINT32_MAX - 1);
  r.num("preferredLft", op.preferredLft, 0, UINT32_MAX - 1);
  r.num("state", op.state, 0, 0xffff);
  r.num("flags", op.flags, 0, 255);
  r.num("vlan", op.vlan, 0, 4095);
  r.num("rate", op.rate, 0, 9007199254740991.0);
  r.num("limit", op.limit, 0, UINT32_MAX);
  r.num("buffer", op.buffer, 0, UINT32_MAX);
  r.num("target", op.target, 0, INT32_MAX);
  return op;
}

}  // namespace weft
