// The rendezvous key-value store: server and client over TCP.
//
// Frames (see store.h):  u32 length (BE) | payload | HMAC-SHA256(key, seq || payload)
//
// Sequence numbers are u64, big endian in the MAC input, counted per
// connection and per direction from zero. The server-to-client direction has
// the top bit set (kServerToClient), so a reply can never be reflected back
// to the server as a request.
//
// Payload encoding (all integers big endian; str/blob = u32 length | bytes):
//
//   request                        reply when the status byte is kOk
//   kPing  u32 version             u32 version
//   kSet   str key | blob value    (nothing)
//   kGet   str key | u64 wait_ms   blob value        (or kTimedOut, nothing)
//   kAdd   str key | u64 delta     u64 new value     (two's complement)
//   kCheck u32 n | n x str key     u32 n | n x u8 (1 = present)
//
// Every reply starts with a status byte: kOk, kTimedOut (Get only),
// kFailed (then i32 hvd_status_t | str message), or kShuttingDown. A request
// must be consumed exactly: a short, long or unknown one is malformed, and the
// server drops the connection as it does for a bad MAC. So is a request sent
// before the reply to the previous one.
//
// kBusy (nothing after it) is the server's first frame, in place of any
// reply, to a connection it drops before that connection authenticated (too
// many waiting to, or too slow): a client that holds the secret connects
// again.
//
// Counters are stored as 8-byte big-endian values, so Get on a counter key
// returns those 8 bytes; Add wraps around on overflow.
//
// Known limit: sequence numbers start at zero on every connection, so a
// recorded first frame could be replayed on a new connection by someone who
// can sniff the job's traffic (it cannot be altered or reordered). The secret
// keeps out everyone else.

#include "rendezvous/store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <list>
#include <mutex>
#include <new>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace hvd::rdv {

namespace internal {
// True when a connected TCP socket's local and peer addresses are the same.
bool ConnectedToItself(int fd) {
  sockaddr_storage local{}, peer{};
  socklen_t ll = sizeof(local), pl = sizeof(peer);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) {
    return false;
  }
  return ll == pl && std::memcmp(&local, &peer, ll) == 0;
}
}  // namespace internal

