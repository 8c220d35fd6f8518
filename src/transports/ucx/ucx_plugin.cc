// The UCX transport, ABI version 4: connection setup, point-to-point and
// faults over UCP tagged messages; no collectives and no shared memory of its
// own (the core runs every collective over isend/irecv/wait, as over Gloo).
// It needs only hvd.h, hvd_transport.h, UCX (ucp, ucs) and the standard
// library. Built into libhvd_transport_ucx.so (hvd_transport_plugin).
//
// Rendezvous: every rank publishes "joined/<rank>" (its host name) and waits
// for everyone's within the start timeout, so a rank that never starts is
// named and host names are known for messages ("rank 2 (host h)"); then every
// rank publishes its UCP worker address under "ucx/addr/<rank>", creates an
// endpoint to every peer and exchanges a zero-byte hello with each (bounded by
// the start timeout), so a peer UCX cannot reach fails init, named.
//
// Point-to-point: one UCP context (UCP_FEATURE_TAG, UCP_FEATURE_WAKEUP) and
// one worker (UCS_THREAD_MODE_SINGLE: the core calls isend/irecv/wait/
// finalize one at a time, from its loop thread or a waiting caller's, handed
// over under a lock; UCX keeps no per-thread state for a worker). The UCP tag of a message is (tag << 32 |
// sender rank), received with a full mask, so a receive matches exactly
// (peer, tag), and UCP matches in posting order. Each request is ours (a
// struct completed by UCP's callback through user_data); the UCX request
// pointer it holds, if the operation did not complete at once, is freed when
// the request is released. Waits progress the worker, spin for a few
// microseconds when idle, then arm the worker and poll its event fd for at
// most 100 ms at a time, checking the deadline and the failure flag.
//
// Faults: the first failure (timeout, an endpoint's error callback, a failed
// request, abort) breaks the communicator: it is recorded once under Comm::mu
// and every later call returns it. abort and async_error may come from any
// thread: abort records the failure and calls ucp_worker_signal (safe from
// any thread), which wakes a wait blocked in poll; the waiting (loop) thread
// then cancels every pending receive and force-closes every endpoint, so
// pending sends fail and nothing is written into a buffer after its request
// is released.
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include <ucp/api/ucp.h>

#include "hvd.h"
#include "hvd_transport.h"

// One request: linked into its communicator's list of pending requests while
// it lives; UCP's completion callback writes done/status through user_data.
struct hvd_transport_request {
  void* op = nullptr;  // UCX's request, or nullptr if it completed at posting
  bool done = false;
  ucs_status_t status = UCS_OK;
  ucp_tag_recv_info_t info{};  // a receive's matched message
  size_t bytes = 0;
  int32_t peer = -1;
  bool send = false;
  unsigned char dummy = 0;  // the memory of a zero-byte message
  hvd_transport_request* prev = nullptr;
  hvd_transport_request* next = nullptr;
};

namespace hvd_ucx_v4 {
namespace {

using Clock = std::chrono::steady_clock;
using Request = hvd_transport_request;

constexpr uint32_t kMaxTag = 0x7FFFFFFFu;
constexpr uint32_t kHelloTag = 0xFFFFFFFFu;  // init's hello, above every core tag
constexpr uint32_t kByeTag = 0xFFFFFFFEu;    // finalize's goodbye, above every core tag
constexpr ucp_tag_t kFullMask = ~ucp_tag_t{0};
constexpr double kCloseWaitS = 2.0;          // bound of a forced close's progress
constexpr double kGoodbyeWaitS = 0.1;        // bound of sending the goodbyes
constexpr double kPeerGoodbyeWaitS = 0.5;    // bound of finalize's wait for the peers'
constexpr int kPollSliceMs = 100;            // a wait re-checks flags at least this often
constexpr auto kSpin = std::chrono::microseconds(50);  // where the host has a CPU per rank

ucp_tag_t Tag(uint32_t tag, int32_t sender) {
  return (ucp_tag_t{tag} << 32) | static_cast<uint32_t>(sender);
}
Clock::time_point After(double s) {
  if (!(s > 0) || s > 3.0e7) return Clock::time_point::max();
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}
double SecondsLeft(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return 3.0e7;
  return std::max(0.0, std::chrono::duration<double>(deadline - Clock::now()).count());
}
std::string Secs(double s) {
  char b[32];
  std::snprintf(b, sizeof(b), "%g", s);
  return b;
}
int StatusOf(ucs_status_t st) {
  switch (st) {
    case UCS_ERR_NO_MEMORY:
      return HVD_ERR_NO_MEMORY;
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_ENDPOINT_TIMEOUT:
      return HVD_ERR_TIMEOUT;
    default:
      return HVD_ERR_TRANSPORT;
  }
}

struct Comm;
// The argument of an endpoint's error callback: which peer it is.
struct PeerArg {
  Comm* comm = nullptr;
  int rank = -1;
};

struct Comm {
  int rank = 0;
  int size = 1;
  double limit_s = 0;       // the limit of waits given no timeout (set_timeout)
  bool peer_limit = false;  // ... and it is the core's peer timeout
  void* logger = nullptr;
  void (*log)(void*, int, const char*) = nullptr;
  // The store (valid until finalize): a rank whose communicator breaks notes
  // why under "broken/<rank>" before closing its endpoints, so peers that
  // only see the closing can say what was behind it (BrokenNote).
  void* kv = nullptr;
  int (*kv_set)(void*, const char*, const void*, size_t) = nullptr;
  int (*kv_get)(void*, const char*, void**, size_t*, double) = nullptr;
  void (*kv_free)(void*) = nullptr;
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  int efd = -1;
  // How long an idle wait spins before it sleeps on efd: kSpin, or none
  // where this host's ranks outnumber its CPUs (a spinning rank then holds
  // the CPU the peer it waits for needs: at 4 ranks on 2 CPUs spinning made
  // 64 KiB-1 MiB allreduces 1.5-2x slower).
  std::chrono::microseconds spin = kSpin;
  std::vector<ucp_ep_h> eps;  // per rank; nullptr for this rank and once closed
  // Per rank: the receive of its goodbye (posted after the hello; not in the
  // pending list), and whether it left cleanly (goodbye, then its endpoint
  // closed): only requests that wait on such a peer fail.
  std::vector<Request*> byes;
  std::vector<char> gone;
  std::unique_ptr<PeerArg[]> peer_args;
  std::vector<std::string> hosts;  // every rank's host name
  std::string last_error;          // the loop thread's
  bool settled = false;            // the loop thread has acted on the failure (Settle)
  Request* pending = nullptr;      // loop thread only

