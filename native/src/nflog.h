// Packets nftables logs to an NFLOG group (`log group N`), read over nfnetlink_log through
// libnl-nf-3: the socket is bound on the handle's worker (in its namespace), then polled by libuv
// on the JS thread and delivered in batches, as the monitor's notifications are.
#pragma once

#include "polled-socket.h"

namespace weft {

// One logged packet: the rule's prefix and the addresses, protocol and ports of its IP header.
struct LoggedPacket {
  std::string prefix;
  int family = 0;  // 4 or 6
  std::string src;
  std::string dst;
  int protocol = 0;  // IPPROTO_*
  int sport = 0;     // TCP, UDP, SCTP; 0 otherwise
  int dport = 0;
};

// On the worker thread: a non-blocking NETLINK_NETFILTER socket bound to NFLOG group `group`,
// copying the first `copyRange` bytes of each packet; the kernel sends a datagram once
// `queueThreshold` packets wait or `flushMs` passed. The kernel refuses (EPERM) a group another
// socket holds.
Failure nflogOpen(uint16_t group, uint32_t copyRange, uint32_t queueThreshold, uint32_t flushMs, int rcvbuf,
                  struct nl_sock** out);

class NflogReader : public PolledSocket {
 public:
  // Takes ownership of `sk` (bound to `group`) and starts polling; `callback` receives arrays of
  // packets, and `{lost: true}` where the kernel dropped some because the socket was full.
  NflogReader(Napi::Env env, struct nl_sock* sk, uint16_t group, Napi::Function callback);
  // close() unbinds the group first.

 private:
  ~NflogReader() override = default;
  void drain() override;
  void beforeClose() override;

  uint16_t group_;
};

}  // namespace weft
