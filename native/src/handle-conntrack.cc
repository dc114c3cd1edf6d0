// Node-API glue for conntrackDelete: the JS filters read into ConntrackFilter, the entries
// deleted on the worker (conntrack.cc).
#include "conntrack.h"
#include "handle.h"

#include <sys/socket.h>

#include <vector>

namespace weft {

namespace {

struct ConntrackDeleteJob : Job {
  std::vector<ConntrackFilter> filters;
  uint32_t deleted = 0;
  using Job::Job;
  void run(Worker&) override { failure = conntrackDelete(filters, deleted); }
  Napi::Value result(Napi::Env env) override { return Napi::Number::New(env, deleted); }
};

}  // namespace

Napi::Value Handle::ConntrackDelete(const Napi::CallbackInfo& info) {
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

}  // namespace weft
