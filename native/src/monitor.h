// Kernel notifications: a non-blocking multicast socket polled by libuv on the JS thread.
#pragma once

#include "polled-socket.h"

namespace weft {

class Monitor : public PolledSocket {
 public:
  // Takes ownership of `sk` and starts polling; `callback` receives arrays of events. Route and
  // neighbour notifications stamped with `ownPort` (the handle's request socket) echo the handle's
  // own changes and are not reported: the caller knows what it wrote, and a batch of thousands
  // would otherwise come back as thousands of events. Without `fdbAdds`, FDB entries added or
  // changed are not reported either (only deleted ones).
  Monitor(Napi::Env env, struct nl_sock* sk, uint32_t ownPort, bool fdbAdds, Napi::Function callback);

 private:
  ~Monitor() override = default;
  void drain() override;

  uint32_t ownPort_;
  bool fdbAdds_;
};

}  // namespace weft
