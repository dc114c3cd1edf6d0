#include "worker.h"

#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/nexthop.h>
#include <linux/rtnetlink.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>

#ifndef NETLINK_EXT_ACK
#define NETLINK_EXT_ACK 11
#endif
#ifndef NETLINK_CAP_ACK
#define NETLINK_CAP_ACK 10
#endif

namespace weft {

int errnoFromNl(int nlerr) {
  switch (nlerr < 0 ? -nlerr : nlerr) {
    case NLE_NOMEM: return ENOBUFS;
    case NLE_EXIST: return EEXIST;
    case NLE_OBJ_NOTFOUND: return ENOENT;
    case NLE_NODEV: return ENODEV;
    case NLE_AGAIN: return EAGAIN;
    case NLE_INTR:
    case NLE_DUMP_INTR: return EINTR;
    case NLE_PERM: return EPERM;
    case NLE_INVAL:
    case NLE_MISSING_ATTR:
    case NLE_AF_MISMATCH: return EINVAL;
    case NLE_AF_NOSUPPORT: return EAFNOSUPPORT;
    case NLE_OPNOTSUPP: return EOPNOTSUPP;
    case NLE_BUSY: return EBUSY;
    case NLE_RANGE: return ERANGE;
    default: return EIO;
  }
}

static Failure nlFailure(int rc) { return {errnoFromNl(rc), nl_geterror(rc)}; }

std::shared_ptr<Worker> Worker::start(const std::string& netnsPath) {
  std::shared_ptr<Worker> w(new Worker());
  std::promise<void> started;
  std::future<void> ready = started.get_future();
  std::thread([w, netnsPath, started = std::move(started)]() mutable {
    w->enter(netnsPath);
    started.set_value();
    w->loop();
  }).detach();
  ready.wait();
  return w;
}

void Worker::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) break;
    std::function<void(Worker&)> task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    task(*this);
    lock.lock();
  }
  std::function<void()> onExit = std::move(onExit_);
  lock.unlock();
  if (onExit) onExit();
}

Worker::~Worker() {
  if (cb_) nl_cb_put(cb_);
  if (sk_) nl_socket_free(sk_);
  if (genlFd_ >= 0) close(genlFd_);
}

Failure Worker::genl(const std::vector<uint8_t>& request, std::vector<std::vector<uint8_t>>& replies) {
  if (request.size() < sizeof(nlmsghdr)) return {EINVAL, "the request is shorter than a netlink header"};
  if (genlFd_ < 0) {
    genlFd_ = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_GENERIC);
    if (genlFd_ < 0) return {errno, "socket(NETLINK_GENERIC)"};
    int on = 1;
    setsockopt(genlFd_, SOL_NETLINK, NETLINK_EXT_ACK, &on, sizeof on);
    sockaddr_nl local = {};
    local.nl_family = AF_NETLINK;
    if (bind(genlFd_, reinterpret_cast<sockaddr*>(&local), sizeof local) < 0) {
      int err = errno;
      close(genlFd_);
      genlFd_ = -1;
      return {err, "bind(NETLINK_GENERIC)"};
    }
  }
  const auto* head = reinterpret_cast<const nlmsghdr*>(request.data());
  const uint32_t seq = head->nlmsg_seq;
  sockaddr_nl kernel = {};
  kernel.nl_family = AF_NETLINK;
  if (sendto(genlFd_, request.data(), request.size(), 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) < 0) {
    return {errno, "send to generic netlink"};
  }
  std::vector<uint8_t> buf(1 << 16);
  for (;;) {
    ssize_t n = recv(genlFd_, buf.data(), buf.size(), MSG_TRUNC);
    if (n < 0) {
      if (errno == EINTR) continue;
      return {errno, "receive from generic netlink"};
    }
    if (static_cast<size_t>(n) > buf.size()) {
      buf.resize(static_cast<size_t>(n));
      continue;  // the truncated datagram is gone; the dump continues with the next one
    }
    int len = static_cast<int>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf.data()); NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
      if (h->nlmsg_seq != seq) continue;
      if (h->nlmsg_type == NLMSG_DONE) return {};
      if (h->nlmsg_type == NLMSG_ERROR) {
        const auto* e = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
        if (e->error == 0) return {};
        return {-e->error, "the kernel refused the generic netlink request"};
      }
      const auto* bytes = reinterpret_cast<const uint8_t*>(h);
      replies.emplace_back(bytes, bytes + h->nlmsg_len);
      if (!(h->nlmsg_flags & NLM_F_MULTI) && !(head->nlmsg_flags & NLM_F_ACK)) return {};
    }
  }
}