  // Any thread: the first failure.
  std::mutex mu;
  std::atomic<int> failed{HVD_OK};
  std::string fail_msg;
  bool aborted = false;  // the failure came from abort
  int lost_peer = -1;    // the failure came from this peer's endpoint

  std::string Who(int r) const {
    std::string s = "rank " + std::to_string(r);
    const std::string host = r >= 0 && r < static_cast<int>(hosts.size()) ? hosts[r] : "";
    return host.empty() ? s : s + " (host " + host + ")";
  }
  void Log(int level, const std::string& msg) const {
    if (log != nullptr) log(logger, level, msg.c_str());
  }
  // Records the first failure; false if the communicator had failed already.
  bool Fail(int status, const std::string& msg, bool from_abort = false, int peer = -1) {
    std::lock_guard<std::mutex> lock(mu);
    if (failed.load() != HVD_OK) return false;
    fail_msg = msg;
    aborted = from_abort;
    lost_peer = peer;
    failed.store(status);
    return true;
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
    (r->prev != nullptr ? r->prev->next : pending) = r->next;
    if (r->next != nullptr) r->next->prev = r->prev;
    r->prev = r->next = nullptr;
  }
};

// ---------------------------------------------------------------------------
// UCP callbacks (called from ucp_worker_progress, on the loop thread).

void SendDone(void*, ucs_status_t status, void* user_data) {
  Request* r = static_cast<Request*>(user_data);
  r->status = status;
  r->done = true;
}

void RecvDone(void*, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user_data) {
  Request* r = static_cast<Request*>(user_data);
  if (info != nullptr) r->info = *info;
  r->status = status;
  r->done = true;
}

void EpFailed(void* arg, ucp_ep_h, ucs_status_t status) {
  const PeerArg* p = static_cast<const PeerArg*>(arg);
  Comm* c = p->comm;
  // A peer that sent its goodbye and then closed: finalized, not a fault.
  // (UCX delivers the goodbye, sent before its flushing close, before it
  // reports the closed connection; this runs inside ucp_worker_progress.)
  const size_t r = static_cast<size_t>(p->rank);
  if (r < c->byes.size() && r < c->gone.size() && c->byes[r] != nullptr && c->byes[r]->done &&
      c->byes[r]->status == UCS_OK) {
    c->gone[r] = 1;
    return;
  }
  try {
    // A lost connection, whatever UCX calls it (a peer that died shows as
    // "Endpoint timeout" over TCP): a transport failure, not a timeout.
    c->Fail(HVD_ERR_TRANSPORT,
            "ucx: " + c->Who(p->rank) + ": connection lost (UCX: " + ucs_status_string(status) +
                ")",
            false, p->rank);
  } catch (...) {
    c->failed.store(HVD_ERR_TRANSPORT);
  }
}

// A peer's goodbye (the receive posted at init, user_data its PeerArg). A
// peer leaving tells every other rank before it closes its endpoints: zero
// bytes when it finalizes cleanly, one byte when its communicator broke (it
// failed or was aborted). Over TCP the closing itself reaches the peers
// (EpFailed), but over shared memory nothing does while the peer's process
// lives, so without the goodbye a rank waiting on a peer that left would sit
// out its whole timeout.
void ByeDone(void*, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user_data) {
  const PeerArg* p = static_cast<const PeerArg*>(user_data);
  Comm* c = p->comm;
  const size_t r = static_cast<size_t>(p->rank);
  Request* bye = c->byes[r];
  if (info != nullptr) bye->info = *info;
  bye->status = status;
  bye->done = true;
  if (status != UCS_OK) return;  // cancelled at this rank's own finalize
  if (bye->info.length == 0) {
    c->gone[r] = 1;  // finalized: requests that wait on it fail
    return;
  }
  try {
    c->Fail(HVD_ERR_TRANSPORT,
            "ucx: " + c->Who(p->rank) + ": connection lost (its communicator broke)", false,
            p->rank);
  } catch (...) {
    c->failed.store(HVD_ERR_TRANSPORT);
  }
}

// ---------------------------------------------------------------------------
// Closing: loop thread only.

// Progresses the worker until every request of reqs (a close, a send without
// a callback) is done or bound_s passes; frees them all (those still pending
// are left to UCX) and empties reqs.
void ProgressUntilDone(Comm& c, std::vector<void*>* reqs, double bound_s) {
  const Clock::time_point deadline = After(bound_s);
  while (!reqs->empty() && Clock::now() < deadline) {
    ucp_worker_progress(c.worker);
    for (size_t i = 0; i < reqs->size();) {
      const ucs_status_t st = ucp_request_check_status((*reqs)[i]);
      if (st != UCS_INPROGRESS) {
        ucp_request_free((*reqs)[i]);
        (*reqs)[i] = reqs->back();
        reqs->pop_back();
      } else {
        ++i;
      }
    }
  }
  for (void* r : *reqs) ucp_request_free(r);  // left to UCX
  reqs->clear();
}

// Tells every peer this rank leaves (see ByeDone): `broke` sends the one-byte
// goodbye of a failed communicator, else the zero-byte one of a clean
// finalize. Best effort and bounded: a peer that cannot take it learns from
// the closing (TCP), UCX's keepalive or its own timeout.
void SayGoodbye(Comm& c, bool broke) {
  static const unsigned char kBroke = 1;
  std::vector<void*> sends;
  ucp_request_param_t p;
  std::memset(&p, 0, sizeof(p));
  for (size_t j = 0; j < c.eps.size(); ++j) {
    if (c.eps[j] == nullptr || j >= c.byes.size() || c.byes[j] == nullptr) continue;
    const ucs_status_ptr_t sp = ucp_tag_send_nbx(
        c.eps[j], &kBroke, broke ? 1 : 0, Tag(kByeTag, c.rank), &p);
    if (UCS_PTR_IS_PTR(sp)) sends.push_back(sp);
  }
  ProgressUntilDone(c, &sends, kGoodbyeWaitS);  // the closing cancels what is left
}

// Progresses the closed worker until it has been idle for kDrainIdleS (at
// most kDrainMaxS) before it is destroyed. UCX 1.13 aborts the process in
// ucp_worker_destroy (assertion "got REP message" in
// ucp_request_send_state_ff, from uct_tcp_ep_pending_purge) when a wire-up
// reply is still queued on a tcp endpoint whose connection the closing just
// broke: seen when ranks finalize with a rendezvous send (8 MiB) pending.
// Progressing lets UCX fail and drop those messages itself. On a loaded
// machine a peer's wire-up can lag 50 ms (the abort was still seen then).
//
// Then the small messages no receive took (a peer's sends that arrived
// after this rank's collective failed and cancelled its receives, or a
// mismatched program's) are taken into a scratch buffer and dropped: UCX
// would report each at worker destroy ("unexpected tag-receive descriptor
// ... was not matched"), a warning that says nothing to the user. Only up
// to kDropMax bytes, which UCX sends eagerly (whole, in the unexpected
// queue; its rendezvous starts at 8,256 bytes over shared memory and 1 MiB
// over tcp with the plugin's segments): a receive that matched a
// rendezvous message whose sender is gone would stay on the endpoint, and
// UCX 1.13 asserts on that at worker destroy (seen in unit.test_ucx_p2p).
// Larger ones keep UCX's warning. Within the same time bound; a receive
// that does not complete within it is cancelled and its scratch left
// allocated (UCX may still write it).
void Drain(Comm& c) {
  constexpr double kDrainIdleS = 0.2, kDrainMaxS = 2.0;
  const Clock::time_point end = After(kDrainMaxS);
  const auto idle_for = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(kDrainIdleS));
  Clock::time_point last_busy = Clock::now();
  for (;;) {
    const Clock::time_point now = Clock::now();
    if (now >= end || now - last_busy >= idle_for) break;
    if (ucp_worker_progress(c.worker) != 0) last_busy = Clock::now();
  }
  while (Clock::now() < end) {
    ucp_tag_recv_info_t info;
    constexpr size_t kDropMax = 8192;
    ucp_tag_message_h msg = ucp_tag_probe_nb(c.worker, 0, 0, 0, &info);
    if (msg == nullptr || info.length > kDropMax) break;  // (probe order: the oldest first)
    msg = ucp_tag_probe_nb(c.worker, 0, 0, 1, &info);
    if (msg == nullptr) break;
    uint8_t* sink = new (std::nothrow) uint8_t[std::max<size_t>(info.length, 1)];
    if (sink == nullptr) break;  // left to UCX's warning
    ucp_request_param_t p;
    std::memset(&p, 0, sizeof(p));
    const ucs_status_ptr_t sp = ucp_tag_msg_recv_nbx(c.worker, sink, info.length, msg, &p);
    if (UCS_PTR_IS_ERR(sp) || sp == nullptr) {
      delete[] sink;
      continue;
    }
    while (ucp_request_check_status(sp) == UCS_INPROGRESS && Clock::now() < end) {
      ucp_worker_progress(c.worker);
    }
    const bool done = ucp_request_check_status(sp) != UCS_INPROGRESS;
    if (!done) ucp_request_cancel(c.worker, sp);
    ucp_request_free(sp);
    if (done) delete[] sink;  // else UCX may still write into it: left allocated
  }
}

// Tells the peers this rank leaves, cancels every pending receive and
// force-closes every endpoint (pending sends then fail), progressing until
// both settle (bounded); after this no UCX operation refers to a buffer of a
// pending request. Idempotent.
void CloseEndpoints(Comm& c) {
  if (c.worker == nullptr) return;
  SayGoodbye(c, c.failed.load() != HVD_OK);
  for (Request* r = c.pending; r != nullptr; r = r->next) {
    if (!r->done && r->op != nullptr && !r->send) ucp_request_cancel(c.worker, r->op);
  }
  std::vector<void*> closing;
  ucp_request_param_t p;
  std::memset(&p, 0, sizeof(p));
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_EP_CLOSE_FLAG_FORCE;
  for (ucp_ep_h& ep : c.eps) {
    if (ep == nullptr) continue;
    const ucs_status_ptr_t sp = ucp_ep_close_nbx(ep, &p);
    if (UCS_PTR_IS_PTR(sp)) closing.push_back(sp);
    ep = nullptr;
  }
  ProgressUntilDone(c, &closing, kCloseWaitS);
  const Clock::time_point deadline = After(kCloseWaitS);
  for (;;) {
    bool all = true;
    for (Request* r = c.pending; r != nullptr; r = r->next) all = all && (r->done || r->op == nullptr);
    if (all || Clock::now() >= deadline) break;
    ucp_worker_progress(c.worker);
  }
}

// "; rank r had failed: <what rank r noted when its communicator broke>", or
// "" if it noted nothing (it died or hangs, or there is no store).
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

// Acts on the failure once, on the loop thread: a lost peer's note is added
// to the message, this rank's reason goes to the store (unless it was an
// abort) and the log, and the endpoints are closed. Returns the failure.
int Settle(Comm& c) {
  if (!c.settled && c.failed.load() != HVD_OK) {
    c.settled = true;
    int peer = -1;
    bool aborted = false;
    {
      std::lock_guard<std::mutex> lock(c.mu);
      peer = c.lost_peer;
      aborted = c.aborted;
    }
    if (peer >= 0) {
      const std::string note = BrokenNote(c, peer);
      std::lock_guard<std::mutex> lock(c.mu);
      c.fail_msg += note;
    }
    if (!aborted) {
      std::string msg;
      {
        std::lock_guard<std::mutex> lock(c.mu);
        msg = c.fail_msg;
      }
      c.Log(HVD_LOG_ERROR, msg);
      if (c.kv_set != nullptr && c.size > 1) {
        const std::string key = "broken/" + std::to_string(c.rank);
        (void)c.kv_set(c.kv, key.c_str(), msg.data(), msg.size());
      }
    }
    CloseEndpoints(c);
  }
  return c.Failed();
}

// A failure of this call that breaks the communicator; returns the first.
int Break(Comm& c, int status, const std::string& msg, int peer = -1) {
  c.Fail(status, msg, false, peer);
  return Settle(c);
}

// ---------------------------------------------------------------------------
// Waiting: progress, spin a little, then sleep on the worker's event fd.

// Progresses until done() or the deadline; false at the deadline. A failure
// recorded meanwhile (abort, an endpoint's error) ends the wait too: the
// caller checks c.failed.
template <typename Done>
bool ProgressUntil(Comm& c, Clock::time_point deadline, Done done) {
  Clock::time_point idle_since{};
  bool idle = false;
  for (;;) {
    if (done() || c.failed.load() != HVD_OK) return true;
    if (ucp_worker_progress(c.worker) != 0) {
      idle = false;
      continue;
    }
    if (done() || c.failed.load() != HVD_OK) return true;
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return false;
    if (!idle) {
      idle = true;
      idle_since = now;
      continue;
    }
    if (now - idle_since < c.spin || c.efd < 0) continue;
    const ucs_status_t st = ucp_worker_arm(c.worker);
    if (st == UCS_ERR_BUSY) continue;  // events arrived: progress them
    double left_ms = SecondsLeft(deadline) * 1000.0;
    const int ms = static_cast<int>(std::max(1.0, std::min<double>(kPollSliceMs, left_ms)));
    struct pollfd pfd = {c.efd, POLLIN, 0};
    (void)poll(&pfd, 1, st == UCS_OK ? ms : 1);
  }
}

// ---------------------------------------------------------------------------
// Posting.

// Posts one send or receive for r (linked into the pending list); false with
// r->status set when UCP refused it at once.
bool PostOp(Comm& c, Request* r, void* data, uint32_t tag) {
  ucp_request_param_t p;
  std::memset(&p, 0, sizeof(p));
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.user_data = r;
  ucs_status_ptr_t sp;
  if (r->send) {
    p.cb.send = &SendDone;
    sp = ucp_tag_send_nbx(c.eps[r->peer], data, r->bytes, Tag(tag, c.rank), &p);
  } else {
    // Always through the callback: UCX 1.13 does not fill recv_info on an
    // immediate completion, and the received length is checked.
    p.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    p.cb.recv = &RecvDone;
    sp = ucp_tag_recv_nbx(c.worker, data, r->bytes, Tag(tag, r->peer), kFullMask, &p);
  }
  if (sp == nullptr) {  // completed at once (no callback)
    r->done = true;
    r->status = UCS_OK;
    return true;
  }
  if (UCS_PTR_IS_ERR(sp)) {
    r->done = true;
    r->status = UCS_PTR_STATUS(sp);
    return false;
  }
  r->op = sp;
  return true;
}

// The outcome of a completed request: "" if it succeeded, else the message.
std::string Outcome(const Comm& c, const Request& r) {
  if (r.status == UCS_OK) {
    if (!r.send && r.info.length != r.bytes) {
      return "ucx: receiving from " + c.Who(r.peer) + ": message of " +
             std::to_string(r.info.length) + " bytes, expected " + std::to_string(r.bytes);
    }
    return "";
  }
  return std::string("ucx: ") + (r.send ? "sending to " : "receiving from ") + c.Who(r.peer) +
         ": " + ucs_status_string(r.status);
}

std::string TimeoutMessage(const Comm& c, const Request& r, double secs, bool peer_kind) {
  if (peer_kind) {
    return "ucx: " + c.Who(r.peer) + " has not answered for " + Secs(secs) +
           " s (stopped or cut off?; peer timeout, HVD_PEER_TIMEOUT)";
  }
  return "ucx: timed out after " + Secs(secs) + " s waiting " + (r.send ? "to send to " : "for ") +
         c.Who(r.peer);
}

// Releases a request (its UCX request too); loop thread only.
void Release(Comm& c, Request* r) {
  c.Unlink(r);
  if (r->op != nullptr) ucp_request_free(r->op);  // no callback after this
  delete r;
}

// Cancels the goodbye receives still posted and frees them; loop thread
// only, after the endpoints are closed (a cancelled receive completes at
// once; progress is bounded anyway).
void ReleaseByes(Comm& c) {
  for (Request* r : c.byes) {
    if (r != nullptr && !r->done && r->op != nullptr) ucp_request_cancel(c.worker, r->op);
  }
  const Clock::time_point deadline = After(kCloseWaitS);
  for (;;) {
    bool all = true;
    for (Request* r : c.byes) all = all && (r == nullptr || r->done || r->op == nullptr);
    if (all || Clock::now() >= deadline) break;
    ucp_worker_progress(c.worker);
  }
  for (Request*& r : c.byes) {
    if (r == nullptr) continue;
    if (r->op != nullptr) ucp_request_free(r->op);
    delete r;
    r = nullptr;
  }
}

// ---------------------------------------------------------------------------
// Init.

void WriteErr(char* err, size_t err_len, const std::string& msg) {
  if (err == nullptr || err_len == 0) return;
  const size_t n = std::min(err_len - 1, msg.size());
  std::memcpy(err, msg.data(), n);
  err[n] = '\0';
}

struct StoreError : std::runtime_error {
  StoreError(int code, const std::string& msg) : std::runtime_error(msg), code(code) {}
  int code;
};

// The core's store (throwing StoreError), every wait ending at one deadline.
class Kv {
 public:
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

