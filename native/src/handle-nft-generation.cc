// Node-API glue for nftGeneration: the generation read on the worker (nft-generation.cc).
#include "handle.h"
#include "nft-generation.h"

namespace weft {

namespace {

struct NftGenerationJob : Job {
  uint32_t id = 0;
  using Job::Job;
  void run(Worker&) override { failure = nftGeneration(id); }
  Napi::Value result(Napi::Env env) override { return Napi::Number::New(env, id); }
};

}  // namespace

Napi::Value Handle::NftGeneration(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!usable(env)) return env.Undefined();
  return submit(env, new NftGenerationJob(env));
}

}  // namespace weft
