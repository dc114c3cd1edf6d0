// Node-API glue for nftChanges, unnftChanges and nftChangesListen: the socket joined to the nftables notification
// group on the worker (inside the namespace), then handed to an NftChangesReader that polls it on
// the JS thread (nft-changes.cc).
#include "handle.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>

namespace weft {

struct NftChangesJob : Job {
  Handle* handle;
  int rcvbuf = 0;
  bool join = true;
  struct nl_sock* sk = nullptr;
  NftChangesJob(Napi::Env env, Handle* h) : Job(env), handle(h) {}
  ~NftChangesJob() override {
    if (sk) nl_socket_free(sk);
  }
  void run(Worker&) override { failure = nftChangesOpen(rcvbuf, join, &sk); }
  Napi::Value result(Napi::Env env) override { return env.Undefined(); }
  // Hands the socket to the handle first.
  void complete(Napi::Env env) override {
    handle->adoptNftChanges(env, this);
    Job::complete(env);
  }
};

Napi::Value Handle::NftChangesStart(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!usable(env)) return env.Undefined();
  if (nftChanges_ || nftChangesJob_) {
    Napi::Error::New(env, "this handle already follows the nftables changes").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  auto optional = [&](size_t i, bool (Napi::Value::*is)() const) {
    return info.Length() <= i || info[i].IsUndefined() || (info[i].*is)();
  };
  if (info.Length() < 1 || !info[0].IsFunction() || !optional(1, &Napi::Value::IsNumber) || !optional(2, &Napi::Value::IsBoolean)) {
    Napi::TypeError::New(env, "nftChanges(callback, rcvbuf?, join?): a function, a number and a boolean").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  auto* job = new NftChangesJob(env, this);
  if (info.Length() > 1 && info[1].IsNumber())
    job->rcvbuf = static_cast<int>(std::clamp<int64_t>(info[1].As<Napi::Number>().Int64Value(), 0, 1 << 30));
  if (info.Length() > 2 && info[2].IsBoolean()) job->join = info[2].As<Napi::Boolean>().Value();
  Napi::Promise joined = submit(env, job).As<Napi::Promise>();
  nftChangesCallback_ = Napi::Persistent(info[0].As<Napi::Function>());
  nftChangesJob_ = job;
  return joined;
}

Napi::Value Handle::NftChangesStop(const Napi::CallbackInfo& info) {
  nftChangesJob_ = nullptr;  // a socket still being made is dropped when it arrives
  if (nftChanges_) {
    nftChanges_->close();
    nftChanges_ = nullptr;
  }
  nftChangesCallback_.Reset();
  return info.Env().Undefined();
}

Napi::Value Handle::NftChangesListen(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsBoolean()) {
    Napi::TypeError::New(env, "nftChangesListen(on): a boolean").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  return Napi::Boolean::New(env, nftChanges_ != nullptr && nftChanges_->listen(info[0].As<Napi::Boolean>().Value()));
}

void Handle::adoptNftChanges(Napi::Env env, NftChangesJob* job) {
  if (job != nftChangesJob_) return;
  nftChangesJob_ = nullptr;
  if (job->failure || nftChangesCallback_.IsEmpty() || !worker_) {
    nftChangesCallback_.Reset();
    return;
  }
  nftChanges_ = new NftChangesReader(env, job->sk, nftChangesCallback_.Value());
  job->sk = nullptr;
  nftChangesCallback_.Reset();
  if (!nftChanges_->ok()) {
    nftChanges_->close();
    nftChanges_ = nullptr;
    job->failure = {EIO, "cannot poll the nftables notification socket"};
  }
}

}  // namespace weft
