// Handle's lifetime and job queue: the JS class with its verbs, the worker thread it starts in
// the namespace, the thread-safe function completions come back through, and the teardown that
// never waits for netlink work in flight. The verbs' glue is in handle-*.cc.
#include "handle.h"

#include <memory>

namespace weft {

namespace {

// Whether JS can still run in `env` (false while a worker thread is being terminated): a
// property set, which may run JS (a setter), is refused then.
bool canRunJs(napi_env env) {
  napi_value obj;
  return napi_create_object(env, &obj) == napi_ok && napi_set_named_property(env, obj, "probe", obj) == napi_ok;
}

}  // namespace

Napi::Function Handle::Define(Napi::Env env) {
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
                         InstanceMethod<&Handle::NftGeneration>("nftGeneration"),
                         InstanceMethod<&Handle::Close>("close"),
                     });
}

Handle::Handle(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Handle>(info), env_(info.Env()) {
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

Handle::~Handle() {
  if (hooked_) napi_remove_env_cleanup_hook(env_, &Handle::onEnvCleanup, this);
  shutdown();
}

void Handle::onEnvCleanup(void* arg) {
  auto* self = static_cast<Handle*>(arg);
  self->hooked_ = false;
  self->shutdown();
}

void Handle::shutdown() {
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

bool Handle::usable(Napi::Env env) {
  if (worker_) return true;
  Napi::Error::New(env, "netlink handle is closed").ThrowAsJavaScriptException();
  return false;
}

Napi::Value Handle::submit(Napi::Env env, Job* job) {
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

void Handle::settled(Napi::Env env) {
  if (--pending_ != 0) return;
  if (worker_) tsfn_.Unref(env);
  Unref();
}

Napi::Value Handle::Close(const Napi::CallbackInfo& info) {
  shutdown();
  return info.Env().Undefined();
}

}  // namespace weft
