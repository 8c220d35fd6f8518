// The UCX transport: connection setup, point-to-point and
// faults over UCP tagged messages; no collectives and no shared memory of its
// own (the core runs every collective over isend/irecv/wait, as over Gloo).
// It needs only hvd.h, hvd_transport.h, UCX (ucp, ucs) and the standard
// library. Built into libhvd_transport_ucx.so (hvd_transport_plugin).
//
// Rendezvous: host names come from the core's host table (env.hosts), for
// messages ("rank 2 (host h)"). Every rank publishes its UCP worker address
// under "ucx/addr/<rank>" and reads everyone's within the start timeout (a
// rank whose address never comes is named: it did not join), creates an
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
// then sends every peer its abort message (the first cause, on the goodbye
// tag), cancels every pending receive and force-closes every endpoint, so
// pending sends fail and nothing is written into a buffer after its request
// is released (CloseEndpoints, Settled); the closes finish at finalize.
#pragma once

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
#include "kit/comm_base.h"
#include "kit/deadline.h"
#include "kit/p2p.h"
#include "kit/settings.h"
#include "kit/silence.h"
#include "kit/store.h"

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

namespace hvd_ucx_transport {

using hvd::kit::After;
using hvd::kit::Clock;
using hvd::kit::SecondsLeft;
using hvd::kit::Secs;
using Request = hvd_transport_request;

constexpr uint32_t kMaxTag = 0x7FFFFFFFu;
constexpr uint32_t kHelloTag = 0xFFFFFFFFu;  // init's hello, above every core tag
constexpr uint32_t kByeTag = 0xFFFFFFFEu;    // finalize's goodbye, above every core tag
constexpr ucp_tag_t kFullMask = ~ucp_tag_t{0};
// A goodbye: zero bytes (finalized) or an abort message "<status> <text>"
// of at most this many bytes (the communicator broke, and why).
constexpr size_t kAbortBytes = 1024;
constexpr double kCloseWaitS = 2.0;          // bound of a forced close's progress
constexpr double kCloseQuickS = 0.05;        // of the part a failing call waits for
constexpr double kSettleWaitS = 0.25;        // a failing call's wait for live peers' receives
constexpr double kGoodbyeWaitS = 0.1;        // bound of sending the goodbyes
constexpr double kPeerGoodbyeWaitS = 0.5;    // bound of finalize's wait for the peers'
constexpr int kPollSliceMs = 100;            // a wait re-checks flags at least this often
constexpr auto kSpin = std::chrono::microseconds(50);  // where the host has a CPU per rank

inline ucp_tag_t Tag(uint32_t tag, int32_t sender) {
  return (ucp_tag_t{tag} << 32) | static_cast<uint32_t>(sender);
}
inline int StatusOf(ucs_status_t st) {
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

struct Comm : hvd::kit::CommBase {
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
  std::vector<char> dead;    // per rank: its endpoint failed (UCX's error callback)
  std::vector<char> bye_in;  // per rank kAbortBytes: what its goodbye carries
  std::string abort_out;     // this rank's abort message, alive until destroy
  // Forced closes still in progress (a stopped peer's): finished at finalize,
  // so the failing call returns at once.
  std::vector<void*> closing;
  std::unique_ptr<PeerArg[]> peer_args;
  bool settled = false;                    // the loop thread has acted on the failure (Settle)
  // A look at whether the store answers, started while a wait goes silent
  // (p2p.cc, Wait); a rank cut off from it leaves it alone (store_cut).
  hvd::kit::StoreProbe store_probe;
  bool store_cut = false;                  // loop thread: no note to or from the store
  // Loop thread: the peer a Wait in progress waits on (-1: none), and since
  // when; a bystander's abort arriving as this wait itself times out does not
  // hide the silence this rank sees (ByeDone).
  int waits_on = -1;
  Clock::time_point wait_start{};
  hvd::kit::PendingList<Request> pending;  // loop thread only

  // Any thread, under failure.mu: where the first failure came from.
  bool aborted = false;  // the failure came from abort
  int lost_peer = -1;    // the failure came from this peer's endpoint

  // Records the first failure; false if the communicator had failed already.
  bool Fail(int status, const std::string& msg, bool from_abort = false, int peer = -1) {
    std::lock_guard<std::mutex> lock(failure.mu);
    if (failure.status.load() != HVD_OK) return false;
    aborted = from_abort;
    lost_peer = peer;
    return failure.RecordLocked(status, msg);
  }
};

// What init reads from the env (plugin.cc, ReadEnv): the set-up's input.
struct Settings : hvd::kit::Settings {
  std::string network_interface;  // "" if none given
};

// ---------------------------------------------------------------------------
// Across the plugin's files (faults.cc, comm.cc, p2p.cc, plugin.cc).

// faults.cc
void SendDone(void*, ucs_status_t status, void* user_data);
void RecvDone(void*, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user_data);
void EpFailed(void* arg, ucp_ep_h, ucs_status_t status);
void ByeDone(void*, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user_data);
std::string PeerAborted(const Comm& c, int p, const std::string& message, int* status);
int Settle(Comm& c);
int Break(Comm& c, int status, const std::string& msg, int peer = -1);
std::string Outcome(const Comm& c, const Request& r);
std::string LanesByPeer(const Comm& c);
int Abort(void* comm, int status, const char* reason) noexcept;

// comm.cc
void ProgressUntilDone(Comm& c, std::vector<void*>* reqs, double bound_s);
void SayGoodbye(Comm& c, bool broke);
void Drain(Comm& c);
void CloseEndpoints(Comm& c);
void ReleaseByes(Comm& c);
void Destroy(Comm* c);
struct CommDeleter {
  void operator()(Comm* c) const { Destroy(c); }
};
using CommPtr = std::unique_ptr<Comm, CommDeleter>;
int Setup(const Settings& s, CommPtr* out, std::string* msg);
void Finalize(void* comm) noexcept;

// p2p.cc
bool PostOp(Comm& c, Request* r, void* data, uint32_t tag);
void Release(Comm& c, Request* r);
int Post(void* comm, int32_t peer, uint32_t tag, const hvd_transport_buffer_t* buf,
         hvd_transport_request_t** req, bool send) noexcept;
int Wait(void* comm, hvd_transport_request_t* req, double timeout_s) noexcept;
int Test(void* comm, hvd_transport_request_t* req, int* done) noexcept;
int Progress(void* comm) noexcept;

// ---------------------------------------------------------------------------
// Waiting: progress, spin a little, then sleep on the worker's event fd.

// Progresses until done() or the deadline; false at the deadline. A failure
// recorded meanwhile (abort, an endpoint's error) ends the wait too: the
// caller checks c.failure.status.
template <typename Done>
bool ProgressUntil(Comm& c, Clock::time_point deadline, Done done) {
  Clock::time_point idle_since{};
  bool idle = false;
  for (;;) {
    if (done() || c.failure.status.load() != HVD_OK) return true;
    if (ucp_worker_progress(c.worker) != 0) {
      idle = false;
      continue;
    }
    if (done() || c.failure.status.load() != HVD_OK) return true;
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


}  // namespace hvd_ucx_transport