namespace {
using internal::ConnectedToItself;

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;
using std::chrono::milliseconds;

constexpr size_t kLenBytes = 4;
constexpr size_t kSeqBytes = 8;
constexpr size_t kMacBytes = 32;
constexpr uint64_t kServerToClient = uint64_t{1} << 63;
constexpr uint32_t kProtocolVersion = 1;

// Bytes the payload buffer grows by while a frame arrives: memory follows the
// bytes actually received, not the length a peer announces.
constexpr size_t kReadChunk = 64 << 10;
// How long a server waits for progress inside a frame (or for a client to
// take a reply) before it drops the connection. Between requests an
// authenticated client may stay silent for as long as it likes.
constexpr Clock::duration kServerIdle = std::chrono::seconds(30);
// Extra time a client allows for a reply beyond the server-side wait.
constexpr Clock::duration kReplyMargin = std::chrono::seconds(30);
// Least margin a Get's reply gets beyond its wait (see Get).
constexpr Clock::duration kShortReplyMargin = std::chrono::seconds(2);
// Least time the Connect handshake gets, even when the connect timeout is
// nearly spent.
constexpr Clock::duration kHandshakeFloor = std::chrono::seconds(2);
// Least time one TCP connect attempt gets.
constexpr Clock::duration kConnectFloor = milliseconds(200);
// Waits longer than this are clamped (keeps deadline arithmetic finite).
constexpr uint64_t kMaxWaitMs = uint64_t{30} * 24 * 3600 * 1000;

enum Command : uint8_t { kPing = 1, kSet = 2, kGet = 3, kAdd = 4, kCheck = 5 };
enum ReplyStatus : uint8_t { kOk = 0, kTimedOut = 1, kFailed = 2, kShuttingDown = 3, kBusy = 4 };

// ---- small helpers ----------------------------------------------------------

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

// A key as it appears in messages: printable, and not too long.
std::string ShowKey(const std::string& key) {
  constexpr size_t kMax = 128;
  std::string out = "'";
  for (size_t i = 0; i < key.size() && i < kMax; ++i) {
    unsigned char c = static_cast<unsigned char>(key[i]);
    out += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
  }
  if (key.size() > kMax) out += "...";
  return out + "'";
}

std::string JoinHostPort(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

void PutU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}
void PutU64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (56 - 8 * i));
}
uint32_t GetU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | p[i];
  return v;
}
uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The secret never appears in messages.
Status DecodeSecret(const std::string& secret, Bytes* key) {
  if (secret.empty() || secret.size() % 2 != 0) {
    return InvalidArgument("the rendezvous secret must be a non-empty hex string of even length (got " +
                           std::to_string(secret.size()) + " characters)");
  }
  key->resize(secret.size() / 2);
  for (size_t i = 0; i < key->size(); ++i) {
    int hi = HexValue(secret[2 * i]);
    int lo = HexValue(secret[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return InvalidArgument("the rendezvous secret must be a hex string (character " +
                             std::to_string(hi < 0 ? 2 * i : 2 * i + 1) + " is not a hex digit)");
    }
    (*key)[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return Status::Ok();
}

bool ComputeMac(const Bytes& key, const uint8_t* data, size_t n, uint8_t out[kMacBytes]) {
  unsigned int len = 0;
  return HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), data, n, out, &len) != nullptr &&
         len == kMacBytes;
}

TimePoint DeadlineAfterMs(uint64_t ms) {
  return Clock::now() + milliseconds(std::min(ms, kMaxWaitMs));
}

uint64_t SecondsToMs(double s) {
  if (!(s > 0)) return 0;
  double ms = std::ceil(s * 1000.0);
  return ms >= static_cast<double>(kMaxWaitMs) ? kMaxWaitMs : static_cast<uint64_t>(ms);
}

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

// Reads exactly n bytes. *got (if given) counts the bytes read before a failure.
Io RecvExact(int fd, uint8_t* buf, size_t n, const Limits& lim, size_t* got = nullptr) {
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

// ---- frames -------------------------------------------------------------------

enum class FrameCode {
  kOk,
  kClosed,     // orderly close before a frame started
  kTruncated,  // the peer closed inside a frame
  kTooLong,    // announced length over kMaxFrame
  kBadMac,     // authentication failed (wrong secret, tampering, replay, reorder)
  kTimeout,
  kIoError,
  kInternal,   // HMAC computation failed
};
struct FrameResult {
  FrameCode code = FrameCode::kOk;
  int err = 0;
  uint64_t length = 0;
};

FrameResult FromIo(const Io& io, bool started) {
  switch (io.code) {
    case IoCode::kOk: return {};
    case IoCode::kEof: return {started ? FrameCode::kTruncated : FrameCode::kClosed, 0};
    case IoCode::kTimeout: return {FrameCode::kTimeout, 0};
    case IoCode::kError: break;
  }
  return {FrameCode::kIoError, io.err};
}

// buf holds kSeqBytes of room followed by the payload. The sequence number is
// written into that room, so the MAC input (seq || payload) is contiguous.
FrameResult SendFrame(int fd, const Bytes& key, uint64_t seq, Bytes* buf, const Limits& lim) {
  size_t len = buf->size() - kSeqBytes;
  if (len > kMaxFrame) return {FrameCode::kTooLong, 0, len};
  PutU64(buf->data(), seq);
  uint8_t mac[kMacBytes];
  if (!ComputeMac(key, buf->data(), buf->size(), mac)) return {FrameCode::kInternal, 0};
  uint8_t header[kLenBytes];
  PutU32(header, static_cast<uint32_t>(len));
  iovec iov[3] = {{header, kLenBytes}, {buf->data() + kSeqBytes, len}, {mac, kMacBytes}};
  return FromIo(SendAll(fd, iov, 3, lim), true);
}

// On success *buf holds seq || payload (the payload starts at kSeqBytes).
FrameResult ReadFrame(int fd, const Bytes& key, uint64_t seq, const Limits& lim, Bytes* buf) {
  uint8_t header[kLenBytes];
  size_t got = 0;
  Io io = RecvExact(fd, header, kLenBytes, lim, &got);
  if (io.code != IoCode::kOk) return FromIo(io, got > 0);
  const uint32_t len = GetU32(header);
  // Checked before any allocation; the buffer then grows only as bytes arrive.
  if (len > kMaxFrame) return {FrameCode::kTooLong, 0, len};
  const size_t want = kSeqBytes + len;
  buf->clear();
  buf->resize(kSeqBytes);
  PutU64(buf->data(), seq);
  while (buf->size() < want) {
    size_t have = buf->size();
    size_t next = std::min(want, std::max(have + kReadChunk, have * 2));
    buf->resize(next);
    io = RecvExact(fd, buf->data() + have, next - have, lim);
    if (io.code != IoCode::kOk) return FromIo(io, true);
  }
  uint8_t mac[kMacBytes];
  io = RecvExact(fd, mac, kMacBytes, lim);
  if (io.code != IoCode::kOk) return FromIo(io, true);
  uint8_t expect[kMacBytes];
  if (!ComputeMac(key, buf->data(), buf->size(), expect)) return {FrameCode::kInternal, 0};
  if (CRYPTO_memcmp(mac, expect, kMacBytes) != 0) return {FrameCode::kBadMac, 0, len};
  return {FrameCode::kOk, 0, len};
}

// ---- payload encoding -----------------------------------------------------------

class Writer {
 public:
  explicit Writer(size_t payload_hint = 64) {
    b_.reserve(kSeqBytes + payload_hint);
    b_.resize(kSeqBytes);
  }
  void U8(uint8_t v) { b_.push_back(v); }
  void U32(uint32_t v) {
    size_t at = b_.size();
    b_.resize(at + 4);
    PutU32(b_.data() + at, v);
  }
  void U64(uint64_t v) {
    size_t at = b_.size();
    b_.resize(at + 8);
    PutU64(b_.data() + at, v);
  }
  // Callers keep n within kMaxFrame.
  void Blob(const uint8_t* p, size_t n) {
    U32(static_cast<uint32_t>(n));
    b_.insert(b_.end(), p, p + n);
  }
  void Str(const std::string& s) { Blob(reinterpret_cast<const uint8_t*>(s.data()), s.size()); }
  Bytes* buffer() { return &b_; }

 private:
  Bytes b_;
};

class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  size_t remaining() const { return n_; }
  bool AtEnd() const { return n_ == 0; }
  bool U8(uint8_t* v) {
    if (n_ < 1) return false;
    *v = *p_;
    Skip(1);
    return true;
  }
  bool U32(uint32_t* v) {
    if (n_ < 4) return false;
    *v = GetU32(p_);
    Skip(4);
    return true;
  }
  bool U64(uint64_t* v) {
    if (n_ < 8) return false;
    *v = GetU64(p_);
    Skip(8);
    return true;
  }
  bool Blob(Bytes* out) {
    const uint8_t* p;
    size_t n;
    if (!Field(&p, &n)) return false;
    out->assign(p, p + n);
    return true;
  }
  bool Str(std::string* out) {
    const uint8_t* p;
    size_t n;
    if (!Field(&p, &n)) return false;
    out->assign(reinterpret_cast<const char*>(p), n);
    return true;
  }

 private:
  bool Field(const uint8_t** p, size_t* n) {
    uint32_t len;
    if (!U32(&len) || len > n_) return false;
    *p = p_;
    *n = len;
    Skip(len);
    return true;
  }
  void Skip(size_t k) {
    p_ += k;
    n_ -= k;
  }
  const uint8_t* p_;
  size_t n_;
};

// ---- server -----------------------------------------------------------------------
//
// One thread serves every connection: an epoll loop over non-blocking
// sockets, each connection a small state machine (reading a frame, a Get
// parked until its key appears or its wait ends, a reply being sent). A
// waiting Get costs a table entry and a timer, not a thread, and a client
// that disconnects while its Get waits is dropped as soon as the close
// arrives.
//
// Connections that have not yet delivered an authenticated frame are kept
// apart: each must authenticate within the authentication timeout, there are
// at most max_unauthenticated of them, and a new arrival beyond that evicts
// the oldest. Idle connections from someone without the secret therefore
// cannot lock a client out: a client sends its first frame right after its
// TCP connect, the server reads it as soon as it accepts the connection, and
// an evicted client is told (an authenticated kBusy frame) and reconnects.

constexpr uint64_t kListenId = 0;  // epoll data of the listening socket
constexpr uint64_t kWakeId = 1;    // ... of the wake eventfd
constexpr uint64_t kFirstConnId = 2;
// Connections accepted per readiness of the listening socket, so that
// reading connections already accepted is never starved by a flood of new ones.
constexpr int kAcceptBatch = 32;
// Bytes read from one connection per readiness (fairness between connections).
constexpr size_t kReadBudget = 1 << 20;
// The first frame of a connection (before it has authenticated) is at most
// this long: what an unauthenticated peer can make the server hold is small.
constexpr uint32_t kMaxFirstFrame = 64 << 10;
// How long accepting pauses when the process is out of descriptors.
constexpr Clock::duration kAcceptBackoff = milliseconds(100);

class ServerImpl final : public StoreServer {
 public:
  ServerImpl(Bytes key, const StoreServerOptions& opts);
  ~ServerImpl() override;

  Status Listen(const std::string& host, int port);
  Status StartServing();

  int port() const override { return port_; }
  uint64_t rejected() const override { return rejected_.load(std::memory_order_relaxed); }
  void Set(const std::string& key, const Bytes& value) override;
  bool TryGet(const std::string& key, Bytes* value) const override;

 private:
  struct Conn {
    Fd fd;
    uint64_t id = 0;
    bool authed = false;
    TimePoint accepted;
    std::list<uint64_t>::iterator fifo;  // place among the unauthenticated, while !authed
    uint32_t events = 0;                 // the epoll interest now
    // Reading: a header, then seq room | payload | MAC.
    uint8_t header[kLenBytes] = {};
    size_t header_have = 0;
    size_t frame_want = 0;  // 0 while reading a header
    Bytes frame;
    TimePoint read_progress;
    uint64_t recv_seq = 0;
    // Replying: out[out_done..] is still to send.
    Bytes out;
    size_t out_done = 0;
    TimePoint write_progress;
    uint64_t send_seq = kServerToClient;
    bool close_after_send = false;
    // A parked Get.
    bool waiting = false;
    std::string wait_key;
    TimePoint wait_deadline;
    // Its entry in timers_ (TimePoint::max(): none).
    TimePoint timer = TimePoint::max();

    bool mid_frame() const { return header_have > 0 || frame_want > 0; }
    bool sending() const { return out_done < out.size(); }
  };
  enum class Outcome { kReply, kWait, kMalformed };

  void Loop() noexcept;
  void Wake();
  void AcceptSome();
  void PauseAccepting();
  void Evict(Conn* c);
  void OnReadable(Conn* c);
  void OnFrame(Conn* c);
  Outcome Handle(Conn* c, const uint8_t* p, size_t n, Writer* out);
  void ServeWaiters(const std::string& key);
  void Reply(Conn* c, Writer* reply);
  void Flush(Conn* c);
  void Watch(Conn* c);
  void Rearm(Conn* c);
  void RunTimers();
  void ShutDown();
  void Close(Conn* c, bool reject);
  Conn* Find(uint64_t id);
  int WaitMs() const;
  void Reject() { rejected_.fetch_add(1, std::memory_order_relaxed); }

  const Bytes key_;
  const Clock::duration auth_timeout_;
  const size_t max_unauthenticated_;
  const size_t max_connections_;
  Fd listen_fd_;
  Fd epoll_fd_;
  Fd wake_fd_;  // an eventfd: stop, or keys set by the hosting process
  int port_ = 0;
  std::atomic<uint64_t> rejected_{0};

  mutable std::mutex mu_;  // guards kv_, dirty_ and stopping_
  std::unordered_map<std::string, Bytes> kv_;
  std::vector<std::string> dirty_;  // keys Set() by the hosting process, for the loop's waiters
  bool stopping_ = false;

  std::thread thread_;
  // Owned by the loop thread (and by the destructor once it has joined it).
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns_;
  std::list<uint64_t> unauthenticated_;  // oldest first
  size_t authenticated_ = 0;
  std::set<std::pair<TimePoint, uint64_t>> timers_;
  std::unordered_map<std::string, std::unordered_set<uint64_t>> waiters_;
  uint64_t next_id_ = kFirstConnId;
  TimePoint accept_paused_until_ = TimePoint::min();
  bool accept_paused_ = false;
};

Clock::duration SecondsToDuration(double s) {
  if (!(s > 0)) return Clock::duration::zero();
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(std::min(s, static_cast<double>(kMaxWaitMs) / 1000.0)));
}

