// Node-API glue for monitor and unmonitor: the socket joined to rtnetlink groups on the worker
// (inside the namespace), then handed to a Monitor that polls it on the JS thread (monitor.cc).
#include "handle.h"

#include <linux/rtnetlink.h>

#include <cerrno>
#include <string>
#include <vector>

namespace weft {

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
  // Hands the socket to the handle first.
  void complete(Napi::Env env) override {
    handle->adoptMonitor(env, this);
    Job::complete(env);
  }
};

Napi::Value Handle::MonitorStart(const Napi::CallbackInfo& info) {
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

Napi::Value Handle::MonitorStop(const Napi::CallbackInfo& info) {
  monitorJob_ = nullptr;  // a socket still being made is dropped when it arrives
  if (monitor_) {
    monitor_->close();
    monitor_ = nullptr;
  }
  monitorCallback_.Reset();
  return info.Env().Undefined();
}

void Handle::adoptMonitor(Napi::Env env, MonitorJob* job) {
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

}  // namespace weft