 private:
  const hvd_transport_env_t& env_;
  Clock::time_point deadline_;
};

// Releases what init built so far (a communicator that never served).
void Destroy(Comm* c) {
  if (c == nullptr) return;
  if (c->worker != nullptr) {
    CloseEndpoints(*c);
    ReleaseByes(*c);
    while (c->pending != nullptr) Release(*c, c->pending);
    Drain(*c);
    ucp_worker_destroy(c->worker);
  }
  if (c->context != nullptr) ucp_cleanup(c->context);
  delete c;
}

struct CommDeleter {
  void operator()(Comm* c) const { Destroy(c); }
};
using CommPtr = std::unique_ptr<Comm, CommDeleter>;

// The transports an endpoint's lanes use, as UCX prints them ("sysv/memory",
// "tcp/eth0", "rc_mlx5/mlx5_0:1"), '+'-joined; "" if UCX printed none.
std::string Lanes(ucp_ep_h ep) {
  char* text = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&text, &len);
  if (f == nullptr) return "";
  ucp_ep_print_info(ep, f);
  std::fclose(f);
  std::string out;
  const std::string all(text != nullptr ? text : "", len);
  std::free(text);
  // "#                 lane[0]:  3:sysv/memory.0 md[2]  -> md[2]/sysv/..."
  for (size_t at = all.find("lane["); at != std::string::npos; at = all.find("lane[", at + 1)) {
    const size_t colon = all.find(':', all.find("]:", at) + 2);
    if (colon == std::string::npos) break;
    const size_t end = all.find_first_of(" \n", colon + 1);
    std::string tl = all.substr(colon + 1, end == std::string::npos ? end : end - colon - 1);
    const size_t dot = tl.rfind('.');
    if (dot != std::string::npos && tl.find('/') != std::string::npos && dot > tl.find('/')) {
      tl.resize(dot);  // the device index
    }
    if (tl.empty() || ("+" + out + "+").find("+" + tl + "+") != std::string::npos) continue;
    out += (out.empty() ? "" : "+") + tl;
  }
  return out;
}

