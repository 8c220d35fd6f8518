// The Gloo transport: connection setup, point-to-point and
// faults over Gloo's TCP transport; no collectives and no shared memory (the
// core runs every collective over isend/irecv/wait). It needs only hvd.h,
// hvd_transport.h, Gloo and the standard library: the model of a plugin
// written outside this project. Built into libhvd_transport_gloo.so
// (hvd_transport_plugin) and, with HVD_BUILTIN_GLOO=1, into the static
// core library (hvd_gloo_transport_table, no plugin symbol).
//
// Rendezvous: host names come from the core's host table (env.hosts), for
// messages ("rank 2 (host h)"); Gloo's keys go under "gloo/", and a rank
// whose addresses never come there is named (it did not join). A Gloo error on a request is its pair's, so the
// address it quotes is shown as that peer's: "rank 2 (host h, [ip]:port)".
// Errors of the full mesh name the peer through the addresses the ranks
// published (MeshFailure), and a closing handshake with each peer names
// the peers that never answered (Handshake).
//
// Point-to-point: each request owns one Gloo unbound buffer over the caller's
// memory (an unbound buffer counts completions, so one per request makes a
// wait exact; creating one costs ~0.05 us). Tag t is slot kSlotBase + t; Gloo
// matches sends and receives per (pair, slot) in posting order. A zero-byte
// message sends zero bytes from a dummy byte the request owns.
//
// Faults: the first failure (timeout, I/O error, abort) breaks the
// communicator: it is recorded once, every pending request's Gloo wait is
// aborted, every peer is sent the reason (an abort message, Watch) and
// every connection closed (so nothing arrives into a released buffer and
// peers blocked on this rank fail fast); later calls return it. What Gloo
// does not report to a waiting request (a pair failing under a message
// mid-way, another rank's failure, a silent peer) the watch thread finds
// (watch.cc; docs/failures.md).
// abort and async_error may come from any thread: the failure record and the
// pending list are guarded by Comm::mu. SIGPIPE (Gloo writes with writev) is
// blocked in the calling thread during every entry point, and Gloo's
// event-loop thread inherits the block from init.
//
// Gloo's event-loop thread runs under SCHED_BATCH (MakeDevice): woken by a
// message while a rank's own thread holds that pair's lock (posting a send or
// receive), the loop finds the lock taken and returns to epoll, which reports
// the same readable socket again at once: it spins until the scheduler gives
// the CPU back to the lock holder. A woken thread of normal policy preempts
// the running one, so on a CPU the two share (a bound rank; more ranks than
// cores) the spin lasted the rest of a time slice, milliseconds per message.
#pragma once

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "hvd.h"
#include "hvd_transport.h"
#include "kit/comm_base.h"
#include "kit/deadline.h"
#include "kit/p2p.h"
#include "kit/settings.h"
#include "kit/silence.h"
#include "kit/store.h"

// One request: an unbound buffer over the caller's memory, linked into its
// communicator's list of pending requests while it lives.
struct hvd_transport_request {
  std::unique_ptr<gloo::transport::UnboundBuffer> ub;
  int32_t peer = -1;
  bool send = false;
  unsigned char dummy = 0;  // the memory of a zero-byte message
  hvd_transport_request* prev = nullptr;
  hvd_transport_request* next = nullptr;
};

namespace hvd_gloo_transport {

using hvd::kit::Clock;
using hvd::kit::After;
using hvd::kit::SecondsLeft;
using hvd::kit::Secs;
using hvd::kit::StoreError;
using Millis = std::chrono::milliseconds;
using Request = hvd_transport_request;

// Our slots: the high byte differs from every gloo::Slot prefix (1..8) and
// from the slots of the collective tables (0xA1, 0xA2).
constexpr uint64_t kSlotBase = uint64_t{0xB4} << 56;
// The closing handshake of init (Handshake): a high byte of its own.
constexpr uint64_t kHandshakeSlot = uint64_t{0xB5} << 56;
// Abort messages (Watch): a high byte of their own.
constexpr uint64_t kControlSlot = uint64_t{0xB6} << 56;
constexpr uint32_t kMaxTag = 0x7FFFFFFFu;
constexpr Millis kForever = std::chrono::hours(24 * 365);

inline Millis ToMillis(double s) {
  if (!(s > 0) || s > 3.0e7) return kForever;
  return Millis(std::max<int64_t>(1, static_cast<int64_t>(s * 1000.0)));
}
inline bool LooksLikeTimeout(const char* s) {
  return std::strstr(s, "imed out") != nullptr || std::strstr(s, "imeout") != nullptr;
}


// The rank a key of Gloo's full mesh belongs to: "<rank>" (the addresses
// of a rank's pairs) or "rank_<rank>" (its host name, in Gloo versions that
// count local ranks); -1 for any other key.
inline int RankOfGlooKey(const std::string& key) {
  const size_t from = key.compare(0, 5, "rank_") == 0 ? 5 : 0;
  if (from == key.size() || key.size() - from > 9) return -1;
  for (size_t i = from; i < key.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(key[i]))) return -1;
  }
  return std::stoi(key.substr(from));
}

