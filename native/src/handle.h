// class Handle, the addon's JS object bound to one network namespace: its lifetime (a worker
// thread, the thread-safe function completions come back through, the monitor and NFLOG readers)
// and the verbs it exposes. handle.cc holds the lifetime and the job queue; each group of verbs
// has its Node-API glue in a handle-*.cc of its own.
#pragma once

#include "common.h"
#include "job.h"
#include "monitor.h"
#include "nflog.h"
#include "worker.h"

#include <atomic>
#include <memory>

namespace weft {

struct MonitorJob;  // handle-monitor.cc
struct NflogJob;    // handle-nflog.cc

class Handle : public Napi::ObjectWrap<Handle> {
 public:
  static Napi::Function Define(Napi::Env env);
  explicit Handle(const Napi::CallbackInfo& info);
  ~Handle() override;

  // Called on the JS thread when a monitor socket has been created on the worker.
  void adoptMonitor(Napi::Env env, MonitorJob* job);
  // Called on the JS thread when an NFLOG socket has been bound on the worker.
  void adoptNflog(Napi::Env env, NflogJob* job);

 private:
  static void onEnvCleanup(void* arg);
  void shutdown();
  bool usable(Napi::Env env);
  // Queues `job` on the worker and returns its promise; takes ownership of `job`.
  Napi::Value submit(Napi::Env env, Job* job);
  void settled(Napi::Env env);

  // handle-rtnl.cc
  Napi::Value Apply(const Napi::CallbackInfo& info);
  Napi::Value Dump(const Napi::CallbackInfo& info);
  Napi::Value LinkGet(const Napi::CallbackInfo& info);
  Napi::Value RouteGet(const Napi::CallbackInfo& info);
  // handle-genl.cc
  Napi::Value Genl(const Napi::CallbackInfo& info);
  // handle-conntrack.cc
  Napi::Value ConntrackDelete(const Napi::CallbackInfo& info);
  // handle-announce.cc
  Napi::Value Announce(const Napi::CallbackInfo& info);
  Napi::Value AddressProbe(const Napi::CallbackInfo& info);
  // handle-monitor.cc
  Napi::Value MonitorStart(const Napi::CallbackInfo& info);
  Napi::Value MonitorStop(const Napi::CallbackInfo& info);
  // handle-nflog.cc
  Napi::Value NflogStart(const Napi::CallbackInfo& info);
  Napi::Value NflogStop(const Napi::CallbackInfo& info);
  // handle-nft-generation.cc
  Napi::Value NftGeneration(const Napi::CallbackInfo& info);
  // handle.cc
  Napi::Value Close(const Napi::CallbackInfo& info);

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

}  // namespace weft
