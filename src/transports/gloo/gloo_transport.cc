// The Gloo transport: hvd_transport_v1_t over Gloo's TCP transport.
//
// Built twice from this one file:
//  - as the plugin libhvd_transport_gloo.so, which exports only
//    hvd_transport_plugin_v1 (the core dlopens it);
//  - into the static core library with HVD_BUILTIN_GLOO=1, where the core
//    calls hvd_gloo_transport_table() directly and no plugin symbol exists.
//
// Rendezvous. Gloo's own keys go through a gloo::rendezvous::Store adapter
// over the core's key-value callbacks, under the prefix "gloo/". Before
// Gloo's full-mesh connect, every rank publishes "joined/<rank>" and waits
// for everyone else's, so a rank that never starts is reported by number
// (HVD_ERR_RENDEZVOUS) instead of as an anonymous Gloo connect timeout.
//
// Allreduce. Written here over Gloo's unbound buffers (point-to-point send and
// recv with completion counting) instead of calling gloo::allreduce or the
// legacy algorithm classes, because:
//  - gloo::allreduce allocates a scratch segment (up to 2 MiB) on every call;
//    fresh pages cost ~10 us per 4 KiB here, and the core calls allreduce
//    every cycle on its fusion buffer;
//  - the legacy AllreduceRing* / HalvingDoubling classes bind to one buffer
//    and one int count and allocate full-size inboxes when built, and building
//    them consumes context slots, so a per-(pointer, count) cache can diverge
//    between ranks (a hit on one rank, a miss on another) and deadlock.
// Two algorithms, chosen from the byte count alone (so every rank chooses the
// same one):
//  - direct (small messages): every rank sends its buffer to every other rank
//    and reduces all contributions in rank order (one network latency);
//  - ring (large): reduce-scatter then allgather around the ring, each part
//    cut into segments of at most kSegmentBytes, with up to kRingDepth + 1
//    receives and sends in flight so the network and the reduction overlap.
// All scratch memory is allocated and touched once at init; the steady state
// allocates nothing proportional to the data (Gloo itself still makes a few
// small bookkeeping allocations per message). Measurements: README.md here.
//
// Shared memory. When every rank of the communicator is on this host (same
// boot id, host name, IPC and PID namespaces, agreed through the store) and
// HVD_GLOO_SHM is not 0, allreduce, allgatherv, broadcast and barrier run
// over one POSIX shm segment instead (alltoallv stays on Gloo): per-rank
// slots, barriers on per-rank counters with spin, yield, then cross-process
// futex sleeps, every wait bounded by the transport timeout, peers' pids
// checked while blocked. Any setup failure on any rank makes all ranks keep
// TCP. The code is transports/common/shm.h (shared with the MPI plugin);
// this file provides its exchange over the store (SetupShm). Details and
// measurements: README.md here.
//
// SIGPIPE. Gloo writes to its sockets with writev(2), so a peer that went
// away raises SIGPIPE, whose default action kills the whole process. The
// plugin blocks SIGPIPE in the calling thread for the duration of every entry
// point (discarding one that became pending meanwhile; EPIPE still surfaces
// as an error), and Gloo's event-loop thread inherits a blocked SIGPIPE from
// init. The process-wide disposition is left alone.
//
// Errors. Every entry point is noexcept and catches everything. Any failure
// of a collective leaves Gloo's context in an undefined state (a timeout makes
// Gloo close every pair), so the communicator is then marked broken: its
// connections are closed at once (peers blocked on us fail fast instead of
// waiting for their own timeout) and later calls fail with the first error.
// Messages name the peer by rank and host, never by address alone: every
// rank publishes its host name in the join round, and after the full-mesh
// connect every peer's endpoints are noted (the addresses Gloo's errors quote:
// "Read error [127.0.0.1]:40143: ..."; see NotePeerEndpoints). A timeout
// carries no address: the algorithms note which rank each wait is for
// (Comm::waiting_for), and the message names it. A rank whose communicator
// breaks over TCP notes why in the store ("broken/<rank>") before closing its
// connections, so peers that only see the closing can say what was behind it.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cctype>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <gloo/allgatherv.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "common/kernels.h"
#include "algorithms/shm.h"
#include "hvd_transport.h"

// Tuning constants (compile-time; see the measurements in README.md).
#ifndef HVD_GLOO_SEGMENT_BYTES
#define HVD_GLOO_SEGMENT_BYTES (1024u * 1024u)
#endif
#ifndef HVD_GLOO_RING_DEPTH
#define HVD_GLOO_RING_DEPTH 2
#endif
#ifndef HVD_GLOO_DIRECT_FANOUT_BYTES
#define HVD_GLOO_DIRECT_FANOUT_BYTES (64u * 1024u)
#endif
#ifndef HVD_GLOO_SHM_SLOT_BYTES
#define HVD_GLOO_SHM_SLOT_BYTES (1024u * 1024u)
#endif
#ifndef HVD_GLOO_SHM_SPIN_US
#define HVD_GLOO_SHM_SPIN_US 20
#endif
#ifndef HVD_GLOO_SHM_YIELD_US
#define HVD_GLOO_SHM_YIELD_US 50
#endif
#ifndef HVD_GLOO_SHM_SMALL_FANOUT_BYTES
#define HVD_GLOO_SHM_SMALL_FANOUT_BYTES (256u * 1024u)
#endif

namespace hvd {
namespace gloo_transport {
namespace {

using Millis = std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Ring pipeline unit (Gloo's own allreduce uses the same 1 MiB cap).
constexpr size_t kSegmentBytes = HVD_GLOO_SEGMENT_BYTES;
// Ring receives in flight beyond the one being consumed (scratch holds
// kRingDepth + 1 segments).
constexpr size_t kRingDepth = HVD_GLOO_RING_DEPTH;
// The direct algorithm sends (size - 1) copies of the buffer; it is used while
// that fan-out stays within this many bytes, i.e. up to 64 KiB with 2 ranks,
// 21 KiB with 4, 9 KiB with 8 (where one round trip beats 2(P-1) ring steps).
constexpr size_t kDirectFanoutBytes = HVD_GLOO_DIRECT_FANOUT_BYTES;
// One pass of the ring handles at most this many elements (the rest of the
// buffer goes in further passes), so no count ever nears INT_MAX anywhere.
constexpr size_t kMaxPassElements = size_t{1} << 30;
// Our own slots: the high byte differs from every gloo::Slot prefix (1..8).
constexpr uint64_t kSlotRing = uint64_t{0xA1} << 56;
constexpr uint64_t kSlotDirect = uint64_t{0xA2} << 56;
constexpr const char* kGlooKeyPrefix = "gloo/";
// "No limit" for Gloo waits (Gloo treats 0 ms as an immediate timeout).
constexpr Millis kForever = std::chrono::hours(24 * 365);
constexpr size_t kUbCacheSize = 4;

// Thrown by the store adapter; init maps it to HVD_ERR_RENDEZVOUS.
struct StoreError : std::runtime_error {
  StoreError(int code, const std::string& msg) : std::runtime_error(msg), code(code) {}
  int code;
};

Millis ToMillis(double seconds) {
  if (!(seconds > 0)) return kForever;
  if (seconds > 3.0e7) return kForever;
  return Millis(std::max<int64_t>(1, static_cast<int64_t>(seconds * 1000.0)));
}

double SecondsLeft(Clock::time_point deadline) {
  const double s = std::chrono::duration<double>(deadline - Clock::now()).count();
  return s > 0 ? s : 0.0;
}

// ---------------------------------------------------------------------------
// gloo::rendezvous::Store over the core's key-value callbacks. Every wait runs
// until the adapter's deadline (the start timeout), whatever timeout Gloo
// passes: Gloo derives its own from the context timeout, which is shortened
// during connect (see InitImpl).
class KvStore : public gloo::rendezvous::Store {
 public:
  KvStore(const hvd_transport_env_v1_t& env, Clock::time_point deadline)
      : env_(env), deadline_(deadline) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    const std::string k = kGlooKeyPrefix + key;
    const int st = env_.kv_set(env_.kv, k.c_str(), data.data(), data.size());
    if (st != HVD_OK) {
      throw StoreError(st, "rendezvous store: cannot set '" + k + "' (status " +
                               std::to_string(st) + ")");
    }
  }

  std::vector<char> get(const std::string& key) override {
    const std::string k = kGlooKeyPrefix + key;
    void* value = nullptr;
    size_t len = 0;
    const int st = env_.kv_get(env_.kv, k.c_str(), &value, &len, SecondsLeft(deadline_));
    if (st != HVD_OK) {
      throw StoreError(st, "rendezvous store: key '" + k + "' not available (status " +
                               std::to_string(st) + ")");
    }
    std::vector<char> out(static_cast<char*>(value), static_cast<char*>(value) + len);
    if (value != nullptr) env_.kv_free(value);
    seen_[key] = out;
    return out;
  }

  // A value get() returned (Gloo's rendezvous data), or empty.
  std::vector<char> Seen(const std::string& key) const {
    auto it = seen_.find(key);
    return it == seen_.end() ? std::vector<char>() : it->second;
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, kForever); }