ServerImpl::ServerImpl(Bytes key, const StoreServerOptions& opts)
    : key_(std::move(key)),
      auth_timeout_(SecondsToDuration(opts.auth_timeout_s)),
      max_unauthenticated_(std::max<size_t>(opts.max_unauthenticated, 1)),
      max_connections_(std::max<size_t>(opts.max_connections, 1)) {}

ServerImpl::~ServerImpl() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  Wake();
  if (thread_.joinable()) thread_.join();
  conns_.clear();  // closes whatever the loop left (nothing, unless it never ran)
}

void ServerImpl::Wake() {
  if (wake_fd_.get() < 0) return;
  const uint64_t one = 1;
  ssize_t r;
  do {
    r = ::write(wake_fd_.get(), &one, sizeof(one));
  } while (r < 0 && errno == EINTR);
  // EAGAIN: the counter is already non-zero, so the loop wakes anyway.
}

Status ServerImpl::Listen(const std::string& host_in, int port) {
  if (port < 0 || port > 65535) {
    return InvalidArgument("rendezvous store port must be in 0..65535 (got " + std::to_string(port) + ")");
  }
  std::string host = host_in;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string where = JoinHostPort(host.empty() ? "*" : host, port);

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  const char* node = host.empty() ? nullptr : host.c_str();
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  int rc = ::getaddrinfo(node, service.c_str(), &hints, &res);
  if (rc != 0) {
    return Error(HVD_ERR_RENDEZVOUS, "rendezvous store: cannot resolve " + where + ": " +
                                         (rc == EAI_SYSTEM ? ErrnoText(errno) : ::gai_strerror(rc)));
  }
  std::string last_error = "no usable address";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
    if (fd.get() < 0) {
      last_error = "socket: " + ErrnoText(errno);
      continue;
    }
    int one = 1, zero = 0;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ai->ai_family == AF_INET6 && node == nullptr) {
      // All interfaces: accept IPv4 too on the IPv6 wildcard.
      ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    }
    // EADDRINUSE on a fixed port is retried briefly: a client dialling this
    // port before the server is up can hold it for an instant through a
    // connection to itself (the client drops such a connection at once).
    int bound = -1;
    for (int attempt = 0; attempt < 20; ++attempt) {
      bound = ::bind(fd.get(), ai->ai_addr, ai->ai_addrlen);
      if (bound == 0 || errno != EADDRINUSE || port == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (bound != 0) {
      last_error = "bind: " + ErrnoText(errno);
      continue;
    }
    if (::listen(fd.get(), SOMAXCONN) != 0) {
      last_error = "listen: " + ErrnoText(errno);
      continue;
    }
    listen_fd_ = std::move(fd);
    break;
  }
  ::freeaddrinfo(res);
  if (listen_fd_.get() < 0) {
    return Error(HVD_ERR_RENDEZVOUS, "rendezvous store: cannot listen on " + where + ": " + last_error);
  }
  sockaddr_storage ss{};
  socklen_t sl = sizeof(ss);
  if (::getsockname(listen_fd_.get(), reinterpret_cast<sockaddr*>(&ss), &sl) != 0) {
    return Error(HVD_ERR_RENDEZVOUS, "rendezvous store: getsockname failed: " + ErrnoText(errno));
  }
  port_ = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                   : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return Status::Ok();
}

Status ServerImpl::StartServing() {
  epoll_fd_ = Fd(::epoll_create1(EPOLL_CLOEXEC));
  if (epoll_fd_.get() < 0) {
    return Error(HVD_ERR_RENDEZVOUS, "rendezvous store: epoll_create1 failed: " + ErrnoText(errno));
  }
  wake_fd_ = Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (wake_fd_.get() < 0) {
    return Error(HVD_ERR_RENDEZVOUS, "rendezvous store: eventfd failed: " + ErrnoText(errno));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenId;
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, listen_fd_.get(), &ev) != 0) {
    return Error(HVD_ERR_RENDEZVOUS, "rendezvous store: epoll_ctl failed: " + ErrnoText(errno));
  }
  ev.data.u64 = kWakeId;
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, wake_fd_.get(), &ev) != 0) {
    return Error(HVD_ERR_RENDEZVOUS, "rendezvous store: epoll_ctl failed: " + ErrnoText(errno));
  }
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

ServerImpl::Conn* ServerImpl::Find(uint64_t id) {
  auto it = conns_.find(id);
  return it == conns_.end() ? nullptr : it->second.get();
}

int ServerImpl::WaitMs() const {
  TimePoint until = timers_.empty() ? TimePoint::max() : timers_.begin()->first;
  if (accept_paused_) until = std::min(until, accept_paused_until_);
  if (until == TimePoint::max()) return -1;
  auto left = until - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  return static_cast<int>(std::min<int64_t>(std::chrono::ceil<milliseconds>(left).count(), INT_MAX));
}

void ServerImpl::Loop() noexcept {
  epoll_event events[64];
  for (;;) {
    int n = ::epoll_wait(epoll_fd_.get(), events, 64, WaitMs());
    if (n < 0) {
      if (errno != EINTR) std::this_thread::sleep_for(milliseconds(10));  // not expected: do not spin
      n = 0;
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t id = events[i].data.u64;
      try {
        if (id == kListenId) {
          AcceptSome();
          continue;
        }
        if (id == kWakeId) {
          uint64_t count;
          while (::read(wake_fd_.get(), &count, sizeof(count)) > 0) {
          }
          std::vector<std::string> keys;
          bool stop;
          {
            std::lock_guard<std::mutex> lock(mu_);
            stop = stopping_;
            keys.swap(dirty_);
          }
          if (stop) {
            ShutDown();
            return;
          }
          for (const auto& key : keys) ServeWaiters(key);
          continue;
        }
        Conn* c = Find(id);
        if (c == nullptr) continue;  // closed earlier in this batch
        if (events[i].events & EPOLLOUT) {
          Flush(c);
          c = Find(id);
          if (c == nullptr) continue;
        }
        if (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) OnReadable(c);
      } catch (...) {
        // bad_alloc and the like: drop that connection, keep serving.
        if (Conn* c = Find(id)) Close(c, false);
      }
    }
    try {
      RunTimers();
      if (accept_paused_ && Clock::now() >= accept_paused_until_) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u64 = kListenId;
        if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, listen_fd_.get(), &ev) == 0) accept_paused_ = false;
      }
    } catch (...) {
    }
  }
}