// "sysv/memory to ranks 1, 2; tcp/eth0 to rank 3": what each endpoint runs on.
std::string LanesByPeer(const Comm& c) {
  std::vector<std::pair<std::string, std::string>> groups;  // lanes, ranks
  for (size_t j = 0; j < c.eps.size(); ++j) {
    if (c.eps[j] == nullptr) continue;
    std::string lanes = Lanes(c.eps[j]);
    if (lanes.empty()) lanes = "?";
    auto g = std::find_if(groups.begin(), groups.end(),
                          [&](const std::pair<std::string, std::string>& x) { return x.first == lanes; });
    if (g == groups.end()) {
      groups.emplace_back(lanes, std::to_string(j));
    } else {
      g->second += ", " + std::to_string(j);
    }
  }
  std::string out;
  for (const auto& g : groups) {
    out += (out.empty() ? "" : "; ") + g.first +
           (g.second.find(',') == std::string::npos ? " to rank " : " to ranks ") + g.second;
  }
  return out;
}

// This host's CPUs online (1 if unknown). Not the affinity mask: hvdrun
// binds each rank to its share of the CPUs, and the ranks that share a
// host's CPUs are what counts.
int HostCpus() {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(std::min<long>(n, 1 << 20)) : 1;
}

// Sets a UCP option unless the user's environment sets it: UCX_<name>, or
// `user_var` where the user's name for it differs (a transport's field:
// see ModifyTcp).
void Modify(ucp_config_t* cfg, const char* name, const char* value, const Comm& c,
            const char* user_var = nullptr) {
  const std::string var = user_var != nullptr ? std::string(user_var) : std::string("UCX_") + name;
  if (std::getenv(var.c_str()) != nullptr) return;
  const ucs_status_t st = ucp_config_modify(cfg, name, value);
  if (st != UCS_OK) {
    c.Log(HVD_LOG_WARNING, "ucx: cannot set " + var + "=" + value + ": " + ucs_status_string(st));
  }
}

