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
#include "common.h"
#include "handle.h"

#include <sys/file.h>

#include <cerrno>
#include <string>

namespace weft {

namespace {

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
