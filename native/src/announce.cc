// Announcements of an address that moved to this node, sent as packets on the worker thread (so
// from the handle's namespace): a gratuitous ARP for IPv4, an unsolicited neighbour advertisement
// for IPv6. Both go out through an AF_PACKET socket bound to the one link, so nothing about the
// link changes and no route or source address selection is involved.
#include "announce.h"

#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <netinet/icmp6.h>
#include <netinet/if_ether.h>
#include <netinet/ip6.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

namespace weft {

namespace {

Failure sysFailure(const std::string& what) { return {errno, what + ": " + strerror(errno)}; }

// The link's MAC address (SIOCGIFHWADDR), which must be an Ethernet one.
Failure linkMac(int fd, int ifindex, unsigned char mac[ETH_ALEN]) {
  struct ifreq ifr = {};
  if (!if_indextoname(static_cast<unsigned>(ifindex), ifr.ifr_name))
    return {ENODEV, "no link with index " + std::to_string(ifindex)};
  if (ioctl(fd, SIOCGIFHWADDR, &ifr) < 0) return sysFailure(std::string("cannot read the MAC address of ") + ifr.ifr_name);
  if (ifr.ifr_hwaddr.sa_family != ARPHRD_ETHER)
    return {EOPNOTSUPP, std::string(ifr.ifr_name) + " is not an Ethernet link"};
  memcpy(mac, ifr.ifr_hwaddr.sa_data, ETH_ALEN);
  return {};
}

// Sends `len` bytes of `payload` as one frame of `ethertype` to `dst` on link `ifindex`; the
// kernel adds the Ethernet header with the link's own MAC as source.
Failure sendFrame(int fd, int ifindex, uint16_t ethertype, const unsigned char dst[ETH_ALEN], const void* payload, size_t len) {
  struct sockaddr_ll to = {};
  to.sll_family = AF_PACKET;
  to.sll_protocol = htons(ethertype);
  to.sll_ifindex = ifindex;
  to.sll_halen = ETH_ALEN;
  memcpy(to.sll_addr, dst, ETH_ALEN);
  ssize_t sent;
  do sent = sendto(fd, payload, len, 0, reinterpret_cast<struct sockaddr*>(&to), sizeof to);
  while (sent < 0 && errno == EINTR);
  if (sent < 0) return sysFailure("cannot send the announcement");
  return {};
}

// RFC 5227's ARP announcement: a request whose sender and target are both the address, to the
// broadcast address, as the kernel itself sends when a link's address changes.
Failure gratuitousArp(int fd, int ifindex, const unsigned char mac[ETH_ALEN], const in_addr& ip) {
  struct ether_arp arp = {};
  arp.arp_hrd = htons(ARPHRD_ETHER);
  arp.arp_pro = htons(ETHERTYPE_IP);
  arp.arp_hln = ETH_ALEN;
  arp.arp_pln = 4;
  arp.arp_op = htons(ARPOP_REQUEST);
  memcpy(arp.arp_sha, mac, ETH_ALEN);
  memcpy(arp.arp_spa, &ip, 4);
  memcpy(arp.arp_tpa, &ip, 4);
  const unsigned char broadcast[ETH_ALEN] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  return sendFrame(fd, ifindex, ETH_P_ARP, broadcast, &arp, sizeof arp);
}

uint16_t checksum(const void* data, size_t len, uint32_t sum) {
  auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i + 1 < len; i += 2) sum += (p[i] << 8) | p[i + 1];
  if (len & 1) sum += p[len - 1] << 8;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

// RFC 4861 7.2.6: an unsolicited neighbour advertisement to all nodes (ff02::1), hop limit 255,
// override set, solicited clear, with the target link-layer address option. Its source is the
// address itself (assigned to the link, as 4861 asks), so it needs no other address on the link.
Failure unsolicitedNa(int fd, int ifindex, const unsigned char mac[ETH_ALEN], const in6_addr& ip) {
  struct Packet {
    struct ip6_hdr ip6;
    struct nd_neighbor_advert na;
    struct nd_opt_hdr opt;
    unsigned char lladdr[ETH_ALEN];
  } pkt = {};
  static_assert(sizeof pkt == 40 + 24 + 8, "the advertisement is laid out without padding");
  const size_t icmpLen = sizeof pkt - sizeof pkt.ip6;
  pkt.ip6.ip6_flow = htonl(6u << 28);
  pkt.ip6.ip6_plen = htons(static_cast<uint16_t>(icmpLen));
  pkt.ip6.ip6_nxt = IPPROTO_ICMPV6;
  pkt.ip6.ip6_hlim = 255;
  pkt.ip6.ip6_src = ip;
  inet_pton(AF_INET6, "ff02::1", &pkt.ip6.ip6_dst);
  pkt.na.nd_na_type = ND_NEIGHBOR_ADVERT;
  pkt.na.nd_na_flags_reserved = ND_NA_FLAG_OVERRIDE;
  pkt.na.nd_na_target = ip;
  pkt.opt.nd_opt_type = ND_OPT_TARGET_LINKADDR;
  pkt.opt.nd_opt_len = 1;  // in units of 8 bytes: type, length and the MAC
  memcpy(pkt.lladdr, mac, ETH_ALEN);
  // The ICMPv6 checksum covers a pseudo-header: source, destination, length and next header.
  uint32_t sum = 0;
  for (const in6_addr* a : {&pkt.ip6.ip6_src, &pkt.ip6.ip6_dst})
    for (int i = 0; i < 16; i += 2) sum += (a->s6_addr[i] << 8) | a->s6_addr[i + 1];
  sum += static_cast<uint32_t>(icmpLen) + IPPROTO_ICMPV6;
  pkt.na.nd_na_cksum = htons(checksum(&pkt.na, icmpLen, sum));
  const unsigned char allNodes[ETH_ALEN] = {0x33, 0x33, 0x00, 0x00, 0x00, 0x01};
  return sendFrame(fd, ifindex, ETH_P_IPV6, allNodes, &pkt, sizeof pkt);
}

std::string macText(const unsigned char* m) {
  char buf[18];
  snprintf(buf, sizeof buf, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
  return buf;
}

// The IPv6 solicited-node multicast group of `ip` (RFC 4291 2.7.1): ff02::1:ff00:0/104 plus its low 24 bits.
in6_addr solicitedNode(const in6_addr& ip) {
  in6_addr group = {};
  inet_pton(AF_INET6, "ff02::1:ff00:0", &group);
  memcpy(&group.s6_addr[13], &ip.s6_addr[13], 3);
  return group;
}

// RFC 5227 2.1.1's ARP probe: a broadcast request for `ip` with sender address 0.0.0.0, so no
// neighbour learns anything from it.
Failure arpRequest(int fd, int ifindex, const unsigned char mac[ETH_ALEN], const in_addr& ip) {
  struct ether_arp probe = {};
  probe.arp_hrd = htons(ARPHRD_ETHER);
  probe.arp_pro = htons(ETHERTYPE_IP);
  probe.arp_hln = ETH_ALEN;
  probe.arp_pln = 4;
  probe.arp_op = htons(ARPOP_REQUEST);
  memcpy(probe.arp_sha, mac, ETH_ALEN);
  memcpy(probe.arp_tpa, &ip, 4);
  const unsigned char broadcast[ETH_ALEN] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  return sendFrame(fd, ifindex, ETH_P_ARP, broadcast, &probe, sizeof probe);
}

// RFC 4862 5.4.2's duplicate address detection probe: a neighbour solicitation for `ip` from the
// unspecified address to its solicited-node group, hop limit 255, without a source link-layer
// option. A host holding the address answers with an advertisement to all nodes (ff02::1).
Failure dadSolicitation(int fd, int ifindex, const in6_addr& ip) {
  struct Packet {
    struct ip6_hdr ip6;
    struct nd_neighbor_solicit ns;
  } pkt = {};
  static_assert(sizeof pkt == 40 + 24, "the solicitation is laid out without padding");
  const size_t icmpLen = sizeof pkt - sizeof pkt.ip6;
  pkt.ip6.ip6_flow = htonl(6u << 28);
  pkt.ip6.ip6_plen = htons(static_cast<uint16_t>(icmpLen));
  pkt.ip6.ip6_nxt = IPPROTO_ICMPV6;
  pkt.ip6.ip6_hlim = 255;
  pkt.ip6.ip6_dst = solicitedNode(ip);
  pkt.ns.nd_ns_type = ND_NEIGHBOR_SOLICIT;
  pkt.ns.nd_ns_target = ip;
  uint32_t sum = 0;
  for (int i = 0; i < 16; i += 2) sum += (pkt.ip6.ip6_dst.s6_addr[i] << 8) | pkt.ip6.ip6_dst.s6_addr[i + 1];
  sum += static_cast<uint32_t>(icmpLen) + IPPROTO_ICMPV6;
  pkt.ns.nd_ns_cksum = htons(checksum(&pkt.ns, icmpLen, sum));
  // 33:33 and the group's low 32 bits (RFC 2464 7).
  const unsigned char dst[ETH_ALEN] = {0x33, 0x33, 0xff, ip.s6_addr[13], ip.s6_addr[14], ip.s6_addr[15]};
  return sendFrame(fd, ifindex, ETH_P_IPV6, dst, &pkt, sizeof pkt);
}

// Whether a received frame says one of the probed addresses is its sender's: an ARP reply or
// announcement (sender address) or a neighbour advertisement (target address); `index` is then
// its place in v4 followed by v6.
bool claimedBy(uint16_t protocol, const unsigned char* frame, ssize_t len, const std::vector<in_addr>& v4,
               const std::vector<in6_addr>& v6, size_t& index) {
  if (protocol == ETH_P_ARP && len >= static_cast<ssize_t>(sizeof(struct ether_arp))) {
    // Another host's probe for it (sender 0.0.0.0) is not counted (RFC 5227 would): whoever assigns
    // the address decides between two claimants, and a host watching the address must not hold its claimant off.
    const auto* arp = reinterpret_cast<const struct ether_arp*>(frame);
    for (size_t i = 0; i < v4.size(); i++)
      if (memcmp(arp->arp_spa, &v4[i], 4) == 0) {
        index = i;
        return true;
      }
    return false;
  }
  if (protocol != ETH_P_IPV6 || len < static_cast<ssize_t>(sizeof(struct ip6_hdr) + sizeof(struct nd_neighbor_advert))) return false;
  const auto* ip6 = reinterpret_cast<const struct ip6_hdr*>(frame);
  const auto* na = reinterpret_cast<const struct nd_neighbor_advert*>(frame + sizeof(struct ip6_hdr));
  if (ip6->ip6_nxt != IPPROTO_ICMPV6 || ip6->ip6_hlim != 255 || na->nd_na_type != ND_NEIGHBOR_ADVERT) return false;
  for (size_t i = 0; i < v6.size(); i++)
    if (memcmp(&na->nd_na_target, &v6[i], sizeof(in6_addr)) == 0) {
      index = v4.size() + i;
      return true;
    }
  return false;
}

}  // namespace

Failure addressProbe(int ifindex, const std::vector<std::string>& addresses, int waitMs, int probes,
                     std::vector<std::vector<std::string>>& macs) {
  // The addresses of each family, and where each one's answers go in `macs`.
  std::vector<in_addr> v4;
  std::vector<in6_addr> v6;
  std::vector<size_t> slot4, slot6;
  for (size_t i = 0; i < addresses.size(); i++) {
    in_addr a;
    in6_addr b;
    if (inet_pton(AF_INET, addresses[i].c_str(), &a) == 1) {
      v4.push_back(a);
      slot4.push_back(i);
    } else if (inet_pton(AF_INET6, addresses[i].c_str(), &b) == 1) {
      v6.push_back(b);
      slot6.push_back(i);
    } else {
      return {EINVAL, "invalid address \"" + addresses[i] + "\""};
    }
  }
  macs.assign(addresses.size(), {});
  int fd = socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, htons(ETH_P_ALL));
  if (fd < 0) return sysFailure("cannot open a packet socket");
  struct sockaddr_ll here = {};
  here.sll_family = AF_PACKET;
  here.sll_protocol = htons(ETH_P_ALL);
  here.sll_ifindex = ifindex;
  unsigned char mac[ETH_ALEN];
  Failure f = linkMac(fd, ifindex, mac);
  if (!f && bind(fd, reinterpret_cast<struct sockaddr*>(&here), sizeof here) < 0) f = sysFailure("cannot bind the packet socket");
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  const Clock::time_point end = start + std::chrono::milliseconds(waitMs);
  int sent = 0;
  while (!f) {
    Clock::time_point now = Clock::now();
    if (now >= end) break;
    // The probes go out evenly over the window, the first at once, so one lost frame (or a
    // neighbour busy for a moment) does not hide the other host.
    Clock::time_point nextProbe = start + std::chrono::milliseconds(waitMs) * sent / probes;
    if (sent < probes && now >= nextProbe) {
      for (const in_addr& a : v4)
        if ((f = arpRequest(fd, ifindex, mac, a))) break;
      for (const in6_addr& a : v6)
        if (!f && (f = dadSolicitation(fd, ifindex, a))) break;
      sent++;
      continue;
    }
    Clock::time_point until = sent < probes ? std::min(end, start + std::chrono::milliseconds(waitMs) * sent / probes) : end;
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count()) + 1;
    struct pollfd p = {fd, POLLIN, 0};
    int rc = poll(&p, 1, left);
    if (rc < 0 && errno != EINTR) f = sysFailure("cannot wait for answers to the probes");
    if (rc <= 0) continue;
    unsigned char frame[256];
    struct sockaddr_ll from = {};
    socklen_t fromLen = sizeof from;
    ssize_t n = recvfrom(fd, frame, sizeof frame, MSG_TRUNC, reinterpret_cast<struct sockaddr*>(&from), &fromLen);
    if (n <= 0 || from.sll_pkttype == PACKET_OUTGOING || from.sll_halen != ETH_ALEN) continue;
    if (memcmp(from.sll_addr, mac, ETH_ALEN) == 0) continue;
    n = std::min<ssize_t>(n, sizeof frame);
    size_t index = 0;
    if (!claimedBy(ntohs(from.sll_protocol), frame, n, v4, v6, index)) continue;
    std::vector<std::string>& seen = macs[index < v4.size() ? slot4[index] : slot6[index - v4.size()]];
    std::string who = macText(from.sll_addr);
    if (std::find(seen.begin(), seen.end(), who) == seen.end()) seen.push_back(who);
  }
  close(fd);
  return f;
}

Failure announce(int ifindex, const std::string& address) {
  in_addr v4;
  in6_addr v6;
  bool isV4 = inet_pton(AF_INET, address.c_str(), &v4) == 1;
  if (!isV4 && inet_pton(AF_INET6, address.c_str(), &v6) != 1) return {EINVAL, "invalid address \"" + address + "\""};
  // SOCK_DGRAM: the kernel builds the Ethernet header; protocol 0: the socket receives nothing.
  int fd = socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return sysFailure("cannot open a packet socket");
  unsigned char mac[ETH_ALEN];
  Failure f = linkMac(fd, ifindex, mac);
  if (!f) f = isV4 ? gratuitousArp(fd, ifindex, mac, v4) : unsolicitedNa(fd, ifindex, mac, v6);
  close(fd);
  return f;
}

}  // namespace weft
