// Node-API glue for the rtnetlink verbs: apply (batched changes), dump, linkGet and routeGet,
// each read from JS on the JS thread into a job the worker runs.
#include "handle.h"

#include <arpa/inet.h>
#include <linux/rtnetlink.h>

#include <cerrno>
#include <functional>
#include <memory>
#include <type_traits>

namespace weft {

namespace {

struct ApplyJob : Job {
  std::vector<Op> ops;
  std::vector<Failure> results;
  using Job::Job;
  void run(Worker& w) override {
    results.resize(ops.size());
    for (size_t i = 0; i < ops.size(); i++) {
      struct nl_msg* msg = buildRequest(ops[i], results[i]);
      if (msg) results[i] = w.ack(msg);
    }
  }
  Napi::Value result(Napi::Env env) override {
    Napi::Array arr = Napi::Array::New(env, results.size());
    for (size_t i = 0; i < results.size(); i++) {
      arr.Set(static_cast<uint32_t>(i), results[i] ? Napi::Value(failureToJs(env, results[i])) : env.Null());
    }
    return arr;
  }
};

struct DumpJob : Job {
  int kind = 0;
  DumpFilter filter;
  // Records per JS array with `chunk` set: a dump of more than kChunkedAbove records resolves to
  // a function returning the next array (empty at the end), so its objects can be consumed and
  // dropped as they come; a smaller one is one array, as without `chunk`.
  static constexpr size_t kChunkedAbove = 4096;
  size_t chunk = 0;
  Records records;
  using Job::Job;
  void run(Worker& w) override { failure = w.dump(kind, filter, records); }
  Napi::Value result(Napi::Env env) override {
    if (chunk == 0 || records.size() <= kChunkedAbove) return recordsToJs(env, records);
    auto held = std::make_shared<Records>(std::move(records));
    auto next = std::make_shared<size_t>(0);
    size_t n = chunk;
    return Napi::Function::New(env, [held, next, n](const Napi::CallbackInfo& info) -> Napi::Value {
      Napi::Array arr = recordsToJs(info.Env(), *held, *next, n);
      *next += arr.Length();
      if (*next >= held->size()) held->clear();
      else held->releaseBefore(*next);
      return arr;
    });
  }
};

// A request answered by exactly one record (link get, route get).
struct GetJob : Job {
  std::function<struct nl_msg*(Failure&)> build;
  Records records;
  using Job::Job;
  void run(Worker& w) override {
    struct nl_msg* msg = build(failure);
    if (!msg) return;
    failure = w.get(msg, records);
    if (!failure && records.empty()) failure = {ENOENT, "the kernel sent no answer"};
  }
  Napi::Value result(Napi::Env env) override { return recordToJs(env, records[0]); }
};

}  // namespace

Napi::Value Handle::Apply(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!usable(env)) return env.Undefined();
  if (info.Length() < 1 || !info[0].IsArray()) {
    Napi::TypeError::New(env, "apply(ops): ops must be an array").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  Napi::Array arr = info[0].As<Napi::Array>();
  auto* job = new ApplyJob(env);
  job->ops.reserve(arr.Length());
  for (uint32_t i = 0; i < arr.Length(); i++) job->ops.push_back(opFromJs(arr.Get(i)));
  return submit(env, job);
}

Napi::Value Handle::Dump(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!usable(env)) return env.Undefined();
  std::string kind = info.Length() > 0 && info[0].IsString() ? info[0].As<Napi::String>().Utf8Value() : "";
  auto* job = new DumpJob(env);
  if (kind == "link") job->kind = RTM_GETLINK;
  else if (kind == "addr") job->kind = RTM_GETADDR;
  else if (kind == "route") job->kind = RTM_GETROUTE;
  else if (kind == "neigh") job->kind = RTM_GETNEIGH;
  else if (kind == "nexthop") job->kind = RTM_GETNEXTHOP;
  else if (kind == "qdisc") job->kind = RTM_GETQDISC;
  else if (kind == "filter") job->kind = RTM_GETTFILTER;
  else {
    delete job;
    Napi::TypeError::New(env, "dump(kind): kind must be link, addr, route, neigh, nexthop, qdisc or filter").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  if (info.Length() > 1 && info[1].IsObject()) {
    Napi::Object f = info[1].As<Napi::Object>();
    auto num = [&](const char* key, auto& out) {
      Napi::Value v = f.Get(key);
      if (v.IsNumber()) out = static_cast<std::remove_reference_t<decltype(out)>>(v.As<Napi::Number>().Int64Value());
    };
    num("family", job->filter.family);
    num("index", job->filter.index);
    num("table", job->filter.table);
    num("protocol", job->filter.protocol);
    num("parent", job->filter.parent);
    num("chunk", job->chunk);
  }
  return submit(env, job);
}

Napi::Value Handle::LinkGet(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!usable(env)) return env.Undefined();
  int index = 0;
  std::string name;
  if (info.Length() > 0 && info[0].IsNumber()) index = info[0].As<Napi::Number>().Int32Value();
  else if (info.Length() > 0 && info[0].IsString()) name = info[0].As<Napi::String>().Utf8Value();
  else {
    Napi::TypeError::New(env, "linkGet(nameOrIndex): a name or an index is required").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  auto* job = new GetJob(env);
  job->build = [index, name](Failure& fail) -> struct nl_msg* {
    struct nl_msg* msg = nullptr;
    int rc = rtnl_link_build_get_request(index, name.empty() ? nullptr : name.c_str(), &msg);
    if (rc < 0) {
      fail = {errnoFromNl(rc), nl_geterror(rc)};
      return nullptr;
    }
    return msg;
  };
  return submit(env, job);
}

Napi::Value Handle::RouteGet(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!usable(env)) return env.Undefined();
  if (info.Length() < 1 || !info[0].IsString()) {
    Napi::TypeError::New(env, "routeGet(dst): dst must be an address string").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  std::string dst = info[0].As<Napi::String>().Utf8Value();
  int oif = info.Length() > 1 && info[1].IsNumber() ? info[1].As<Napi::Number>().Int32Value() : 0;
  auto* job = new GetJob(env);
  job->build = [dst, oif](Failure& fail) -> struct nl_msg* {
    unsigned char bin[16];
    int family = inet_pton(AF_INET, dst.c_str(), bin) == 1    ? AF_INET
                 : inet_pton(AF_INET6, dst.c_str(), bin) == 1 ? AF_INET6
                                                              : 0;
    if (!family) {
      fail = {EINVAL, "invalid destination address \"" + dst + "\""};
      return nullptr;
    }
    int len = family == AF_INET ? 4 : 16;
    struct rtmsg rtm = {};
    rtm.rtm_family = static_cast<unsigned char>(family);
    rtm.rtm_dst_len = static_cast<unsigned char>(len * 8);
    struct nl_msg* msg = nlmsg_alloc_simple(RTM_GETROUTE, 0);
    if (!msg || nlmsg_append(msg, &rtm, sizeof rtm, NLMSG_ALIGNTO) < 0 || nla_put(msg, RTA_DST, len, bin) < 0 ||
        (oif && nla_put_u32(msg, RTA_OIF, static_cast<uint32_t>(oif)) < 0)) {
      if (msg) nlmsg_free(msg);
      fail = {ENOMEM, "cannot build route get request"};
      return nullptr;
    }
    return msg;
  };
  return submit(env, job);
}

}  // namespace weft
