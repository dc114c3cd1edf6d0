// Node-API glue for nflog and unnflog: the socket bound to an NFLOG group on the worker (inside
// the namespace), then handed to an NflogReader that polls it on the JS thread (nflog.cc).
#include "handle.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>

namespace weft {

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
  // Hands the socket to the handle first.
  void complete(Napi::Env env) override {
    handle->adoptNflog(env, this);
    Job::complete(env);
  }
};

Napi::Value Handle::NflogStart(const Napi::CallbackInfo& info) {
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

Napi::Value Handle::NflogStop(const Napi::CallbackInfo& info) {
  nflogJob_ = nullptr;  // a socket still being bound is dropped (and so unbound) when it arrives
  if (nflog_) {
    nflog_->close();
    nflog_ = nullptr;
  }
  nflogCallback_.Reset();
  return info.Env().Undefined();
}

void Handle::adoptNflog(Napi::Env env, NflogJob* job) {
  if (job != nflogJob_) return;
  nflogJob_ = nullptr;
  if (job->failure || nflogCallback_.IsEmpty() || !worker_) {
    nflogCallback_.Reset();
    return;
  }
  nflog_ = new NflogReader(env, job->sk, job->group, nflogCallback_.Value());
  job->sk = nullptr;
  nflogCallback_.Reset();
  if (!nflog_->ok()) {
    nflog_->close();
    nflog_ = nullptr;
    job->failure = {EIO, "cannot poll the NFLOG socket"};
  }
}

}  // namespace weft
