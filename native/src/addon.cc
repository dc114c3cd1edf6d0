// The JS surface: class Handle, bound to one network namespace.
//
//   new Handle(netnsPath?)                 netnsPath "" or absent: the process's namespace
//   handle.apply(ops)        -> Promise<(null | {errno, message})[]>, one result per op, in order
//   handle.dump(kind, filter) -> Promise<record[]>   kind: "link" | "addr" | "route" | "neigh" | "nexthop" | "qdisc" | "filter"
//   handle.linkGet(nameOrIndex) -> Promise<record>
//   handle.routeGet(dst, oif?) -> Promise<record>
//   handle.genl(request)     -> Promise<Buffer[]>: one generic netlink request (bytes, header
//                               included) and its answer messages
//   handle.conntrackDelete(filters) -> Promise<number>: entries deleted that any filter matched;
//                               a filter {family: 4 | 6, protocol (IPPROTO_*), origDst?, origDstPort?, replySrc?}
//   handle.monitor(groups, callback, rcvbuf?) -> Promise<void>; callback(events[])
//   handle.announce(ifindex, address) -> Promise<void>   gratuitous ARP / unsolicited NA
//   handle.addressProbe(ifindex, addresses, waitMs, probes) -> Promise<string[][]>   MACs answering for each address
//   handle.nflog(group, callback, {copyRange, queueThreshold, flushMs, rcvbuf}) -> Promise<void>;
//                               callback(packets[]): packets nftables logged to NFLOG group `group`
//   handle.unmonitor(), handle.unnflog(), handle.close()
//   flock(fd, "ex" | "sh" | "un") -> boolean   flock(2) with LOCK_NB: false when another holds it
//
// Failures reject with an Error carrying `errno` (the kernel's symbolic errno) and `detail`.
#include "announce.h"
#include "common.h"
#include "conntrack.h"
#include "monitor.h"
#include "nflog.h"
#include "worker.h"

#include <arpa/inet.h>
#include <linux/rtnetlink.h>
#include <sys/file.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <cerrno>
#include <memory>

