// The Gloo transport, ABI version 4: connection setup, point-to-point and
// faults over Gloo's TCP transport; no collectives and no shared memory (the
// core runs every collective over isend/irecv/wait). It needs only hvd.h,
// hvd_transport.h, Gloo and the standard library: the model of a plugin
// written outside this project. Built into libhvd_transport_gloo.so
// (hvd_transport_plugin) and, with HVD_BUILTIN_GLOO=1, into the static
// core library (hvd_gloo_transport_table, no plugin symbol).
//
// Rendezvous: every rank publishes "joined/<rank>" (its host name) and waits
// for everyone's within the start timeout, so a rank that never starts is
// named, and host names are known for messages ("rank 2 (host h)"); Gloo's
// keys go under "gloo/". A Gloo error on a request is its pair's, so the
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
// aborted and every connection closed (so nothing arrives into a released
// buffer and peers blocked on this rank fail fast); later calls return it.
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
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
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

namespace hvd_gloo_v4 {
namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;
using Request = hvd_transport_request;

// Our slots: the high byte differs from every gloo::Slot prefix (1..8) and
// from the slots of the collective tables (0xA1, 0xA2).
constexpr uint64_t kSlotBase = uint64_t{0xB4} << 56;
// The closing handshake of init (Handshake): a high byte of its own.
constexpr uint64_t kHandshakeSlot = uint64_t{0xB5} << 56;
constexpr uint32_t kMaxTag = 0x7FFFFFFFu;
constexpr Millis kForever = std::chrono::hours(24 * 365);

Millis ToMillis(double s) {
  if (!(s > 0) || s > 3.0e7) return kForever;
  return Millis(std::max<int64_t>(1, static_cast<int64_t>(s * 1000.0)));
}
Clock::time_point After(double s) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}
double SecondsLeft(Clock::time_point deadline) {
  return std::max(0.0, std::chrono::duration<double>(deadline - Clock::now()).count());
}
std::string Secs(double s) {
  char b[32];
  std::snprintf(b, sizeof(b), "%g", s);
  return b;
}
bool LooksLikeTimeout(const char* s) {
  return std::strstr(s, "imed out") != nullptr || std::strstr(s, "imeout") != nullptr;
}

struct StoreError : std::runtime_error {
  StoreError(int code, const std::string& msg) : std::runtime_error(msg), code(code) {}
  int code;
};

// The rank a key of Gloo's full mesh belongs to: "<rank>" (the addresses
// of a rank's pairs) or "rank_<rank>" (its host name, in Gloo versions that
// count local ranks); -1 for any other key.
int RankOfGlooKey(const std::string& key) {
  const size_t from = key.compare(0, 5, "rank_") == 0 ? 5 : 0;
  if (from == key.size() || key.size() - from > 9) return -1;
  for (size_t i = from; i < key.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(key[i]))) return -1;
  }
  return std::stoi(key.substr(from));
}

// The core's store (throwing StoreError, every wait ending at one deadline),
// and Gloo's store over it, Gloo's keys under "gloo/". What Gloo's full
// mesh reads through it is kept, to name the peer when the mesh fails
// (MeshFailure): each rank's published pair addresses, and the rank whose
// key was read last (Gloo reads rank i's addresses and then connects to
// rank i, one rank after another).
class Kv : public gloo::rendezvous::Store {
 public:
  std::map<int, std::vector<char>> addresses;  // rank -> Gloo's bytes under "<rank>"
  int last_rank = -1;                          // the rank of the key read last
  int waiting_for = -1;                        // the rank of a key not (yet) read

  Kv(const hvd_transport_env_t& env, double seconds) : env_(env), deadline_(After(seconds)) {}
  void Set(const std::string& key, const void* data, size_t len) const {
    const int st = env_.kv_set(env_.kv, key.c_str(), data, len);
    if (st != HVD_OK) {
      throw StoreError(
          st, "rendezvous store: cannot set '" + key + "' (status " + std::to_string(st) + ")");
    }
  }
  std::string Get(const std::string& key) const {
    void* v = nullptr;
    size_t len = 0;
    const int st = env_.kv_get(env_.kv, key.c_str(), &v, &len, SecondsLeft(deadline_));
    if (st != HVD_OK) {
      throw StoreError(st, "rendezvous store: key '" + key + "' not available (status " +
                               std::to_string(st) + ")");
    }
    std::string out(static_cast<const char*>(v), v != nullptr ? len : 0);
    if (v != nullptr) env_.kv_free(v);
    return out;
  }
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
  const hvd_transport_env_t& env_;
  Clock::time_point deadline_;
};

