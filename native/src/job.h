// A Job: one verb of a Handle, run on the handle's worker thread, then settled on the JS thread
// (Handle::submit carries it across). Each verb's job is defined beside its glue (handle-*.cc).
#pragma once

#include "common.h"
#include "worker.h"

namespace weft {

struct Job {
  Napi::Promise::Deferred deferred;
  Failure failure;
  explicit Job(Napi::Env env) : deferred(Napi::Promise::Deferred::New(env)) {}
  virtual ~Job() = default;
  // Worker thread: does the work, filling `failure` when it fails. Touches no JS.
  virtual void run(Worker& w) = 0;
  // JS thread: what the promise resolves to when `failure` is unset.
  virtual Napi::Value result(Napi::Env env) = 0;
  // JS thread: settles the promise.
  virtual void complete(Napi::Env env) {
    if (failure) deferred.Reject(failureError(env, failure).Value());
    else deferred.Resolve(result(env));
  }
};

}  // namespace weft
