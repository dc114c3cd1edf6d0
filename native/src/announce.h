// Packets that tell a link's neighbours where an address is now (announce.cc). Worker thread only:
// the sockets open in the thread's network namespace.
#pragma once

#include "common.h"

#include <string>
#include <vector>

namespace weft {

// A gratuitous ARP (IPv4) or an unsolicited neighbour advertisement (IPv6) for `address` from
// link `ifindex`'s own MAC address.
Failure announce(int ifindex, const std::string& address);

// RFC 5227's ARP probe for IPv4 `address` on link `ifindex` (two probes over `waitMs`): the MACs
// of the hosts that said the address is theirs in that time, ours excepted.
Failure arpProbe(int ifindex, const std::string& address, int waitMs, std::vector<std::string>& macs);

}  // namespace weft
