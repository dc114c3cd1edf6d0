// Changes to the nftables ruleset, as the kernel announces them: every committed transaction
// ends with an NFT_MSG_NEWGEN notification on NFNLGRP_NFTABLES naming the new generation and the
// process that committed it. Only those are decoded; the per-object notifications before them (one
// per set element: 100,000 for a large table) are received but not decoded, where `nft monitor`
// prints each.
#pragma once

#include "polled-socket.h"

namespace weft {

// One committed transaction: the ruleset's new generation and who committed it.
struct NftGeneration {
  uint32_t id = 0;
  uint32_t pid = 0;
  std::string process;
};

// On the worker thread: a non-blocking NETLINK_NETFILTER socket, joined to NFNLGRP_NFTABLES when
// `join` (else listen(true) joins it later), its receive buffer `rcvbuf` bytes when not 0.
Failure nftChangesOpen(int rcvbuf, bool join, struct nl_sock** out);

class NftChangesReader : public PolledSocket {
 public:
  // Takes ownership of `sk` and starts polling; `callback` receives arrays of generations, and
  // `{lost: true}` where the kernel dropped notifications because the socket was full.
  NftChangesReader(Napi::Env env, struct nl_sock* sk, Napi::Function callback);
  // Leaves (false) or joins again (true) the notification group: while out of it, no notice is
  // queued for this socket, and with no other listener the kernel builds none.
  bool listen(bool on);

 private:
  ~NftChangesReader() override = default;
  void drain() override;
};

}  // namespace weft
