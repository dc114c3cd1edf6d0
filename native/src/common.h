// Shared declarations of the weft netlink addon.
//
// The addon is deliberately policy-free: it turns plain records into netlink requests through
// libnl-route-3 (and libnl-nf-3 for conntrack), runs them on one thread per handle (libnl
// sockets are not thread-safe, and the thread lives in the handle's network namespace), and
// turns kernel messages back into plain records. Everything that decides *what* to program lives in TypeScript.
#pragma once

#include <napi.h>

#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/neighbour.h>
#include <netlink/route/route.h>

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace weft {

// ---- records: what the kernel holds, as plain data ----------------------------------------------

struct VxlanInfo {
  uint32_t vni = 0;
  std::string local;   // "" when unset
  uint32_t link = 0;   // VTEP device index, 0 when unset
  uint16_t port = 0;   // destination UDP port, host order; 0 when unset
  bool learning = false;
  bool gbp = false;
  bool l2miss = false;
  bool l3miss = false;
  bool proxy = false;
};

struct LinkRec {
  int index = 0;
  std::string name;
  std::string kind;    // rtnl link info kind ("vxlan", "veth", "bridge"...), "" for none
  std::string mac;
  uint32_t mtu = 0;
  uint32_t flags = 0;  // IFF_*
  uint8_t operstate = 0;
  int master = 0;
  int ifLink = 0;      // IFLA_LINK: a veth's peer (index in the peer's namespace), a lower device
  std::optional<VxlanInfo> vxlan;
};

struct AddrRec {
  int index = 0;
  int family = 0;
  std::string local;
  int prefixLen = 0;
  int scope = 0;
  uint32_t flags = 0;  // IFA_F_*
  std::string label;
  uint32_t validLft = 0;
  uint32_t preferredLft = 0;
};

struct RouteRec {
  int family = 0;
  std::string dst;     // "" for the default route
  int dstLen = 0;
  uint32_t table = 0;
  int protocol = 0;
  int scope = 0;
  int type = 0;
  uint32_t priority = 0;
  uint32_t flags = 0;  // RTM_F_* and RTNH_F_* of the route
  int oif = 0;
  std::string gateway;
  std::string prefsrc;
  uint32_t nhFlags = 0;  // RTNH_F_* of the (first) next hop, e.g. RTNH_F_ONLINK
  int nexthops = 0;
  uint32_t nhid = 0;   // RTA_NH_ID: the nexthop object the route goes through, 0 for none
};

// A nexthop object (`ip nexthop`, Linux 5.3+). libnl-route-3 3.7 has no object for it: the
// messages are read and built by hand (nexthopFromMessage, buildRequest).
struct NexthopRec {
  uint32_t id = 0;
  int family = 0;
  int protocol = 0;
  uint32_t flags = 0;  // RTNH_F_*, e.g. RTNH_F_ONLINK
  int oif = 0;
  std::string gateway;
  bool blackhole = false;
  bool group = false;  // a group of other nexthops (NHA_GROUP)
};

struct NeighRec {
  int family = 0;      // AF_INET, AF_INET6 or AF_BRIDGE (FDB)
  int index = 0;
  std::string ip;      // NDA_DST: neighbour address, or the remote VTEP of an FDB entry
  std::string mac;     // NDA_LLADDR
  int state = 0;       // NUD_*
  int flags = 0;       // NTF_*
  int vlan = 0;
  int master = 0;
};

// A queueing discipline (`tc qdisc show`); libnl's tbf object recomputes the buffer from its
// own rounding, so the message is read by hand (qdiscFromMessage) and the kernel's values kept.
struct TbfInfo {
  uint64_t rate = 0;    // bytes per second (TCA_TBF_RATE64 when the kernel sends it)
  uint32_t limit = 0;   // bytes
  uint32_t buffer = 0;  // ticks
};

struct QdiscRec {
  int index = 0;
  uint32_t handle = 0;
  uint32_t parent = 0;
  std::string kind;
  std::optional<TbfInfo> tbf;
};

// A classifier (`tc filter show dev <dev> parent <parent>`): what the bandwidth CHECK needs of
// it, the devices its mirred actions redirect to (egress redirect only).
struct FilterRec {
  int index = 0;
  uint32_t handle = 0;
  uint32_t parent = 0;
  int priority = 0;
  int protocol = 0;  // host order, e.g. ETH_P_ALL
  std::string kind;
  std::vector<int> redirects;
};

using Record = std::variant<LinkRec, AddrRec, RouteRec, NeighRec, NexthopRec, QdiscRec, FilterRec>;

// Records as a dump reads them, in blocks of kBlock: a dump of 50,000 routes (~10 MB) is never
// copied to grow (a vector's doubling held up to three times that at its last step), and its
// blocks can be freed as JS takes them (releaseBefore).
class Records {
 public:
  static constexpr size_t kBlock = 1024;
  void push_back(Record&& r) {
    // A block grows as a vector does, up to kBlock: a small dump costs no more than before.
    if (size_ % kBlock == 0) blocks_.emplace_back();
    blocks_.back().push_back(std::move(r));
    size_++;
  }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  void clear() {
    blocks_.clear();
    size_ = 0;
  }
  const Record& operator[](size_t i) const { return blocks_[i / kBlock][i % kBlock]; }
  // Frees every block wholly before record `i`; those records must not be read again.
  void releaseBefore(size_t i) {
    for (size_t b = 0; b < i / kBlock && b < blocks_.size(); b++) std::vector<Record>().swap(blocks_[b]);
  }

 private:
  std::vector<std::vector<Record>> blocks_;
  size_t size_ = 0;
};

// What a monitor saw: a record with the message type that carried it, or a receive overrun.
struct Event {
  enum class Action { New, Del, Get, Overrun } action = Action::New;
  std::optional<Record> record;
};

// ---- conversions (records.cc) --------------------------------------------------------------------

std::string addrToString(struct nl_addr* addr);
std::optional<Record> recordFromObject(struct nl_object* obj);
// RTM_NEWROUTE/DELROUTE (with RTA_NH_ID, which libnl 3.7 does not read) and RTM_NEWNEXTHOP/DELNEXTHOP.
std::optional<Record> routeFromMessage(struct nlmsghdr* hdr);
std::optional<Record> nexthopFromMessage(const struct nlmsghdr* hdr);
// RTM_NEWQDISC and RTM_NEWTFILTER (tc.cc).
std::optional<Record> qdiscFromMessage(const struct nlmsghdr* hdr);
std::optional<Record> filterFromMessage(const struct nlmsghdr* hdr);
Napi::Value recordToJs(Napi::Env env, const Record& rec);
Napi::Array recordsToJs(Napi::Env env, const Records& recs, size_t from = 0, size_t count = SIZE_MAX);
Napi::Array eventsToJs(Napi::Env env, const std::vector<Event>& events);

// ---- failures ------------------------------------------------------------------------------------

// A failure: the kernel's errno (positive) and its extended-ack text when it gave one.
struct Failure {
  int err = 0;
  std::string detail;
  explicit operator bool() const { return err != 0; }
};

std::string errnoName(int err);
Napi::Object failureToJs(Napi::Env env, const Failure& f);
// An Error to throw or reject with: the message names the errno; `errno` is its symbolic name,
// `detail` the kernel's text (strerror when it gave none).
Napi::Error failureError(Napi::Env env, const Failure& f);

// ---- requests (read in requests.cc; built in request-build.cc, request-*.cc and tc.cc) -----------

enum class OpKind {
  LinkAddVxlan, LinkAddBridge, LinkAddType, LinkAddVeth, LinkSet, LinkSetHairpin, LinkDel, LinkDelGroup,
  AddrAdd, AddrReplace, AddrDel,
  RouteAdd, RouteReplace, RouteDel,
  NeighAdd, NeighReplace, NeighAppend, NeighDel,
  NexthopAdd, NexthopReplace, NexthopDel,
  LinkAddIfb, QdiscAddTbf, QdiscAddIngress, FilterAddRedirect,
};

// One request, read from a JS object on the main thread and built into a message on the worker.
struct Op {
  OpKind kind = OpKind::LinkSet;
  std::string invalid;  // set when the JS object could not be read; the op then fails with EINVAL

  int index = 0;
  int family = 0;
  std::string name;
  std::optional<bool> up;
  uint32_t mtu = 0;
  std::string mac;
  int master = -1;  // linkSet: -1 unchanged, 0 no master, else the master's index
  uint32_t group = 0;  // linkSet: 0 unchanged; linkDelGroup: the group deleted
  bool on = false;  // linkSetHairpin

  // veth: the peer's name and the namespace it is created in (an open fd; -1: this one)
  std::string peerName;
  int peerNsFd = -1;

  std::string linkKind;  // linkAddType: IFLA_INFO_KIND, e.g. "wireguard"

  // vxlan
  uint32_t vni = 0;
  std::string local;
  uint32_t vtepIndex = 0;
  uint16_t port = 0;
  bool learning = false;
  bool gbp = false;
  bool l2miss = false;
  bool l3miss = false;
  bool proxy = false;

  // address: `local`/`prefixLen`; route: dst/dstLen, gateway...
  int prefixLen = 0;
  int scope = -1;  // -1: kernel / libnl default
  std::string dst;
  int dstLen = 0;
  std::string gateway;
  std::string prefsrc;
  uint32_t table = 0;
  int protocol = -1;
  uint32_t priority = 0;
  bool hasPriority = false;
  int type = -1;
  bool onlink = false;
  uint32_t nhid = 0;  // route: through this nexthop object (no gateway or device of its own)
  uint32_t id = 0;    // nexthop: its id
  uint32_t validLft = 0;      // address: seconds the kernel keeps it; 0 = forever
  uint32_t preferredLft = 0;  // address: seconds it stays preferred (with validLft)

  // neighbour / FDB: `dst` is NDA_DST, `mac` is NDA_LLADDR; address: IFA_F_* in `flags`
  int state = -1;
  int flags = 0;
  int vlan = 0;

  // traffic control: `index` is the device; tbf's rate (bytes/s), limit (bytes) and buffer
  // (ticks); a redirect's target device
  uint64_t rate = 0;
  uint32_t limit = 0;
  uint32_t buffer = 0;
  int target = 0;
};

Op opFromJs(const Napi::Value& v);
// Builds the netlink message for `op`; on failure returns nullptr and fills `fail`.
struct nl_msg* buildRequest(const Op& op, Failure& fail);

}  // namespace weft