namespace weft {

namespace {

// Whether JS can still run in `env` (false while a worker thread is being terminated): a
// property set, which may run JS (a setter), is refused then.
bool canRunJs(napi_env env) {
  napi_value obj;
  return napi_create_object(env, &obj) == napi_ok && napi_set_named_property(env, obj, "probe", obj) == napi_ok;
}

Napi::Error failureError(Napi::Env env, const Failure& f) {
  std::string name = errnoName(f.err);
  Napi::Error e = Napi::Error::New(env, f.detail.empty() ? name : name + ": " + f.detail);
  e.Set("errno", name);
  e.Set("detail", f.detail.empty() ? std::string(strerror(f.err)) : f.detail);
  return e;
}

// Work done on the worker thread, then settled on the JS thread.
struct Job {
  Napi::Promise::Deferred deferred;
  Failure failure;
  explicit Job(Napi::Env env) : deferred(Napi::Promise::Deferred::New(env)) {}
  virtual ~Job() = default;
  virtual void run(Worker& w) = 0;
  virtual Napi::Value result(Napi::Env env) = 0;
  virtual void complete(Napi::Env env) {
    if (failure) deferred.Reject(failureError(env, failure).Value());
    else deferred.Resolve(result(env));
  }
};

class Handle;

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

struct AnnounceJob : Job {
  int ifindex = 0;
  std::string address;
  using Job::Job;
  void run(Worker&) override { failure = announce(ifindex, address); }
  Napi::Value result(Napi::Env env) override { return env.Undefined(); }
};

// A generic netlink request: raw bytes in, the answer messages out (Worker::genl).
struct GenlJob : Job {
  std::vector<uint8_t> request;
  std::vector<std::vector<uint8_t>> replies;
  using Job::Job;
  void run(Worker& w) override { failure = w.genl(request, replies); }
  Napi::Value result(Napi::Env env) override {
    Napi::Array arr = Napi::Array::New(env, replies.size());
    for (size_t i = 0; i < replies.size(); i++) {
      arr.Set(static_cast<uint32_t>(i), Napi::Buffer<uint8_t>::Copy(env, replies[i].data(), replies[i].size()));
    }
    return arr;
  }
};

struct ConntrackDeleteJob : Job {
  std::vector<ConntrackFilter> filters;
  uint32_t deleted = 0;
  using Job::Job;
  void run(Worker&) override { failure = conntrackDelete(filters, deleted); }
  Napi::Value result(Napi::Env env) override { return Napi::Number::New(env, deleted); }
};

struct AddressProbeJob : Job {
  int ifindex = 0;
  std::vector<std::string> addresses;
  int waitMs = 0;
  int probes = 1;
  std::vector<std::vector<std::string>> macs;
  using Job::Job;
  void run(Worker&) override { failure = addressProbe(ifindex, addresses, waitMs, probes, macs); }
  Napi::Value result(Napi::Env env) override {
    Napi::Array all = Napi::Array::New(env, macs.size());
    for (size_t i = 0; i < macs.size(); i++) {
      Napi::Array arr = Napi::Array::New(env, macs[i].size());
      for (size_t j = 0; j < macs[i].size(); j++) arr.Set(static_cast<uint32_t>(j), macs[i][j]);
      all.Set(static_cast<uint32_t>(i), arr);
    }
    return all;
  }
};

struct MonitorJob : Job {
  Handle* handle;
  std::vector<int> groups;
  int rcvbuf = 0;
  struct nl_sock* sk = nullptr;
  uint32_t requestPort = 0;
  bool fdbAdds = true;
  MonitorJob(Napi::Env env, Handle* h) : Job(env), handle(h) {}
  ~MonitorJob() override {
    if (sk) nl_socket_free(sk);
  }
  void run(Worker& w) override {
    failure = w.openMonitorSocket(groups, rcvbuf, &sk);
    requestPort = w.requestPort();
  }
  Napi::Value result(Napi::Env env) override { return env.Undefined(); }
  void complete(Napi::Env env) override;  // hands the socket to the handle first
};

struct NflogJob : Job {
  Handle* handle;
  uint16_t group = 0;
  uint32_t copyRange = 0, queueThreshold = 1, flushMs = 0;
  int rcvbuf = 0;
  struct nl_sock* sk = nullptr;
  NflogJob(Napi::Env env, Handle* h) : Job(env), handle(h) {}
  ~NflogJob() override {
    if (sk) nl_socket_free(sk);
  }
  void run(Worker&) override { failure = nflogOpen(group, copyRange, queueThreshold, flushMs, rcvbuf, &sk); }
  Napi::Value result(Napi::Env env) override { return env.Undefined(); }
  void complete(Napi::Env env) override;  // hands the socket to the handle first
};

class Handle : public Napi::ObjectWrap<Handle> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Handle",
                       {
                           InstanceMethod<&Handle::Apply>("apply"),
                           InstanceMethod<&Handle::Dump>("dump"),
                           InstanceMethod<&Handle::LinkGet>("linkGet"),
                           InstanceMethod<&Handle::RouteGet>("routeGet"),
                           InstanceMethod<&Handle::Announce>("announce"),
                           InstanceMethod<&Handle::Genl>("genl"),
                           InstanceMethod<&Handle::ConntrackDelete>("conntrackDelete"),
                           InstanceMethod<&Handle::AddressProbe>("addressProbe"),
                           InstanceMethod<&Handle::MonitorStart>("monitor"),
                           InstanceMethod<&Handle::MonitorStop>("unmonitor"),
                           InstanceMethod<&Handle::NflogStart>("nflog"),
                           InstanceMethod<&Handle::NflogStop>("unnflog"),
                           InstanceMethod<&Handle::Close>("close"),
                       });
  }

  explicit Handle(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Handle>(info), env_(info.Env()) {
    Napi::Env env = info.Env();
    std::string path;
    if (info.Length() > 0 && info[0].IsString()) path = info[0].As<Napi::String>().Utf8Value();
    worker_ = Worker::start(path);
    if (worker_->startError()) {
      failureError(env, worker_->startError()).ThrowAsJavaScriptException();
      worker_->stop(nullptr);
      worker_.reset();
      return;
    }
    tsfn_ = Napi::ThreadSafeFunction::New(env, Napi::Function::New(env, [](const Napi::CallbackInfo&) {}),
                                          "weft-netlink", 0, 1);
    tsfn_.Unref(env);
    // At environment teardown Node finalizes wrapped objects while holding the thread-safe
    // function's lock, so releasing it from the finalizer would deadlock: release it earlier,
    // from a cleanup hook, and let the finalizer find nothing left to do.
    napi_add_env_cleanup_hook(env, &Handle::onEnvCleanup, this);
    hooked_ = true;
  }

  ~Handle() override {
    if (hooked_) napi_remove_env_cleanup_hook(env_, &Handle::onEnvCleanup, this);
    shutdown();
  }

 private:
  static void onEnvCleanup(void* arg) {
    auto* self = static_cast<Handle*>(arg);
    self->hooked_ = false;
    self->shutdown();
  }

  void shutdown() {
    if (monitor_) {
      monitor_->close();
      monitor_ = nullptr;
    }
    nflogJob_ = nullptr;
    if (nflog_) {
      nflog_->close();
      nflog_ = nullptr;
    }
    if (worker_) {
      // Never waits: the worker runs what was queued (completions still reach JS through tsfn_)
      // and releases tsfn_ itself when done, on its own thread. If the environment went away
      // first, calls on tsfn_ failed and the worker must not touch it again.
      Napi::ThreadSafeFunction tsfn = tsfn_;
      std::shared_ptr<bool> closing = closing_;
      worker_->stop([tsfn, closing]() mutable {
        if (!*closing) tsfn.Release();
      });
      worker_.reset();
    }
  }

  bool usable(Napi::Env env) {
    if (worker_) return true;
    Napi::Error::New(env, "netlink handle is closed").ThrowAsJavaScriptException();
    return false;
  }

  Napi::Value submit(Napi::Env env, Job* job) {
    Napi::Promise promise = job->deferred.Promise();
    // While anything is pending, keep the JS object (and so this Handle) alive: completions
    // reach back into it even if the caller dropped every reference.
    if (pending_++ == 0) {
      tsfn_.Ref(env);
      Ref();
    }
    Napi::ThreadSafeFunction tsfn = tsfn_;
    std::shared_ptr<bool> closing = closing_;
    Handle* self = this;
    worker_->post([job, tsfn, self, closing](Worker& w) mutable {
      job->run(w);
      if (*closing) {
        delete job;
        return;
      }
      napi_status status = tsfn.NonBlockingCall(job, [self](Napi::Env env, Napi::Function, Job* done) {
        std::unique_ptr<Job> owned(done);
        // A worker thread being terminated still drains this queue but can run no JS: settling
        // would fail inside node-addon-api, which aborts the process. Nobody waits any more.
        if (!canRunJs(env)) return;
        owned->complete(env);
        self->settled(env);
      });
      // napi_closing: the environment is being torn down and no JS will run again, so the
      // promise can never settle; free the job instead of leaking it, and stop calling.
      if (status != napi_ok) {
        *closing = true;
        delete job;
      }
    });
    return promise;
  }

  void settled(Napi::Env env) {
    if (--pending_ != 0) return;
    if (worker_) tsfn_.Unref(env);
    Unref();
  }

  Napi::Value Apply(const Napi::CallbackInfo& info) {
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

  Napi::Value Dump(const Napi::CallbackInfo& info) {
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

  Napi::Value LinkGet(const Napi::CallbackInfo& info) {
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

  Napi::Value Genl(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!usable(env)) return env.Undefined();
    if (info.Length() < 1 || !info[0].IsTypedArray()) {
      Napi::TypeError::New(env, "genl(request): request must be a Uint8Array").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    Napi::Uint8Array bytes = info[0].As<Napi::Uint8Array>();
    auto* job = new GenlJob(env);
    job->request.assign(bytes.Data(), bytes.Data() + bytes.ByteLength());
    return submit(env, job);
  }

  Napi::Value ConntrackDelete(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!usable(env)) return env.Undefined();
    if (info.Length() < 1 || !info[0].IsArray()) {
      Napi::TypeError::New(env, "conntrackDelete(filters): filters must be an array").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    Napi::Array filters = info[0].As<Napi::Array>();
    auto* job = new ConntrackDeleteJob(env);
    for (uint32_t i = 0; i < filters.Length(); i++) {
      Napi::Value v = filters.Get(i);
      Napi::Object o = v.IsObject() ? v.As<Napi::Object>() : Napi::Object::New(env);
      auto text = [&](const char* key) { return o.Get(key).IsString() ? o.Get(key).As<Napi::String>().Utf8Value() : ""; };
      auto number = [&](const char* key) { return o.Get(key).IsNumber() ? o.Get(key).As<Napi::Number>().Int32Value() : 0; };
      ConntrackFilter f;
      f.family = number("family") == 6 ? AF_INET6 : number("family") == 4 ? AF_INET : 0;
      f.protocol = number("protocol");
      f.origDst = text("origDst");
      f.origDstPort = number("origDstPort");
      f.replySrc = text("replySrc");
      job->filters.push_back(f);
    }
    return submit(env, job);
  }

  Napi::Value RouteGet(const Napi::CallbackInfo& info) {
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

  Napi::Value Announce(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!usable(env)) return env.Undefined();
    if (info.Length() < 2 || !info[0].IsNumber() || !info[1].IsString()) {
      Napi::TypeError::New(env, "announce(ifindex, address): ifindex must be a number and address a string")
          .ThrowAsJavaScriptException();
      return env.Undefined();
    }
    auto* job = new AnnounceJob(env);
    job->ifindex = info[0].As<Napi::Number>().Int32Value();
    job->address = info[1].As<Napi::String>().Utf8Value();
    return submit(env, job);
  }

  Napi::Value AddressProbe(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!usable(env)) return env.Undefined();
    if (info.Length() < 4 || !info[0].IsNumber() || !info[1].IsArray() || !info[2].IsNumber() || !info[3].IsNumber()) {
      Napi::TypeError::New(env, "addressProbe(ifindex, addresses, waitMs, probes): numbers and an array of address strings")
          .ThrowAsJavaScriptException();
      return env.Undefined();
    }
    auto* job = new AddressProbeJob(env);
    job->ifindex = info[0].As<Napi::Number>().Int32Value();
    Napi::Array addresses = info[1].As<Napi::Array>();
    for (uint32_t i = 0; i < addresses.Length(); i++) job->addresses.push_back(addresses.Get(i).ToString().Utf8Value());
    job->waitMs = std::clamp(info[2].As<Napi::Number>().Int32Value(), 0, 10000);
    job->probes = std::clamp(info[3].As<Napi::Number>().Int32Value(), 1, 10);
    return submit(env, job);
  }

  Napi::Value MonitorStart(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!usable(env)) return env.Undefined();
    if (monitor_ || monitorJob_) {
      Napi::Error::New(env, "this handle is already monitoring").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    if (info.Length() < 2 || !info[0].IsArray() || !info[1].IsFunction()) {
      Napi::TypeError::New(env, "monitor(groups, callback): groups must be an array and callback a function")
          .ThrowAsJavaScriptException();
      return env.Undefined();
    }
    auto* job = new MonitorJob(env, this);
    Napi::Array groups = info[0].As<Napi::Array>();
    for (uint32_t i = 0; i < groups.Length(); i++) {
      std::string g = groups.Get(i).ToString().Utf8Value();
      if (g == "link") job->groups.push_back(RTNLGRP_LINK);
      else if (g == "addr") job->groups.insert(job->groups.end(), {RTNLGRP_IPV4_IFADDR, RTNLGRP_IPV6_IFADDR});
      else if (g == "route") job->groups.insert(job->groups.end(), {RTNLGRP_IPV4_ROUTE, RTNLGRP_IPV6_ROUTE});
      else if (g == "neigh") job->groups.push_back(RTNLGRP_NEIGH);
      else if (g == "nexthop") job->groups.push_back(RTNLGRP_NEXTHOP);
      else {
        delete job;
        Napi::TypeError::New(env, "monitor: unknown group \"" + g + "\" (link, addr, route, neigh, nexthop)")
            .ThrowAsJavaScriptException();
        return env.Undefined();
      }
    }
    if (info.Length() > 2 && info[2].IsNumber()) job->rcvbuf = info[2].As<Napi::Number>().Int32Value();
    if (info.Length() > 3 && info[3].IsBoolean()) job->fdbAdds = info[3].As<Napi::Boolean>().Value();
    // The socket is made on the worker (inside the namespace); polling starts when it is handed over.
    Napi::Promise created = submit(env, job).As<Napi::Promise>();
    monitorCallback_ = Napi::Persistent(info[1].As<Napi::Function>());
    monitorJob_ = job;
    return created;
  }

  Napi::Value MonitorStop(const Napi::CallbackInfo& info) {
    monitorJob_ = nullptr;  // a socket still being made is dropped when it arrives
    if (monitor_) {
      monitor_->close();
      monitor_ = nullptr;
    }
    monitorCallback_.Reset();
    return info.Env().Undefined();
  }

  Napi::Value NflogStart(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!usable(env)) return env.Undefined();
    if (nflog_ || nflogJob_) {
      Napi::Error::New(env, "this handle already reads an NFLOG group").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    if (info.Length() < 3 || !info[0].IsNumber() || !info[1].IsFunction() || !info[2].IsObject()) {
      Napi::TypeError::New(env, "nflog(group, callback, options): a number, a function and an object").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    Napi::Object o = info[2].As<Napi::Object>();
    auto number = [&](const char* key, int64_t fallback) {
      return o.Get(key).IsNumber() ? o.Get(key).As<Napi::Number>().Int64Value() : fallback;
    };
    auto* job = new NflogJob(env, this);
    job->group = static_cast<uint16_t>(std::clamp<int64_t>(info[0].As<Napi::Number>().Int64Value(), 0, 65535));
    job->copyRange = static_cast<uint32_t>(std::clamp<int64_t>(number("copyRange", 128), 0, 65535));
    job->queueThreshold = static_cast<uint32_t>(std::clamp<int64_t>(number("queueThreshold", 1), 1, 65535));
    job->flushMs = static_cast<uint32_t>(std::clamp<int64_t>(number("flushMs", 0), 0, 60000));
    job->rcvbuf = static_cast<int>(std::clamp<int64_t>(number("rcvbuf", 0), 0, 1 << 30));
    // The socket is bound on the worker (inside the namespace); polling starts when it is handed over.
    Napi::Promise created = submit(env, job).As<Napi::Promise>();
    nflogCallback_ = Napi::Persistent(info[1].As<Napi::Function>());
    nflogJob_ = job;
    return created;
  }

  Napi::Value NflogStop(const Napi::CallbackInfo& info) {
    nflogJob_ = nullptr;  // a socket still being bound is dropped (and so unbound) when it arrives
    if (nflog_) {
      nflog_->close();
      nflog_ = nullptr;
    }
    nflogCallback_.Reset();
    return info.Env().Undefined();
  }

  Napi::Value Close(const Napi::CallbackInfo& info) {
    shutdown();
    return info.Env().Undefined();
  }

 public:
  // Called on the JS thread when a monitor socket has been created on the worker.
  void adoptMonitor(Napi::Env env, MonitorJob* job) {
    if (job != monitorJob_) return;
    monitorJob_ = nullptr;
    if (job->failure || monitorCallback_.IsEmpty() || !worker_) return;
    monitor_ = new Monitor(env, job->sk, job->requestPort, job->fdbAdds, monitorCallback_.Value());
    job->sk = nullptr;
    monitorCallback_.Reset();
    if (!monitor_->ok()) {
      monitor_->close();
      monitor_ = nullptr;
      job->failure = {EIO, "cannot poll the monitor socket"};
    }
  }

  // Called on the JS thread when an NFLOG socket has been bound on the worker.
  void adoptNflog(Napi::Env env, NflogJob* job) {
    if (job != nflogJob_) return;
    nflogJob_ = nullptr;
    if (job->failure || nflogCallback_.IsEmpty() || !worker_) return;
    nflog_ = new NflogReader(env, job->sk, job->group, nflogCallback_.Value());
    job->sk = nullptr;
    nflogCallback_.Reset();
    if (!nflog_->ok()) {
      nflog_->close();
      nflog_ = nullptr;
      job->failure = {EIO, "cannot poll the NFLOG socket"};
    }
  }

 private:
  napi_env env_;
  bool hooked_ = false;
  std::shared_ptr<Worker> worker_;
  Napi::ThreadSafeFunction tsfn_;
  // Set on the worker thread once a call on tsfn_ failed (only the worker thread reads it after).
  std::shared_ptr<bool> closing_ = std::make_shared<bool>(false);
  std::atomic<int> pending_{0};
  Monitor* monitor_ = nullptr;  // frees itself on close()
  Napi::FunctionReference monitorCallback_;
  MonitorJob* monitorJob_ = nullptr;
  NflogReader* nflog_ = nullptr;  // frees itself on close()
  Napi::FunctionReference nflogCallback_;
  NflogJob* nflogJob_ = nullptr;
};

void NflogJob::complete(Napi::Env env) {
  handle->adoptNflog(env, this);
  Job::complete(env);
}

void MonitorJob::complete(Napi::Env env) {
  handle->adoptMonitor(env, this);
  Job::complete(env);
}

// flock(2) without waiting, so the JS thread never blocks on another process's lock.
Napi::Value Flock(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsNumber() || !info[1].IsString()) {
    Napi::TypeError::New(env, "flock(fd, \"ex\" | \"sh\" | \"un\")").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  int fd = info[0].As<Napi::Number>().Int32Value();
  std::string mode = info[1].As<Napi::String>().Utf8Value();
  int op = mode == "ex" ? LOCK_EX : mode == "sh" ? LOCK_SH : mode == "un" ? LOCK_UN : -1;
  if (op < 0) {
    Napi::TypeError::New(env, "flock: mode must be \"ex\", \"sh\" or \"un\"").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  int rc;
  do rc = flock(fd, op | LOCK_NB);
  while (rc < 0 && errno == EINTR);
  if (rc == 0) return Napi::Boolean::New(env, true);
  if (errno == EWOULDBLOCK) return Napi::Boolean::New(env, false);
  failureError(env, {errno, ""}).ThrowAsJavaScriptException();
  return env.Undefined();
}

}  // namespace

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("Handle", Handle::Define(env));
  exports.Set("flock", Napi::Function::New(env, Flock, "flock"));
  return exports;
}

}  // namespace weft

static Napi::Object InitWeftNetlink(Napi::Env env, Napi::Object exports) { return weft::Init(env, exports); }
NODE_API_MODULE(weft_netlink, InitWeftNetlink)
