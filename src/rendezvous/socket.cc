// Sockets for the rendezvous store: error text, deadlines, bounded I/O.

#include "rendezvous/socket.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace hvd::rdv::detail {

// strerror_r comes in two flavours (XSI returns int, GNU returns char*).
[[maybe_unused]] std::string StrerrorResult(int rc, const char* buf) {
  return rc == 0 ? std::string(buf) : std::string("unknown error");
}
[[maybe_unused]] std::string StrerrorResult(const char* msg, const char*) {
  return msg ? std::string(msg) : std::string("unknown error");
}
std::string ErrnoText(int err) {
  char buf[256] = {0};
  return StrerrorResult(strerror_r(err, buf, sizeof(buf)), buf);
}

std::string Seconds(double s) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g s", s);
  return buf;
}

std::string JoinHostPort(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

TimePoint DeadlineAfterMs(uint64_t ms) {
  return Clock::now() + milliseconds(std::min(ms, kMaxWaitMs));
}

uint64_t SecondsToMs(double s) {
  if (!(s > 0)) return 0;
  double ms = std::ceil(s * 1000.0);
  return ms >= static_cast<double>(kMaxWaitMs) ? kMaxWaitMs : static_cast<uint64_t>(ms);
}

Io WaitFd(int fd, short events, TimePoint until) {
  for (;;) {
    int timeout_ms = -1;
    if (until != TimePoint::max()) {
      auto left = until - Clock::now();
      if (left <= Clock::duration::zero()) return {IoCode::kTimeout, 0};
      auto ms = std::chrono::ceil<milliseconds>(left).count();
      timeout_ms = static_cast<int>(std::min<int64_t>(ms, INT_MAX));
    }
    pollfd p = {fd, events, 0};
    int n = ::poll(&p, 1, timeout_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      return {IoCode::kError, errno};
    }
    // POLLERR/POLLHUP also count as ready: the next send/recv reports them.
    if (p.revents != 0) return {IoCode::kOk, 0};
  }
}

Io SendAll(int fd, iovec* iov, int iovcnt, const Limits& lim) {
  while (iovcnt > 0) {
    if (iov->iov_len == 0) {
      ++iov;
      --iovcnt;
      continue;
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(iovcnt);
    ssize_t sent = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        Io w = WaitFd(fd, POLLOUT, lim.deadline);
        if (w.code != IoCode::kOk) return w;
        continue;
      }
      return {IoCode::kError, errno};
    }
    size_t left = static_cast<size_t>(sent);
    while (iovcnt > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --iovcnt;
    }
    if (iovcnt > 0) {
      iov->iov_base = static_cast<uint8_t*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return {};
}

Io RecvExact(int fd, uint8_t* buf, size_t n, const Limits& lim, size_t* got) {
  size_t have = 0;
  Io result;
  while (have < n) {
    ssize_t r = ::recv(fd, buf + have, n - have, MSG_DONTWAIT);
    if (r > 0) {
      have += static_cast<size_t>(r);
      continue;
    }
    if (r == 0) {
      result = {IoCode::kEof, 0};
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      Io w = WaitFd(fd, POLLIN, lim.deadline);
      if (w.code != IoCode::kOk) {
        result = w;
        break;
      }
      continue;
    }
    result = {IoCode::kError, errno};
    break;
  }
  if (got) *got = have;
  return result;
}

}  // namespace hvd::rdv::detail
