#include "nft-generation.h"
#include "worker.h"

#include <arpa/inet.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <netlink/attr.h>
#include <netlink/msg.h>
#include <netlink/netfilter/nfnl.h>

#include <memory>

namespace weft {

namespace {

struct Answer {
  uint32_t id = 0;
  bool found = false;
};

int onMessage(struct nl_msg* msg, void* arg) {
  auto* answer = static_cast<Answer*>(arg);
  struct nlmsghdr* hdr = nlmsg_hdr(msg);
  if (NFNL_SUBSYS_ID(hdr->nlmsg_type) != NFNL_SUBSYS_NFTABLES || NFNL_MSG_TYPE(hdr->nlmsg_type) != NFT_MSG_NEWGEN) return NL_OK;
  struct nlattr* tb[NFTA_GEN_MAX + 1] = {};
  if (nlmsg_parse(hdr, sizeof(struct nfgenmsg), tb, NFTA_GEN_MAX, nullptr) < 0 || !tb[NFTA_GEN_ID]) return NL_OK;
  answer->id = ntohl(nla_get_u32(tb[NFTA_GEN_ID]));
  answer->found = true;
  return NL_OK;
}

}  // namespace

Failure nftGeneration(uint32_t& id) {
  std::unique_ptr<struct nl_sock, void (*)(struct nl_sock*)> sk(nl_socket_alloc(), nl_socket_free);
  if (!sk) return {ENOMEM, "cannot allocate a netfilter socket"};
  int rc = nl_connect(sk.get(), NETLINK_NETFILTER);
  if (rc < 0) return {errnoFromNl(rc), std::string("connect to nfnetlink: ") + nl_geterror(rc)};
  std::unique_ptr<struct nl_msg, void (*)(struct nl_msg*)> msg(
      nfnlmsg_alloc_simple(NFNL_SUBSYS_NFTABLES, NFT_MSG_GETGEN, NLM_F_REQUEST, AF_UNSPEC, 0), nlmsg_free);
  if (!msg) return {ENOMEM, "cannot allocate an nftables request"};
  Answer answer;
  nl_socket_modify_cb(sk.get(), NL_CB_VALID, NL_CB_CUSTOM, onMessage, &answer);
  rc = nl_send_auto(sk.get(), msg.get());
  // One answer: the NEWGEN message, or an error message that makes this fail.
  if (rc >= 0) rc = nl_recvmsgs_default(sk.get());
  if (rc < 0) return {errnoFromNl(rc), std::string("read the nftables generation: ") + nl_geterror(rc)};
  if (!answer.found) return {EPROTO, "the kernel answered without an nftables generation"};
  id = answer.id;
  return {};
}

}  // namespace weft