// Whether UCX_TLS (`tls`; null: unset, every transport) can let UCX load a
// transport of `family`: one of the names (a transport or an alias naming the
// whole family) is listed, or "all", or the list is a "^" exclusion that
// names none of them. A field set for a transport UCX does not load is
// reported by UCX as an "invalid configuration" when the worker is made.
bool TlsMayLoad(const char* tls, std::initializer_list<const char*> family) {
  if (tls == nullptr || tls[0] == '\0') return true;
  std::string list(tls);
  const bool exclude = list[0] == '^';
  if (exclude) list.erase(0, 1);
  bool named = false;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    const std::string tl = list.substr(at, comma - at);
    if (!exclude && tl == "all") return true;
    for (const char* f : family) named = named || tl == f;
    at = comma + 1;
  }
  return exclude ? !named : named;
}

// Sets a field of UCX's tcp transport unless the user's environment sets
// it (UCX_TCP_<field>) or tcp is not among UCX_TLS. UCP takes a transport's
// field by its name within the transport's own table ("TX_SEG_SIZE":
// "TCP_TX_SEG_SIZE" is reported as an unused configuration when the worker
// is made) and gives it to every transport with a field of that name; in
// UCX 1.13 only tcp has TX_SEG_SIZE and RX_SEG_SIZE.
void ModifyTcp(ucp_config_t* cfg, const char* field, const char* value, const Comm& c) {
  if (!TlsMayLoad(std::getenv("UCX_TLS"), {"tcp"})) return;
  Modify(cfg, field, value, c, (std::string("UCX_TCP_") + field).c_str());
}