  void wait(const std::vector<std::string>& keys, const Millis& /*timeout*/) override {
    const auto deadline = deadline_;
    for (const auto& key : keys) {
      const std::string k = kGlooKeyPrefix + key;
      void* value = nullptr;
      size_t len = 0;
      const int st = env_.kv_get(env_.kv, k.c_str(), &value, &len, SecondsLeft(deadline));
      if (st != HVD_OK) {
        throw StoreError(st, "rendezvous store: timed out waiting for '" + k + "' (status " +
                                 std::to_string(st) + ")");
      }
      if (value != nullptr) env_.kv_free(value);
    }
  }

 private:
  const hvd_transport_env_v1_t& env_;
  Clock::time_point deadline_;
  std::map<std::string, std::vector<char>> seen_;
};

// 64-byte aligned, zero-filled (so touched) memory that lives as long as the
// communicator.
struct AlignedFree {
  void operator()(uint8_t* p) const { std::free(p); }
};
using AlignedBytes = std::unique_ptr<uint8_t[], AlignedFree>;

AlignedBytes AllocTouched(size_t bytes) {
  const size_t rounded = (std::max<size_t>(bytes, 64) + 63) / 64 * 64;
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, rounded));
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  return AlignedBytes(p);
}

// ---------------------------------------------------------------------------
// Shared-memory path (all ranks on one host): transports/common/shm.h, set
// up over the store (SetupShm); see the notes at the top and README.md.

// Per-rank slot size, the allreduce chunk per rank (largest; smaller with many
// ranks so the segment stays within 32 MiB, e.g. inside Docker's default
// 64 MiB /dev/shm).
constexpr size_t kShmSlotBytes = HVD_GLOO_SHM_SLOT_BYTES;
// The one-barrier allreduce is used while bytes x (size - 1) stays within this.
constexpr size_t kShmSmallFanoutBytes = HVD_GLOO_SHM_SMALL_FANOUT_BYTES;
static_assert(kShmSlotBytes % 4096 == 0, "slot bytes must be a multiple of 4 KiB");

struct Comm {
  hvd_transport_env_v1_t env{};  // copy; string fields are not used after init
  int rank = 0;
  int size = 1;
  Millis timeout{kForever};
  // The limit in force is the core's peer timeout (set_timeout, kind PEER):
  // a timeout then means the peer waited for has gone silent.
  bool peer_limit = false;
  hvd_reduce_kernel_fn reduce = nullptr;

  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> ctx;

  // Ring: kRingDepth + 1 segments. Direct: one slot of direct_max bytes per rank.
  size_t direct_max = 0;  // largest buffer (bytes) the direct algorithm takes
  AlignedBytes ring_scratch;
  AlignedBytes direct_scratch;
  std::unique_ptr<gloo::transport::UnboundBuffer> ring_ub;
  // Direct: one buffer per peer over its slot, so a wait is for one rank.
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> direct_in;

  // Unbound buffers over caller memory, by pointer (the fusion buffer hits
  // every time). A buffer covers [ptr, ptr + bytes) and serves any call on
  // that pointer up to that size. Creating one allocates only a small object.
  struct UbEntry {
    void* ptr = nullptr;
    size_t bytes = 0;
    uint64_t last_use = 0;
    std::unique_ptr<gloo::transport::UnboundBuffer> ub;
  };
  std::array<UbEntry, kUbCacheSize> ub_cache;
  uint64_t use_clock = 0;

  // The shared-memory path, when every rank is on this host (else null).
  std::unique_ptr<shm::Segment> shm;
  bool shm_enabled = true;  // HVD_GLOO_SHM, read at init (ReadSettings)

  bool broken = false;
  std::string last_error;

  // Every rank's host name and the endpoints of its Gloo connections, as
  // Gloo's errors quote them; see the note on errors at the top. Empty where
  // unknown.
  struct Endpoint {
    std::string quoted;  // as Gloo's messages write it
    std::string shown;   // as messages here write it ("127.0.0.1:40143")
  };
  struct Peer {
    std::string host;
    std::vector<Endpoint> endpoints;
  };
  std::vector<Peer> peers;
  // The ranks the wait in progress is for, set by the algorithms before each
  // wait (receiving from / sending to); -1: not known here.
  int waiting_for = -1;
  int sending_to = -1;

  // "rank 2 (host h, 127.0.0.1:40143)": addr is the endpoint to show, by
  // default the first one known.
  std::string Who(int r, std::string addr = std::string()) const {
    std::string s = "rank " + std::to_string(r);
    if (r < 0 || r >= static_cast<int>(peers.size())) return s;
    const Peer& p = peers[static_cast<size_t>(r)];
    if (addr.empty() && !p.endpoints.empty()) addr = p.endpoints.front().shown;
    if (p.host.empty() && addr.empty()) return s;
    s += " (";
    if (!p.host.empty()) s += "host " + p.host + (addr.empty() ? "" : ", ");
    return s + addr + ")";
  }

  void Log(int level, const std::string& msg) const {
    if (env.log != nullptr) env.log(env.logger, level, msg.c_str());
  }

  gloo::transport::UnboundBuffer* UserBuffer(void* ptr, size_t bytes) {
    ++use_clock;
    UbEntry* victim = &ub_cache[0];
    for (auto& e : ub_cache) {
      if (e.ub && e.ptr == ptr && e.bytes >= bytes) {
        e.last_use = use_clock;
        return e.ub.get();
      }
    }
    for (auto& e : ub_cache) {
      if (e.ub && e.ptr == ptr) {  // same pointer, grown: replace in place
        victim = &e;
        break;
      }
      if (!e.ub) {
        victim = &e;
        break;
      }
      if (e.last_use < victim->last_use) victim = &e;
    }
    victim->ub.reset();
    victim->ub = ctx->createUnboundBuffer(ptr, bytes);
    victim->ptr = ptr;
    victim->bytes = bytes;
    victim->last_use = use_clock;
    return victim->ub.get();
  }

