// Node-API glue for the packets a handle sends on a link (announce.cc): announce, a gratuitous
// ARP or unsolicited NA, and addressProbe, which asks whether another host holds addresses.
#include "announce.h"
#include "handle.h"

#include <algorithm>
#include <string>
#include <vector>

namespace weft {

namespace {

struct AnnounceJob : Job {
  int ifindex = 0;
  std::string address;
  using Job::Job;
  void run(Worker&) override { failure = announce(ifindex, address); }
  Napi::Value result(Napi::Env env) override { return env.Undefined(); }
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

}  // namespace

Napi::Value Handle::Announce(const Napi::CallbackInfo& info) {
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

Napi::Value Handle::AddressProbe(const Napi::CallbackInfo& info) {
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

}  // namespace weft
