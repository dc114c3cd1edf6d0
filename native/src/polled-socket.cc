#include "polled-socket.h"

#include <sys/socket.h>

#include <cerrno>

namespace weft {

PolledSocket::PolledSocket(Napi::Env env, struct nl_sock* sk, Napi::Function callback)
    : env_(env), sk_(sk), callback_(Napi::Persistent(callback)) {
  uv_loop_t* loop = nullptr;
  if (napi_get_uv_event_loop(env, &loop) != napi_ok) return;
  poll_ = new uv_poll_t;
  if (uv_poll_init_socket(loop, poll_, nl_socket_get_fd(sk_)) != 0) {
    delete poll_;
    poll_ = nullptr;
    return;
  }
  poll_->data = this;
  // drain() is virtual: it first runs from the loop, once the subclass is constructed.
  started_ = uv_poll_start(poll_, UV_READABLE, &PolledSocket::onReadable) == 0;
}

void PolledSocket::close() {
  if (closed_) return;
  closed_ = true;
  callback_.Reset();
  beforeClose();
  if (poll_) {
    uv_close(reinterpret_cast<uv_handle_t*>(poll_), &PolledSocket::onClosed);
  } else {
    nl_socket_free(sk_);
    delete this;
  }
}

void PolledSocket::receive(std::vector<unsigned char>& buf, int maxDatagrams,
                           const std::function<void(struct nlmsghdr*)>& onMessage, const std::function<void()>& onLost) {
  int fd = nl_socket_get_fd(sk_);
  for (int i = 0; i < maxDatagrams; i++) {
    struct iovec iov = {buf.data(), buf.size()};
    struct msghdr mh = {};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      // The socket keeps working after an overrun.
      if (errno == ENOBUFS) {
        onLost();
        continue;
      }
      break;  // EAGAIN: drained
    }
    // A datagram larger than the buffer lost its tail: said as an overrun, its whole messages still read.
    if (mh.msg_flags & MSG_TRUNC) onLost();
    int len = static_cast<int>(n);
    for (auto* hdr = reinterpret_cast<struct nlmsghdr*>(buf.data()); nlmsg_ok(hdr, len); hdr = nlmsg_next(hdr, &len)) onMessage(hdr);
  }
}

void PolledSocket::onClosed(uv_handle_t* handle) {
  auto* self = static_cast<PolledSocket*>(handle->data);
  delete reinterpret_cast<uv_poll_t*>(handle);
  nl_socket_free(self->sk_);
  delete self;
}

void PolledSocket::onReadable(uv_poll_t* handle, int status, int events) {
  auto* self = static_cast<PolledSocket*>(handle->data);
  self->drain();
  // An overrun sets the socket's error (POLLERR), on which libuv stops the poll handle. The drain
  // has read the error; poll again, or nothing would ever arrive after the first overrun.
  if (status < 0 && !self->closed_) uv_poll_start(handle, UV_READABLE, &PolledSocket::onReadable);
}

}  // namespace weft
