// One thread per handle: it enters the handle's network namespace once, owns the libnl socket,
// and runs requests strictly in order. Nothing on it touches JS. The thread owns the Worker (a
// shared_ptr) and is never joined: stopping it only asks, so the JS thread never waits for the
// netlink work in flight.
#pragma once

#include "common.h"

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace weft {

// Filters applied while a dump is parsed, so only wanted records cross into JS.
struct DumpFilter {
  int family = 0;     // AF_UNSPEC: all
  int index = 0;      // link index (neigh, addr: the device; route: the output device)
  uint32_t table = 0; // routes: 0 = any
  int protocol = -1;  // routes: -1 = any
  uint32_t parent = 0; // filters: the qdisc they hang under
};

class Worker {
 public:
  // Starts the thread in the namespace at `netnsPath` ("" = the caller's); returns once it is
  // there (or failed to get there: check startError()).
  static std::shared_ptr<Worker> start(const std::string& netnsPath);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  const Failure& startError() const { return startError_; }

  // Queues `task` to run on the worker thread, after every task queued before it.
  void post(std::function<void(Worker&)> task);
  // Asks the thread to run the queued tasks, then `onExit` (on the worker thread), then end.
  // Returns at once. Idempotent: only the first call's `onExit` runs.
  void stop(std::function<void()> onExit);

  // ---- worker-thread only ----
  Failure ack(struct nl_msg* msg);
  Failure dump(int kind, const DumpFilter& filter, Records& out);
  Failure get(struct nl_msg* msg, Records& out);
  // A new non-blocking socket in this namespace, joined to the given rtnetlink groups.
  Failure openMonitorSocket(const std::vector<int>& groups, int rcvbuf, struct nl_sock** out);
  // The port ID of the request socket: the kernel stamps it on notifications of our own changes.
  uint32_t requestPort() const;
  // One generic netlink request, built whole by the caller (header included), on this thread's
  // NETLINK_GENERIC socket (opened on first use, in the handle's namespace). Every answer message
  // but the closing ack or NLMSG_DONE goes to `replies`; an error answer is the failure.
  Failure genl(const std::vector<uint8_t>& request, std::vector<std::vector<uint8_t>>& replies);

 private:
  Worker() = default;
  void enter(const std::string& netnsPath);
  void loop();
  Failure receive(Records* out, const DumpFilter* filter);
  static int onError(struct sockaddr_nl*, struct nlmsgerr* e, void* arg);
  static int onValid(struct nl_msg* msg, void* arg);

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void(Worker&)>> queue_;
  bool stopping_ = false;
  std::function<void()> onExit_;
  Failure startError_;

  struct nl_sock* sk_ = nullptr;
  struct nl_cb* cb_ = nullptr;
  int genlFd_ = -1;
  Failure kernelError_;

  struct ParseTarget {
    Records* out;
    const DumpFilter* filter;
  };
};

// libnl's NLE_* code to the nearest errno, for failures that never reached the kernel.
int errnoFromNl(int nlerr);

// A notification socket made ready for the JS thread's poll: its receive buffer `rcvbuf` bytes
// when not 0 (past rmem_max: weftd runs as root), and non-blocking.
void readyForPolling(struct nl_sock* sk, int rcvbuf);

}  // namespace weft