int InitImpl(const hvd_transport_env_t* env_in, CommPtr* out, std::string* msg) {
  if (env_in == nullptr || env_in->struct_size < offsetof(hvd_transport_env_t, hosts)) {
    *msg = "ucx init: missing or too small environment table";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  hvd_transport_env_t env{};
  std::memcpy(&env, env_in, std::min(env_in->struct_size, sizeof(env)));
  if (env.size < 1 || env.rank < 0 || env.rank >= env.size) {
    *msg =
        "ucx init: bad rank " + std::to_string(env.rank) + " of size " + std::to_string(env.size);
    return HVD_ERR_INVALID_ARGUMENT;
  }
  if (env.size > 1 && (env.kv_set == nullptr || env.kv_get == nullptr || env.kv_free == nullptr)) {
    *msg = "ucx init: no rendezvous store callbacks";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  CommPtr c(new Comm);
  c->rank = env.rank;
  c->size = env.size;
  c->limit_s = env.timeout_s;
  c->logger = env.logger;
  c->log = env.log;
  c->kv = env.kv;
  c->kv_set = env.kv_set;
  c->kv_get = env.kv_get;
  c->kv_free = env.kv_free;
  if (env.local_size > HostCpus()) c->spin = std::chrono::microseconds(0);
  // HVD_UCX_SPIN_US: the spin in microseconds, whatever the count (a host
  // whose CPUs other jobs share, or where waking from the fd costs more).
  if (const char* v = std::getenv("HVD_UCX_SPIN_US")) {
    char* end = nullptr;
    const long us = std::strtol(v, &end, 10);
    if (end != v && *end == '\0' && us >= 0 && us <= 1000000) {
      c->spin = std::chrono::microseconds(us);
    } else {
      c->Log(HVD_LOG_WARNING, std::string("HVD_UCX_SPIN_US='") + v +
                                  "' is not a number of microseconds (0 to 1000000): ignored");
    }
  }
  if (c->size == 1) {
    *out = std::move(c);
    return HVD_OK;
  }
  const double start_s = env.start_timeout_s > 0 ? env.start_timeout_s : 30.0;

  // Join round first, so a rank that never starts is named before UCX runs.
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
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
    *msg = "ucx init: rank " + std::to_string(c->rank) + ": rank" + (n_missing > 1 ? "s " : " ") +
           missing + " did not join within the start timeout (" + Secs(start_s) + " s)";
    if (store_status != HVD_OK) {
      *msg += "; the rendezvous store also failed (status " + std::to_string(store_status) + ")";
    }
    return HVD_ERR_RENDEZVOUS;
  }

  // UCP context: tagged messages and wake-ups. Transports are UCX's choice
  // (UCX_TLS etc. from the environment); the interface hvd was given becomes
  // NET_DEVICES; the memory-type cache is off (host memory only here, and it
  // is what would install UCM's memory hooks for this context).
  ucp_config_t* cfg = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &cfg);
  if (st != UCS_OK) {
    *msg = std::string("ucx init: reading UCX's configuration: ") + ucs_status_string(st);
    return HVD_ERR_TRANSPORT;
  }
  std::string where = "UCX's default devices";
  const hvd_transport_option_t* iface = hvd_transport_find_option(env_in, "network_interface");
  if (iface != nullptr && iface->value != nullptr && iface->value[0] != '\0') {
    if (std::getenv("UCX_NET_DEVICES") == nullptr) {
      where = "interface " + std::string(iface->value);
    } else {
      where = "UCX_NET_DEVICES (over the interface hvd was given)";
    }
    Modify(cfg, "NET_DEVICES", iface->value, *c);
  }
  Modify(cfg, "MEMTYPE_CACHE", "n", *c);
  // UCX leaves its shared-memory transports (posix, sysv) out of endpoints
  // that ask for peer error handling unless they watch their peers
  // themselves: this turns that on, so ranks of one host talk over shared
  // memory (within a host only: an IPC namespace apart is another host).
  if (TlsMayLoad(std::getenv("UCX_TLS"), {"posix", "sysv", "mm", "sm", "shm"})) {
    Modify(cfg, "MM_ERROR_HANDLING", "y", *c);
  }
  // Over shared memory a peer that died is seen only by UCX's keepalive
  // (whether the peer process still exists; a stopped one does): once a
  // second rather than UCX's 20 s, so a dead rank is named within about a
  // second, as over TCP, not at the transport timeout.
  Modify(cfg, "KEEPALIVE_INTERVAL", "1s", *c);
  // UCX's tcp copies a message through segments of 8 KiB (send) and 64 KiB
  // (receive), each a system call and an event; 1 MiB segments measured
  // faster at 64 KiB and above (bench/results/2026-12-02-ucx-seg). The
  // buffers come from a pool while a message is in flight, not one per
  // endpoint.
  ModifyTcp(cfg, "TX_SEG_SIZE", "1m", *c);
  ModifyTcp(cfg, "RX_SEG_SIZE", "1m", *c);
  ucp_params_t params;
  std::memset(&params, 0, sizeof(params));
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS |
                      UCP_PARAM_FIELD_ESTIMATED_NUM_PPN | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.estimated_num_eps = static_cast<size_t>(c->size);
  params.estimated_num_ppn = static_cast<size_t>(std::max(1, env.local_size));
  params.name = "hvd";
  st = ucp_init(&params, cfg, &c->context);
  ucp_config_release(cfg);
  if (st != UCS_OK) {
    c->context = nullptr;
    *msg = std::string("ucx init: ucp_init on ") + where + ": " + ucs_status_string(st);
    return HVD_ERR_TRANSPORT;
  }
  ucp_worker_params_t wp;
  std::memset(&wp, 0, sizeof(wp));
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  st = ucp_worker_create(c->context, &wp, &c->worker);
  if (st != UCS_OK) {
    c->worker = nullptr;
    *msg = std::string("ucx init: creating a worker: ") + ucs_status_string(st);
    return HVD_ERR_TRANSPORT;
  }
  if (ucp_worker_get_efd(c->worker, &c->efd) != UCS_OK) c->efd = -1;  // then waits spin

  // Addresses through the store, one endpoint per peer.
  ucp_address_t* addr = nullptr;
  size_t addr_len = 0;
  st = ucp_worker_get_address(c->worker, &addr, &addr_len);
  if (st != UCS_OK) {
    *msg = std::string("ucx init: worker address: ") + ucs_status_string(st);
    return HVD_ERR_TRANSPORT;
  }
  try {
    kv.Set("ucx/addr/" + std::to_string(c->rank), addr, addr_len);
  } catch (...) {
    ucp_worker_release_address(c->worker, addr);
    throw;
  }
  ucp_worker_release_address(c->worker, addr);
  c->eps.assign(static_cast<size_t>(c->size), nullptr);
  c->peer_args.reset(new PeerArg[c->size]);
  for (int j = 0; j < c->size; ++j) {
    if (j == c->rank) continue;
    const std::string peer_addr = kv.Get("ucx/addr/" + std::to_string(j));
    c->peer_args[j].comm = c.get();
    c->peer_args[j].rank = j;
    ucp_ep_params_t ep;
    std::memset(&ep, 0, sizeof(ep));
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(peer_addr.data());
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &EpFailed;
    ep.err_handler.arg = &c->peer_args[j];
    st = ucp_ep_create(c->worker, &ep, &c->eps[j]);
    if (st != UCS_OK) {
      c->eps[j] = nullptr;
      *msg = "ucx init: rank " + std::to_string(c->rank) + ": cannot create an endpoint to " +
             c->Who(j) + " over " + where + ": " + ucs_status_string(st);
      return HVD_ERR_TRANSPORT;
    }
  }

  // Hello: a zero-byte message each way with every peer, so init returns
  // with every connection working (or names the peers it could not reach).
  std::vector<Request*> hello;
  for (int j = 0; j < c->size; ++j) {
    if (j == c->rank) continue;
    for (bool send : {false, true}) {
      Request* r = new Request;
      r->peer = j;
      r->send = send;
      c->Link(r);
      hello.push_back(r);
      PostOp(*c, r, &r->dummy, kHelloTag);
    }
  }
  const Clock::time_point deadline = After(start_s);
  ProgressUntil(*c, deadline, [&] {
    for (Request* r : hello) {
      if (!r->done) return false;
    }
    return true;
  });
  std::string unreached;
  int status = HVD_OK;
  for (Request* r : hello) {
    if (r->done && r->status == UCS_OK) continue;
    if (unreached.find(c->Who(r->peer)) == std::string::npos) {
      unreached += (unreached.empty() ? "" : ", ") + c->Who(r->peer) +
                   (r->done ? std::string(": ") + ucs_status_string(r->status) : "");
    }
    status = r->done ? HVD_ERR_TRANSPORT : HVD_ERR_TIMEOUT;
  }
  if (status == HVD_OK && c->failed.load() != HVD_OK) {
    status = c->failed.load();
    unreached = c->fail_msg;
  }
  if (status != HVD_OK) {
    *msg = "ucx init: rank " + std::to_string(c->rank) + ": no hello within the start timeout (" +
           Secs(start_s) + " s) over " + where + " from " + unreached;
    return status;  // Destroy closes the endpoints and releases the hellos
  }
  for (Request* r : hello) Release(*c, r);
  // Every peer's goodbye (finalize), so a peer that leaves cleanly is told
  // apart from one that fails.
  c->gone.assign(static_cast<size_t>(c->size), 0);
  c->byes.assign(static_cast<size_t>(c->size), nullptr);
  for (int j = 0; j < c->size; ++j) {
    if (j == c->rank) continue;
    Request* r = new Request;
    r->peer = j;
    r->bytes = 1;  // zero bytes: finalized; one: its communicator broke
    c->byes[j] = r;
    ucp_request_param_t p;
    std::memset(&p, 0, sizeof(p));
    p.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    p.user_data = &c->peer_args[j];
    p.cb.recv = &ByeDone;
    const ucs_status_ptr_t sp =
        ucp_tag_recv_nbx(c->worker, &r->dummy, 1, Tag(kByeTag, j), kFullMask, &p);
    if (UCS_PTR_IS_ERR(sp)) {
      *msg = "ucx init: rank " + std::to_string(c->rank) + ": cannot post a receive from " +
             c->Who(j) + ": " + ucs_status_string(UCS_PTR_STATUS(sp));
      return HVD_ERR_TRANSPORT;
    }
    r->op = sp;
  }
  c->Log(HVD_LOG_DEBUG, "ucx: rank " + std::to_string(c->rank) + " of " +
                            std::to_string(c->size) + " connected over " + where +
                            (c->efd < 0 ? " (no wake-up fd: waits spin)" : "") + ": " +
                            LanesByPeer(*c));
  *out = std::move(c);
  return HVD_OK;
}

