// Kernel notifications: a non-blocking multicast socket polled by libuv on the JS thread.
#pragma once

#include "common.h"

#include <uv.h>

namespace weft {

class Monitor {
 public:
  // Takes ownership of `sk` and starts polling; `callback` receives arrays of events.
  Monitor(Napi::Env env, struct nl_sock* sk, Napi::Function callback);
  // Stops polling and frees the socket once libuv has let go of the poll handle.
  void close();
  bool ok() const { return started_; }

 private:
  static void onReadable(uv_poll_t* handle, int status, int events);
  void drain();

  Napi::Env env_;
  struct nl_sock* sk_;
  Napi::FunctionReference callback_;
  uv_poll_t* poll_ = nullptr;
  bool started_ = false;
};

}  // namespace weft
