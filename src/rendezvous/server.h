// The rendezvous store's server: one thread, an epoll loop over every
// connection (server.cc), and the commands on the key-value table
// (server_commands.cc).
#pragma once

#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "rendezvous/frame.h"
#include "rendezvous/socket.h"
#include "rendezvous/store.h"

namespace hvd::rdv::detail {

// How long a server waits for progress inside a frame (or for a client to
// take a reply) before it drops the connection. Between requests an
// authenticated client may stay silent for as long as it likes.
constexpr Clock::duration kServerIdle = std::chrono::seconds(30);

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

  // What a request leads to: a reply now, a parked Get, or closing the
  // connection (a malformed request).
  enum class Outcome { kReply, kWait, kMalformed };

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

  void Loop() noexcept;
  void Wake();
  void AcceptSome();
  void PauseAccepting();
  void Evict(Conn* c);
  void OnReadable(Conn* c);
  void OnFrame(Conn* c);
  Outcome Handle(Conn* c, const uint8_t* p, size_t n, Writer* out);
  Outcome HandlePing(Reader* in, Writer* out);
  Outcome HandleSet(Reader* in, Writer* out);
  Outcome HandleGet(Conn* c, Reader* in, Writer* out);
  Outcome HandleAdd(Reader* in, Writer* out);
  Outcome HandleCheck(Reader* in, Writer* out);
  void ServeWaiters(const std::string& key);
  void Reply(Conn* c, Writer* reply);
  void SendAtOnce(Conn* c, Writer* w, uint64_t seq);
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

}  // namespace hvd::rdv::detail