int Init(const hvd_transport_env_t* env, hvd_transport_info_t* info, void** comm, char* err,
         size_t err_len) noexcept {
  if (comm == nullptr) {
    WriteErr(err, err_len, "ucx init: comm is NULL");
    return HVD_ERR_INVALID_ARGUMENT;
  }
  *comm = nullptr;
  std::string msg;
  int status = HVD_ERR_INTERNAL;
  try {
    CommPtr c;
    status = InitImpl(env, &c, &msg);
    if (status == HVD_OK) {
      if (info != nullptr &&
          info->struct_size >= offsetof(hvd_transport_info_t, native_max_bytes) +
                                   sizeof(info->native_max_bytes)) {
        info->max_tag = kMaxTag;
        info->mpi_thread_level = -1;
        std::fill(info->native_max_bytes, info->native_max_bytes + HVD_TRANSPORT_COLLECTIVES, 0);
      }
      *comm = c.release();
      return HVD_OK;
    }
  } catch (const StoreError& e) {
    msg = std::string("ucx init: ") + e.what();
    status = HVD_ERR_RENDEZVOUS;
  } catch (const std::bad_alloc&) {
    msg = "ucx init: out of memory";
    status = HVD_ERR_NO_MEMORY;
  } catch (const std::exception& e) {
    msg = std::string("ucx init: ") + e.what();
    status = HVD_ERR_TRANSPORT;
  } catch (...) {
    msg = "ucx init: unknown exception";
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

int Post(void* comm, int32_t peer, uint32_t tag, const hvd_transport_buffer_t* buf,
         hvd_transport_request_t** req, bool send) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  const char* op = send ? "ucx isend: " : "ucx irecv: ";
  try {
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
    if (c->failed.load() != HVD_OK) return Settle(*c);
    std::unique_ptr<Request> r(new Request);
    r->peer = peer;
    r->send = send;
    r->bytes = buf->bytes;
    void* data = buf->bytes > 0 ? buf->data : &r->dummy;
    Request* linked = r.release();
    c->Link(linked);
    if (!PostOp(*c, linked, data, tag)) {
      const std::string why = Outcome(*c, *linked);
      const int status = Break(*c, StatusOf(linked->status), why, peer);
      Release(*c, linked);
      return status;
    }
    *req = linked;
    return HVD_OK;
  } catch (const std::bad_alloc&) {
    c->last_error = std::string(op) + "out of memory";
    return HVD_ERR_NO_MEMORY;
  } catch (...) {
    return HVD_ERR_INTERNAL;
  }
}

int Isend(void* comm, int32_t peer, uint32_t tag, const hvd_transport_buffer_t* buf,
          hvd_transport_request_t** req) noexcept {
  return Post(comm, peer, tag, buf, req, true);
}

int Irecv(void* comm, int32_t peer, uint32_t tag, const hvd_transport_buffer_t* buf,
          hvd_transport_request_t** req) noexcept {
  return Post(comm, peer, tag, buf, req, false);
}

// What a request comes to once a wait or test stops progressing: the
// communicator's failure (aborted, an endpoint failed), its peer's leaving,
// or its own outcome once done (HVD_OK, or a failure that breaks the
// communicator); HVD_IN_PROGRESS while none of these has happened.
int Conclusion(Comm& c, hvd_transport_request_t* req) {
  const size_t peer = static_cast<size_t>(req->peer);
  if (c.failed.load() != HVD_OK) return Settle(c);
  if (!req->done && peer < c.gone.size() && c.gone[peer] != 0) {
    return Break(c, HVD_ERR_TRANSPORT,
                 "ucx: " + c.Who(req->peer) + ": connection lost (it finalized and left while this rank " +
                     (req->send ? "was sending to it)" : "waited for it)"));
  }
  if (!req->done) return HVD_IN_PROGRESS;
  const std::string why = Outcome(c, *req);
  return why.empty() ? HVD_OK : Break(c, StatusOf(req->status), why, req->peer);
}

int Wait(void* comm, hvd_transport_request_t* req, double timeout_s) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  if (req == nullptr) {
    try {
      c->last_error = "ucx wait: NULL request";
    } catch (...) {
    }
    return HVD_ERR_INVALID_ARGUMENT;
  }
  int status = HVD_OK;
  try {
    const bool peer_kind = timeout_s < 0 && c->peer_limit;
    const double secs = timeout_s < 0 ? c->limit_s : timeout_s;  // <= 0: no limit
    if (c->failed.load() != HVD_OK) {
      status = Settle(*c);
    } else {
      const size_t peer = static_cast<size_t>(req->peer);
      const bool in_time = ProgressUntil(*c, After(secs), [c, req, peer] {
        return req->done || (peer < c->gone.size() && c->gone[peer] != 0);
      });
      if (!req->done && peer < c->gone.size() && c->gone[peer] != 0) {
        // The peer left, but what it sent before its goodbye may still sit
        // in UCX's queues: what is due now completes within this progress.
        for (int i = 0; i < 64 && !req->done && ucp_worker_progress(c->worker) != 0; ++i) {
        }
      }
      status = Conclusion(*c, req);
      if (status == HVD_IN_PROGRESS) {  // not done, and ProgressUntil gave up
        status = in_time ? HVD_ERR_INTERNAL
                         : Break(*c, HVD_ERR_TIMEOUT, TimeoutMessage(*c, *req, secs, peer_kind), req->peer);
      }
    }
  } catch (...) {
    status = HVD_ERR_INTERNAL;
    try {
      status = Break(*c, HVD_ERR_TRANSPORT, "ucx wait: unexpected exception");
    } catch (...) {
    }
  }
  // Settle/Break closed the endpoints before the buffer goes on failure.
  Release(*c, req);
  return status;
}