struct Comm {
  int rank = 0;
  int size = 1;
  double limit_s = 0;       // the limit of waits given no timeout (set_timeout)
  bool peer_limit = false;  // ... and it is the core's peer timeout
  void* logger = nullptr;
  void (*log)(void*, int, const char*) = nullptr;
  // The store (valid until finalize): a rank whose communicator breaks notes
  // why under "broken/<rank>" before closing its connections, so peers that
  // only see the closing can say what was behind it (BrokenNote).
  void* kv = nullptr;
  int (*kv_set)(void*, const char*, const void*, size_t) = nullptr;
  int (*kv_get)(void*, const char*, void**, size_t*, double) = nullptr;
  void (*kv_free)(void*) = nullptr;
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  std::vector<std::string> hosts;  // every rank's host name
  std::string last_error;          // the loop thread's

  // Any thread: the first failure and the pending requests.
  std::mutex mu;
  std::atomic<int> failed{HVD_OK};
  std::string fail_msg;
  Request* pending = nullptr;
  std::atomic<bool> closed{false};

  std::string Who(int r, const std::string& addr = std::string()) const {
    std::string s = "rank " + std::to_string(r);
    const std::string host = r >= 0 && r < static_cast<int>(hosts.size()) ? hosts[r] : "";
    if (host.empty() && addr.empty()) return s;
    s += " (";
    if (!host.empty()) s += "host " + host + (addr.empty() ? "" : ", ");
    return s + addr + ")";
  }
  void Log(int level, const std::string& msg) const {
    if (log != nullptr) log(logger, level, msg.c_str());
  }
  // Records the first failure and wakes every pending wait; false if the
  // communicator had failed already.
  bool Fail(int status, const std::string& msg) {
    std::lock_guard<std::mutex> lock(mu);
    if (failed.load() != HVD_OK) return false;
    fail_msg = msg;
    failed.store(status);
    for (Request* r = pending; r != nullptr; r = r->next) {
      if (r->send) {
        r->ub->abortWaitSend();
      } else {
        r->ub->abortWaitRecv();
      }
    }
    return true;
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
  // The first failure as this call's outcome.
  int Failed() {
    std::lock_guard<std::mutex> lock(mu);
    last_error = fail_msg;
    return failed.load();
  }
  void Link(Request* r) {
    r->next = pending;
    if (pending != nullptr) pending->prev = r;
    pending = r;
  }
  void Unlink(Request* r) {
    std::lock_guard<std::mutex> lock(mu);
    (r->prev != nullptr ? r->prev->next : pending) = r->next;
    if (r->next != nullptr) r->next->prev = r->prev;
    r->prev = r->next = nullptr;
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
// Gloo's messages, peers named.

// Without Gloo's source location ("[./gloo/transport/tcp/pair.cc:589] ").
std::string WithoutLocation(const std::string& s) {
  const size_t end = s.find("] ");
  if (s.empty() || s[0] != '[' || end == std::string::npos || s.find(':') > end) return s;
  return s.substr(end + 2);
}

// "Read error : Connection reset by peer" -> "Read error: Connection reset by peer".
std::string Clause(const std::string& in) {
  std::string s;
  for (char ch : in) {
    if (ch == ' ' && (s.empty() || s.back() == ' ')) continue;
    if (ch == ':' && !s.empty() && s.back() == ' ') s.pop_back();
    s += ch;
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == ':')) s.pop_back();
  return s;
}

// The first address Gloo's text quotes ("[127.0.0.1]:40143", without a
// "$seq" after it): where it starts and its length; false if none.
bool FindAddress(const std::string& text, size_t* pos, size_t* len) {
  const size_t open = text.find('[');
  const size_t close = open == std::string::npos ? open : text.find("]:", open);
  size_t end = close == std::string::npos ? close : close + 2;
  while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
  if (close == std::string::npos || end == close + 2) return false;
  *pos = open;
  *len = end - open;
  return true;
}

// The message for a Gloo failure of request r. The failure is its pair's
// (one request per unbound buffer; Gloo's context-wide timeout is handled
// apart), so the address Gloo quotes ("[127.0.0.1]:40143") is r's peer's.
std::string DescribeFailure(const Comm& c, const Request& r, const std::string& what) {
  std::string text = WithoutLocation(what);
  size_t open = 0, len = 0;
  if (FindAddress(text, &open, &len)) {
    const std::string addr = text.substr(open, len);
    return "gloo: " + c.Who(r.peer, addr) + ": " + Clause(text.erase(open, len));
  }
  return std::string("gloo: ") + (r.send ? "sending to " : "receiving from ") + c.Who(r.peer) +
         ": " + Clause(text);
}

// The ranks whose published pair addresses (Kv::addresses) are at `addr`
// ("[ip]:port"): a rank's pairs listen on its device's one port in Gloo's
// TCP transport (on one port each in older versions), so this names the
// rank that listens there. Bytes that are no Gloo TCP address are skipped.
std::vector<int> RanksAt(const Kv& store, int size, const std::string& addr) {
  std::vector<int> ranks;
  for (const auto& [rank, bytes] : store.addresses) {
    const size_t n = static_cast<size_t>(size - 1);
    if (n == 0 || bytes.empty() || bytes.size() % n != 0) continue;
    const size_t each = bytes.size() / n;
    for (size_t k = 0; k < n; ++k) {
      try {
        const gloo::transport::tcp::Address a(
            std::vector<char>(bytes.begin() + k * each, bytes.begin() + (k + 1) * each));
        const std::string s = a.str();
        size_t pos = 0, len = 0;
        if (FindAddress(s, &pos, &len) && s.compare(pos, len, addr) == 0) {
          ranks.push_back(rank);
          break;
        }
      } catch (const std::exception&) {
        break;  // not Gloo's TCP address layout: this rank cannot be matched
      }
    }
  }
  return ranks;
}

// "a peer among ranks 1 (host a), 2 (host b)": every rank but this one
// (the first 8 named, then how many in all); "rank 1 (host a)" for one.
std::string AmongPeers(const Comm& c) {
  constexpr int kMaxNamed = 8;
  if (c.size == 2) return c.Who(1 - c.rank);
  std::string s = "a peer among ranks ";
  int n = 0;
  for (int r = 0; r < c.size && n < kMaxNamed; ++r) {
    if (r == c.rank) continue;
    s += (n++ ? ", " : "") + c.Who(r).substr(5);  // without "rank "
  }
  if (c.size - 1 > kMaxNamed) s += ", ... (" + std::to_string(c.size - 1) + " in all)";
  return s;
}

// The message for a failure of Gloo's full mesh, naming the peer: the rank
// listening at the address Gloo quotes, among the addresses the ranks
// published; else the rank whose addresses were read last (Gloo connects
// the pairs one at a time, each right after reading its peer's addresses);
// else every peer, as "a peer among ranks ...".
std::string MeshFailure(const Comm& c, const Kv& store, const std::string& what) {
  std::string text = WithoutLocation(what);
  size_t open = 0, len = 0;
  if (FindAddress(text, &open, &len)) {
    const std::string addr = text.substr(open, len);
    const std::vector<int> ranks = RanksAt(store, c.size, addr);
    if (ranks.size() == 1) return c.Who(ranks[0], addr) + ": " + Clause(text.erase(open, len));
  }
  if (store.last_rank >= 0 && store.last_rank != c.rank) {
    return "connecting to " + c.Who(store.last_rank) + ": " + Clause(text);
  }
  return AmongPeers(c) + ": " + Clause(text);
}

// A rank whose full mesh fails notes it under "init_failed" (one key, the
// last writer's note stays: any one is a cause), so that ranks whose own
// mesh completed and whose closing handshake then fails (a peer gave up and
// closed its connections) can say what was behind it. Gloo names in the
// handshake's failure only a connection (an address and a port of the
// peer's choosing), not the rank.
void NoteInitFailure(const Kv& store, int rank, const std::string& msg) {
  const std::string note = std::to_string(rank) + " " + msg;
  try {
    store.Set("init_failed", note.data(), note.size());
  } catch (const StoreError&) {
    // Best effort: the rank's own message is what it reports.
  }
}

// "; rank 3 (host h) could not connect: <its message>", or "" if no rank
// noted a failure within a short wait.
std::string InitFailureNote(const Comm& c) {
  constexpr double kNoteWaitS = 1.0;
  void* value = nullptr;
  size_t len = 0;
  if (c.kv_get(c.kv, "init_failed", &value, &len, kNoteWaitS) != HVD_OK) return "";
  std::string note(static_cast<const char*>(value), value != nullptr ? len : 0);
  if (value != nullptr) c.kv_free(value);
  const size_t sp = note.find(' ');
  int r = -1;
  try {
    r = sp == std::string::npos ? -1 : std::stoi(note.substr(0, sp));
  } catch (const std::exception&) {
    return "";
  }
  if (r < 0 || r >= c.size || r == c.rank) return "";
  std::string why = note.substr(sp + 1);
  if (why.compare(0, 11, "gloo init: ") == 0) why.erase(0, 11);
  return "; " + c.Who(r) + " could not connect: " + why;
}

// The closing handshake of init: one byte to and from every peer over the
// new pairs, within `secs`. Done on one rank, every rank has entered it, so
// its mesh is complete. Gloo's own barrier would do, but its failure names
// no peer ("Timed out waiting 2000ms for recv operation to complete"); here
// each peer has its own buffers, so the peers that said nothing in time are
// named, as is the peer of a failed connection. O(size) one-byte messages
// a rank, over the O(size) connections the mesh has made anyway. On
// failure the connections are closed before the buffers go (nothing may
// arrive into them).
int Handshake(Comm& c, double secs, std::string* msg) {
  const size_t n = static_cast<size_t>(c.size);
  std::vector<char> out(n, 1), in(n, 0);
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> sends(n), recvs(n);
  std::vector<int> silent;
  std::string failure;
  int status = HVD_OK;
  try {
    for (int j = 0; j < c.size; ++j) {
      if (j == c.rank) continue;
      recvs[j] = c.ctx->createUnboundBuffer(&in[j], 1);
      recvs[j]->recv(j, kHandshakeSlot, 0, 1);
      sends[j] = c.ctx->createUnboundBuffer(&out[j], 1);
      sends[j]->send(j, kHandshakeSlot, 0, 1);
    }
  } catch (const std::exception& e) {
    c.Close();
    *msg = "posting its messages: " + WithoutLocation(e.what());
    return HVD_ERR_TRANSPORT;
  }
  const Clock::time_point deadline = After(secs);
  for (int j = 0; j < c.size; ++j) {
    if (j == c.rank) continue;
    for (auto* ub : {recvs[j].get(), sends[j].get()}) {
      const Millis left(std::max<int64_t>(
          1, std::chrono::duration_cast<Millis>(deadline - Clock::now()).count()));
      try {
        if (ub == recvs[j].get() ? ub->waitRecv(left) : ub->waitSend(left)) continue;
        failure = "aborted";
      } catch (const std::exception& e) {
        const std::string what = e.what();
        if (what.find("Timed out waiting") != std::string::npos) {
          silent.push_back(j);
        } else if (failure.empty()) {
          Request r;
          r.peer = j;
          r.send = ub == sends[j].get();
          failure = DescribeFailure(c, r, what).substr(6);  // without "gloo: "
          status = LooksLikeTimeout(what.c_str()) ? HVD_ERR_TIMEOUT : HVD_ERR_TRANSPORT;
        }
      }
      break;  // one failure a peer is enough
    }
  }
  if (silent.empty() && failure.empty()) return HVD_OK;
  c.Close();
  if (!failure.empty()) {
    *msg = failure;
    return status == HVD_OK ? HVD_ERR_TRANSPORT : status;
  }
  constexpr size_t kMaxNamed = 8;
  *msg = "nothing within " + Secs(secs) + " s from ";
  for (size_t i = 0; i < silent.size() && i < kMaxNamed; ++i) {
    *msg += (i ? ", " : "") + c.Who(silent[i]);
  }
  if (silent.size() > kMaxNamed) *msg += ", ... (" + std::to_string(silent.size()) + " ranks in all)";
  *msg += " (connected, then stopped or cut off?; start timeout, HVD_START_TIMEOUT)";
  return HVD_ERR_TIMEOUT;
}

std::string TimeoutMessage(const Comm& c, const Request& r, double secs, bool peer_kind) {
  if (peer_kind) {
    return "gloo: " + c.Who(r.peer) + " has not answered for " + Secs(secs) +
           " s (stopped or cut off?; peer timeout, HVD_PEER_TIMEOUT)";
  }
  return "gloo: timed out after " + Secs(secs) + " s waiting " + (r.send ? "to send to " : "for ") +
         c.Who(r.peer);
}

// ---------------------------------------------------------------------------
// Init.

void WriteErr(char* err, size_t err_len, const std::string& msg) {
  if (err == nullptr || err_len == 0) return;
  const size_t n = std::min(err_len - 1, msg.size());
  std::memcpy(err, msg.data(), n);
  err[n] = '\0';
}

// Creates the TCP device, whose event-loop thread is started by Gloo's
// CreateDevice and inherits the creating thread's scheduling policy, CPU
// affinity and signal mask. The device is therefore made on a short-lived
// thread of this one (same affinity and mask) that first switches itself to
// SCHED_BATCH, which takes away the woken loop's preemption of the thread it
// wakes beside (the spin in the header comment) and nothing of its share of
// the CPU: nice stays as it was. HVD_GLOO_LOOP_SCHED=normal keeps the
// caller's policy. Measured (2 ranks on 2 CPUs, every byte over Gloo's TCP):
// a 4-byte allreduce 480-690 us -> 100-140 us, 1 MiB 4.8 ms -> 0.4-0.7 ms.
int MakeDevice(Comm& c, const gloo::transport::tcp::attr& attr, const std::string& where,
               std::string* msg) {
  const char* want = std::getenv("HVD_GLOO_LOOP_SCHED");
  const std::string policy = want == nullptr || want[0] == '\0' ? "batch" : want;
  if (policy != "batch" && policy != "normal") {
    *msg = "gloo init: HVD_GLOO_LOOP_SCHED='" + policy + "': expected batch or normal";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  std::string error, note;
  try {
    std::thread maker([&] {
#ifdef SCHED_BATCH
      if (policy == "batch") {
        sched_param sp{};
        sp.sched_priority = 0;
        const int rc = pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp);
        note = rc == 0 ? "gloo: event loop under SCHED_BATCH"
                       : std::string("gloo: event loop left at the caller's policy: "
                                     "SCHED_BATCH refused: ") +
                             std::strerror(rc);
      }
#else
      if (policy == "batch") note = "gloo: event loop left at the caller's policy: no SCHED_BATCH";
#endif
      try {
        c.device = gloo::transport::tcp::CreateDevice(attr);
      } catch (const std::exception& e) {
        error = e.what();
      } catch (...) {
        error = "unknown exception";
      }
    });
    maker.join();
  } catch (const std::exception& e) {  // no thread could be started
    error = std::string("starting a thread: ") + e.what();
  }
  if (!error.empty() || c.device == nullptr) {
    *msg = "gloo init: cannot create a TCP device on " + where + ": " +
           (error.empty() ? std::string("no device") : error);
    return HVD_ERR_TRANSPORT;
  }
  if (!note.empty()) c.Log(HVD_LOG_DEBUG, note);
  return HVD_OK;
}

int InitImpl(const hvd_transport_env_t* env_in, std::unique_ptr<Comm>* out, std::string* msg) {
  if (env_in == nullptr || env_in->struct_size < offsetof(hvd_transport_env_t, hosts)) {
    *msg = "gloo init: missing or too small environment table";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  hvd_transport_env_t env{};
  std::memcpy(&env, env_in, std::min(env_in->struct_size, sizeof(env)));
  if (env.size < 1 || env.rank < 0 || env.rank >= env.size) {
    *msg =
        "gloo init: bad rank " + std::to_string(env.rank) + " of size " + std::to_string(env.size);
    return HVD_ERR_INVALID_ARGUMENT;
  }
  if (env.size > 1 && (env.kv_set == nullptr || env.kv_get == nullptr || env.kv_free == nullptr)) {
    *msg = "gloo init: no rendezvous store callbacks";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  auto c = std::make_unique<Comm>();
  c->rank = env.rank;
  c->size = env.size;
  c->limit_s = env.timeout_s;
  c->logger = env.logger;
  c->log = env.log;
  c->kv = env.kv;
  c->kv_set = env.kv_set;
  c->kv_get = env.kv_get;
  c->kv_free = env.kv_free;
  if (c->size == 1) {
    *out = std::move(c);
    return HVD_OK;
  }
  const double start_s = env.start_timeout_s > 0 ? env.start_timeout_s : 30.0;

  // Where to listen: the interface or address given, loopback when every
  // rank is on this host, else this host's name.
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  gloo::transport::tcp::attr attr;
  std::string where;
  const hvd_transport_option_t* iface = hvd_transport_find_option(env_in, "network_interface");
  const hvd_transport_option_t* addr = hvd_transport_find_option(env_in, "local_address");
  if (iface != nullptr && iface->value != nullptr && iface->value[0] != '\0') {
    attr.iface = iface->value;
    where = "interface " + attr.iface;
  } else if (addr != nullptr && addr->value != nullptr && addr->value[0] != '\0') {
    attr.hostname = addr->value;
    where = "address " + attr.hostname;
  } else if (env.local_size == env.size) {
    attr.hostname = "127.0.0.1";
    where = "address 127.0.0.1 (single host)";
  } else if (host[0] != '\0') {
    attr.hostname = host;
    where = "host name " + attr.hostname;
  } else {
    *msg = "gloo init: gethostname failed and no interface or address was given";
    return HVD_ERR_TRANSPORT;
  }
  const int status = MakeDevice(*c, attr, where, msg);
  if (status != HVD_OK) return status;

  // Join round: publish ours (our host name), wait for everyone's.
  const Kv kv(env, start_s);
  c->hosts.assign(static_cast<size_t>(c->size), std::string());
  c->hosts[c->rank] = host;
  kv.Set("joined/" + std::to_string(c->rank), host, std::strlen(host));
  std::string missing;
  int n_missing = 0, store_status = HVD_OK;
  for (int j = 0; j < c->size; ++j) {
    if (j == c->rank) continue;
    try {
      c->hosts[j] = kv.Get("joined/" + std::to_string(j));
    } catch (const StoreError& e) {
      missing += (missing.empty() ? "" : ", ") + std::to_string(j);
      ++n_missing;
      if (e.code != HVD_ERR_TIMEOUT) store_status = e.code;
    }
  }
  if (n_missing > 0) {
    *msg = "gloo init: rank " + std::to_string(c->rank) + ": rank" + (n_missing > 1 ? "s " : " ") +
           missing + " did" + " not join within the start timeout (" + Secs(start_s) + " s)";
    if (store_status != HVD_OK) {
      *msg += "; the rendezvous store also failed (status " + std::to_string(store_status) + ")";
    }
    return HVD_ERR_RENDEZVOUS;
  }

  // Full mesh. Everyone has joined, so this normally takes milliseconds;
  // Gloo waits up to 5x the context timeout for a pair, hence the /5.
  Kv store(env, start_s);
  c->ctx = std::make_shared<gloo::rendezvous::Context>(c->rank, c->size);
  c->ctx->setTimeout(std::max(Millis(200), ToMillis(start_s / 5.0)));
  try {
    c->ctx->connectFullMesh(store, c->device);
  } catch (const StoreError& e) {
    // Every rank joined, so a key that never came is a rank that stopped
    // (or lost the store) between joining and publishing its addresses.
    *msg = "gloo init: connecting the full mesh: " +
           (store.waiting_for >= 0 ? "waiting for " + c->Who(store.waiting_for) + "'s addresses: "
                                   : std::string()) +
           e.what();
    NoteInitFailure(store, c->rank, *msg);
    return HVD_ERR_RENDEZVOUS;
  } catch (const std::exception& e) {
    *msg = "gloo init: connecting the full mesh over " + where + ": " +
           MeshFailure(*c, store, e.what());
    NoteInitFailure(store, c->rank, *msg);
    return LooksLikeTimeout(e.what()) ? HVD_ERR_TIMEOUT : HVD_ERR_TRANSPORT;
  }
  // Every rank's mesh is complete before any rank's init returns. Gloo's
  // connect completes on the connecting side before the accepting side has
  // read the handshake, so a rank that returned and finalized at once could
  // still break a peer's set-up ("Connection closed by peer", or a third
  // rank's connect timing out). Seen in test_gloo_p2p under load, where one
  // of three ranks has no traffic and finalizes right after init. A peer
  // that connected and then never answers is also seen only here.
  const int hs = Handshake(*c, start_s, msg);
  if (hs != HVD_OK) {
    *msg = "gloo init: the ranks' closing handshake over " + where + ": " + *msg + InitFailureNote(*c);
    return hs;
  }
  c->ctx->setTimeout(ToMillis(env.timeout_s));
  c->Log(HVD_LOG_DEBUG, "gloo: rank " + std::to_string(c->rank) + " of " + std::to_string(c->size) +
                            " connected over " + where + " (" + c->device->str() + ")");
  *out = std::move(c);
  return HVD_OK;
}

int Init(const hvd_transport_env_t* env, hvd_transport_info_t* info, void** comm, char* err,
         size_t err_len) noexcept {
  if (comm == nullptr) {
    WriteErr(err, err_len, "gloo init: comm is NULL");
    return HVD_ERR_INVALID_ARGUMENT;
  }
  *comm = nullptr;
  SigpipeBlock no_sigpipe;  // also inherited by Gloo's event-loop thread
  std::string msg;
  int status = HVD_ERR_INTERNAL;
  try {
    std::unique_ptr<Comm> c;
    status = InitImpl(env, &c, &msg);
    if (status == HVD_OK) {
      // Only the fields that fit in info->struct_size.
      if (info != nullptr &&
          info->struct_size >= offsetof(hvd_transport_info_t, native_max_bytes) +
                                   sizeof(info->native_max_bytes)) {
        info->max_tag = kMaxTag;
        info->mpi_thread_level = -1;
        std::fill(info->native_max_bytes, info->native_max_bytes + HVD_TRANSPORT_COLLECTIVES, 0);
      }
      // Pipelines cut large transfers into 4 MiB messages here: every message
      // costs a receive-ready round trip through Gloo, and on loopback TCP
      // (2 ranks, 2 cores) 4 MiB segments were 1.1-1.4x faster than 1 MiB
      // for 16-64 MiB allreduce and allgather, and equal at 4 MiB.
      if (info != nullptr && info->struct_size >= offsetof(hvd_transport_info_t, segment_bytes) +
                                                      sizeof(info->segment_bytes)) {
        info->segment_bytes = size_t{4} << 20;
      }
      *comm = c.release();
      return HVD_OK;
    }
  } catch (const StoreError& e) {
    msg = std::string("gloo init: ") + e.what();
    status = HVD_ERR_RENDEZVOUS;
  } catch (const std::exception& e) {
    msg = std::string("gloo init: ") + WithoutLocation(e.what());
    status = dynamic_cast<const std::bad_alloc*>(&e) != nullptr ? HVD_ERR_NO_MEMORY
             : LooksLikeTimeout(e.what())                       ? HVD_ERR_TIMEOUT
                                                                : HVD_ERR_TRANSPORT;
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

// ---------------------------------------------------------------------------
// Point-to-point.

// "; rank r had failed: <what rank r noted when its communicator broke>", or
// "" if it noted nothing (it died or hangs, or there is no store). A rank
// notes before it closes its connections, so the note is there once the
// closing is seen here: the wait is short. Loop thread only.
std::string BrokenNote(const Comm& c, int r) {
  if (r < 0 || c.kv_get == nullptr || c.kv_free == nullptr) return "";
  constexpr double kNoteWaitS = 0.5;
  const std::string key = "broken/" + std::to_string(r);
  void* value = nullptr;
  size_t len = 0;
  if (c.kv_get(c.kv, key.c_str(), &value, &len, kNoteWaitS) != HVD_OK) return "";
  std::string note(static_cast<const char*>(value), len);
  if (value != nullptr) c.kv_free(value);
  return "; rank " + std::to_string(r) + " had failed: " + note;
}

// A failure of this call that breaks the communicator; returns the first.
// Loop thread only (it writes this rank's note to the store).
int Break(Comm& c, int status, const std::string& msg) {
  if (c.Fail(status, msg)) {
    c.Log(HVD_LOG_ERROR, msg);
    if (c.kv_set != nullptr && c.size > 1) {
      const std::string key = "broken/" + std::to_string(c.rank);
      (void)c.kv_set(c.kv, key.c_str(), msg.data(), msg.size());
    }
    c.Close();
  }
  return c.Failed();
}

int Post(void* comm, int32_t peer, uint32_t tag, const hvd_transport_buffer_t* buf,
         hvd_transport_request_t** req, bool send) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  const char* op = send ? "gloo isend: " : "gloo irecv: ";
  if (req == nullptr || buf == nullptr || (buf->data == nullptr && buf->bytes > 0)) {
    c->last_error = std::string(op) + "NULL request, buffer or data";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  *req = nullptr;
  if (peer < 0 || peer >= c->size || peer == c->rank || tag > kMaxTag) {
    c->last_error = std::string(op) + "bad peer " + std::to_string(peer) + " or tag " +
                    std::to_string(tag) + " (rank " + std::to_string(c->rank) + " of " +
                    std::to_string(c->size) + ", max tag " + std::to_string(kMaxTag) + ")";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  if (buf->memory_type != HVD_MEMORY_HOST) {
    c->last_error = std::string(op) + "only host memory is supported";
    return HVD_ERR_UNSUPPORTED;
  }
  if (c->failed.load() != HVD_OK) return c->Failed();
  SigpipeBlock no_sigpipe;
  Request* linked = nullptr;  // once in the pending list
  try {
    auto r = std::make_unique<Request>();
    r->peer = peer;
    r->send = send;
    void* data = buf->bytes > 0 ? buf->data : &r->dummy;
    r->ub = c->ctx->createUnboundBuffer(data, std::max<size_t>(buf->bytes, 1));
    {
      std::lock_guard<std::mutex> lock(c->mu);
      if (c->failed.load() == HVD_OK) {
        c->Link(r.get());
        linked = r.release();
      }
    }
    if (linked == nullptr) return c->Failed();  // aborted meanwhile
    const uint64_t slot = kSlotBase + tag;
    if (send) {
      linked->ub->send(peer, slot, 0, buf->bytes);
    } else {
      linked->ub->recv(peer, slot, 0, buf->bytes);
    }
    *req = linked;
    return HVD_OK;
  } catch (const std::exception& e) {
    if (linked == nullptr) {  // nothing posted (out of memory?): the communicator is fine
      c->last_error = std::string(op) + WithoutLocation(e.what());
      return dynamic_cast<const std::bad_alloc*>(&e) ? HVD_ERR_NO_MEMORY : HVD_ERR_TRANSPORT;
    }
    Break(*c, HVD_ERR_TRANSPORT, DescribeFailure(*c, *linked, e.what()) + BrokenNote(*c, linked->peer));
  } catch (...) {
    Break(*c, HVD_ERR_TRANSPORT, std::string(op) + "unknown exception");
  }
  if (linked != nullptr) {  // connections are closed now (Break)
    c->Unlink(linked);
    delete linked;
  }
  return c->Failed();
}

int Isend(void* comm, int32_t peer, uint32_t tag, const hvd_transport_buffer_t* buf,
          hvd_transport_request_t** req) noexcept {
  return Post(comm, peer, tag, buf, req, true);
}

int Irecv(void* comm, int32_t peer, uint32_t tag, const hvd_transport_buffer_t* buf,
          hvd_transport_request_t** req) noexcept {
  return Post(comm, peer, tag, buf, req, false);
}

int Wait(void* comm, hvd_transport_request_t* req, double timeout_s) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr || req == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  SigpipeBlock no_sigpipe;
  const bool peer_kind = timeout_s < 0 && c->peer_limit;
  const double secs = timeout_s < 0 ? c->limit_s : timeout_s;  // 0: no limit (ToMillis)
  int status = HVD_OK;
  if (c->failed.load() != HVD_OK) {
    status = c->Failed();
  } else {
    try {
      const Millis limit = ToMillis(secs);
      const bool done = req->send ? req->ub->waitSend(limit) : req->ub->waitRecv(limit);
      if (!done) status = c->Failed();  // aborted (Fail woke it)
    } catch (const std::exception& e) {
      const std::string what = e.what();
      if (c->failed.load() != HVD_OK) {
        status = c->Failed();  // the failure behind it came first
      } else if (what.find("Timed out waiting") != std::string::npos) {
        status = Break(*c, HVD_ERR_TIMEOUT,
                       TimeoutMessage(*c, *req, secs, peer_kind) + BrokenNote(*c, req->peer));
      } else {
        status = Break(*c, LooksLikeTimeout(what.c_str()) ? HVD_ERR_TIMEOUT : HVD_ERR_TRANSPORT,
                       DescribeFailure(*c, *req, what) + BrokenNote(*c, req->peer));
      }
      c->Log(HVD_LOG_DEBUG, "gloo: Gloo said: " + what);
    } catch (...) {
      status = Break(*c, HVD_ERR_TRANSPORT, "gloo wait: unknown exception");
    }
  }
  if (status != HVD_OK) c->Close();  // before the buffer goes: nothing may arrive into it
  c->Unlink(req);
  delete req;
  return status;
}

// ---------------------------------------------------------------------------
// The rest.

void Finalize(void* comm) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return;
  SigpipeBlock no_sigpipe;
  try {
    if (c->pending != nullptr) c->Close();  // hard close first: nothing writes into them
    while (c->pending != nullptr) {
      Request* r = c->pending;
      c->Unlink(r);
      delete r;
    }
    c->ctx.reset();  // a soft close where not closed already: peers see end-of-stream
    c->device.reset();
  } catch (...) {
  }
  delete c;
}

const char* LastError(void* comm) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return "gloo: no communicator";
  try {
    if (c->failed.load() != HVD_OK) c->Failed();  // e.g. an abort's reason
  } catch (...) {
  }
  return c->last_error.c_str();
}

int Abort(void* comm, int status, const char* reason) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  SigpipeBlock no_sigpipe;
  try {
    if (status == HVD_OK) status = HVD_ERR_ABORTED;
    const std::string msg =
        reason != nullptr && reason[0] != '\0'
            ? std::string(reason)
            : "gloo: communicator aborted (status " + std::to_string(status) + ")";
    if (c->Fail(status, msg)) c->Close();
    return HVD_OK;
  } catch (...) {
    return HVD_ERR_INTERNAL;
  }
}

int AsyncError(void* comm) noexcept {
  const Comm* c = static_cast<const Comm*>(comm);
  return c == nullptr ? HVD_ERR_INVALID_ARGUMENT : c->failed.load();
}

int SetTimeout(void* comm, double timeout_s, int32_t kind) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  c->limit_s = timeout_s;
  c->peer_limit = kind == HVD_TRANSPORT_LIMIT_PEER;
  return HVD_OK;
}

hvd_transport_t MakeTable() {
  hvd_transport_t t;
  std::memset(&t, 0, sizeof(t));
  t.abi_version = HVD_TRANSPORT_ABI;
  t.struct_size = sizeof(hvd_transport_t);
  t.name = "gloo";
  t.caps = HVD_TRANSPORT_CAP_P2P | HVD_TRANSPORT_CAP_ABORT | HVD_TRANSPORT_CAP_PEER_TIMEOUT |
           HVD_TRANSPORT_CAP_ANY_THREAD;
  t.init = &Init;
  t.finalize = &Finalize;
  t.last_error = &LastError;
  t.isend = &Isend;
  t.irecv = &Irecv;
  t.wait = &Wait;
  t.abort = &Abort;
  t.async_error = &AsyncError;
  t.set_timeout = &SetTimeout;
  return t;
}

const hvd_transport_t kTable = MakeTable();

}  // namespace
}  // namespace hvd_gloo_v4

extern "C" const hvd_transport_t* hvd_gloo_transport_table(void) {
  return &hvd_gloo_v4::kTable;
}

#ifndef HVD_BUILTIN_GLOO
extern "C" __attribute__((visibility("default"))) const hvd_transport_t* hvd_transport_plugin(
    void) {
  return &hvd_gloo_v4::kTable;
}
#endif
