// The rendezvous store's server: listening, the event loop, reading frames,
// sending replies, timers, and the hosting process's direct access.

#include "rendezvous/server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <openssl/crypto.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <exception>
#include <new>

namespace hvd::rdv {
namespace detail {

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
  SendAtOnce(c, &w, c->send_seq);  // a fresh socket has room
  Close(c, true);
}

// Sends a short frame without waiting (best effort): for the frames a
// connection gets just before it closes.
void ServerImpl::SendAtOnce(Conn* c, Writer* w, uint64_t seq) {
  Bytes* buf = w->buffer();
  if (!SealFrame(key_, seq, buf)) return;
  ::send(c->fd.get(), buf->data() + kFrameStart, buf->size() - kFrameStart,
         MSG_NOSIGNAL | MSG_DONTWAIT);
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

// Seals the reply into a frame and starts sending it.
void ServerImpl::Reply(Conn* c, Writer* reply) {
  Bytes& b = *reply->buffer();
  if (!SealFrame(key_, c->send_seq++, &b)) return Close(c, false);
  c->out.swap(b);
  c->out_done = kFrameStart;
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
    SendAtOnce(c, &reply, c->send_seq++);
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

}  // namespace detail

using detail::DecodeSecret;
using detail::ServerImpl;

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

}  // namespace hvd::rdv