// Never blocks: one round of progress, then the request's state as Wait
// would report it once done (a failure breaks the communicator as there).
int Test(void* comm, hvd_transport_request_t* req, int* done) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr || done == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  *done = 0;
  if (req == nullptr) {
    try {
      c->last_error = "ucx test: NULL request";
    } catch (...) {
    }
    return HVD_ERR_INVALID_ARGUMENT;
  }
  int status = HVD_OK;
  try {
    if (c->failed.load() == HVD_OK) {
      for (int i = 0; i < 8 && !req->done && ucp_worker_progress(c->worker) != 0; ++i) {
      }
    }
    status = Conclusion(*c, req);
    if (status == HVD_IN_PROGRESS) return HVD_OK;  // still pending: not released
  } catch (...) {
    status = HVD_ERR_INTERNAL;
    try {
      status = Break(*c, HVD_ERR_TRANSPORT, "ucx test: unexpected exception");
    } catch (...) {
    }
  }
  *done = 1;
  Release(*c, req);
  return status;
}

// Advances pending transfers without blocking: what has arrived is taken in
// (a rendezvous over tcp moves only while the worker is progressed), so a
// caller busy between waits (the ring's reductions) keeps the wire moving.
int Progress(void* comm) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  if (c->failed.load() != HVD_OK) return c->failed.load();
  try {
    for (int i = 0; i < 8 && ucp_worker_progress(c->worker) != 0; ++i) {
    }
  } catch (...) {
    return HVD_ERR_INTERNAL;
  }
  return HVD_OK;
}

// ---------------------------------------------------------------------------
// The rest.

void Finalize(void* comm) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return;
  try {
    if (c->worker != nullptr) {
      if (c->pending != nullptr || c->failed.load() != HVD_OK) {
        CloseEndpoints(*c);  // force: nothing may write into released buffers
      } else {
        // A goodbye to every peer, then a flushing close: peers see this
        // rank leave, not a fault.
        SayGoodbye(*c, false);
        std::vector<void*> closing;
        ucp_request_param_t p;
        std::memset(&p, 0, sizeof(p));
        for (ucp_ep_h& ep : c->eps) {
          if (ep == nullptr) continue;
          const ucs_status_ptr_t sp = ucp_ep_close_nbx(ep, &p);
          if (UCS_PTR_IS_PTR(sp)) closing.push_back(sp);
          ep = nullptr;
        }
        ProgressUntilDone(*c, &closing, kCloseWaitS);
        // Until every peer's goodbye has arrived (bounded: a peer may still
        // be busy before its own finalize): one that came after its receive
        // was cancelled would be left in UCX's unexpected queue, which UCX
        // reports at worker destroy ("unexpected tag-receive descriptor").
        const Clock::time_point deadline = After(kPeerGoodbyeWaitS);
        for (;;) {
          bool all = true;
          for (const Request* r : c->byes) all = all && (r == nullptr || r->done);
          if (all || c->failed.load() != HVD_OK || Clock::now() >= deadline) break;
          ucp_worker_progress(c->worker);
        }
      }
      ReleaseByes(*c);
      while (c->pending != nullptr) Release(*c, c->pending);
      Drain(*c);
      ucp_worker_destroy(c->worker);
      c->worker = nullptr;
    }
    if (c->context != nullptr) ucp_cleanup(c->context);
    c->context = nullptr;
  } catch (...) {
  }
  delete c;
}

const char* LastError(void* comm) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return "ucx: no communicator";
  try {
    if (c->failed.load() != HVD_OK) c->Failed();  // e.g. an abort's reason
  } catch (...) {
  }
  return c->last_error.c_str();
}

int Abort(void* comm, int status, const char* reason) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  try {
    if (status == HVD_OK) status = HVD_ERR_ABORTED;
    const std::string msg =
        reason != nullptr && reason[0] != '\0'
            ? std::string(reason)
            : "ucx: communicator aborted (status " + std::to_string(status) + ")";
    c->Fail(status, msg, true);
    // Wakes a wait sleeping on the event fd (safe from any thread); the
    // loop thread closes the endpoints when it sees the failure.
    if (c->worker != nullptr) (void)ucp_worker_signal(c->worker);
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
  t.name = "ucx";
  t.caps = HVD_TRANSPORT_CAP_P2P | HVD_TRANSPORT_CAP_P2P_TEST | HVD_TRANSPORT_CAP_ABORT |
           HVD_TRANSPORT_CAP_PEER_TIMEOUT | HVD_TRANSPORT_CAP_ANY_THREAD;
  t.init = &Init;
  t.finalize = &Finalize;
  t.last_error = &LastError;
  t.isend = &Isend;
  t.irecv = &Irecv;
  t.wait = &Wait;
  t.test = &Test;
  t.progress = &Progress;
  t.abort = &Abort;
  t.async_error = &AsyncError;
  t.set_timeout = &SetTimeout;
  return t;
}

const hvd_transport_t kTable = MakeTable();

}  // namespace
}  // namespace hvd_ucx_v4

extern "C" __attribute__((visibility("default"))) const hvd_transport_t* hvd_transport_plugin(
    void) {
  return &hvd_ucx_v4::kTable;
}
