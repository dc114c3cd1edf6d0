// The nftables ruleset's generation: a number the kernel advances with every committed transaction
// in a namespace, whoever commits it (nft, iptables-nft, firewalld).
#pragma once

#include "common.h"

#include <cstdint>

namespace weft {

// On the worker thread (inside the handle's namespace): asks the kernel for the generation
// (NFT_MSG_GETGEN) and sets `id` to it.
Failure nftGeneration(uint32_t& id);

}  // namespace weft