  // Drops every unbound buffer (none may have an operation pending).
  void DropBuffers() {
    for (auto& e : ub_cache) {
      e.ub.reset();
      e.ptr = nullptr;
      e.bytes = 0;
    }
    ring_ub.reset();
    for (auto& b : direct_in) b.reset();
  }

  // After a failure: close every connection first (so no peer can still write
  // into a buffer a receive was posted on), then drop the buffers.
  void Break(int status) {
    if (broken) return;
    broken = true;
    if (shm) shm->Abort(status, last_error);  // peers waiting in shm fail at once
    try {
      if (ctx) ctx->closeConnections();
    } catch (...) {
    }
    DropBuffers();
  }
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
    if (!active_) return;  // the caller blocks SIGPIPE itself: leave its state alone
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
  sigset_t pipe_;
  sigset_t old_;
  bool active_ = false;
};

// ---------------------------------------------------------------------------
// Error wall.

bool LooksLikeTimeout(const char* what) {
  std::string s(what != nullptr ? what : "");
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s.find("timed out") != std::string::npos || s.find("timeout") != std::string::npos;
}

// Gloo's text without its source location ("[./gloo/transport/tcp/pair.cc:589] ").
std::string WithoutLocation(const std::string& s) {
  if (s.empty() || s[0] != '[') return s;
  const size_t end = s.find("] ");
  if (end == std::string::npos || s.find(':') > end) return s;
  return s.substr(end + 2);
}

// The peer whose endpoint the text quotes, or -1; *at and *ep: where, which.
int QuotedPeer(const Comm& c, const std::string& text, size_t* at, const Comm::Endpoint** ep) {
  for (size_t r = 0; r < c.peers.size(); ++r) {
    if (static_cast<int>(r) == c.rank) continue;
    for (const Comm::Endpoint& e : c.peers[r].endpoints) {
      const std::string& a = e.quoted;
      if (a.empty()) continue;
      for (size_t pos = text.find(a); pos != std::string::npos; pos = text.find(a, pos + 1)) {
        const size_t after = pos + a.size();
        if (after < text.size() && std::isdigit(static_cast<unsigned char>(text[after]))) continue;
        *at = pos;
        *ep = &e;
        return static_cast<int>(r);
      }
    }
  }
  return -1;
}

// "Read error : Connection reset by peer" -> "read error: connection reset by
// peer": spaces tidied, each clause starting in lower case.
std::string Clause(const std::string& in) {
  std::string s;
  for (char ch : in) {
    if (ch == ' ' && (s.empty() || s.back() == ' ')) continue;
    if (ch == ':' && !s.empty() && s.back() == ' ') s.pop_back();
    s += ch;
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == ':')) s.pop_back();
  for (size_t i = 0; i < s.size(); ++i) {
    const bool starts = i == 0 || (i >= 2 && s[i - 2] == ':' && s[i - 1] == ' ');
    // "Connection" -> "connection", but not an acronym ("EPIPE").
    if (starts && std::isupper(static_cast<unsigned char>(s[i])) && i + 1 < s.size() &&
        std::islower(static_cast<unsigned char>(s[i + 1]))) {
      s[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[i])));
    }
  }
  return s;
}

// "; rank r had failed: <what rank r noted when its communicator broke>"
// ("broken/<r>"), or "" if it noted nothing (it died or hangs, or the store
// is gone). A rank notes before it closes its connections, so the note is
// there once the closing is seen here: the wait is short.
std::string BrokenNote(const Comm& c, int r) {
  if (r < 0 || c.env.kv_get == nullptr || c.env.kv_free == nullptr) return "";
  constexpr double kNoteWaitS = 0.5;
  const std::string key = "broken/" + std::to_string(r);
  void* value = nullptr;
  size_t len = 0;
  if (c.env.kv_get(c.env.kv, key.c_str(), &value, &len, kNoteWaitS) != HVD_OK) return "";
  std::string note(static_cast<const char*>(value), len);
  if (value != nullptr) c.env.kv_free(value);
  return "; rank " + std::to_string(r) + " had failed: " + note;
}

// The message for a Gloo exception: the peer by rank and host where the text
// quotes its address, or the rank a timed-out wait was for.
std::string DescribeFailure(const Comm& c, const char* op, const std::string& what) {
  const std::string text = WithoutLocation(what);
  const std::string head = std::string("gloo ") + op + ": ";
  size_t at = 0;
  const Comm::Endpoint* ep = nullptr;
  const int peer = QuotedPeer(c, text, &at, &ep);
  if (peer >= 0) {
    std::string msg = head + c.Who(peer, ep->shown) + ": " +
                      Clause(text.substr(0, at) + text.substr(at + ep->quoted.size()));
    // A peer that failed first closes its connections; what it noted then
    // names the rank behind it all.
    return msg + BrokenNote(c, peer);
  }
  if (LooksLikeTimeout(what.c_str())) {
    // Gloo says which side of the transfer it waited for.
    const bool send = text.find("for send") != std::string::npos;
    const int r = send ? c.sending_to : c.waiting_for;
    char secs[32];
    std::snprintf(secs, sizeof(secs), "%g", static_cast<double>(c.timeout.count()) / 1000.0);
    // Gloo does not wake every wait when a connection fails (a transfer
    // already under way waits for the timeout), so the rank waited for may
    // have failed because of another one: its note says.
    if (c.peer_limit && r >= 0) {
      return head + c.Who(r) + " has not answered for " + secs +
             " s (stopped or cut off?; peer timeout, HVD_PEER_TIMEOUT)" + BrokenNote(c, r);
    }
    return head + "timed out after " + secs + " s waiting " + (send ? "to send to " : "for ") +
           (r >= 0 ? c.Who(r) : std::string("another rank")) +
           " (transport timeout, HVD_TRANSPORT_TIMEOUT)" + BrokenNote(c, r);
  }
  return head + text;
}