void ServerImpl::PauseAccepting() {
  epoll_event ev{};
  ev.events = 0;
  ev.data.u64 = kListenId;
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, listen_fd_.get(), &ev) == 0) {
    accept_paused_ = true;
    accept_paused_until_ = Clock::now() + kAcceptBackoff;
  }
}

void ServerImpl::AcceptSome() {
  for (int i = 0; i < kAcceptBatch; ++i) {
    Fd fd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (fd.get() < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors or memory: an unauthenticated connection makes
        // room; with none, back off instead of spinning.
        if (!unauthenticated_.empty()) {
          Evict(Find(unauthenticated_.front()));
          continue;
        }
        PauseAccepting();
        return;
      }
      continue;  // ECONNABORTED and the like: that connection is gone
    }
    if (unauthenticated_.size() >= max_unauthenticated_) Evict(Find(unauthenticated_.front()));
    int one = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto conn = std::make_unique<Conn>();
    Conn* c = conn.get();
    c->id = next_id_++;
    c->fd = std::move(fd);
    c->accepted = c->read_progress = Clock::now();
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = c->id;
    if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, c->fd.get(), &ev) != 0) continue;  // drops it
    c->events = ev.events;
    unauthenticated_.push_back(c->id);
    c->fifo = std::prev(unauthenticated_.end());
    conns_.emplace(c->id, std::move(conn));
    Rearm(c);
    // A client sends its first frame right after connecting: it is often
    // here already, and then the connection never waits among the unauthenticated.
    OnReadable(c);
  }
}

void ServerImpl::Evict(Conn* c) {
  if (c == nullptr) return;
  // Tells a client that holds the secret to reconnect; to anyone else this
  // fixed, authenticated frame says nothing.
  Writer w;
  w.U8(kBusy);
  Bytes* buf = w.buffer();
  const size_t len = buf->size() - kSeqBytes;
  PutU64(buf->data(), c->send_seq);
  uint8_t mac[kMacBytes];
  if (ComputeMac(key_, buf->data(), buf->size(), mac)) {
    PutU32(buf->data() + kSeqBytes - kLenBytes, static_cast<uint32_t>(len));
    buf->insert(buf->end(), mac, mac + kMacBytes);
    ::send(c->fd.get(), buf->data() + kSeqBytes - kLenBytes, kLenBytes + len + kMacBytes,
           MSG_NOSIGNAL | MSG_DONTWAIT);  // best effort: a fresh socket has room
  }
  Close(c, true);
}

void ServerImpl::OnReadable(Conn* c) {
  const int fd = c->fd.get();
  if (c->waiting || c->sending()) {
    // A client sends its next request only after the reply to this one, so
    // all that can come now is the close (which releases a waiting Get at
    // once) or an early request, which is malformed.
    uint8_t byte;
    ssize_t r = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0) return Close(c, false);
    if (r > 0) return Close(c, true);
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) Close(c, false);
    return;
  }
  size_t budget = kReadBudget;
  while (budget > 0) {
    ssize_t r;
    if (c->frame_want == 0) {
      r = ::recv(fd, c->header + c->header_have, kLenBytes - c->header_have, MSG_DONTWAIT);
    } else {
      const size_t have = c->frame.size();
      const size_t next = std::min(c->frame_want, std::max(have + kReadChunk, have * 2));
      c->frame.resize(next);  // memory follows the bytes received, not the length announced
      r = ::recv(fd, c->frame.data() + have, std::min(next - have, budget), MSG_DONTWAIT);
      c->frame.resize(have + static_cast<size_t>(std::max<ssize_t>(r, 0)));
    }
    if (r == 0) {
      // The peer closed: between frames that is a goodbye, inside one a truncation.
      return Close(c, c->mid_frame());
    }
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return Close(c, false);
      Rearm(c);
      return;
    }
    budget -= std::min(budget, static_cast<size_t>(r));
    c->read_progress = Clock::now();
    if (c->frame_want == 0) {
      c->header_have += static_cast<size_t>(r);
      if (c->header_have < kLenBytes) continue;
      const uint32_t len = GetU32(c->header);
      // Checked before any allocation.
      if (len > (c->authed ? kMaxFrame : kMaxFirstFrame)) return Close(c, true);
      c->frame_want = kSeqBytes + len + kMacBytes;
      c->frame.clear();
      c->frame.resize(kSeqBytes);
      continue;
    }
    if (c->frame.size() < c->frame_want) continue;
    return OnFrame(c);  // one request at a time: the next comes after the reply
  }
  Rearm(c);  // budget spent; level-triggered epoll brings us back
}

void ServerImpl::OnFrame(Conn* c) {
  const size_t len = c->frame_want - kSeqBytes - kMacBytes;
  Bytes& f = c->frame;
  PutU64(f.data(), c->recv_seq);
  uint8_t expect[kMacBytes];
  if (!ComputeMac(key_, f.data(), kSeqBytes + len, expect)) return Close(c, false);
  if (CRYPTO_memcmp(f.data() + kSeqBytes + len, expect, kMacBytes) != 0) return Close(c, true);
  ++c->recv_seq;
  c->header_have = 0;
  c->frame_want = 0;
  Writer reply;
  if (!c->authed) {
    c->authed = true;
    unauthenticated_.erase(c->fifo);
    ++authenticated_;
    if (authenticated_ > max_connections_) {
      reply.U8(kFailed);
      reply.U32(static_cast<uint32_t>(static_cast<int32_t>(HVD_ERR_RENDEZVOUS)));
      reply.Str("the store already serves " + std::to_string(max_connections_) +
                " connections, its limit");
      c->close_after_send = true;
      Reply(c, &reply);
      return;
    }
  }
  Outcome outcome = Handle(c, f.data() + kSeqBytes, len, &reply);
  if (f.capacity() > (1u << 20)) Bytes().swap(f);  // do not pin big buffers
  switch (outcome) {
    case Outcome::kMalformed:
      return Close(c, true);
    case Outcome::kWait:
      waiters_[c->wait_key].insert(c->id);
      Rearm(c);
      return;
    case Outcome::kReply:
      Reply(c, &reply);
      return;
  }
}