// The core's store (kit::Store: throwing StoreError, every wait ending at
// one deadline) as Gloo's store, Gloo's keys under "gloo/". What Gloo's full
// mesh reads through it is kept, to name the peer when the mesh fails
// (MeshFailure): each rank's published pair addresses, and the rank whose
// key was read last (Gloo reads rank i's addresses and then connects to
// rank i, one rank after another).
class Kv : public gloo::rendezvous::Store {
 public:
  std::map<int, std::vector<char>> addresses;  // rank -> Gloo's bytes under "<rank>"
  int last_rank = -1;                          // the rank of the key read last
  int waiting_for = -1;                        // the rank of a key not (yet) read

  Kv(const hvd::kit::StoreCalls& calls, double seconds) : store_(calls, seconds) {}
  void Set(const std::string& key, const void* data, size_t len) const {
    store_.Set(key, data, len);
  }
  std::string Get(const std::string& key) const { return store_.Get(key); }
  void set(const std::string& key, const std::vector<char>& data) override {
    Set("gloo/" + key, data.data(), data.size());
  }
  std::vector<char> get(const std::string& key) override {
    const int r = RankOfGlooKey(key);
    waiting_for = r;
    const std::string v = Get("gloo/" + key);
    waiting_for = -1;
    std::vector<char> bytes(v.begin(), v.end());
    if (r >= 0) {
      last_rank = r;
      if (key[0] != 'r') addresses[r] = bytes;
    }
    return bytes;
  }
  // Gloo's own limits are ignored: the deadline bounds every wait.
  void wait(const std::vector<std::string>& keys) override { wait(keys, kForever); }
  void wait(const std::vector<std::string>& keys, const Millis&) override {
    for (const auto& k : keys) {
      waiting_for = RankOfGlooKey(k);
      Get("gloo/" + k);
      waiting_for = -1;
    }
  }

 private:
  hvd::kit::Store store_;
};

// What Gloo does not tell a waiting request (watch.cc). Gloo wakes the
// requests of a pair whose connection fails only where they wait in its
// queues: a message already coming in (a large transfer's, mid-way) waits on
// for the transport timeout, and a request on another pair (a ring's
// receive from a healthy neighbour) learns nothing. So each rank keeps, per
// peer, one receive of an abort message posted (`in`), which Gloo fails
// with the pair; a watch thread polls them every kWatchPeriod while this
// rank waits on requests, and times the loop thread's wait against the
// peer timeout (Progress). What it finds it records here and wakes the
// waits; the loop thread turns it into the failure (Settle).
struct Watch {
  static constexpr size_t kBytes = 1024;  // an abort message: "<status> <text>", 0-padded, kMagic last
  static constexpr char kMagic = 'X';
  enum Found { kNothing, kClosed, kAborted, kSilent };
  // Declared first, freed last: the receives (and through them Gloo's
  // pairs) go before their memory.
  std::vector<std::vector<char>> in_bytes;
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> in;  // per peer
  hvd::kit::Progress progress;
  std::thread thread;
  std::mutex mu;       // stop and the wake-up
  std::mutex poll_mu;  // one look at the abort receives at a time (Poll)
  std::condition_variable cv;
  bool stop = false;
  // The abort messages this rank sent (once), kept until finalize: Gloo may
  // still be writing them when the connections close.
  std::atomic<bool> sent{false};
  std::vector<char> out;
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> sends;
  // Under the communicator's failure.mu: the loop thread's wait and what
  // the watch found (kNothing until the loop thread has settled it).
  int waiting_peer = -1;  // -1: the loop thread is not in a wait
  int64_t since = 0;      // Progress::Now() at the wait's start
  Found found = kNothing;
  std::atomic<bool> flagged{false};  // found != kNothing, read without the lock
  int found_peer = -1;
  int found_status = HVD_OK;
  std::string found_text;
  // Whether the store answers, asked while a wait goes silent (Round): a
  // rank cut off from the store skips it in the silence's verdict (Settle)
  // instead of waiting the store client's reply margin there.
  hvd::kit::StoreProbe store_probe;
};

