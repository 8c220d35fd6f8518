// Sockets for the rendezvous store: the clock and deadlines, descriptors
// (RAII), and bounded I/O on non-blocking sockets (the client's).
#pragma once

#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

namespace hvd::rdv::detail {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;
using std::chrono::milliseconds;

// Waits longer than this are clamped (keeps deadline arithmetic finite).
constexpr uint64_t kMaxWaitMs = uint64_t{30} * 24 * 3600 * 1000;

std::string ErrnoText(int err);
std::string Seconds(double s);
std::string JoinHostPort(const std::string& host, int port);
TimePoint DeadlineAfterMs(uint64_t ms);
uint64_t SecondsToMs(double s);

// RAII for a file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// ---- bounded socket I/O (the client's) -----------------------------------------
//
// Sockets are non-blocking; every wait is a poll() with a deadline.

enum class IoCode { kOk, kEof, kTimeout, kError };
struct Io {
  IoCode code = IoCode::kOk;
  int err = 0;
};

struct Limits {
  TimePoint deadline = TimePoint::max();
};

Io WaitFd(int fd, short events, TimePoint until);
Io SendAll(int fd, iovec* iov, int iovcnt, const Limits& lim);
// Reads exactly n bytes. *got (if given) counts the bytes read before a failure.
Io RecvExact(int fd, uint8_t* buf, size_t n, const Limits& lim, size_t* got = nullptr);

}  // namespace hvd::rdv::detail