ServerImpl::Outcome ServerImpl::Handle(Conn* c, const uint8_t* p, size_t n, Writer* out) {
  Reader in(p, n);
  uint8_t cmd = 0;
  if (!in.U8(&cmd)) return Outcome::kMalformed;
  auto failed = [out](hvd_status_t code, const std::string& msg) {
    out->U8(kFailed);
    out->U32(static_cast<uint32_t>(static_cast<int32_t>(code)));
    out->Str(msg);
    return Outcome::kReply;
  };

  switch (cmd) {
    case kPing: {
      uint32_t version = 0;
      if (!in.U32(&version) || !in.AtEnd()) return Outcome::kMalformed;
      if (version != kProtocolVersion) {
        return failed(HVD_ERR_VERSION, "rendezvous protocol version " + std::to_string(version) +
                                           " is not supported by this store (it speaks " +
                                           std::to_string(kProtocolVersion) + ")");
      }
      out->U8(kOk);
      out->U32(kProtocolVersion);
      return Outcome::kReply;
    }
    case kSet: {
      std::string key;
      Bytes value;
      if (!in.Str(&key) || !in.Blob(&value) || !in.AtEnd()) return Outcome::kMalformed;
      {
        std::lock_guard<std::mutex> lock(mu_);
        kv_[key] = std::move(value);
      }
      // Waiters are answered before the setter hears back, so a Set that has
      // returned has also released every Get waiting for its key.
      ServeWaiters(key);
      out->U8(kOk);
      return Outcome::kReply;
    }
    case kGet: {
      std::string key;
      uint64_t wait_ms = 0;
      if (!in.Str(&key) || !in.U64(&wait_ms) || !in.AtEnd()) return Outcome::kMalformed;
      const TimePoint deadline = DeadlineAfterMs(wait_ms);
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = kv_.find(key);
        if (it != kv_.end()) {
          if (it->second.size() > kMaxFrame - 5) {
            return failed(HVD_ERR_INVALID_ARGUMENT, "the value of key " + ShowKey(key) + " (" +
                                                        std::to_string(it->second.size()) +
                                                        " bytes) does not fit in a store frame");
          }
          out->U8(kOk);
          out->Blob(it->second.data(), it->second.size());
          return Outcome::kReply;
        }
      }
      if (wait_ms == 0) {
        out->U8(kTimedOut);
        return Outcome::kReply;
      }
      c->waiting = true;
      c->wait_key = std::move(key);
      c->wait_deadline = deadline;
      return Outcome::kWait;
    }
    case kAdd: {
      std::string key;
      uint64_t delta = 0;
      if (!in.Str(&key) || !in.U64(&delta) || !in.AtEnd()) return Outcome::kMalformed;
      uint64_t now_value = 0;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = kv_.find(key);
        if (it == kv_.end()) {
          it = kv_.emplace(key, Bytes(8, 0)).first;
        } else if (it->second.size() != 8) {
          return failed(HVD_ERR_INVALID_ARGUMENT, "key " + ShowKey(it->first) + " holds " +
                                                      std::to_string(it->second.size()) +
                                                      " bytes, not a 64-bit counter");
        }
        now_value = GetU64(it->second.data()) + delta;  // wraps, as documented
        PutU64(it->second.data(), now_value);
      }
      ServeWaiters(key);
      out->U8(kOk);
      out->U64(now_value);
      return Outcome::kReply;
    }
    case kCheck: {
      uint32_t count = 0;
      if (!in.U32(&count) || count > in.remaining() / 4) return Outcome::kMalformed;
      std::vector<std::string> keys(count);
      for (auto& key : keys) {
        if (!in.Str(&key)) return Outcome::kMalformed;
      }
      if (!in.AtEnd()) return Outcome::kMalformed;
      std::lock_guard<std::mutex> lock(mu_);
      out->U8(kOk);
      out->U32(count);
      for (const auto& key : keys) out->U8(kv_.count(key) ? 1 : 0);
      return Outcome::kReply;
    }
    default:
      return Outcome::kMalformed;
  }
}

void ServerImpl::ServeWaiters(const std::string& key) {
  auto w = waiters_.find(key);
  if (w == waiters_.end()) return;
  std::unordered_set<uint64_t> ids = std::move(w->second);
  waiters_.erase(w);
  Bytes value;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = kv_.find(key);
    if (it == kv_.end()) return;  // cannot happen: keys are never deleted
    value = it->second;
  }
  for (uint64_t id : ids) {
    Conn* c = Find(id);
    if (c == nullptr || !c->waiting || c->wait_key != key) continue;
    c->waiting = false;
    c->wait_key.clear();
    Writer reply(5 + value.size());
    if (value.size() > kMaxFrame - 5) {
      reply.U8(kFailed);
      reply.U32(static_cast<uint32_t>(static_cast<int32_t>(HVD_ERR_INVALID_ARGUMENT)));
      reply.Str("the value of key " + ShowKey(key) + " (" + std::to_string(value.size()) +
                " bytes) does not fit in a store frame");
    } else {
      reply.U8(kOk);
      reply.Blob(value.data(), value.size());
    }
    Reply(c, &reply);
  }
}

// Seals the reply into a frame and starts sending it.
void ServerImpl::Reply(Conn* c, Writer* reply) {
  Bytes& b = *reply->buffer();
  const size_t len = b.size() - kSeqBytes;
  PutU64(b.data(), c->send_seq++);
  uint8_t mac[kMacBytes];
  if (!ComputeMac(key_, b.data(), b.size(), mac)) return Close(c, false);
  // The frame is built in place: the header goes into the last bytes of the
  // sequence-number room, the MAC after the payload.
  PutU32(b.data() + kSeqBytes - kLenBytes, static_cast<uint32_t>(len));
  b.insert(b.end(), mac, mac + kMacBytes);
  c->out.swap(b);
  c->out_done = kSeqBytes - kLenBytes;
  c->write_progress = Clock::now();
  Flush(c);
}

void ServerImpl::Flush(Conn* c) {
  while (c->sending()) {
    ssize_t sent = ::send(c->fd.get(), c->out.data() + c->out_done, c->out.size() - c->out_done,
                          MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return Close(c, false);
    }
    c->out_done += static_cast<size_t>(sent);
    c->write_progress = Clock::now();
  }
  if (!c->sending()) {
    if (c->close_after_send) return Close(c, false);
    if (c->out.capacity() > (1u << 20)) {
      Bytes().swap(c->out);
    } else {
      c->out.clear();
    }
    c->out_done = 0;
  }
  Watch(c);
  Rearm(c);
}

// The epoll interest: always reading (to see a close at once), and writing
// while a reply is not all sent.
void ServerImpl::Watch(Conn* c) {
  uint32_t want = EPOLLIN | EPOLLRDHUP | (c->sending() ? EPOLLOUT : 0u);
  if (want == c->events) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.u64 = c->id;
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, c->fd.get(), &ev) != 0) return Close(c, false);
  c->events = want;
}

// Files the connection under its earliest deadline: authentication, progress
// inside a frame or a reply, or the end of a waiting Get.
void ServerImpl::Rearm(Conn* c) {
  TimePoint t = TimePoint::max();
  if (!c->authed) {
    t = c->accepted + auth_timeout_;
  } else {
    if (c->mid_frame()) t = std::min(t, c->read_progress + kServerIdle);
    if (c->sending()) t = std::min(t, c->write_progress + kServerIdle);
    if (c->waiting) t = std::min(t, c->wait_deadline);
  }
  if (t == c->timer) return;
  if (c->timer != TimePoint::max()) timers_.erase({c->timer, c->id});
  c->timer = t;
  if (t != TimePoint::max()) timers_.emplace(t, c->id);
}

void ServerImpl::RunTimers() {
  const TimePoint now = Clock::now();
  std::vector<uint64_t> due;
  for (auto it = timers_.begin(); it != timers_.end() && it->first <= now; ++it) due.push_back(it->second);
  for (uint64_t id : due) {
    Conn* c = Find(id);
    if (c == nullptr) continue;
    if (!c->authed) {
      Evict(c);  // did not authenticate in time
      continue;
    }
    if (c->sending() && c->write_progress + kServerIdle <= now) {
      Close(c, false);  // the client does not take its reply
      continue;
    }
    if (c->mid_frame() && c->read_progress + kServerIdle <= now) {
      Close(c, true);  // a frame stalled half-way
      continue;
    }
    if (c->waiting && c->wait_deadline <= now) {
      auto w = waiters_.find(c->wait_key);
      if (w != waiters_.end()) {
        w->second.erase(c->id);
        if (w->second.empty()) waiters_.erase(w);
      }
      c->waiting = false;
      c->wait_key.clear();
      Writer reply;
      reply.U8(kTimedOut);
      Reply(c, &reply);
      continue;
    }
    Rearm(c);
  }
}

