// libnl-nf-3 binds the group and parses each NFULNL_MSG_PACKET (prefix, payload); only the IP
// header's addresses and the transport ports are decoded here, so no nfnetlink codec lives here.
#include "nflog.h"
#include "worker.h"

#include <arpa/inet.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <netlink/netfilter/log.h>
#include <netlink/netfilter/log_msg.h>
#include <netlink/netfilter/nfnl.h>

#include <cerrno>
#include <memory>
#include <optional>
#include <vector>

namespace weft {

namespace {

constexpr size_t kBufSize = 256 * 1024;
// Bound the work per wakeup so a flood cannot starve the event loop; libuv polls again.
constexpr int kMaxDatagramsPerWakeup = 256;

using LogPtr = std::unique_ptr<struct nfnl_log, void (*)(struct nfnl_log*)>;

LogPtr groupConfig(uint16_t group) {
  LogPtr log(nfnl_log_alloc(), nfnl_log_put);
  if (log) nfnl_log_set_group(log.get(), group);
  return log;
}

bool transport(int protocol) {
  return protocol == IPPROTO_TCP || protocol == IPPROTO_UDP || protocol == IPPROTO_SCTP;
}

// The addresses, protocol and ports of an IPv4 or IPv6 header (the first next header of IPv6:
// extension headers are not walked).
bool decode(const unsigned char* p, int len, LoggedPacket& out) {
  char text[INET6_ADDRSTRLEN];
  int l4 = 0;
  if (len >= 20 && (p[0] >> 4) == 4) {
    out.family = 4;
    out.protocol = p[9];
    l4 = (p[0] & 0x0f) * 4;
    out.src = inet_ntop(AF_INET, p + 12, text, sizeof text);
    out.dst = inet_ntop(AF_INET, p + 16, text, sizeof text);
  } else if (len >= 40 && (p[0] >> 4) == 6) {
    out.family = 6;
    out.protocol = p[6];
    l4 = 40;
    out.src = inet_ntop(AF_INET6, p + 8, text, sizeof text);
    out.dst = inet_ntop(AF_INET6, p + 24, text, sizeof text);
  } else {
    return false;
  }
  if (transport(out.protocol) && len >= l4 + 4) {
    out.sport = (p[l4] << 8) | p[l4 + 1];
    out.dport = (p[l4 + 2] << 8) | p[l4 + 3];
  }
  return true;
}

std::optional<LoggedPacket> parsePacket(struct nlmsghdr* hdr) {
  struct nfnl_log_msg* msg = nullptr;
  if (nfnlmsg_log_msg_parse(hdr, &msg) < 0) return std::nullopt;
  LoggedPacket packet;
  int len = 0;
  const auto* payload = static_cast<const unsigned char*>(nfnl_log_msg_get_payload(msg, &len));
  const char* prefix = nfnl_log_msg_get_prefix(msg);
  bool ok = payload && decode(payload, len, packet);
  if (prefix) packet.prefix = prefix;
  nfnl_log_msg_put(msg);
  if (!ok) return std::nullopt;
  return packet;
}

Napi::Object packetToJs(Napi::Env env, const LoggedPacket& p) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("prefix", p.prefix);
  o.Set("family", p.family);
  o.Set("src", p.src);
  o.Set("dst", p.dst);
  o.Set("protocol", p.protocol);
  o.Set("sport", p.sport);
  o.Set("dport", p.dport);
  return o;
}

}  // namespace

Failure nflogOpen(uint16_t group, uint32_t copyRange, uint32_t queueThreshold, uint32_t flushMs, int rcvbuf,
                  struct nl_sock** out) {
  std::unique_ptr<struct nl_sock, void (*)(struct nl_sock*)> sk(nl_socket_alloc(), nl_socket_free);
  if (!sk) return {ENOMEM, "cannot allocate a netfilter socket"};
  int rc = nl_connect(sk.get(), NETLINK_NETFILTER);
  if (rc < 0) return {errnoFromNl(rc), std::string("connect to nfnetlink_log: ") + nl_geterror(rc)};
  LogPtr log = groupConfig(group);
  if (!log) return {ENOMEM, "cannot allocate an NFLOG group"};
  nfnl_log_set_copy_mode(log.get(), NFNL_LOG_COPY_PACKET);
  nfnl_log_set_copy_range(log.get(), copyRange);
  nfnl_log_set_queue_threshold(log.get(), queueThreshold);
  nfnl_log_set_flush_timeout(log.get(), (flushMs + 9) / 10);  // in hundredths of a second
  rc = nfnl_log_create(sk.get(), log.get());
  if (rc < 0) return {errnoFromNl(rc), "bind NFLOG group " + std::to_string(group) + ": " + nl_geterror(rc)};
  readyForPolling(sk.get(), rcvbuf);
  *out = sk.release();
  return {};
}

NflogReader::NflogReader(Napi::Env env, struct nl_sock* sk, uint16_t group, Napi::Function callback)
    : PolledSocket(env, sk, callback), group_(group) {}

// The kernel unbinds a closed socket's groups too; the explicit unbind frees the group at once. No
// wait for the ack: the socket is non-blocking and about to close.
void NflogReader::beforeClose() {
  LogPtr log = groupConfig(group_);
  struct nl_msg* msg = nullptr;
  if (log && nfnl_log_build_delete_request(log.get(), &msg) == 0) {
    nl_send_auto(sk_, msg);
    nlmsg_free(msg);
  }
}

// Calls back with an array of the packets read, and `{lost: true}` after them where the kernel
// dropped some; nothing when there is neither.
void NflogReader::drain() {
  static thread_local std::vector<unsigned char> buf(kBufSize);
  std::vector<LoggedPacket> batch;
  bool lost = false;
  receive(
      buf, kMaxDatagramsPerWakeup,
      [&](struct nlmsghdr* hdr) {
        if (NFNL_SUBSYS_ID(hdr->nlmsg_type) != NFNL_SUBSYS_ULOG || NFNL_MSG_TYPE(hdr->nlmsg_type) != NFULNL_MSG_PACKET) return;
        if (std::optional<LoggedPacket> packet = parsePacket(hdr)) batch.push_back(std::move(*packet));
      },
      [&]() { lost = true; });
  if ((batch.empty() && !lost) || closed_) return;
  Napi::HandleScope scope(env_);
  Napi::Array arr = Napi::Array::New(env_, batch.size() + (lost ? 1 : 0));
  for (size_t i = 0; i < batch.size(); i++) arr.Set(static_cast<uint32_t>(i), packetToJs(env_, batch[i]));
  if (lost) {
    Napi::Object o = Napi::Object::New(env_);
    o.Set("lost", true);
    arr.Set(static_cast<uint32_t>(batch.size()), o);
  }
  callback_.MakeCallback(env_.Global(), {arr});
}

}  // namespace weft