struct Comm : hvd::kit::CommBase {
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  // Any thread, under failure.mu: the pending requests.
  hvd::kit::PendingList<Request> pending;
  std::atomic<bool> closed{false};
  std::unique_ptr<Watch> watch;  // none for a world of one

  // Records the first failure and wakes every pending wait; false if the
  // communicator had failed already.
  bool Fail(int status, const std::string& msg) {
    std::lock_guard<std::mutex> lock(failure.mu);
    if (!failure.RecordLocked(status, msg)) return false;
    WakeLocked();
    return true;
  }
  // Wakes every pending wait (their Gloo waits return false); under failure.mu.
  void WakeLocked() {
    for (Request* r = pending.head; r != nullptr; r = r->next) {
      if (r->send) {
        r->ub->abortWaitSend();
      } else {
        r->ub->abortWaitRecv();
      }
    }
  }
  // Hard close of every pair, once: nothing arrives into released buffers.
  void Close() {
    if (ctx && !closed.exchange(true)) {
      try {
        ctx->closeConnections();
      } catch (...) {
      }
    }
  }
  void Unlink(Request* r) {
    std::lock_guard<std::mutex> lock(failure.mu);
    pending.Unlink(r);
  }
};

// What init reads from the env (plugin.cc, ReadEnv): the set-up's input.
struct Settings : hvd::kit::Settings {
  std::string network_interface;  // "" if none given
  std::string local_address;      // "" if none given
};

// Blocks SIGPIPE in this thread while alive; see the note at the top.
class SigpipeBlock {
 public:
  SigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    active_ = pthread_sigmask(SIG_BLOCK, &pipe_, &old_) == 0 && !sigismember(&old_, SIGPIPE);
  }
  ~SigpipeBlock() {
    if (!active_) return;
    sigset_t pending;
    if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE)) {
      const struct timespec zero = {0, 0};
      (void)sigtimedwait(&pipe_, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeBlock(const SigpipeBlock&) = delete;
  SigpipeBlock& operator=(const SigpipeBlock&) = delete;

 private:
  sigset_t pipe_, old_;
  bool active_ = false;
};

// ---------------------------------------------------------------------------
// Across the plugin's files (faults.cc, comm.cc, p2p.cc, plugin.cc).

// faults.cc
std::string WithoutLocation(const std::string& s);
bool FindAddress(const std::string& text, size_t* pos, size_t* len);
std::string DescribeFailure(const Comm& c, const Request& r, const std::string& what);
std::string PeerFailure(const Comm& c, const Request& r, const std::string& what, int* status);
std::string MeshFailure(const Comm& c, const Kv& store, const std::string& what);
void NoteInitFailure(const Kv& store, int rank, const std::string& msg);
std::string InitFailureNote(const Comm& c);
int Break(Comm& c, int status, const std::string& msg, bool note = true);
int Abort(void* comm, int status, const char* reason) noexcept;
int Settle(Comm& c);

// watch.cc
void PostWatch(Comm& c);
void StartWatch(Comm& c);
void StopWatch(Comm& c) noexcept;
void Waiting(Comm& c, const Request* r);
void SendAborts(Comm& c, int status, const std::string& msg) noexcept;
bool AbortFrom(const Comm& c, int j, std::string* text);

// comm.cc
int Setup(const Settings& s, std::unique_ptr<Comm>* out, std::string* msg);
void Finalize(void* comm) noexcept;

// p2p.cc
int Post(void* comm, int32_t peer, uint32_t tag, const hvd_transport_buffer_t* buf,
         hvd_transport_request_t** req, bool send) noexcept;
int Wait(void* comm, hvd_transport_request_t* req, double timeout_s) noexcept;

}  // namespace hvd_gloo_transport