void Worker::enter(const std::string& netnsPath) {
  if (!netnsPath.empty()) {
    int fd = open(netnsPath.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      startError_ = {errno, "cannot open network namespace " + netnsPath + ": " + strerror(errno)};
      return;
    }
    // Only this thread moves; the rest of the process stays where it is.
    int rc = setns(fd, CLONE_NEWNET);
    int err = errno;
    close(fd);
    if (rc < 0) {
      startError_ = {err, "cannot enter network namespace " + netnsPath + ": " + strerror(err)};
      return;
    }
  }
  sk_ = nl_socket_alloc();
  cb_ = nl_cb_alloc(NL_CB_DEFAULT);
  if (!sk_ || !cb_) {
    startError_ = {ENOMEM, "cannot allocate a netlink socket"};
    return;
  }
  nl_cb_err(cb_, NL_CB_CUSTOM, &Worker::onError, this);
  nl_socket_set_cb(sk_, cb_);
  if (int rc = nl_connect(sk_, NETLINK_ROUTE); rc < 0) {
    startError_ = nlFailure(rc);
    return;
  }
  nl_socket_set_buffer_size(sk_, 8 << 20, 1 << 20);
  // One recvmsg per datagram instead of libnl's peek-then-read: the kernel never builds a dump
  // datagram above 32 KiB for a reader offering more, so 64 KiB is never truncated.
  nl_socket_disable_msg_peek(sk_);
  nl_socket_set_msg_buf_size(sk_, 64 * 1024);
  int one = 1;
  // Extended acks carry the kernel's own explanation; capped acks skip echoing our request.
  setsockopt(nl_socket_get_fd(sk_), SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof one);
  setsockopt(nl_socket_get_fd(sk_), SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof one);
}

void Worker::post(std::function<void(Worker&)> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void Worker::stop(std::function<void()> onExit) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    onExit_ = std::move(onExit);
  }
  cv_.notify_one();
}

// libnl reports kernel errors folded into its own codes (ENOENT and ESRCH become one, ENETUNREACH
// is lost): keep the kernel's errno and its extended-ack message instead.
int Worker::onError(struct sockaddr_nl*, struct nlmsgerr* e, void* arg) {
  auto* self = static_cast<Worker*>(arg);
  self->kernelError_ = {-e->error, ""};
  auto* hdr = reinterpret_cast<struct nlmsghdr*>(reinterpret_cast<char*>(e) - NLMSG_HDRLEN);
  if (hdr->nlmsg_flags & NLM_F_ACK_TLVS) {
    size_t off = sizeof(*e);
    if (!(hdr->nlmsg_flags & NLM_F_CAPPED)) off += e->msg.nlmsg_len - NLMSG_HDRLEN;
    off = NLMSG_ALIGN(off);
    size_t total = hdr->nlmsg_len - NLMSG_HDRLEN;
    if (off < total) {
      auto* attrs = reinterpret_cast<struct nlattr*>(reinterpret_cast<char*>(e) + off);
      struct nlattr* tb[NLMSGERR_ATTR_MAX + 1] = {};
      if (nla_parse(tb, NLMSGERR_ATTR_MAX, attrs, static_cast<int>(total - off), nullptr) == 0 &&
          tb[NLMSGERR_ATTR_MSG]) {
        self->kernelError_.detail = nla_get_string(tb[NLMSGERR_ATTR_MSG]);
      }
    }
  }
  return NL_STOP;
}