// The server is being destroyed: each waiting Get hears why (best effort,
// never blocking), then every connection closes.
void ServerImpl::ShutDown() {
  for (auto& entry : conns_) {
    Conn* c = entry.second.get();
    if (!c->waiting || c->sending()) continue;
    Writer reply;
    reply.U8(kShuttingDown);
    Bytes& b = *reply.buffer();
    const size_t len = b.size() - kSeqBytes;
    PutU64(b.data(), c->send_seq++);
    uint8_t mac[kMacBytes];
    if (!ComputeMac(key_, b.data(), b.size(), mac)) continue;
    PutU32(b.data() + kSeqBytes - kLenBytes, static_cast<uint32_t>(len));
    b.insert(b.end(), mac, mac + kMacBytes);
    ::send(c->fd.get(), b.data() + kSeqBytes - kLenBytes, kLenBytes + len + kMacBytes,
           MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  // Closing a socket with unread input resets it; a shutdown first makes
  // sure every peer sees an orderly end after what was sent.
  for (auto& entry : conns_) ::shutdown(entry.second->fd.get(), SHUT_RDWR);
  conns_.clear();
  unauthenticated_.clear();
  timers_.clear();
  waiters_.clear();
  authenticated_ = 0;
}

void ServerImpl::Close(Conn* c, bool reject) {
  if (reject) Reject();  // counted before the close, so a peer that sees the close sees the count
  if (c->timer != TimePoint::max()) timers_.erase({c->timer, c->id});
  if (c->waiting) {
    auto w = waiters_.find(c->wait_key);
    if (w != waiters_.end()) {
      w->second.erase(c->id);
      if (w->second.empty()) waiters_.erase(w);
    }
  }
  if (c->authed) {
    --authenticated_;
  } else {
    unauthenticated_.erase(c->fifo);
  }
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, c->fd.get(), nullptr);
  conns_.erase(c->id);  // closes the socket
}

void ServerImpl::Set(const std::string& key, const Bytes& value) {
  try {
    {
      std::lock_guard<std::mutex> lock(mu_);
      kv_[key] = value;
      dirty_.push_back(key);
    }
    Wake();  // the loop answers the Gets waiting for it
  } catch (...) {
    // Out of memory: the value is not stored (a later Get times out naming
    // the key). The interface has no error channel and must not throw.
  }
}

bool ServerImpl::TryGet(const std::string& key, Bytes* value) const {
  try {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = kv_.find(key);
    if (it == kv_.end()) return false;
    if (value != nullptr) *value = it->second;
    return true;
  } catch (...) {
    return false;
  }
}

// ---- client -------------------------------------------------------------------------

std::string NumericAddress(int fd) {
  sockaddr_storage ss{};
  socklen_t sl = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &sl) != 0) return "";
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
    if (!::inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof(buf))) return "";
  } else if (ss.ss_family == AF_INET6) {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&ss);
    if (IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr)) {
      if (!::inet_ntop(AF_INET, &sin6->sin6_addr.s6_addr[12], buf, sizeof(buf))) return "";
    } else if (!::inet_ntop(AF_INET6, &sin6->sin6_addr, buf, sizeof(buf))) {
      return "";
    }
  }
  return buf;
}

// One TCP connect over every address of host; returns a connected socket or
// an invalid Fd with *error set.
Fd TryConnect(const std::string& host, int port, TimePoint deadline, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) {
    *error = "cannot resolve host: " + std::string(rc == EAI_SYSTEM ? ErrnoText(errno) : ::gai_strerror(rc));
    return Fd();
  }
  Fd result;
  for (addrinfo* ai = res; ai != nullptr && result.get() < 0; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
    if (fd.get() < 0) {
      *error = "socket: " + ErrnoText(errno);
      continue;
    }
    if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS && errno != EINTR) {
        *error = "connect: " + ErrnoText(errno);
        continue;
      }
      TimePoint until = std::max(deadline, Clock::now() + kConnectFloor);
      Io w = WaitFd(fd.get(), POLLOUT, until);
      if (w.code != IoCode::kOk) {
        *error = w.code == IoCode::kTimeout ? "connect: timed out" : "poll: " + ErrnoText(w.err);
        continue;
      }
      int err = 0;
      socklen_t len = sizeof(err);
      if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      if (err != 0) {
        *error = "connect: " + ErrnoText(err);
        continue;
      }
    }
    if (ConnectedToItself(fd.get())) {
      // With nobody listening yet on a port inside the ephemeral range, the
      // kernel can pick that same port as the source and complete a
      // simultaneous open with itself. Dropping the socket at once also frees
      // the port for the server that is about to bind it.
      *error = "connect: " + ErrnoText(ECONNREFUSED);
      continue;
    }
    int one = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    result = std::move(fd);
  }
  ::freeaddrinfo(res);
  return result;
}

class ClientImpl final : public StoreClient {
 public:
  ClientImpl(Fd fd, Bytes key, std::string where)
      : fd_(std::move(fd)), key_(std::move(key)), where_(std::move(where)), local_(NumericAddress(fd_.get())) {}

  // *busy: the server had too many connections waiting to authenticate and
  // dropped this one before reading its request; a new connection may get in.
  Status Ping(TimePoint deadline, bool* busy);
  Status Set(const std::string& key, const Bytes& value) override;
  Result<Bytes> Get(const std::string& key, double timeout_s) override;
  Result<int64_t> Add(const std::string& key, int64_t delta) override;
  Result<std::vector<bool>> Check(const std::vector<std::string>& keys) override;
  std::string local_address() const override { return local_; }
  // The descriptor stays open until destruction (failures only shut it down),
  // so this is safe from any thread while the client lives.
  void Interrupt() override { ::shutdown(fd_.get(), SHUT_RDWR); }

 private:
  // Sends one request and returns the reply's status byte, leaving `in` on
  // the rest of the reply. kFailed and kShuttingDown replies become errors
  // here. Any I/O or authentication failure closes the connection, and every
  // later call fails with that error.
  Result<uint8_t> RoundTrip(Writer* request, TimePoint deadline, Bytes* reply, Reader* in);
  Status IoFailure(const FrameResult& r, TimePoint deadline, TimePoint start, bool sending);
  Status Malformed() const {
    return Error(HVD_ERR_RENDEZVOUS, "malformed reply from the rendezvous store at " + where_ +
                                         " (is it an hvd store of the same version?)");
  }
  Status TooBig(const std::string& what, size_t bytes) const {
    return InvalidArgument(what + " takes " + std::to_string(bytes) +
                           " bytes, over the rendezvous store's frame limit of " + std::to_string(kMaxFrame));
  }

  std::mutex mu_;  // one request at a time on the connection
  Fd fd_;
  const Bytes key_;
  const std::string where_;
  const std::string local_;
  uint64_t send_seq_ = 0;
  uint64_t recv_seq_ = kServerToClient;
  Status broken_;
};

Status ClientImpl::IoFailure(const FrameResult& r, TimePoint deadline, TimePoint start, bool sending) {
  switch (r.code) {
    case FrameCode::kOk:
      return Status::Ok();
    case FrameCode::kClosed:
    case FrameCode::kTruncated:
      break;
    case FrameCode::kIoError:
      if (r.err == ECONNRESET || r.err == EPIPE) break;
      return Error(HVD_ERR_RENDEZVOUS, std::string(sending ? "sending to" : "receiving from") +
                                           " the rendezvous store at " + where_ + " failed: " + ErrnoText(r.err));
    case FrameCode::kTimeout: {
      double waited = std::chrono::duration<double>(deadline - start).count();
      return Error(HVD_ERR_RENDEZVOUS, "the rendezvous store at " + where_ + " did not " +
                                           (sending ? "take the request" : "reply") + " within " +
                                           Seconds(waited) + " (the server is unresponsive)");
    }
    case FrameCode::kTooLong:
      return Error(HVD_ERR_RENDEZVOUS, "the rendezvous store at " + where_ + " announced a frame of " +
                                           std::to_string(r.length) + " bytes, over the limit of " +
                                           std::to_string(kMaxFrame));
    case FrameCode::kBadMac:
      return Error(HVD_ERR_RENDEZVOUS, "a reply from the rendezvous store at " + where_ +
                                           " failed authentication: the secret does not match the "
                                           "server's, or the connection was tampered with");
    case FrameCode::kInternal:
      return Error(HVD_ERR_INTERNAL, "HMAC-SHA256 computation failed (OpenSSL)");
  }
  return Error(HVD_ERR_RENDEZVOUS, "the rendezvous store at " + where_ +
                                       " closed the connection; the likely cause is a secret that does "
                                       "not match the server's (or the server shut down)");
}

