// Packets that tell a link's neighbours where an address is now (announce.cc). Worker thread only:
// the sockets open in the thread's network namespace.
#pragma once

#include "common.h"

#include <string>

namespace weft {

// A gratuitous ARP (IPv4) or an unsolicited neighbour advertisement (IPv6) for `address` from
// link `ifindex`'s own MAC address.
Failure announce(int ifindex, const std::string& address);

}  // namespace weft
