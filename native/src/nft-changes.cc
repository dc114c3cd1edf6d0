#include "nft-changes.h"
#include "worker.h"

#include <arpa/inet.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <netlink/attr.h>
#include <netlink/msg.h>

#include <cerrno>
#include <memory>

namespace weft {

namespace {

constexpr size_t kBufSize = 64 * 1024;
// Bound the work per wakeup so a flood cannot starve the event loop; libuv polls again.
constexpr int kMaxDatagramsPerWakeup = 1024;

std::optional<NftGeneration> parseGeneration(struct nlmsghdr* hdr) {
  struct nlattr* tb[NFTA_GEN_MAX + 1] = {};
  if (nlmsg_parse(hdr, sizeof(struct nfgenmsg), tb, NFTA_GEN_MAX, nullptr) < 0) return std::nullopt;
  NftGeneration gen;
  if (tb[NFTA_GEN_ID]) gen.id = ntohl(nla_get_u32(tb[NFTA_GEN_ID]));
  if (tb[NFTA_GEN_PROC_PID]) gen.pid = ntohl(nla_get_u32(tb[NFTA_GEN_PROC_PID]));
  if (tb[NFTA_GEN_PROC_NAME]) gen.process = nla_get_string(tb[NFTA_GEN_PROC_NAME]);
  return gen;
}

Napi::Object generationToJs(Napi::Env env, const NftGeneration& gen) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("generation", gen.id);
  o.Set("pid", gen.pid);
  o.Set("process", gen.process);
  return o;
}

}  // namespace

Failure nftChangesOpen(int rcvbuf, bool join, struct nl_sock** out) {
  std::unique_ptr<struct nl_sock, void (*)(struct nl_sock*)> sk(nl_socket_alloc(), nl_socket_free);
  if (!sk) return {ENOMEM, "cannot allocate a netfilter socket"};
  nl_socket_disable_seq_check(sk.get());
  int rc = nl_connect(sk.get(), NETLINK_NETFILTER);
  if (rc < 0) return {errnoFromNl(rc), std::string("connect to nfnetlink: ") + nl_geterror(rc)};
  rc = join ? nl_socket_add_membership(sk.get(), NFNLGRP_NFTABLES) : 0;
  if (rc < 0) return {errnoFromNl(rc), std::string("join the nftables notification group: ") + nl_geterror(rc)};
  readyForPolling(sk.get(), rcvbuf);
  *out = sk.release();
  return {};
}

NftChangesReader::NftChangesReader(Napi::Env env, struct nl_sock* sk, Napi::Function callback)
    : PolledSocket(env, sk, callback) {}

bool NftChangesReader::listen(bool on) {
  int rc = on ? nl_socket_add_membership(sk_, NFNLGRP_NFTABLES) : nl_socket_drop_membership(sk_, NFNLGRP_NFTABLES);
  return rc == 0;
}

void NftChangesReader::drain() {
  static thread_local std::vector<unsigned char> buf(kBufSize);
  deliverNfnl<NftGeneration>(buf, kMaxDatagramsPerWakeup, NFNL_SUBSYS_NFTABLES, NFT_MSG_NEWGEN, parseGeneration, generationToJs);
}

}  // namespace weft
