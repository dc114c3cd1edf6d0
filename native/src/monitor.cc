#include "monitor.h"

#include <linux/rtnetlink.h>
#include <sys/socket.h>

namespace weft {

namespace {

// Enough for every notification the kernel batches into one datagram.
constexpr size_t kBufSize = 64 * 1024;
// Bound the work per wakeup so a flood cannot starve the event loop; libuv polls again.
constexpr int kMaxDatagramsPerWakeup = 2048;

std::optional<Event> parseNotification(struct nlmsghdr* hdr) {
  Event ev;
  switch (hdr->nlmsg_type) {
    case RTM_NEWROUTE:
    case RTM_NEWNEIGH:
    case RTM_NEWLINK:
    case RTM_NEWADDR: ev.action = Event::Action::New; break;
    case RTM_DELROUTE:
    case RTM_DELNEIGH:
    case RTM_DELLINK:
    case RTM_DELADDR: ev.action = Event::Action::Del; break;
    case RTM_GETNEIGH: ev.action = Event::Action::Get; break;  // vxlan L2/L3 miss
    case RTM_NEWNEXTHOP: ev.action = Event::Action::New; break;
    case RTM_DELNEXTHOP: ev.action = Event::Action::Del; break;
    default: return std::nullopt;
  }
  if (hdr->nlmsg_type == RTM_NEWROUTE || hdr->nlmsg_type == RTM_DELROUTE) {
    ev.record = routeFromMessage(hdr);
    if (!ev.record) return std::nullopt;
    return ev;
  }
  if (hdr->nlmsg_type == RTM_NEWNEXTHOP || hdr->nlmsg_type == RTM_DELNEXTHOP) {
    ev.record = nexthopFromMessage(hdr);
    if (!ev.record) return std::nullopt;
    return ev;
  }
  if (hdr->nlmsg_type == RTM_NEWNEIGH || hdr->nlmsg_type == RTM_DELNEIGH || hdr->nlmsg_type == RTM_GETNEIGH) {
    struct rtnl_neigh* n = nullptr;
    if (rtnl_neigh_parse(hdr, &n) < 0) return std::nullopt;
    ev.record = recordFromObject(reinterpret_cast<nl_object*>(n));
    rtnl_neigh_put(n);
    return ev;
  }
  struct nl_msg* msg = nlmsg_convert(hdr);
  if (!msg) return std::nullopt;
  nlmsg_set_proto(msg, NETLINK_ROUTE);
  nl_msg_parse(
      msg, [](struct nl_object* obj, void* arg) { static_cast<Event*>(arg)->record = recordFromObject(obj); },
      &ev);
  nlmsg_free(msg);
  if (!ev.record) return std::nullopt;
  return ev;
}

// A route, nexthop or neighbour change made through the handle's own request socket. (The vxlan driver
// stamps no port on FDB notifications, so those always come through.)
bool isOwnEcho(const struct nlmsghdr* hdr, uint32_t ownPort) {
  if (ownPort == 0 || hdr->nlmsg_pid != ownPort) return false;
  switch (hdr->nlmsg_type) {
    case RTM_NEWROUTE:
    case RTM_DELROUTE:
    case RTM_NEWNEIGH:
    case RTM_DELNEIGH:
    case RTM_NEWNEXTHOP:
    case RTM_DELNEXTHOP: return true;
    default: return false;
  }
}

// An FDB entry added or changed: RTM_NEWNEIGH of the bridge family.
bool isFdbAdd(const struct nlmsghdr* hdr) {
  if (hdr->nlmsg_type != RTM_NEWNEIGH || hdr->nlmsg_len < NLMSG_LENGTH(sizeof(struct ndmsg))) return false;
  return static_cast<const struct ndmsg*>(NLMSG_DATA(hdr))->ndm_family == AF_BRIDGE;
}

}  // namespace

Monitor::Monitor(Napi::Env env, struct nl_sock* sk, uint32_t ownPort, bool fdbAdds, Napi::Function callback)
    : PolledSocket(env, sk, callback), ownPort_(ownPort), fdbAdds_(fdbAdds) {}

void Monitor::drain() {
  static thread_local std::vector<unsigned char> buf(kBufSize);
  std::vector<Event> batch;
  // An overrun is reported in place, so the caller resyncs after what came before it.
  receive(
      buf, kMaxDatagramsPerWakeup,
      [&](struct nlmsghdr* hdr) {
        if (isOwnEcho(hdr, ownPort_) || (!fdbAdds_ && isFdbAdd(hdr))) return;
        if (std::optional<Event> ev = parseNotification(hdr)) batch.push_back(std::move(*ev));
      },
      [&]() { batch.push_back(Event{Event::Action::Overrun, std::nullopt}); });
  if (batch.empty() || closed_) return;
  Napi::HandleScope scope(env_);
  callback_.MakeCallback(env_.Global(), {eventsToJs(env_, batch)});
}

}  // namespace weft
