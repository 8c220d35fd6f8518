// The rendezvous store's client: connecting (with retries and the
// handshake), and one request at a time with a bounded wait for its reply.

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <exception>
#include <mutex>
#include <new>
#include <thread>

#include "rendezvous/address.h"
#include "rendezvous/frame.h"
#include "rendezvous/socket.h"
#include "rendezvous/store.h"

namespace hvd::rdv {

namespace {
using namespace detail;  // NOLINT: this file is the client of the store's internals
using internal::ConnectedToItself;

// Extra time a client allows for a reply beyond the server-side wait.
constexpr Clock::duration kReplyMargin = std::chrono::seconds(30);
// Least margin a Get's reply gets beyond its wait (see Get).
constexpr Clock::duration kShortReplyMargin = std::chrono::seconds(2);
// Least time the Connect handshake gets, even when the connect timeout is
// nearly spent.
constexpr Clock::duration kHandshakeFloor = std::chrono::seconds(2);
// Least time one TCP connect attempt gets.
constexpr Clock::duration kConnectFloor = milliseconds(200);

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

// Runs one client call, turning an exception into its error: out of memory
// names the call (and its key), anything else is an internal error.
template <typename R, typename F>
R Guarded(const char* call, const std::string* key, F&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Error(HVD_ERR_NO_MEMORY, std::string("out of memory in rendezvous ") + call +
                                        (key != nullptr ? "(" + ShowKey(*key) + ")" : ""));
  } catch (const std::exception& e) {
    return Error(HVD_ERR_INTERNAL, std::string("rendezvous ") + call + ": " + e.what());
  }
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
  return Guarded<Status>("Set", &key, [&]() -> Status {
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
  });
}

Result<Bytes> ClientImpl::Get(const std::string& key, double timeout_s) {
  return Guarded<Result<Bytes>>("Get", &key, [&]() -> Result<Bytes> {
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
  });
}

Result<int64_t> ClientImpl::Add(const std::string& key, int64_t delta) {
  return Guarded<Result<int64_t>>("Add", &key, [&]() -> Result<int64_t> {
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
  });
}

Result<std::vector<bool>> ClientImpl::Check(const std::vector<std::string>& keys) {
  return Guarded<Result<std::vector<bool>>>("Check", nullptr, [&]() -> Result<std::vector<bool>> {
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
  });
}

}  // namespace

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

}  // namespace hvd::rdv