int Worker::onValid(struct nl_msg* msg, void* arg) {
  auto* target = static_cast<ParseTarget*>(arg);
  struct nlmsghdr* hdr = nlmsg_hdr(msg);
  const DumpFilter* f = target->filter;
  switch (hdr->nlmsg_type) {
    case RTM_NEWROUTE: {
      std::optional<Record> parsed = routeFromMessage(hdr);
      if (!parsed) return NL_SKIP;
      Record rec = std::move(*parsed);
      const auto& r = std::get<RouteRec>(rec);
      if (f && ((f->table && r.table != f->table) || (f->protocol >= 0 && r.protocol != f->protocol) ||
                (f->index && r.oif != f->index)))
        return NL_OK;
      target->out->push_back(std::move(rec));
      return NL_OK;
    }
    case RTM_NEWNEIGH: {
      struct rtnl_neigh* n = nullptr;
      if (rtnl_neigh_parse(hdr, &n) < 0) return NL_SKIP;
      Record rec = recordFromObject(reinterpret_cast<nl_object*>(n)).value();
      rtnl_neigh_put(n);
      if (f && f->index && std::get<NeighRec>(rec).index != f->index) return NL_OK;
      target->out->push_back(std::move(rec));
      return NL_OK;
    }
    case RTM_NEWQDISC: {
      std::optional<Record> rec = qdiscFromMessage(hdr);
      if (!rec) return NL_SKIP;
      if (f && f->index && std::get<QdiscRec>(*rec).index != f->index) return NL_OK;
      target->out->push_back(std::move(*rec));
      return NL_OK;
    }
    case RTM_NEWTFILTER: {
      std::optional<Record> rec = filterFromMessage(hdr);
      if (!rec) return NL_SKIP;
      target->out->push_back(std::move(*rec));
      return NL_OK;
    }
    case RTM_NEWNEXTHOP: {
      std::optional<Record> rec = nexthopFromMessage(hdr);
      if (!rec) return NL_SKIP;
      target->out->push_back(std::move(*rec));
      return NL_OK;
    }
    default: {
      nl_msg_parse(
          msg,
          [](struct nl_object* obj, void* a) {
            auto* t = static_cast<ParseTarget*>(a);
            std::optional<Record> rec = recordFromObject(obj);
            if (!rec) return;
            if (t->filter && t->filter->index) {
              if (auto* addr = std::get_if<AddrRec>(&*rec); addr && addr->index != t->filter->index) return;
            }
            t->out->push_back(std::move(*rec));
          },
          target);
      return NL_OK;
    }
  }
}

Failure Worker::receive(Records* out, const DumpFilter* filter) {
  ParseTarget target{out, filter};
  struct nl_cb* cb = nl_cb_clone(cb_);
  if (!cb) return {ENOMEM, "out of memory"};
  nl_cb_set(cb, NL_CB_VALID, NL_CB_CUSTOM, &Worker::onValid, &target);
  kernelError_ = {};
  int rc = nl_recvmsgs(sk_, cb);
  nl_cb_put(cb);
  if (rc < 0) return kernelError_ ? kernelError_ : nlFailure(rc);
  return {};
}

Failure Worker::ack(struct nl_msg* msg) {
  kernelError_ = {};
  int rc = nl_send_auto(sk_, msg);
  nlmsg_free(msg);
  if (rc < 0) return nlFailure(rc);
  rc = nl_wait_for_ack(sk_);
  if (rc < 0) return kernelError_ ? kernelError_ : nlFailure(rc);
  return {};
}

