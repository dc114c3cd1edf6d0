// Node-API glue for genl: one generic netlink request, built whole in JS, sent from the
// handle's namespace, its answer messages returned as Buffers.
#include "handle.h"

#include <cstdint>
#include <vector>

namespace weft {

namespace {

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

}  // namespace

Napi::Value Handle::Genl(const Napi::CallbackInfo& info) {
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

}  // namespace weft