Result<uint8_t> ClientImpl::RoundTrip(Writer* request, TimePoint deadline, Bytes* reply, Reader* in) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!broken_.ok()) return broken_;
  const TimePoint start = Clock::now();
  Limits lim;
  lim.deadline = deadline;
  FrameResult r = SendFrame(fd_.get(), key_, send_seq_, request->buffer(), lim);
  bool sending = true;
  if (r.code == FrameCode::kOk) {
    ++send_seq_;
    sending = false;
    r = ReadFrame(fd_.get(), key_, recv_seq_, lim, reply);
  }
  if (r.code != FrameCode::kOk) {
    broken_ = IoFailure(r, deadline, start, sending);
    ::shutdown(fd_.get(), SHUT_RDWR);
    return broken_;
  }
  ++recv_seq_;
  *in = Reader(reply->data() + kSeqBytes, reply->size() - kSeqBytes);
  uint8_t status = 0;
  if (!in->U8(&status)) return Malformed();
  if (status == kFailed) {
    uint32_t code = 0;
    std::string msg;
    if (!in->U32(&code) || !in->Str(&msg) || !in->AtEnd()) return Malformed();
    auto c = static_cast<hvd_status_t>(static_cast<int32_t>(code));
    if (static_cast<int32_t>(code) >= 0) c = HVD_ERR_RENDEZVOUS;  // an error stays an error
    return Error(c, "the rendezvous store at " + where_ + " refused the request: " + msg);
  }
  if (status == kShuttingDown) {
    // The server closes the connection next; later calls report why.
    broken_ = Error(HVD_ERR_RENDEZVOUS, "the rendezvous store at " + where_ + " is shutting down");
    ::shutdown(fd_.get(), SHUT_RDWR);
    return broken_;
  }
  if (status == kBusy) {
    // Sent only in place of the first reply, and the server closes next.
    if (recv_seq_ != kServerToClient + 1 || !in->AtEnd()) return Malformed();
    broken_ = Error(HVD_ERR_RENDEZVOUS, "the rendezvous store at " + where_ +
                                            " dropped the connection before it authenticated (busy)");
    ::shutdown(fd_.get(), SHUT_RDWR);
    return status;
  }
  if (status != kOk && status != kTimedOut) return Malformed();
  return status;
}

Status ClientImpl::Ping(TimePoint deadline, bool* busy) {
  *busy = false;
  Writer w;
  w.U8(kPing);
  w.U32(kProtocolVersion);
  Bytes reply;
  Reader in(nullptr, 0);
  HVD_ASSIGN_OR_RETURN(uint8_t status, RoundTrip(&w, deadline, &reply, &in));
  if (status == kBusy) {
    *busy = true;
    return broken_;
  }
  uint32_t version = 0;
  if (status != kOk || !in.U32(&version) || !in.AtEnd()) return Malformed();
  if (version != kProtocolVersion) {
    return Error(HVD_ERR_VERSION, "the rendezvous store at " + where_ + " speaks protocol version " +
                                      std::to_string(version) + ", this client " +
                                      std::to_string(kProtocolVersion));
  }
  return Status::Ok();
}

Status ClientImpl::Set(const std::string& key, const Bytes& value) {
  try {
    if (key.size() > kMaxFrame || value.size() > kMaxFrame || 9 + key.size() + value.size() > kMaxFrame) {
      return TooBig("Set(" + ShowKey(key) + ")", 9 + key.size() + value.size());
    }
    Writer w(9 + key.size() + value.size());
    w.U8(kSet);
    w.Str(key);
    w.Blob(value.data(), value.size());
    Bytes reply;
    Reader in(nullptr, 0);
    HVD_ASSIGN_OR_RETURN(uint8_t status, RoundTrip(&w, Clock::now() + kReplyMargin, &reply, &in));
    if (status != kOk || !in.AtEnd()) return Malformed();
    return Status::Ok();
  } catch (const std::bad_alloc&) {
    return Error(HVD_ERR_NO_MEMORY, "out of memory in rendezvous Set(" + ShowKey(key) + ")");
  } catch (const std::exception& e) {
    return Error(HVD_ERR_INTERNAL, std::string("rendezvous Set: ") + e.what());
  }
}

Result<Bytes> ClientImpl::Get(const std::string& key, double timeout_s) {
  try {
    if (std::isnan(timeout_s) || timeout_s < 0) {
      return InvalidArgument("rendezvous Get(" + ShowKey(key) + "): timeout must be >= 0 seconds");
    }
    if (key.size() > kMaxFrame - 13) return TooBig("Get(" + ShowKey(key) + ")", 13 + key.size());
    const uint64_t wait_ms = SecondsToMs(timeout_s);
    Writer w(13 + key.size());
    w.U8(kGet);
    w.Str(key);
    w.U64(wait_ms);
    Bytes reply;
    Reader in(nullptr, 0);
    // The reply may take the wait plus a margin as long again (at least
    // kShortReplyMargin, at most kReplyMargin): a short lookup to a store
    // that cannot answer (a host cut off) fails in seconds, not 30 s.
    const TimePoint deadline =
        DeadlineAfterMs(wait_ms) +
        std::min<Clock::duration>(kReplyMargin,
                                  std::max<Clock::duration>(kShortReplyMargin, milliseconds(wait_ms)));
    HVD_ASSIGN_OR_RETURN(uint8_t status, RoundTrip(&w, deadline, &reply, &in));
    if (status == kTimedOut) {
      if (!in.AtEnd()) return Malformed();
      return Error(HVD_ERR_TIMEOUT, "timed out after " + Seconds(timeout_s) + " waiting for key " +
                                        ShowKey(key) + " in the rendezvous store at " + where_);
    }
    Bytes value;
    if (!in.Blob(&value) || !in.AtEnd()) return Malformed();
    return value;
  } catch (const std::bad_alloc&) {
    return Error(HVD_ERR_NO_MEMORY, "out of memory in rendezvous Get(" + ShowKey(key) + ")");
  } catch (const std::exception& e) {
    return Error(HVD_ERR_INTERNAL, std::string("rendezvous Get: ") + e.what());
  }
}

Result<int64_t> ClientImpl::Add(const std::string& key, int64_t delta) {
  try {
    if (key.size() > kMaxFrame - 13) return TooBig("Add(" + ShowKey(key) + ")", 13 + key.size());
    Writer w(13 + key.size());
    w.U8(kAdd);
    w.Str(key);
    w.U64(static_cast<uint64_t>(delta));
    Bytes reply;
    Reader in(nullptr, 0);
    HVD_ASSIGN_OR_RETURN(uint8_t status, RoundTrip(&w, Clock::now() + kReplyMargin, &reply, &in));
    uint64_t value = 0;
    if (status != kOk || !in.U64(&value) || !in.AtEnd()) return Malformed();
    return static_cast<int64_t>(value);
  } catch (const std::bad_alloc&) {
    return Error(HVD_ERR_NO_MEMORY, "out of memory in rendezvous Add(" + ShowKey(key) + ")");
  } catch (const std::exception& e) {
    return Error(HVD_ERR_INTERNAL, std::string("rendezvous Add: ") + e.what());
  }
}

