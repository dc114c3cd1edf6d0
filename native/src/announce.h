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

// Whether another host on link `ifindex` holds any of `addresses` (IPv4 or IPv6, mixed): `probes`
// rounds spread evenly over `waitMs`, each an RFC 5227 ARP probe for every IPv4 address and an
// RFC 4862 DAD neighbour solicitation for every IPv6 one. `macs[i]` gets the MACs of the hosts that
// said `addresses[i]` is theirs in that time (ARP reply or announcement, neighbour advertisement), ours excepted.
Failure addressProbe(int ifindex, const std::vector<std::string>& addresses, int waitMs, int probes,
                     std::vector<std::vector<std::string>>& macs);

}  // namespace weft
