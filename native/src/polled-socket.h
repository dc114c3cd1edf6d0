// A non-blocking netlink socket read on the JS thread, polled by libuv: what the monitor and the
// NFLOG reader share (starting the poll, polling again after an overrun, closing from inside the
// callback). A subclass reads the socket in drain().
#pragma once

#include "common.h"

#include <uv.h>

#include <functional>

namespace weft {

class PolledSocket {
 public:
  PolledSocket(const PolledSocket&) = delete;
  PolledSocket& operator=(const PolledSocket&) = delete;
  // Stops polling (after beforeClose()); the socket and this object are freed once libuv lets go
  // of the poll handle, so close() is safe from inside the callback. Do not touch the object afterwards.
  void close();
  bool ok() const { return started_; }

 protected:
  // Takes ownership of `sk` and starts polling; readable data goes to drain() on the JS thread.
  PolledSocket(Napi::Env env, struct nl_sock* sk, Napi::Function callback);
  virtual ~PolledSocket() = default;
  virtual void drain() = 0;
  virtual void beforeClose() {}
  // Reads the datagrams waiting (at most `maxDatagrams`, so a flood cannot starve the event loop:
  // libuv polls again) into `buf`, handing each whole netlink message to `onMessage`; `onLost` is
  // called where the kernel dropped notifications (ENOBUFS) or a datagram lost its tail to the buffer.
  void receive(std::vector<unsigned char>& buf, int maxDatagrams, const std::function<void(struct nlmsghdr*)>& onMessage,
               const std::function<void()>& onLost);
  Napi::Env env_;
  struct nl_sock* sk_;
  Napi::FunctionReference callback_;
  bool closed_ = false;

 private:
  static void onReadable(uv_poll_t* handle, int status, int events);
  static void onClosed(uv_handle_t* handle);

  uv_poll_t* poll_ = nullptr;
  bool started_ = false;
};

}  // namespace weft