Result<std::vector<bool>> ClientImpl::Check(const std::vector<std::string>& keys) {
  try {
    size_t need = 5;
    for (const auto& key : keys) {
      need += 4 + key.size();
      if (need > kMaxFrame) return TooBig("Check of " + std::to_string(keys.size()) + " keys", need);
    }
    Writer w(need);
    w.U8(kCheck);
    w.U32(static_cast<uint32_t>(keys.size()));
    for (const auto& key : keys) w.Str(key);
    Bytes reply;
    Reader in(nullptr, 0);
    HVD_ASSIGN_OR_RETURN(uint8_t status, RoundTrip(&w, Clock::now() + kReplyMargin, &reply, &in));
    uint32_t count = 0;
    if (status != kOk || !in.U32(&count) || count != keys.size() || in.remaining() != count) {
      return Malformed();
    }
    std::vector<bool> present(count);
    for (uint32_t i = 0; i < count; ++i) {
      uint8_t b = 0;
      if (!in.U8(&b) || b > 1) return Malformed();
      present[i] = b == 1;
    }
    return present;
  } catch (const std::bad_alloc&) {
    return Error(HVD_ERR_NO_MEMORY, "out of memory in rendezvous Check");
  } catch (const std::exception& e) {
    return Error(HVD_ERR_INTERNAL, std::string("rendezvous Check: ") + e.what());
  }
}

}  // namespace

// ---- public entry points --------------------------------------------------------

std::string NewSecret() {
  uint8_t raw[32];
  if (RAND_bytes(raw, sizeof(raw)) != 1) return "";  // Start/Connect reject "" clearly
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * sizeof(raw));
  for (uint8_t b : raw) {
    out += kHex[b >> 4];
    out += kHex[b & 0xf];
  }
  OPENSSL_cleanse(raw, sizeof(raw));
  return out;
}

Result<std::unique_ptr<StoreServer>> StoreServer::Start(const std::string& host, int port,
                                                        const std::string& secret) {
  return Start(host, port, secret, StoreServerOptions());
}

Result<std::unique_ptr<StoreServer>> StoreServer::Start(const std::string& host, int port,
                                                        const std::string& secret,
                                                        const StoreServerOptions& options) {
  try {
    Bytes key;
    HVD_CHECK(DecodeSecret(secret, &key));
    if (std::isnan(options.auth_timeout_s) || options.auth_timeout_s <= 0) {
      return InvalidArgument("rendezvous store: the authentication timeout must be above 0 seconds");
    }
    auto server = std::make_unique<ServerImpl>(std::move(key), options);
    HVD_CHECK(server->Listen(host, port));
    HVD_CHECK(server->StartServing());
    return std::unique_ptr<StoreServer>(std::move(server));
  } catch (const std::bad_alloc&) {
    return Error(HVD_ERR_NO_MEMORY, "out of memory starting the rendezvous store");
  } catch (const std::exception& e) {
    return Error(HVD_ERR_RENDEZVOUS, std::string("cannot start the rendezvous store: ") + e.what());
  }
}

Result<std::unique_ptr<StoreClient>> StoreClient::Connect(const std::string& host, int port,
                                                          const std::string& secret, double timeout_s) {
  try {
    Bytes key;
    HVD_CHECK(DecodeSecret(secret, &key));
    if (host.empty()) return InvalidArgument("rendezvous store host is empty");
    if (port <= 0 || port > 65535) {
      return InvalidArgument("rendezvous store port must be in 1..65535 (got " + std::to_string(port) + ")");
    }
    if (std::isnan(timeout_s)) return InvalidArgument("rendezvous connect timeout is NaN");
    std::string bare = host;
    if (bare.size() >= 2 && bare.front() == '[' && bare.back() == ']') bare = bare.substr(1, bare.size() - 2);
    const std::string where = JoinHostPort(bare, port);
    const TimePoint deadline = DeadlineAfterMs(SecondsToMs(timeout_s));

    std::string last_error = "no attempt made";
    auto pause = milliseconds(20);
    for (;;) {
      Fd fd = TryConnect(bare, port, deadline, &last_error);
      if (fd.get() >= 0) {
        // The handshake proves both sides hold the same secret; a server that
        // rejects us closes the connection, which is final: no retry. A
        // server busy with connections that never authenticate says so (in
        // a frame only the secret could make), and we try again.
        auto client = std::make_unique<ClientImpl>(std::move(fd), key, where);
        bool busy = false;
        Status s = client->Ping(std::max(deadline, Clock::now() + kHandshakeFloor), &busy);
        if (!busy) {
          if (!s.ok()) return s;
          return std::unique_ptr<StoreClient>(std::move(client));
        }
        last_error = "the server stayed busy with connections that did not authenticate";
      }
      const TimePoint now = Clock::now();
      if (now >= deadline) break;
      std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
      pause = std::min(pause * 2, milliseconds(500));
    }
    return Error(HVD_ERR_RENDEZVOUS, "could not connect to the rendezvous store at " + where + " within " +
                                         Seconds(std::max(timeout_s, 0.0)) + ": " + last_error);
  } catch (const std::bad_alloc&) {
    return Error(HVD_ERR_NO_MEMORY, "out of memory connecting to the rendezvous store");
  } catch (const std::exception& e) {
    return Error(HVD_ERR_RENDEZVOUS, std::string("cannot connect to the rendezvous store: ") + e.what());
  }
}

std::string OwnAddressOf(const std::string& host_in, bool allow_loopback, std::string* why) {
  std::string host = host_in;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0) {
    *why = "cannot resolve " + host + ": " + (rc == EAI_SYSTEM ? ErrnoText(errno) : ::gai_strerror(rc));
    return "";
  }
  std::string found, loopback;
  for (addrinfo* ai = res; ai != nullptr && found.empty(); ai = ai->ai_next) {
    char buf[INET6_ADDRSTRLEN] = {0};
    bool is_loopback = false;
    if (ai->ai_family == AF_INET) {
      auto* sin = reinterpret_cast<sockaddr_in*>(ai->ai_addr);
      is_loopback = (ntohl(sin->sin_addr.s_addr) >> 24) == 127;
      if (!::inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof(buf))) continue;
    } else if (ai->ai_family == AF_INET6) {
      auto* sin6 = reinterpret_cast<sockaddr_in6*>(ai->ai_addr);
      is_loopback = IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr);
      if (!::inet_ntop(AF_INET6, &sin6->sin6_addr, buf, sizeof(buf))) continue;
    } else {
      continue;
    }
    if (is_loopback && !allow_loopback) {
      loopback = buf;
      continue;
    }
    // Ours if a socket can bind to it (port 0: any free port, released at once).
    Fd fd(::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) continue;
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0) found = buf;
  }
  ::freeaddrinfo(res);
  if (found.empty()) {
    *why = !loopback.empty() ? host + " resolves here to the loopback address " + loopback +
                                   ", which other hosts cannot reach"
                             : host + " is not an address of this host";
  }
  return found;
}

Status ParseHostPort(const std::string& s, std::string* host, int* port) {
  std::string h, p;
  if (!s.empty() && s.front() == '[') {
    size_t close = s.find(']');
    if (close == std::string::npos) return InvalidArgument("'" + s + "': missing ']' after an IPv6 address");
    h = s.substr(1, close - 1);
    if (close + 1 >= s.size() || s[close + 1] != ':') {
      return InvalidArgument("'" + s + "': missing ':port' after the bracketed address");
    }
    p = s.substr(close + 2);
  } else {
    size_t colon = s.rfind(':');
    if (colon == std::string::npos) return InvalidArgument("'" + s + "': expected host:port, the port is missing");
    h = s.substr(0, colon);
    p = s.substr(colon + 1);
    if (h.find(':') != std::string::npos) {
      return InvalidArgument("'" + s + "': an IPv6 address must be bracketed, as in [::1]:29500");
    }
  }
  if (h.empty()) return InvalidArgument("'" + s + "': the host is missing");
  if (p.empty()) return InvalidArgument("'" + s + "': the port is missing");
  if (p.size() > 5 || !std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return InvalidArgument("'" + s + "': the port must be a number in 0..65535");
  }
  int value = std::stoi(p);  // at most 5 digits: cannot throw
  if (value > 65535) return InvalidArgument("'" + s + "': the port must be a number in 0..65535");
  *host = h;
  *port = value;
  return Status::Ok();
}

}  // namespace hvd::rdv
