// Kernel notifications: a non-blocking multicast socket polled by libuv on the JS thread.
#pragma once

#include "common.h"

#include <uv.h>

namespace weft {

class Monitor {
 public:
  // Takes ownership of `sk` and starts polling; `callback` receives arrays of events. Route and
  // neighbour notifications stamped with `ownPort` (the handle's request socket) echo the handle's
  // own changes and are not reported: the caller knows what it wrote, and a batch of thousands
  // would otherwise come back as thousands of events.
  Monitor(Napi::Env env, struct nl_sock* sk, uint32_t ownPort, Napi::Function callback);
  // Stops polling; the socket and this object are freed once libuv lets go of the poll handle,
  // so close() is safe from inside the callback. Do not touch the object afterwards.
  void close();
  bool ok() const { return started_; }

 private:
  ~Monitor() = default;
  static void onReadable(uv_poll_t* handle, int status, int events);
  static void onClosed(uv_handle_t* handle);
  void drain();

  Napi::Env env_;
  struct nl_sock* sk_;
  uint32_t ownPort_;
  Napi::FunctionReference callback_;
  uv_poll_t* poll_ = nullptr;
  bool started_ = false;
  bool closed_ = false;
};

}  // namespace weft