template <typename F>
int Guarded(void* handle, const char* op, F&& body) noexcept {
  Comm* c = static_cast<Comm*>(handle);
  if (c == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  if (c->broken) {
    // Keep the first failure's text: it says what went wrong.
    if (c->last_error.find("(communicator unusable") == std::string::npos) {
      c->last_error += " (communicator unusable after this failure)";
    }
    return HVD_ERR_TRANSPORT;
  }
  SigpipeBlock no_sigpipe;
  int status = HVD_OK;
  std::string raw;  // Gloo's own text, logged at debug level
  c->waiting_for = c->sending_to = -1;
  try {
    status = body(*c);
    return status;
  } catch (const StoreError& e) {
    c->last_error = std::string("gloo ") + op + ": " + e.what();
    status = HVD_ERR_RENDEZVOUS;
  } catch (const shm::Error& e) {
    c->last_error = std::string("gloo ") + e.what();
    if (e.code == HVD_ERR_TIMEOUT && c->peer_limit && !e.missing.empty()) {
      char secs[32];
      std::snprintf(secs, sizeof(secs), "%g", static_cast<double>(c->timeout.count()) / 1000.0);
      std::string who;
      for (int r : e.missing) who += (who.empty() ? "" : ", ") + c->Who(r);
      c->last_error = std::string("gloo ") + op + ": " + who +
                      (e.missing.size() == 1 ? " has" : " have") + " not answered for " + secs +
                      " s (stopped or cut off?; peer timeout, HVD_PEER_TIMEOUT)";
    }
    status = e.code;
  } catch (const gloo::IoException& e) {
    raw = e.what();
    c->last_error = DescribeFailure(*c, op, raw);
    status = LooksLikeTimeout(e.what()) ? HVD_ERR_TIMEOUT : HVD_ERR_TRANSPORT;
  } catch (const gloo::EnforceNotMet& e) {
    c->last_error = std::string("gloo ") + op + ": " + e.what();
    status = HVD_ERR_TRANSPORT;
  } catch (const gloo::Exception& e) {
    raw = e.what();
    c->last_error = DescribeFailure(*c, op, raw);
    status = LooksLikeTimeout(e.what()) ? HVD_ERR_TIMEOUT : HVD_ERR_TRANSPORT;
  } catch (const std::bad_alloc&) {
    c->last_error = std::string("gloo ") + op + ": out of memory";
    status = HVD_ERR_NO_MEMORY;
  } catch (const std::exception& e) {
    c->last_error = std::string("gloo ") + op + ": " + e.what();
    status = HVD_ERR_TRANSPORT;
  } catch (...) {
    c->last_error = std::string("gloo ") + op + ": unknown exception";
    status = HVD_ERR_TRANSPORT;
  }
  try {
    if (!raw.empty()) c->Log(HVD_LOG_DEBUG, std::string("gloo ") + op + ": Gloo said: " + raw);
    c->Log(HVD_LOG_ERROR, c->last_error);
    // Over TCP, peers see only that this rank closed its connections: the
    // note tells them why (see BrokenNote). Before Break, which closes them.
    if (!c->shm && c->size > 1 && c->env.kv_set != nullptr) {
      const std::string key = "broken/" + std::to_string(c->rank);
      (void)c->env.kv_set(c->env.kv, key.c_str(), c->last_error.data(), c->last_error.size());
    }
  } catch (...) {
  }
  c->Break(status);
  return status;
}

// ---------------------------------------------------------------------------
// Allreduce.

// The ring's division of n elements: P parts (the first n % P one element
// longer), each cut into K segments of at most seg elements.
struct RingPlan {
  size_t n, P, K, seg;
  size_t PartStart(size_t p) const { return p * (n / P) + std::min(p, n % P); }
  size_t PartLen(size_t p) const { return n / P + (p < n % P ? 1 : 0); }
  // Element range [*off, *off + return) of segment k of part p (may be empty).
  size_t Seg(size_t p, size_t k, size_t* off) const {
    const size_t plen = PartLen(p);
    const size_t begin = std::min(plen, k * seg);
    *off = PartStart(p) + begin;
    return std::min(seg, plen - begin);
  }
};

// Drives one ring phase of T transfers. Transfer u receives from the left and
// sends to the right. Up to kRingDepth + 1 receives are in flight (posted early
// so the left neighbour can write as soon as it is ready), and send u goes out
// as soon as its data exists: transfer u - K must have completed, because the
// segment sent at u is the one received (and, in the first phase, reduced)
// K transfers earlier.
template <typename PostRecv, typename PostSend, typename FinishRecv, typename FinishSend>
void RingPhase(size_t T, size_t K, PostRecv post_recv, PostSend post_send, FinishRecv finish_recv,
               FinishSend finish_send) {
  size_t next_recv = 0;
  size_t next_send = 0;
  for (size_t t = 0; t < T; ++t) {
    for (; next_recv < T && next_recv <= t + kRingDepth; ++next_recv) post_recv(next_recv);
    for (; next_send < T && next_send < t + K && next_send <= t + kRingDepth; ++next_send) {
      post_send(next_send);
    }
    finish_recv(t);
    finish_send(t);
  }
}

void RingPass(Comm& c, uint8_t* base, gloo::transport::UnboundBuffer* ub, size_t ub_off,
              size_t n, size_t es, hvd_dtype_t dtype, hvd_reduce_op_t op) {
  const size_t P = static_cast<size_t>(c.size);
  const size_t r = static_cast<size_t>(c.rank);
  const int right = static_cast<int>((r + 1) % P);
  const int left = static_cast<int>((r + P - 1) % P);
  const size_t seg_max = kSegmentBytes / es;
  const size_t max_part = (n + P - 1) / P;
  const size_t K = std::max<size_t>(1, (max_part + seg_max - 1) / seg_max);
  const RingPlan plan{n, P, K, (max_part + K - 1) / K};
  const size_t T = (P - 1) * K;  // transfers per phase
  gloo::transport::UnboundBuffer* scratch = c.ring_ub.get();
  uint8_t* scratch_ptr = c.ring_scratch.get();
  const auto to = c.timeout;
  auto slot_off = [](size_t t) { return (t % (kRingDepth + 1)) * kSegmentBytes; };

  // Phase 1, reduce-scatter. Transfer t = s*K + k sends segment k of part
  // (r - s) and receives segment k of part (r - s - 1) into a scratch slot,
  // then reduces it into place. After it, this rank holds part r + 1 reduced.
  auto rs_send = [&](size_t t, size_t* off) {
    return plan.Seg((r + P - t / K) % P, t % K, off);
  };
  auto rs_recv = [&](size_t t, size_t* off) {
    return plan.Seg((r + 2 * P - t / K - 1) % P, t % K, off);
  };
  RingPhase(
      T, K,
      [&](size_t t) {
        size_t off;
        const size_t len = rs_recv(t, &off);
        if (len) scratch->recv(left, kSlotRing, slot_off(t), len * es);
      },
      [&](size_t t) {
        size_t off;
        const size_t len = rs_send(t, &off);
        if (len) ub->send(right, kSlotRing, ub_off + off * es, len * es);
      },
      [&](size_t t) {
        size_t off;
        const size_t len = rs_recv(t, &off);
        if (!len) return;
        c.waiting_for = left;
        scratch->waitRecv(to);
        c.reduce(base + off * es, scratch_ptr + slot_off(t), len, dtype, op);
      },
      [&](size_t t) {
        size_t off;
        c.sending_to = right;
        if (rs_send(t, &off)) ub->waitSend(to);
      });

  // Phase 2, allgather. Transfer t = s*K + k sends segment k of part
  // (r + 1 - s) and receives segment k of part (r - s) straight into place.
  auto ag_send = [&](size_t t, size_t* off) {
    return plan.Seg((r + 1 + P - t / K) % P, t % K, off);
  };
  auto ag_recv = [&](size_t t, size_t* off) {
    return plan.Seg((r + P - t / K) % P, t % K, off);
  };
  RingPhase(
      T, K,
      [&](size_t t) {
        size_t off;
        const size_t len = ag_recv(t, &off);
        if (len) ub->recv(left, kSlotRing, ub_off + off * es, len * es);
      },
      [&](size_t t) {
        size_t off;
        const size_t len = ag_send(t, &off);
        if (len) ub->send(right, kSlotRing, ub_off + off * es, len * es);
      },
      [&](size_t t) {
        size_t off;
        c.waiting_for = left;
        if (ag_recv(t, &off)) ub->waitRecv(to);
      },
      [&](size_t t) {
        size_t off;
        c.sending_to = right;
        if (ag_send(t, &off)) ub->waitSend(to);
      });
}

// Small buffers: everyone sends everything to everyone; every rank then
// reduces the P contributions in rank order, so all ranks get the same bits.
void DirectAllreduce(Comm& c, uint8_t* buf, gloo::transport::UnboundBuffer* ub, size_t n,
                     size_t es, hvd_dtype_t dtype, hvd_reduce_op_t op) {
  const int P = c.size;
  const size_t bytes = n * es;
  uint8_t* slots = c.direct_scratch.get();
  const size_t stride = c.direct_max;
  for (int j = 0; j < P; ++j) {
    if (j != c.rank) c.direct_in[static_cast<size_t>(j)]->recv(j, kSlotDirect, 0, bytes);
  }
  for (int i = 1; i < P; ++i) ub->send((c.rank + i) % P, kSlotDirect, 0, bytes);
  // One wait per peer, in rank order: a timeout names the first peer whose
  // contribution is missing.
  for (int j = 0; j < P; ++j) {
    if (j == c.rank) continue;
    c.waiting_for = j;
    c.direct_in[static_cast<size_t>(j)]->waitRecv(c.timeout);
  }
  c.waiting_for = -1;
  for (int i = 1; i < P; ++i) ub->waitSend(c.timeout);
  std::memcpy(slots + static_cast<size_t>(c.rank) * stride, buf, bytes);
  std::memcpy(buf, slots, bytes);
  for (int j = 1; j < P; ++j) {
    c.reduce(buf, slots + static_cast<size_t>(j) * stride, n, dtype, op);
  }
}

int DoAllreduce(Comm& c, void* buf, size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op) {
  const size_t es = DtypeSize(dtype);
  if (es == 0) {
    c.last_error = "gloo allreduce: invalid dtype " + std::to_string(static_cast<int>(dtype));
    return HVD_ERR_INVALID_ARGUMENT;
  }
  if (op != HVD_SUM && op != HVD_MIN && op != HVD_MAX && op != HVD_PRODUCT) {
    c.last_error = std::string("gloo allreduce: unsupported op ") + ReduceOpName(op) +
                   " (the core turns AVERAGE into SUM)";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  if (count == 0 || c.size == 1) return HVD_OK;
  if (buf == nullptr) {
    c.last_error = "gloo allreduce: NULL buffer";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  if (count > SIZE_MAX / es) {
    c.last_error = "gloo allreduce: byte count overflows size_t";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  const size_t bytes = count * es;
  if (c.shm) {
    shm::Allreduce(*c.shm, c.reduce, static_cast<uint8_t*>(buf), count, es, dtype, op);
    return HVD_OK;
  }
  gloo::transport::UnboundBuffer* ub = c.UserBuffer(buf, bytes);
  uint8_t* base = static_cast<uint8_t*>(buf);
  if (bytes <= c.direct_max) {
    DirectAllreduce(c, base, ub, count, es, dtype, op);
    return HVD_OK;
  }
  for (size_t done = 0; done < count; done += kMaxPassElements) {
    const size_t n = std::min(kMaxPassElements, count - done);
    RingPass(c, base + done * es, ub, done * es, n, es, dtype, op);
  }
  return HVD_OK;
}

// ABI v2: the spans reduced where they lie over shared memory (see
// shm::AllreduceSpansEntry).
int DoAllreduceSpans(Comm& c, const hvd_transport_span_t* spans, size_t nspans, hvd_dtype_t dtype,
                     hvd_reduce_op_t op) {
  return shm::AllreduceSpansEntry(
      c.shm.get(), c.reduce, c.size, "gloo", spans, nspans, dtype, op,
      [&](void* buf, size_t count) { return DoAllreduce(c, buf, count, dtype, op); },
      &c.last_error);
}

// In place over the caller's blocks (ABI v2): over shared memory each rank
// reduces only its own block; over TCP the whole buffer is reduced, which the
// ABI allows (everything outside this rank's block is scratch).
int DoReducescatter(Comm& c, void* buf, const size_t* counts, hvd_dtype_t dtype,
                    hvd_reduce_op_t op) {
  const size_t es = DtypeSize(dtype);
  if (es == 0 || counts == nullptr) {
    c.last_error = es == 0 ? "gloo reducescatter: invalid dtype " +
                                 std::to_string(static_cast<int>(dtype))
                           : std::string("gloo reducescatter: NULL counts");
    return HVD_ERR_INVALID_ARGUMENT;
  }
  std::vector<size_t> start(static_cast<size_t>(c.size) + 1, 0);
  for (int p = 0; p < c.size; ++p) {
    if (counts[p] > (SIZE_MAX / es) - start[p]) {
      c.last_error = "gloo reducescatter: byte count overflows size_t";
      return HVD_ERR_INVALID_ARGUMENT;
    }
    start[p + 1] = start[p] + counts[p];
  }
  if (!c.shm || start.back() == 0 || c.size == 1) {
    return DoAllreduce(c, buf, start.back(), dtype, op);
  }
  if (buf == nullptr) {
    c.last_error = "gloo reducescatter: NULL buffer";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  if (op != HVD_SUM && op != HVD_MIN && op != HVD_MAX && op != HVD_PRODUCT) {
    return DoAllreduce(c, buf, start.back(), dtype, op);  // reports the op
  }
  shm::Reducescatter(*c.shm, c.reduce, static_cast<uint8_t*>(buf), start.data(), es, dtype, op);
  return HVD_OK;
}

// ---------------------------------------------------------------------------
// Entry points.

void WriteErr(char* err, size_t err_len, const std::string& msg) {
  if (err == nullptr || err_len == 0) return;
  const size_t n = std::min(err_len - 1, msg.size());
  std::memcpy(err, msg.data(), n);
  err[n] = '\0';
}

// ---------------------------------------------------------------------------
// Shared-memory setup at init: shm::Setup (transports/common/shm.h) over the
// store. Keys: "shm/host/<rank>" (host identities), "shm/name" (rank 0's
// segment name, or "!" and its failure), "shm/ok/<rank>" (ok or a failure).

void KvSetString(const hvd_transport_env_v1_t& env, const std::string& key,
                 const std::string& value) {
  const int st = env.kv_set(env.kv, key.c_str(), value.data(), value.size());
  if (st != HVD_OK) {
    throw StoreError(st, "rendezvous store: cannot set '" + key + "' (status " +
                             std::to_string(st) + ")");
  }
}

std::string KvGetString(const hvd_transport_env_v1_t& env, const std::string& key,
                        Clock::time_point deadline) {
  void* value = nullptr;
  size_t len = 0;
  const int st = env.kv_get(env.kv, key.c_str(), &value, &len, SecondsLeft(deadline));
  if (st != HVD_OK) {
    throw StoreError(st, "rendezvous store: key '" + key + "' not available (status " +
                             std::to_string(st) + ")");
  }
  std::string out(static_cast<char*>(value), len);
  if (value != nullptr) env.kv_free(value);
  return out;
}

// The allgather shm::Setup needs, over the core's store: every rank sets
// "shm/<round>/<rank>" and reads everyone's; the "name" round is rank 0's
// "shm/name" alone.
class KvExchange : public shm::Exchange {
 public:
  KvExchange(const Comm& c, Clock::time_point deadline) : c_(c), deadline_(deadline) {}

  int Allgather(const char* round, const std::string& mine, std::vector<std::string>* all,
                std::string* err) override {
    try {
      const std::string r = round;
      all->assign(static_cast<size_t>(c_.size), std::string());
      if (r == "name") {
        if (c_.rank == 0) KvSetString(c_.env, "shm/name", mine);
        (*all)[0] = c_.rank == 0 ? mine : KvGetString(c_.env, "shm/name", deadline_);
        return HVD_OK;
      }
      KvSetString(c_.env, "shm/" + r + "/" + std::to_string(c_.rank), mine);
      for (int j = 0; j < c_.size; ++j) {
        (*all)[j] = KvGetString(c_.env, "shm/" + r + "/" + std::to_string(j), deadline_);
      }
      return HVD_OK;
    } catch (const StoreError& e) {
      *err = e.what();
      return e.code;
    }
  }

 private:
  const Comm& c_;
  Clock::time_point deadline_;
};

// Agrees with every peer on whether the shm path is used, and maps the
// segment if so. A store failure throws (init fails); any other failure
// falls back to TCP on every rank, logged.
void SetupShm(Comm& c, Clock::time_point deadline) {
  shm::Options o;
  o.transport = "gloo";
  o.enabled = c.shm_enabled;
  o.switch_name = "HVD_GLOO_SHM";
  o.name_prefix = "/hvd-gloo-";
  o.fallback = "TCP";
  o.rank = c.rank;
  o.size = c.size;
  o.timeout_s = c.env.timeout_s;
  o.slot_bytes = kShmSlotBytes;
  o.small_fanout_bytes = kShmSmallFanoutBytes;
  o.spin_ns = int64_t{HVD_GLOO_SHM_SPIN_US} * 1000;
  o.yield_ns = int64_t{HVD_GLOO_SHM_YIELD_US} * 1000;
  o.log = [&c](int level, const std::string& msg) { c.Log(level, msg); };
  KvExchange ex(c, deadline);
  std::string err;
  const int st = shm::Setup(ex, o, &c.shm, &err);
  if (st != HVD_OK) throw StoreError(st, err);
}

// The plugin's own settings, read once at init, here and nowhere else. The
// core resolves every other setting and hands it over in the env table, but
// tables of ABI versions 1 and 2 carry no field for these, so the plugin
// reads them from the process environment itself:
//   HVD_GLOO_SHM  the shared-memory path (0, false, off, no: off; default on).
void ReadSettings(Comm* c) { c->shm_enabled = shm::SwitchOn(std::getenv("HVD_GLOO_SHM")); }

// "127.0.0.1:40143" or "[fe80::1]:40143".
std::string ShownAddress(const sockaddr_storage& ss) {
  char ip[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
    return std::string(ip) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (ss.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
    return "[" + std::string(ip) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "";
}

// How Gloo quotes an address in its messages (its own str(), which may not
// read the port the way ShownAddress does), and how we show it.
Comm::Endpoint EndpointOf(const gloo::transport::tcp::Address& a) {
  return Comm::Endpoint{a.str(), ShownAddress(a.getSockaddr())};
}

// Where each peer's end of its connection with this rank may be, as Gloo's
// errors here quote it (see the note on errors at the top). A pair's error
// quotes the peer's address as the pair knows it: the address the peer
// published for the pair in Gloo's rendezvous, or, in Gloo versions that read
// it back from the connected socket, the peer's end of that socket, which is
// what the peer's pair reports as its own address once connected. The first
// is in the rendezvous data this rank read (every peer's pair addresses, one
// fixed-size record each); the second each rank publishes ("peer/<rank>").
void NotePeerEndpoints(Comm& c, const KvStore& store, Clock::time_point deadline) {
  using TcpAddress = gloo::transport::tcp::Address;
  const size_t record = TcpAddress().bytes().size();
  for (int j = 0; j < c.size; ++j) {
    if (j == c.rank) continue;
    const std::vector<char> blob = store.Seen(std::to_string(j));
    if (record == 0 || blob.empty() || blob.size() % record != 0) continue;
    for (size_t off = 0; off + record <= blob.size(); off += record) {
      try {
        const TcpAddress a(std::vector<char>(blob.begin() + static_cast<std::ptrdiff_t>(off),
                                             blob.begin() + static_cast<std::ptrdiff_t>(off + record)));
        c.peers[static_cast<size_t>(j)].endpoints.push_back(EndpointOf(a));
      } catch (const std::exception&) {
        // not an address record: this Gloo lays its rendezvous data out otherwise
      }
    }
  }
  // Each of this rank's pairs, connected: its own end, quoted and shown.
  std::string mine;
  for (int i = 0; i < c.size; ++i) {
    if (i == c.rank) continue;
    const auto& a = static_cast<const TcpAddress&>(c.ctx->getPair(i)->address());
    const Comm::Endpoint e = EndpointOf(a);
    mine += e.quoted + "\t" + e.shown + "\n";
  }
  KvSetString(c.env, "peer/" + std::to_string(c.rank), mine);
  for (int j = 0; j < c.size; ++j) {
    if (j == c.rank) continue;
    const std::string v = KvGetString(c.env, "peer/" + std::to_string(j), deadline);
    size_t from = 0;
    for (size_t nl = v.find('\n'); nl != std::string::npos; nl = v.find('\n', from)) {
      const std::string line = v.substr(from, nl - from);
      from = nl + 1;
      const size_t tab = line.find('\t');
      if (tab == std::string::npos) continue;
      c.peers[static_cast<size_t>(j)].endpoints.push_back(
          Comm::Endpoint{line.substr(0, tab), line.substr(tab + 1)});
    }
  }
  if (c.env.log != nullptr) {
    std::string known;
    for (int j = 0; j < c.size; ++j) {
      if (j == c.rank) continue;
      known += (known.empty() ? "" : ", ") + std::to_string(j) + ": " +
               std::to_string(c.peers[static_cast<size_t>(j)].endpoints.size());
    }
    c.Log(HVD_LOG_DEBUG, "gloo: rank " + std::to_string(c.rank) +
                             ": endpoints known for naming peers in errors (rank: count): " + known);
  }
}

int InitImpl(const hvd_transport_env_v1_t* env_in, std::unique_ptr<Comm>* out,
             std::string* msg) {
  if (env_in == nullptr || env_in->struct_size < offsetof(hvd_transport_env_v1_t, mpi_comm)) {
    *msg = "gloo init: missing or too small environment table";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  auto c = std::make_unique<Comm>();
  std::memcpy(&c->env, env_in, std::min(env_in->struct_size, sizeof(c->env)));
  ReadSettings(c.get());
  const hvd_transport_env_v1_t& env = c->env;
  if (env.size < 1 || env.rank < 0 || env.rank >= env.size) {
    *msg = "gloo init: bad rank " + std::to_string(env.rank) + " of size " +
           std::to_string(env.size);
    return HVD_ERR_INVALID_ARGUMENT;
  }
  if (env.size > 1 && (env.kv_set == nullptr || env.kv_get == nullptr || env.kv_free == nullptr)) {
    *msg = "gloo init: no rendezvous store callbacks";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  c->rank = env.rank;
  c->size = env.size;
  c->timeout = ToMillis(env.timeout_s);
  c->reduce = env.reduce != nullptr ? env.reduce : &hvd_reduce_kernel;

  // Persistent scratch, touched now so no collective pays for first use.
  c->ring_scratch = AllocTouched((kRingDepth + 1) * kSegmentBytes);
  if (c->size > 1) {
    // Rounded down to 64 bytes so every slot stays aligned; at most ~128 KiB.
    c->direct_max = kDirectFanoutBytes / static_cast<size_t>(c->size - 1) / 64 * 64;
    if (c->direct_max > 0) {
      c->direct_scratch = AllocTouched(static_cast<size_t>(c->size) * c->direct_max);
    }
  }

  // TCP device address.
  gloo::transport::tcp::attr attr;
  std::string where;
  if (env.network_interface != nullptr && env.network_interface[0] != '\0') {
    attr.iface = env.network_interface;
    where = "interface " + attr.iface;
  } else if (env.local_address != nullptr && env.local_address[0] != '\0') {
    attr.hostname = env.local_address;
    where = "address " + attr.hostname;
  } else if (env.local_size == env.size) {
    attr.hostname = "127.0.0.1";
    where = "address 127.0.0.1 (single host)";
  } else {
    char host[256] = {0};
    if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') {
      *msg = "gloo init: gethostname failed and no interface or address was given";
      return HVD_ERR_TRANSPORT;
    }
    attr.hostname = host;
    where = "host name " + attr.hostname;
  }

  const double start_s = env.start_timeout_s > 0 ? env.start_timeout_s : 30.0;
  if (c->size == 1) {
    *out = std::move(c);
    return HVD_OK;
  }

  try {
    c->device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    *msg = "gloo init: cannot create a TCP device on " + where + ": " + e.what();
    return HVD_ERR_TRANSPORT;
  }

  // Join: publish ours, wait for everyone else's within the start timeout.
  // The value is the rank's host name, for error messages.
  c->peers.assign(static_cast<size_t>(c->size), Comm::Peer());
  {
    char host[256] = {0};
    if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
    c->peers[static_cast<size_t>(c->rank)].host = host;
    const std::string mine = "joined/" + std::to_string(c->rank);
    int st = env.kv_set(env.kv, mine.c_str(), host, std::strlen(host));
    if (st != HVD_OK) {
      *msg = "gloo init: rendezvous store refused key '" + mine + "' (status " +
             std::to_string(st) + ")";
      return HVD_ERR_RENDEZVOUS;
    }
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(start_s));
    std::vector<int> missing;
    int other_status = HVD_OK;
    for (int j = 0; j < c->size; ++j) {
      if (j == c->rank) continue;
      const std::string key = "joined/" + std::to_string(j);
      void* value = nullptr;
      size_t len = 0;
      st = env.kv_get(env.kv, key.c_str(), &value, &len, SecondsLeft(deadline));
      if (st == HVD_OK) {
        if (value != nullptr) {
          c->peers[static_cast<size_t>(j)].host.assign(static_cast<const char*>(value), len);
          env.kv_free(value);
        }
      } else {
        missing.push_back(j);
        if (st != HVD_ERR_TIMEOUT) other_status = st;
      }
    }
    if (!missing.empty()) {
      char secs[32];
      std::snprintf(secs, sizeof(secs), "%g", start_s);
      *msg = "gloo init: rank " + std::to_string(c->rank) + ": ranks " +
             shm::JoinRanks(missing) + " did not join within the start timeout (" + secs + " s)";
      if (other_status != HVD_OK) {
        *msg += "; the rendezvous store also failed (status " + std::to_string(other_status) + ")";
      }
      return HVD_ERR_RENDEZVOUS;
    }
  }

  // Full mesh. Everyone has joined, so this normally takes milliseconds. Gloo
  // waits up to 5x the context timeout for a pair to connect, hence the /5.
  const auto connect_deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                   std::chrono::duration<double>(start_s));
  KvStore store(env, connect_deadline);
  c->ctx = std::make_shared<gloo::rendezvous::Context>(c->rank, c->size);
  c->ctx->setTimeout(std::max(Millis(200), ToMillis(start_s / 5.0)));
  try {
    c->ctx->connectFullMesh(store, c->device);
  } catch (const StoreError& e) {
    *msg = std::string("gloo init: connecting the full mesh: ") + e.what();
    return HVD_ERR_RENDEZVOUS;
  } catch (const std::exception& e) {
    *msg = std::string("gloo init: connecting the full mesh over ") + where + ": " + e.what();
    return LooksLikeTimeout(e.what()) ? HVD_ERR_TIMEOUT : HVD_ERR_TRANSPORT;
  }
  c->ctx->setTimeout(c->timeout);
  c->ring_ub = c->ctx->createUnboundBuffer(c->ring_scratch.get(), (kRingDepth + 1) * kSegmentBytes);
  if (c->direct_scratch) {
    c->direct_in.resize(static_cast<size_t>(c->size));
    for (int j = 0; j < c->size; ++j) {
      if (j == c->rank) continue;
      c->direct_in[static_cast<size_t>(j)] = c->ctx->createUnboundBuffer(
          c->direct_scratch.get() + static_cast<size_t>(j) * c->direct_max, c->direct_max);
    }
  }
  NotePeerEndpoints(*c, store, Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                   std::chrono::duration<double>(start_s)));
  SetupShm(*c, Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(start_s)));
  c->Log(HVD_LOG_DEBUG, "gloo: rank " + std::to_string(c->rank) + " of " +
                            std::to_string(c->size) + " connected over " + where + " (" +
                            c->device->str() + ")");
  *out = std::move(c);
  return HVD_OK;
}

int Init(const hvd_transport_env_v1_t* env, void** comm, char* err, size_t err_len) noexcept {
  if (comm == nullptr) {
    WriteErr(err, err_len, "gloo init: comm is NULL");
    return HVD_ERR_INVALID_ARGUMENT;
  }
  *comm = nullptr;
  // Also makes Gloo's event-loop thread, started below, inherit the block.
  SigpipeBlock no_sigpipe;
  std::string msg;
  int status = HVD_ERR_INTERNAL;
  try {
    std::unique_ptr<Comm> c;
    status = InitImpl(env, &c, &msg);
    if (status == HVD_OK) {
      *comm = c.release();
      return HVD_OK;
    }
  } catch (const StoreError& e) {
    msg = std::string("gloo init: ") + e.what();
    status = HVD_ERR_RENDEZVOUS;
  } catch (const std::bad_alloc&) {
    msg = "gloo init: out of memory";
    status = HVD_ERR_NO_MEMORY;
  } catch (const std::exception& e) {
    msg = std::string("gloo init: ") + e.what();
    status = LooksLikeTimeout(e.what()) ? HVD_ERR_TIMEOUT : HVD_ERR_TRANSPORT;
  } catch (...) {
    msg = "gloo init: unknown exception";
    status = HVD_ERR_TRANSPORT;
  }
  try {
    if (env != nullptr && env->log != nullptr) env->log(env->logger, HVD_LOG_ERROR, msg.c_str());
  } catch (...) {
  }
  WriteErr(err, err_len, msg);
  return status;
}

void Finalize(void* comm) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return;
  SigpipeBlock no_sigpipe;
  try {
    // No operation is pending (the caller serialises calls), so buffers go
    // first, then the pairs (a soft close: peers see end-of-stream), then the
    // device and its event-loop thread.
    c->DropBuffers();
    if (c->shm) c->shm->Depart();
    c->shm.reset();  // munmap; the segment was unlinked at init
    c->ctx.reset();
    c->device.reset();
  } catch (...) {
  }
  delete c;
}

int Allreduce(void* comm, void* buf, size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op) noexcept {
  return Guarded(comm, "allreduce",
                 [&](Comm& c) { return DoAllreduce(c, buf, count, dtype, op); });
}

int Reducescatter(void* comm, void* buf, const size_t* counts, hvd_dtype_t dtype,
                  hvd_reduce_op_t op) noexcept {
  return Guarded(comm, "reducescatter",
                 [&](Comm& c) { return DoReducescatter(c, buf, counts, dtype, op); });
}

int AllreduceSpans(void* comm, const hvd_transport_span_t* spans, size_t nspans,
                   hvd_dtype_t dtype, hvd_reduce_op_t op) noexcept {
  return Guarded(comm, "allreduce",
                 [&](Comm& c) { return DoAllreduceSpans(c, spans, nspans, dtype, op); });
}

int Allgatherv(void* comm, const void* send, void* recv, const size_t* recv_bytes) noexcept {
  return Guarded(comm, "allgatherv", [&](Comm& c) -> int {
    if (recv_bytes == nullptr) {
      c.last_error = "gloo allgatherv: recv_bytes is NULL";
      return HVD_ERR_INVALID_ARGUMENT;
    }
    size_t total = 0;
    for (int r = 0; r < c.size; ++r) total += recv_bytes[r];
    if (total == 0) return HVD_OK;
    const size_t mine = recv_bytes[c.rank];
    if (recv == nullptr || (mine > 0 && send == nullptr)) {
      c.last_error = "gloo allgatherv: NULL buffer";
      return HVD_ERR_INVALID_ARGUMENT;
    }
    size_t my_off = 0;
    for (int r = 0; r < c.rank; ++r) my_off += recv_bytes[r];
    uint8_t* out = static_cast<uint8_t*>(recv);
    if (c.size == 1) {
      if (mine && out + my_off != send) std::memmove(out + my_off, send, mine);
      return HVD_OK;
    }
    if (c.shm) {
      shm::Allgatherv(*c.shm, static_cast<const uint8_t*>(send), out, recv_bytes);
      return HVD_OK;
    }
    // Gloo's allgatherv is a ring: receives from the left, sends to the right.
    c.waiting_for = (c.rank + c.size - 1) % c.size;
    c.sending_to = (c.rank + 1) % c.size;
    gloo::AllgathervOptions opts(c.ctx);
    // In place when send already sits at this rank's offset; otherwise Gloo
    // copies it there first.
    if (mine > 0 && out + my_off != send) {
      opts.setInput(static_cast<uint8_t*>(const_cast<void*>(send)), mine);
    }
    std::vector<size_t> counts(recv_bytes, recv_bytes + c.size);
    opts.setOutput(out, std::move(counts));
    opts.setTimeout(c.timeout);
    gloo::allgatherv(opts);
    return HVD_OK;
  });
}

int Broadcast(void* comm, void* buf, size_t bytes, int32_t root) noexcept {
  return Guarded(comm, "broadcast", [&](Comm& c) -> int {
    if (root < 0 || root >= c.size) {
      c.last_error = "gloo broadcast: root " + std::to_string(root) + " out of range";
      return HVD_ERR_INVALID_ARGUMENT;
    }
    if (bytes == 0 || c.size == 1) return HVD_OK;
    if (buf == nullptr) {
      c.last_error = "gloo broadcast: NULL buffer";
      return HVD_ERR_INVALID_ARGUMENT;
    }
    if (c.shm) {
      shm::Broadcast(*c.shm, static_cast<uint8_t*>(buf), bytes, root);
      return HVD_OK;
    }
    gloo::BroadcastOptions opts(c.ctx);
    opts.setOutput(static_cast<uint8_t*>(buf), bytes);
    opts.setRoot(root);
    opts.setTimeout(c.timeout);
    gloo::broadcast(opts);
    return HVD_OK;
  });
}

int Alltoallv(void* comm, const void* send, const size_t* send_bytes, void* recv,
              const size_t* recv_bytes) noexcept {
  return Guarded(comm, "alltoallv", [&](Comm& c) -> int {
    if (send_bytes == nullptr || recv_bytes == nullptr) {
      c.last_error = "gloo alltoallv: byte counts are NULL";
      return HVD_ERR_INVALID_ARGUMENT;
    }
    if (send_bytes[c.rank] != recv_bytes[c.rank]) {
      c.last_error = "gloo alltoallv: this rank sends " + std::to_string(send_bytes[c.rank]) +
                     " bytes to itself but expects " + std::to_string(recv_bytes[c.rank]);
      return HVD_ERR_INVALID_ARGUMENT;
    }
    std::vector<int64_t> in(c.size), outc(c.size);
    size_t in_total = 0, out_total = 0;
    for (int r = 0; r < c.size; ++r) {
      in[r] = static_cast<int64_t>(send_bytes[r]);
      outc[r] = static_cast<int64_t>(recv_bytes[r]);
      in_total += send_bytes[r];
      out_total += recv_bytes[r];
    }
    if ((in_total > 0 && send == nullptr) || (out_total > 0 && recv == nullptr)) {
      c.last_error = "gloo alltoallv: NULL buffer";
      return HVD_ERR_INVALID_ARGUMENT;
    }
    if (c.size == 1) {
      if (in_total) std::memmove(recv, send, in_total);
      return HVD_OK;
    }
    // Zero-byte sides still need a pointer for Gloo's bookkeeping.
    static uint8_t dummy;
    uint8_t* sp = send ? static_cast<uint8_t*>(const_cast<void*>(send)) : &dummy;
    uint8_t* rp = recv ? static_cast<uint8_t*>(recv) : &dummy;
    gloo::AlltoallvOptions opts(c.ctx);
    opts.setInput(sp, std::move(in));
    opts.setOutput(rp, std::move(outc));
    opts.setTimeout(c.timeout);
    gloo::alltoallv(opts);
    return HVD_OK;
  });
}

int Barrier(void* comm) noexcept {
  return Guarded(comm, "barrier", [&](Comm& c) -> int {
    if (c.size == 1) return HVD_OK;
    if (c.shm) {
      c.shm->Barrier("barrier");
      return HVD_OK;
    }
    gloo::BarrierOptions opts(c.ctx);
    opts.setTimeout(c.timeout);
    gloo::barrier(opts);
    return HVD_OK;
  });
}

// The shared-memory path's keys (shm::Query); nothing else.
int SetTimeout(void* comm, double timeout_s, int32_t kind) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  c->timeout = ToMillis(timeout_s);
  c->peer_limit = kind == HVD_TRANSPORT_LIMIT_PEER;
  if (c->shm) c->shm->set_timeout(timeout_s);
  return HVD_OK;
}

int Query(void* comm, const char* key, int64_t* value) noexcept {
  const Comm* c = static_cast<const Comm*>(comm);
  if (c == nullptr || key == nullptr || value == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  return shm::Query(c->shm.get(), key, value) ? HVD_OK : HVD_ERR_UNSUPPORTED;
}

const char* LastError(void* comm) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return "gloo: no communicator";
  return c->last_error.c_str();
}

const hvd_transport_v1_t kTable = {
    HVD_TRANSPORT_ABI_V1,
    "gloo",
    &Init,
    &Finalize,
    &Allreduce,
    &Allgatherv,
    &Broadcast,
    &Alltoallv,
    &Barrier,
    &LastError,
    &Query,
};

const hvd_transport_v2_t kTableV2 = {
    HVD_TRANSPORT_ABI_V2,
    &kTable,
    &Reducescatter,
    &AllreduceSpans,
};

const hvd_transport_v3_t kTableV3 = {
    HVD_TRANSPORT_ABI_V3,
    &kTableV2,
    &SetTimeout,
};

}  // namespace
}  // namespace gloo_transport
}  // namespace hvd

extern "C" const hvd_transport_v1_t* hvd_gloo_transport_table(void) {
  return &hvd::gloo_transport::kTable;
}
extern "C" const hvd_transport_v2_t* hvd_gloo_transport_table_v2(void) {
  return &hvd::gloo_transport::kTableV2;
}
extern "C" const hvd_transport_v3_t* hvd_gloo_transport_table_v3(void) {
  return &hvd::gloo_transport::kTableV3;
}

#ifndef HVD_BUILTIN_GLOO
extern "C" __attribute__((visibility("default"))) const hvd_transport_v1_t*
hvd_transport_plugin_v1(void) {
  return &hvd::gloo_transport::kTable;
}
extern "C" __attribute__((visibility("default"))) const hvd_transport_v2_t*
hvd_transport_plugin_v2(void) {
  return &hvd::gloo_transport::kTableV2;
}
extern "C" __attribute__((visibility("default"))) const hvd_transport_v3_t*
hvd_transport_plugin_v3(void) {
  return &hvd::gloo_transport::kTableV3;
}
#endif