Failure Worker::get(struct nl_msg* msg, Records& out) {
  int rc = nl_send_auto(sk_, msg);
  nlmsg_free(msg);
  if (rc < 0) return nlFailure(rc);
  if (Failure f = receive(&out, nullptr)) return f;
  // The reply came; the kernel's ack for the request follows it.
  rc = nl_wait_for_ack(sk_);
  if (rc < 0) return kernelError_ ? kernelError_ : nlFailure(rc);
  return {};
}

Failure Worker::dump(int kind, const DumpFilter& filter, Records& out) {
  // A dump that races with changes is flagged NLM_F_DUMP_INTR by the kernel: read it again.
  for (int attempt = 0; attempt < 5; attempt++) {
    out.clear();
    struct nl_msg* msg = nlmsg_alloc_simple(kind, NLM_F_DUMP);
    if (!msg) return {ENOMEM, "out of memory"};
    int rc;
    switch (kind) {
      case RTM_GETLINK: {
        struct ifinfomsg h = {};
        h.ifi_family = static_cast<unsigned char>(filter.family);
        rc = nlmsg_append(msg, &h, sizeof h, NLMSG_ALIGNTO);
        break;
      }
      case RTM_GETADDR: {
        struct ifaddrmsg h = {};
        h.ifa_family = static_cast<unsigned char>(filter.family);
        rc = nlmsg_append(msg, &h, sizeof h, NLMSG_ALIGNTO);
        break;
      }
      case RTM_GETNEXTHOP: {
        struct nhmsg h = {};
        h.nh_family = static_cast<unsigned char>(filter.family);
        rc = nlmsg_append(msg, &h, sizeof h, NLMSG_ALIGNTO);
        break;
      }
      case RTM_GETQDISC:
      case RTM_GETTFILTER: {
        struct tcmsg h = {};
        h.tcm_ifindex = filter.index;
        h.tcm_parent = filter.parent;
        rc = nlmsg_append(msg, &h, sizeof h, NLMSG_ALIGNTO);
        break;
      }
      case RTM_GETROUTE: {
        struct rtmsg h = {};
        h.rtm_family = static_cast<unsigned char>(filter.family);
        rc = nlmsg_append(msg, &h, sizeof h, NLMSG_ALIGNTO);
        break;
      }
      default: {
        struct ndmsg h = {};
        h.ndm_family = static_cast<unsigned char>(filter.family);
        rc = nlmsg_append(msg, &h, sizeof h, NLMSG_ALIGNTO);
        break;
      }
    }
    if (rc < 0) {
      nlmsg_free(msg);
      return nlFailure(rc);
    }
    rc = nl_send_auto(sk_, msg);
    nlmsg_free(msg);
    if (rc < 0) return nlFailure(rc);
    Failure f = receive(&out, &filter);
    if (f.err == EINTR) continue;
    return f;
  }
  return {EINTR, "dump interrupted by concurrent changes five times in a row"};
}

uint32_t Worker::requestPort() const { return nl_socket_get_local_port(sk_); }

Failure Worker::openMonitorSocket(const std::vector<int>& groups, int rcvbuf, struct nl_sock** out) {
  struct nl_sock* sk = nl_socket_alloc();
  if (!sk) return {ENOMEM, "cannot allocate a netlink socket"};
  nl_socket_disable_seq_check(sk);
  if (int rc = nl_connect(sk, NETLINK_ROUTE); rc < 0) {
    nl_socket_free(sk);
    return nlFailure(rc);
  }
  for (int g : groups) {
    if (int rc = nl_socket_add_membership(sk, g); rc < 0) {
      nl_socket_free(sk);
      return nlFailure(rc);
    }
  }
  readyForPolling(sk, rcvbuf);
  *out = sk;
  return {};
}

void readyForPolling(struct nl_sock* sk, int rcvbuf) {
  if (rcvbuf > 0) {
    // SO_RCVBUFFORCE ignores rmem_max (we are root); fall back to the capped variant.
    int fd = nl_socket_get_fd(sk);
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf) < 0)
      setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  }
  nl_socket_set_nonblocking(sk);
}

}  // namespace weft
