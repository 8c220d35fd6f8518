// The MPI transport: hvd_transport_v1_t over an MPI communicator.
//
// A job started by mpirun (or srun with PMI) needs no hvdrun and no
// rendezvous store: the plugin takes its communicator from MPI and reports
// rank, size and the node topology back to the core through query(). See
// docs/mpi.md for the user's side (thread levels, sub-communicators,
// hvdrun --transport mpi, the benchmark).
//
// Communicator. init duplicates the application's communicator when the core
// passes one (params.mpi_comm, a pointer to an MPI_Comm), else MPI_COMM_WORLD;
// hvd's traffic therefore never matches the application's messages. The
// duplicate returns errors instead of aborting (MPI_ERRORS_RETURN).
//
// Who owns MPI. If MPI is not initialised, init calls MPI_Init_thread asking
// for MPI_THREAD_MULTIPLE and the last hvd communicator of this plugin to go
// away calls MPI_Finalize. MPI that the application initialised is never
// finalised here. MPI is one per process, so this bookkeeping (and the
// user-defined MPI_Ops) is the plugin's only process-wide state (Process()).
//
// Thread levels. The core calls init and finalize from the thread that
// creates or destroys the context and every collective from the context's
// background thread. Hence:
//  - MULTIPLE: everything works, also the application's own MPI calls at any
//    time and several hvd contexts at once.
//  - SERIALIZED: works, with a warning. hvd serialises its own MPI calls
//    (one process-wide lock, taken around each call, never across a wait, so
//    several contexts still make progress); the application must not call
//    MPI itself while hvd operations are in flight.
//  - FUNNELED, SINGLE: only the thread that initialised MPI may call it, and
//    hvd's background thread is another thread, so init fails with
//    HVD_ERR_UNSUPPORTED and says how to fix it (initialise MPI with
//    MPI_THREAD_SERIALIZED or MULTIPLE, or let hvd initialise it).
//
// Waiting. Every operation is nonblocking (MPI_I*) and is completed by a
// polling loop with the per-operation limit (env->timeout_s), so no call
// blocks forever on a peer that is alive but stuck. After a timeout the
// requests are abandoned and the communicator is unusable (MPI cannot cancel
// a collective); finalize then leaves the communicator and MPI alone, and the
// job is expected to end (mpirun reports the rank as having exited without
// finalising). A peer that dies takes the job down through mpirun.
//
// Allreduce, chosen from the byte count alone (so every rank chooses the same):
//  - small (below kRingMinPartBytes per rank): MPI_Iallreduce in place.
//    float16, bfloat16 and bool use user-defined MPI_Ops built on hvd_common's
//    ReduceInto (the same kernels as the core), every other dtype a
//    predefined op. The ring's 2(P-1) message latencies make it the slower
//    choice while its parts are small.
//  - large: a ring (reduce-scatter, then allgather) over MPI point-to-point,
//    in segments of at most kSegmentBytes, received into two scratch segments
//    allocated and touched once at init. Open MPI's own MPI_Allreduce mallocs
//    a temporary as large as the message on every call; above 32 MiB glibc
//    serves that with a fresh mmap and munmaps it at free, so every call pays
//    a page fault per 4 KiB of temporary (~10 us each here) and throughput
//    falls from GB/s to under 0.5 GB/s. The ring allocates nothing per call;
//    point-to-point messages between processes of one host go through Open
//    MPI's shared-memory transport with a single copy (CMA), straight into
//    the destination. The threshold and segment size come from the
//    measurements in docs/mpi.md.
//
// Shared memory. When every rank of the communicator is on this host
// (MPI_COMM_TYPE_SHARED covers it all and the ranks' host identities match)
// and HVD_MPI_SHM is not 0 on any rank (default on), allreduce,
// reducescatter, broadcast, allgatherv and barrier run over one POSIX shm
// segment with the Gloo plugin's code (transports/common/shm.h): futex
// barriers, every wait bounded by env->timeout_s, peers' pids checked while
// blocked, a failing rank aborting the segment for everyone; after a failure
// the communicator is broken. alltoallv stays on MPI. Setup agrees through
// MPI_Iallgather(v) on the plugin's communicator (completed by WaitAll); any
// setup failure on any rank leaves every rank on MPI; a failure in shm
// leaves MPI unfinalised, as a timeout does. Reducescatter over shm
// is a real one (each rank reduces only its own block, in rank order).
// query("shm") is 1 when active. Measurements: docs/mpi.md.
//
// Reducescatter (ABI v2), in place over the caller's blocks: small,// Reducescatter (ABI v2), in place over the caller's blocks: small,
// MPI_Ireduce_scatter (its result, at the front of the buffer, moved to the
// rank's block); large, the ring's first phase alone over the caller's block
// boundaries, rotated so that rank r ends owning block r: (P-1)/P of the data
// crosses the wire once, where an allreduce would move it twice.
//
// Counts. MPI counts are int. Allreduce messages are at most one segment;
// allgatherv and alltoallv use MPI_Iallgatherv / MPI_Ialltoallv only when
// every count and displacement fits kMaxMessageBytes (<= INT_MAX), and
// otherwise point-to-point exchanges in chunks of kMaxMessageBytes; broadcast
// goes in chunks of kMaxMessageBytes.
#include <dlfcn.h>
#include <mpi.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "common/kernels.h"
#include "algorithms/shm.h"
#include "hvd_transport.h"

// Tuning constants (compile-time; the test suite builds a second copy of the
// plugin with tiny values so that every chunked path runs on small data).
#ifndef HVD_MPI_SEGMENT_BYTES
#define HVD_MPI_SEGMENT_BYTES (1u << 20)
#endif
#ifndef HVD_MPI_RING_MIN_PART_BYTES
#define HVD_MPI_RING_MIN_PART_BYTES (16u << 10)
#endif
#ifndef HVD_MPI_MAX_MESSAGE_BYTES
#define HVD_MPI_MAX_MESSAGE_BYTES (1u << 30)
#endif
// The shared-memory path (transports/common/shm.h): per-rank slot, and the
// fan-out limit of its one-barrier allreduce (the Gloo plugin's values).
#ifndef HVD_MPI_SHM_SLOT_BYTES
#define HVD_MPI_SHM_SLOT_BYTES (1u << 20)
#endif
#ifndef HVD_MPI_SHM_SMALL_FANOUT_BYTES
#define HVD_MPI_SHM_SMALL_FANOUT_BYTES (256u << 10)
#endif

namespace hvd {
namespace mpi_transport {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kSegmentBytes = HVD_MPI_SEGMENT_BYTES;        // ring pipeline unit
constexpr size_t kRingMinPartBytes = HVD_MPI_RING_MIN_PART_BYTES;  // ring from bytes/P on
constexpr size_t kMaxMessageBytes = HVD_MPI_MAX_MESSAGE_BYTES;  // largest single message
static_assert(kSegmentBytes >= 16, "a segment must hold at least one element of every dtype");
static_assert(kMaxMessageBytes <= static_cast<size_t>(INT_MAX), "MPI counts are int");
constexpr size_t kShmSlotBytes = HVD_MPI_SHM_SLOT_BYTES;
constexpr size_t kShmSmallFanoutBytes = HVD_MPI_SHM_SMALL_FANOUT_BYTES;
static_assert(kShmSlotBytes % 4096 == 0, "shm slot bytes must be a multiple of 4 KiB");

// Point-to-point tags on hvd's own communicator.
constexpr int kTagReduceScatter = 1;
constexpr int kTagAllgather = 2;
constexpr int kTagGatherv = 3;
constexpr int kTagAlltoall = 4;

// Polls between two looks at the clock while waiting.
constexpr unsigned kPollsPerClockCheck = 32;
// A wait spins (lowest latency) for this long, then yields the CPU at every
// look at the clock, and once this long has passed with nothing completed it
// sleeps between polls: a peer that is this late is not transferring (every
// message of the plugin's algorithms is at most a ring segment), it has not
// arrived yet, e.g. an idle rank the negotiation waits for. Spinning through
// that would take a core away from the ranks' own compute.
constexpr auto kSpinFor = std::chrono::microseconds(100);
constexpr auto kYieldFor = std::chrono::milliseconds(5);
constexpr struct timespec kBackoffSleep = {0, 50 * 1000};

// Failure inside an operation: an hvd status and the text for last_error().
struct Failure {
  int code;
  std::string msg;
};

// ---------------------------------------------------------------------------
// Process-wide state: MPI itself is one per process.

constexpr int kNumSpecialDtypes = 3;  // float16, bfloat16, bool
constexpr int kNumOps = 4;            // SUM, MIN, MAX, PRODUCT

struct ProcessState {
  std::mutex mu;            // guards the fields below (init and finalize)
  int live_comms = 0;       // hvd communicators alive in this process
  bool we_initialized = false;
  bool we_finalized = false;
  bool abandoned = false;   // a communicator timed out: MPI cannot be finalised
  bool ops_ready = false;
  MPI_Op ops[kNumSpecialDtypes][kNumOps];
  // Below MPI_THREAD_MULTIPLE, every MPI call of every hvd communicator is
  // made under this lock.
  std::mutex call_mu;
};

ProcessState& Process() {
  static ProcessState* s = new ProcessState();  // never destroyed: used until exit
  return *s;
}

int SpecialIndex(hvd_dtype_t d) {
  switch (d) {
    case HVD_FLOAT16: return 0;
    case HVD_BFLOAT16: return 1;
    case HVD_BOOL: return 2;
    default: return -1;
  }
}

int OpIndex(hvd_reduce_op_t op) {
  switch (op) {
    case HVD_SUM: return 0;
    case HVD_MIN: return 1;
    case HVD_MAX: return 2;
    case HVD_PRODUCT: return 3;
    default: return -1;
  }
}

// MPI_User_function for dtype D and op O: inout = in (op) inout.
template <hvd_dtype_t D, hvd_reduce_op_t O>
void UserOp(void* in, void* inout, int* len, MPI_Datatype*) {
  ReduceInto(inout, in, static_cast<size_t>(*len), D, O);
}

template <hvd_dtype_t D>
int CreateOps(MPI_Op* out) {
  MPI_User_function* fns[kNumOps] = {&UserOp<D, HVD_SUM>, &UserOp<D, HVD_MIN>,
                                     &UserOp<D, HVD_MAX>, &UserOp<D, HVD_PRODUCT>};
  for (int i = 0; i < kNumOps; ++i) {
    const int rc = MPI_Op_create(fns[i], /*commute=*/1, &out[i]);
    if (rc != MPI_SUCCESS) return rc;
  }
  return MPI_SUCCESS;
}

std::string MpiErrorText(int rc) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS || len <= 0) {
    return "MPI error " + std::to_string(rc);
  }
  return std::string(text, static_cast<size_t>(len));
}

const char* ThreadLevelName(int level) {
  if (level == MPI_THREAD_SINGLE) return "MPI_THREAD_SINGLE";
  if (level == MPI_THREAD_FUNNELED) return "MPI_THREAD_FUNNELED";
  if (level == MPI_THREAD_SERIALIZED) return "MPI_THREAD_SERIALIZED";
  if (level == MPI_THREAD_MULTIPLE) return "MPI_THREAD_MULTIPLE";
  return "an unknown MPI thread level";
}

// Keeps this plugin (and with it the MPI library) loaded until the process
// exits: MPI libraries do not support being unloaded and loaded again, and
// the core dlcloses a plugin when its last communicator goes away.
void PinInMemory() {
  static std::once_flag once;
  std::call_once(once, [] {
    Dl_info info;
    if (dladdr(reinterpret_cast<void*>(&PinInMemory), &info) != 0 && info.dli_fname != nullptr) {
      (void)dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    }
  });
}

// ---------------------------------------------------------------------------
// The communicator.

struct AlignedFree {
  void operator()(uint8_t* p) const { std::free(p); }
};
using AlignedBytes = std::unique_ptr<uint8_t[], AlignedFree>;

// 64-byte aligned and zero-filled, so its pages are faulted in now.
AlignedBytes AllocTouched(size_t bytes) {
  const size_t rounded = (std::max<size_t>(bytes, 64) + 63) / 64 * 64;
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, rounded));
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  return AlignedBytes(p);
}

struct Comm {
  hvd_transport_env_v1_t env{};  // copy; its strings are not used after init
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;
  int cross_rank = 0, cross_size = 1;
  int thread_level = MPI_THREAD_MULTIPLE;
  bool serialize = false;       // below MPI_THREAD_MULTIPLE: take call_mu
  double timeout_s = 0;         // <= 0: no limit
  hvd_reduce_kernel_fn reduce = nullptr;
  AlignedBytes scratch;         // two ring segments

  // Reused between calls (no allocation in the steady state).
  std::vector<MPI_Request> sends;
  std::vector<MPI_Request> recvs;
  std::vector<int> counts, displs, counts2, displs2;
  std::vector<size_t> offs, offs2;
  std::vector<size_t> ring_starts;

  // The shared-memory path, when every rank is on this host (else null).
  std::unique_ptr<shm::Segment> shm;
  bool shm_enabled = true;  // HVD_MPI_SHM, read at init (ReadSettings)

  bool broken = false;     // a collective failed: every later call fails
  bool abandoned = false;  // requests were left pending (timeout)
  std::string last_error;

  void Log(int level, const std::string& msg) const {
    if (env.log != nullptr) env.log(env.logger, level, msg.c_str());
  }
};

// Holds the process-wide MPI call lock when the thread level needs it.
class CallLock {
 public:
  explicit CallLock(const Comm& c) {
    if (c.serialize) lock_ = std::unique_lock<std::mutex>(Process().call_mu);
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

void CheckMpi(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw Failure{HVD_ERR_TRANSPORT, std::string(what) + ": " + MpiErrorText(rc)};
}

// Completes n requests, polling with the communicator's time limit.
void WaitAll(Comm& c, int n, MPI_Request* reqs, const char* what) {
  if (n <= 0) return;
  const bool limited = c.timeout_s > 0;
  const auto start = Clock::now();
  const auto deadline =
      limited ? start + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(c.timeout_s))
              : Clock::time_point::max();
  unsigned polls = 0;
  for (;;) {
    int done = 0;
    int rc;
    {
      CallLock lock(c);
      rc = MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
    }
    CheckMpi(rc, what);
    if (done) return;
    if (++polls % kPollsPerClockCheck != 0) continue;
    const auto now = Clock::now();
    if (limited && now > deadline) {
      c.abandoned = true;
      char secs[32];
      std::snprintf(secs, sizeof(secs), "%g", c.timeout_s);
      throw Failure{HVD_ERR_TIMEOUT,
                    std::string(what) + ": no progress within " + secs +
                        " s (transport timeout, HVD_TRANSPORT_TIMEOUT): a peer is stuck or "
                        "gone; the MPI communicator is abandoned"};
    }
    const auto waited = now - start;
    if (waited >= kYieldFor) {
      nanosleep(&kBackoffSleep, nullptr);
    } else if (waited >= kSpinFor || c.serialize) {
      // Also lets other hvd contexts of this process take the call lock.
      sched_yield();
    }
  }
}

void Wait(Comm& c, MPI_Request* req, const char* what) { WaitAll(c, 1, req, what); }

void WaitVector(Comm& c, std::vector<MPI_Request>* reqs, const char* what) {
  WaitAll(c, static_cast<int>(reqs->size()), reqs->data(), what);
  reqs->clear();
}

void PostSend(Comm& c, const void* p, size_t bytes, int to, int tag, MPI_Request* req) {
  CallLock lock(c);
  CheckMpi(MPI_Isend(const_cast<void*>(p), static_cast<int>(bytes), MPI_BYTE, to, tag, c.comm, req),
           "MPI_Isend");
}

void PostRecv(Comm& c, void* p, size_t bytes, int from, int tag, MPI_Request* req) {
  CallLock lock(c);
  CheckMpi(MPI_Irecv(p, static_cast<int>(bytes), MPI_BYTE, from, tag, c.comm, req), "MPI_Irecv");
}

// Appends the requests for sending (or receiving) bytes in chunks of at most
// kMaxMessageBytes.
void SendChunked(Comm& c, const uint8_t* p, size_t bytes, int to, int tag) {
  for (size_t off = 0; off < bytes; off += kMaxMessageBytes) {
    c.sends.push_back(MPI_REQUEST_NULL);
    PostSend(c, p + off, std::min(kMaxMessageBytes, bytes - off), to, tag, &c.sends.back());
  }
}

void RecvChunked(Comm& c, uint8_t* p, size_t bytes, int from, int tag) {
  for (size_t off = 0; off < bytes; off += kMaxMessageBytes) {
    c.recvs.push_back(MPI_REQUEST_NULL);
    PostRecv(c, p + off, std::min(kMaxMessageBytes, bytes - off), from, tag, &c.recvs.back());
  }
}

// ---------------------------------------------------------------------------
// Error wall.

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
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    // Any MPI call now would abort the process.
    c->last_error = std::string("mpi ") + op +
                    ": the application finalised MPI while this hvd context was alive "
                    "(destroy hvd contexts, e.g. hvd_shutdown, before MPI_Finalize)";
    c->broken = true;
    return HVD_ERR_TRANSPORT;
  }
  int status = HVD_OK;
  try {
    return body(*c);
  } catch (const Failure& f) {
    c->last_error = std::string("mpi ") + op + ": " + f.msg;
    status = f.code;
  } catch (const shm::Error& e) {
    c->last_error = std::string("mpi ") + e.what();
    status = e.code;
    // Peers are out of step (stuck, dead or failing): MPI_Finalize, a
    // collective, could wait for them forever, so MPI is left alone as after
    // an MPI timeout, and the launcher ends the job.
    c->abandoned = true;
  } catch (const std::bad_alloc&) {
    c->last_error = std::string("mpi ") + op + ": out of memory";
    status = HVD_ERR_NO_MEMORY;
  } catch (const std::exception& e) {
    c->last_error = std::string("mpi ") + op + ": " + e.what();
    status = HVD_ERR_TRANSPORT;
  } catch (...) {
    c->last_error = std::string("mpi ") + op + ": unknown exception";
    status = HVD_ERR_TRANSPORT;
  }
  // Requests may still be pending or peers out of step: nothing more can be
  // trusted on this communicator. Peers waiting in shared memory fail at once.
  c->broken = true;
  if (c->shm) c->shm->Abort(status, c->last_error);
  try {
    c->Log(HVD_LOG_ERROR, c->last_error);
  } catch (...) {
  }
  return status;
}

// ---------------------------------------------------------------------------
// Allreduce.

bool NativeType(hvd_dtype_t d, MPI_Datatype* out) {
  switch (d) {
    case HVD_UINT8: *out = MPI_UINT8_T; return true;
    case HVD_INT8: *out = MPI_INT8_T; return true;
    case HVD_UINT16: *out = MPI_UINT16_T; return true;
    case HVD_INT16: *out = MPI_INT16_T; return true;
    case HVD_INT32: *out = MPI_INT32_T; return true;
    case HVD_INT64: *out = MPI_INT64_T; return true;
    case HVD_FLOAT32: *out = MPI_FLOAT; return true;
    case HVD_FLOAT64: *out = MPI_DOUBLE; return true;
    default: return false;
  }
}

// The MPI datatype and op for (dtype, op): predefined where MPI has them,
// else a user-defined op over an unsigned integer of the same width.
void MpiTypeAndOp(hvd_dtype_t d, hvd_reduce_op_t op, MPI_Datatype* type, MPI_Op* mop) {
  if (NativeType(d, type)) {
    switch (op) {
      case HVD_SUM: *mop = MPI_SUM; break;
      case HVD_MIN: *mop = MPI_MIN; break;
      case HVD_MAX: *mop = MPI_MAX; break;
      default: *mop = MPI_PROD; break;
    }
    return;
  }
  *type = d == HVD_BOOL ? MPI_UINT8_T : MPI_UINT16_T;
  *mop = Process().ops[SpecialIndex(d)][OpIndex(op)];
}

// The ring's division of a buffer into P parts (given by P + 1 element
// offsets), each cut into K segments of at most seg elements. Ring part q is
// the buffer's part (q - shift) mod P: with shift 0 rank r ends the
// reduce-scatter owning part r + 1 (the allreduce's layout), with shift 1 it
// owns part r (a reduce-scatter's result).
struct RingPlan {
  const size_t* start;
  size_t P, K, seg, shift;
  size_t Part(size_t q) const { return (q + P - shift) % P; }
  size_t PartStart(size_t q) const { return start[Part(q)]; }
  size_t PartLen(size_t q) const { return start[Part(q) + 1] - start[Part(q)]; }
  // Element range [*off, *off + return) of segment k of ring part q (may be empty).
  size_t Seg(size_t q, size_t k, size_t* off) const {
    const size_t plen = PartLen(q);
    const size_t begin = std::min(plen, k * seg);
    *off = PartStart(q) + begin;
    return std::min(seg, plen - begin);
  }
};

// Segments per part and their size, from the longest part.
RingPlan MakePlan(const std::vector<size_t>& start, size_t es, size_t shift) {
  const size_t P = start.size() - 1;
  size_t max_part = 0;
  for (size_t p = 0; p < P; ++p) max_part = std::max(max_part, start[p + 1] - start[p]);
  const size_t seg_max = kSegmentBytes / es;
  const size_t K = std::max<size_t>(1, (max_part + seg_max - 1) / seg_max);
  return RingPlan{start.data(), P, K, std::max<size_t>(1, (max_part + K - 1) / K), shift};
}

// Phase 1, reduce-scatter. Transfer t = s*K + k receives segment k of ring
// part (r - s - 1) from the left into slot t % 2 and reduces it in. Rank r
// sends segment k of ring part (r - s) at step s: its own data for s = 0, and
// for s > 0 the segment it has just finished reducing at transfer t - K, so
// each send goes out as soon as its data is ready. Afterwards rank r holds
// the full reduction of ring part r + 1.
void RingReduceScatter(Comm& c, uint8_t* base, const RingPlan& plan, size_t es, hvd_dtype_t dtype,
                       hvd_reduce_op_t op) {
  const size_t P = plan.P, K = plan.K;
  const size_t r = static_cast<size_t>(c.rank);
  const int right = static_cast<int>((r + 1) % P);
  const int left = static_cast<int>((r + P - 1) % P);
  const size_t T = (P - 1) * K;  // transfers
  uint8_t* slots[2] = {c.scratch.get(), c.scratch.get() + kSegmentBytes};
  auto rs_recv = [&](size_t t, size_t* off) {
    return plan.Seg((r + 2 * P - t / K - 1) % P, t % K, off);
  };
  MPI_Request rreq[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  auto post_rs_recv = [&](size_t t) {
    size_t off;
    const size_t len = rs_recv(t, &off);
    if (len) PostRecv(c, slots[t & 1], len * es, left, kTagReduceScatter, &rreq[t & 1]);
  };
  c.sends.clear();
  auto post_send = [&](size_t off, size_t len) {
    if (!len) return;
    c.sends.push_back(MPI_REQUEST_NULL);
    PostSend(c, base + off * es, len * es, right, kTagReduceScatter, &c.sends.back());
  };
  post_rs_recv(0);
  if (T > 1) post_rs_recv(1);
  for (size_t k = 0; k < K; ++k) {
    size_t off;
    const size_t len = plan.Seg(r, k, &off);
    post_send(off, len);
  }
  for (size_t t = 0; t < T; ++t) {
    size_t off;
    const size_t len = rs_recv(t, &off);
    if (len) {
      Wait(c, &rreq[t & 1], "ring reduce-scatter receive");
      c.reduce(base + off * es, slots[t & 1], len, dtype, op);
    }
    if (t + 2 < T) post_rs_recv(t + 2);
    if (t + K < T) post_send(off, len);  // step s + 1 sends this segment
  }
  // Callers write into parts sent above next: those sends must be done.
  WaitVector(c, &c.sends, "ring reduce-scatter send");
}

// Phase 2, allgather. Rank r owns ring part r + 1. Transfer t = s*K + k
// receives segment k of ring part (r - s) straight into place and forwards
// it at step s + 1.
void RingAllgather(Comm& c, uint8_t* base, const RingPlan& plan, size_t es) {
  const size_t P = plan.P, K = plan.K;
  const size_t r = static_cast<size_t>(c.rank);
  const int right = static_cast<int>((r + 1) % P);
  const int left = static_cast<int>((r + P - 1) % P);
  const size_t T = (P - 1) * K;
  c.sends.clear();
  auto post_send = [&](size_t off, size_t len) {
    if (!len) return;
    c.sends.push_back(MPI_REQUEST_NULL);
    PostSend(c, base + off * es, len * es, right, kTagAllgather, &c.sends.back());
  };
  auto ag_recv = [&](size_t t, size_t* off) { return plan.Seg((r + P - t / K) % P, t % K, off); };
  c.recvs.assign(T, MPI_REQUEST_NULL);
  for (size_t t = 0; t < T; ++t) {
    size_t off;
    const size_t len = ag_recv(t, &off);
    if (len) PostRecv(c, base + off * es, len * es, left, kTagAllgather, &c.recvs[t]);
  }
  for (size_t k = 0; k < K; ++k) {
    size_t off;
    const size_t len = plan.Seg((r + 1) % P, k, &off);
    post_send(off, len);
  }
  for (size_t t = 0; t < T; ++t) {
    size_t off;
    const size_t len = ag_recv(t, &off);
    if (len) Wait(c, &c.recvs[t], "ring allgather receive");
    if (t + K < T) post_send(off, len);
  }
  c.recvs.clear();
  WaitVector(c, &c.sends, "ring allgather send");
}

// n elements in P parts, the first n % P one element longer.
void EvenParts(size_t n, size_t P, std::vector<size_t>* start) {
  start->resize(P + 1);
  for (size_t p = 0; p <= P; ++p) (*start)[p] = p * (n / P) + std::min(p, n % P);
}

void RingAllreduce(Comm& c, uint8_t* base, size_t n, size_t es, hvd_dtype_t dtype,
                   hvd_reduce_op_t op) {
  EvenParts(n, static_cast<size_t>(c.size), &c.ring_starts);
  const RingPlan plan = MakePlan(c.ring_starts, es, 0);
  RingReduceScatter(c, base, plan, es, dtype, op);
  RingAllgather(c, base, plan, es);
}

int DoAllreduce(Comm& c, void* buf, size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op) {
  const size_t es = DtypeSize(dtype);
  if (es == 0) {
    c.last_error = "mpi allreduce: invalid dtype " + std::to_string(static_cast<int>(dtype));
    return HVD_ERR_INVALID_ARGUMENT;
  }
  if (OpIndex(op) < 0) {
    c.last_error = std::string("mpi allreduce: unsupported op ") + ReduceOpName(op) +
                   " (the core turns AVERAGE into SUM)";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  if (count == 0 || c.size == 1) return HVD_OK;
  if (buf == nullptr) {
    c.last_error = "mpi allreduce: NULL buffer";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  if (count > SIZE_MAX / es) {
    c.last_error = "mpi allreduce: byte count overflows size_t";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  const size_t bytes = count * es;
  if (c.shm) {
    shm::Allreduce(*c.shm, c.reduce, static_cast<uint8_t*>(buf), count, es, dtype, op);
    return HVD_OK;
  }
  if (bytes / static_cast<size_t>(c.size) < kRingMinPartBytes &&
      count <= static_cast<size_t>(INT_MAX)) {
    MPI_Datatype type;
    MPI_Op mop;
    MpiTypeAndOp(dtype, op, &type, &mop);
    MPI_Request req = MPI_REQUEST_NULL;
    {
      CallLock lock(c);
      CheckMpi(MPI_Iallreduce(MPI_IN_PLACE, buf, static_cast<int>(count), type, mop, c.comm, &req),
               "MPI_Iallreduce");
    }
    Wait(c, &req, "MPI_Iallreduce");
    return HVD_OK;
  }
  RingAllreduce(c, static_cast<uint8_t*>(buf), count, es, dtype, op);
  return HVD_OK;
}

// ABI v2: the spans reduced where they lie over shared memory (see
// shm::AllreduceSpansEntry).
int DoAllreduceSpans(Comm& c, const hvd_transport_span_t* spans, size_t nspans, hvd_dtype_t dtype,
                     hvd_reduce_op_t op) {
  return shm::AllreduceSpansEntry(
      c.shm.get(), c.reduce, c.size, "mpi", spans, nspans, dtype, op,
      [&](void* buf, size_t count) { return DoAllreduce(c, buf, count, dtype, op); },
      &c.last_error);
}

int DoReducescatter(Comm& c, void* buf, const size_t* counts, hvd_dtype_t dtype,
                    hvd_reduce_op_t op) {
  const size_t es = DtypeSize(dtype);
  if (es == 0) {
    c.last_error = "mpi reducescatter: invalid dtype " + std::to_string(static_cast<int>(dtype));
    return HVD_ERR_INVALID_ARGUMENT;
  }
  if (OpIndex(op) < 0) {
    c.last_error = std::string("mpi reducescatter: unsupported op ") + ReduceOpName(op) +
                   " (the core turns AVERAGE into SUM)";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  if (counts == nullptr) {
    c.last_error = "mpi reducescatter: NULL counts";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  const size_t P = static_cast<size_t>(c.size);
  std::vector<size_t>& start = c.ring_starts;
  start.assign(P + 1, 0);
  bool fits_int = true;
  for (size_t p = 0; p < P; ++p) {
    if (counts[p] > (SIZE_MAX / es) - start[p]) {
      c.last_error = "mpi reducescatter: byte count overflows size_t";
      return HVD_ERR_INVALID_ARGUMENT;
    }
    start[p + 1] = start[p] + counts[p];
    fits_int = fits_int && counts[p] <= static_cast<size_t>(INT_MAX);
  }
  const size_t total = start[P];
  if (total == 0 || P == 1) return HVD_OK;
  if (buf == nullptr) {
    c.last_error = "mpi reducescatter: NULL buffer";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  uint8_t* base = static_cast<uint8_t*>(buf);
  if (c.shm) {
    shm::Reducescatter(*c.shm, c.reduce, base, start.data(), es, dtype, op);
    return HVD_OK;
  }
  if (total * es / P < kRingMinPartBytes && fits_int) {
    // Small: MPI's own, in place (its result lands at the front of buf).
    MPI_Datatype type;
    MPI_Op mop;
    MpiTypeAndOp(dtype, op, &type, &mop);
    c.counts.resize(P);
    for (size_t p = 0; p < P; ++p) c.counts[p] = static_cast<int>(counts[p]);
    MPI_Request req = MPI_REQUEST_NULL;
    {
      CallLock lock(c);
      CheckMpi(MPI_Ireduce_scatter(MPI_IN_PLACE, buf, c.counts.data(), type, mop, c.comm, &req),
               "MPI_Ireduce_scatter");
    }
    Wait(c, &req, "MPI_Ireduce_scatter");
    const size_t mine = start[c.rank];
    if (mine != 0 && counts[c.rank] != 0) std::memmove(base + mine * es, base, counts[c.rank] * es);
    return HVD_OK;
  }
  RingReduceScatter(c, base, MakePlan(start, es, 1), es, dtype, op);
  return HVD_OK;
}

// ---------------------------------------------------------------------------
// Allgatherv, broadcast, alltoallv, barrier.

// Fills counts/displs (int) from byte counts; false if any count or offset
// exceeds kMaxMessageBytes.
bool IntLayout(const size_t* bytes, int n, std::vector<int>* counts, std::vector<int>* displs) {
  counts->resize(static_cast<size_t>(n));
  displs->resize(static_cast<size_t>(n));
  size_t off = 0;
  for (int i = 0; i < n; ++i) {
    if (bytes[i] > kMaxMessageBytes || off > kMaxMessageBytes) return false;
    (*counts)[i] = static_cast<int>(bytes[i]);
    (*displs)[i] = static_cast<int>(off);
    off += bytes[i];
  }
  return off <= kMaxMessageBytes;
}

// Ring allgather of blocks of any size: at step s rank r forwards block
// (r - s) to the right and receives block (r - s - 1) from the left, in
// chunks of at most kMaxMessageBytes.
void RingAllgatherv(Comm& c, uint8_t* out, const size_t* bytes, const std::vector<size_t>& offs) {
  const int P = c.size, r = c.rank;
  const int right = (r + 1) % P, left = (r + P - 1) % P;
  for (int s = 0; s < P - 1; ++s) {
    const int sb = (r - s + P) % P;
    const int rb = (r - s - 1 + 2 * P) % P;
    c.recvs.clear();
    c.sends.clear();
    RecvChunked(c, out + offs[rb], bytes[rb], left, kTagGatherv);
    SendChunked(c, out + offs[sb], bytes[sb], right, kTagGatherv);
    WaitVector(c, &c.recvs, "allgatherv receive");
    WaitVector(c, &c.sends, "allgatherv send");
  }
}

int DoAllgatherv(Comm& c, const void* send, void* recv, const size_t* recv_bytes) {
  if (recv_bytes == nullptr) {
    c.last_error = "mpi allgatherv: recv_bytes is NULL";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  const int P = c.size;
  std::vector<size_t>& offs = c.offs;
  offs.resize(static_cast<size_t>(P));
  size_t total = 0;
  for (int r = 0; r < P; ++r) {
    offs[r] = total;
    total += recv_bytes[r];
  }
  if (total == 0) return HVD_OK;
  const size_t mine = recv_bytes[c.rank];
  if (recv == nullptr || (mine > 0 && send == nullptr)) {
    c.last_error = "mpi allgatherv: NULL buffer";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  uint8_t* out = static_cast<uint8_t*>(recv);
  uint8_t* my_place = out + offs[c.rank];
  const bool in_place = mine == 0 || send == my_place;
  if (P == 1) {
    if (!in_place) std::memmove(my_place, send, mine);
    return HVD_OK;
  }
  if (c.shm) {
    shm::Allgatherv(*c.shm, static_cast<const uint8_t*>(send), out, recv_bytes);
    return HVD_OK;
  }
  if (IntLayout(recv_bytes, P, &c.counts, &c.displs)) {
    MPI_Request req = MPI_REQUEST_NULL;
    {
      CallLock lock(c);
      CheckMpi(MPI_Iallgatherv(in_place ? MPI_IN_PLACE : send, static_cast<int>(mine), MPI_BYTE,
                               out, c.counts.data(), c.displs.data(), MPI_BYTE, c.comm, &req),
               "MPI_Iallgatherv");
    }
    Wait(c, &req, "MPI_Iallgatherv");
    return HVD_OK;
  }
  if (!in_place) std::memmove(my_place, send, mine);
  RingAllgatherv(c, out, recv_bytes, offs);
  return HVD_OK;
}

int DoBroadcast(Comm& c, void* buf, size_t bytes, int32_t root) {
  if (root < 0 || root >= c.size) {
    c.last_error = "mpi broadcast: root " + std::to_string(root) + " out of range";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  if (bytes == 0 || c.size == 1) return HVD_OK;
  if (buf == nullptr) {
    c.last_error = "mpi broadcast: NULL buffer";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  uint8_t* p = static_cast<uint8_t*>(buf);
  if (c.shm) {
    shm::Broadcast(*c.shm, p, bytes, root);
    return HVD_OK;
  }
  for (size_t off = 0; off < bytes; off += kMaxMessageBytes) {
    const int n = static_cast<int>(std::min(kMaxMessageBytes, bytes - off));
    MPI_Request req = MPI_REQUEST_NULL;
    {
      CallLock lock(c);
      CheckMpi(MPI_Ibcast(p + off, n, MPI_BYTE, root, c.comm, &req), "MPI_Ibcast");
    }
    Wait(c, &req, "MPI_Ibcast");
  }
  return HVD_OK;
}

int DoAlltoallv(Comm& c, const void* send, const size_t* send_bytes, void* recv,
                const size_t* recv_bytes) {
  if (send_bytes == nullptr || recv_bytes == nullptr) {
    c.last_error = "mpi alltoallv: byte counts are NULL";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  const int P = c.size, me = c.rank;
  if (send_bytes[me] != recv_bytes[me]) {
    c.last_error = "mpi alltoallv: this rank sends " + std::to_string(send_bytes[me]) +
                   " bytes to itself but expects " + std::to_string(recv_bytes[me]);
    return HVD_ERR_INVALID_ARGUMENT;
  }
  std::vector<size_t>& soff = c.offs;
  std::vector<size_t>& roff = c.offs2;
  soff.resize(static_cast<size_t>(P));
  roff.resize(static_cast<size_t>(P));
  size_t in_total = 0, out_total = 0;
  for (int r = 0; r < P; ++r) {
    soff[r] = in_total;
    roff[r] = out_total;
    in_total += send_bytes[r];
    out_total += recv_bytes[r];
  }
  if ((in_total > 0 && send == nullptr) || (out_total > 0 && recv == nullptr)) {
    c.last_error = "mpi alltoallv: NULL buffer";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  const uint8_t* in = static_cast<const uint8_t*>(send);
  uint8_t* out = static_cast<uint8_t*>(recv);
  if (P == 1) {
    if (in_total) std::memmove(out, in, in_total);
    return HVD_OK;
  }
  static uint8_t dummy[1];
  if (IntLayout(send_bytes, P, &c.counts, &c.displs) &&
      IntLayout(recv_bytes, P, &c.counts2, &c.displs2)) {
    MPI_Request req = MPI_REQUEST_NULL;
    {
      CallLock lock(c);
      CheckMpi(MPI_Ialltoallv(in ? in : dummy, c.counts.data(), c.displs.data(), MPI_BYTE,
                              out ? out : dummy, c.counts2.data(), c.displs2.data(), MPI_BYTE,
                              c.comm, &req),
               "MPI_Ialltoallv");
    }
    Wait(c, &req, "MPI_Ialltoallv");
    return HVD_OK;
  }
  // Pairwise exchange in chunks: at step i send to me + i, receive from me - i.
  if (send_bytes[me]) std::memmove(out + roff[me], in + soff[me], send_bytes[me]);
  for (int i = 1; i < P; ++i) {
    const int to = (me + i) % P, from = (me - i + P) % P;
    c.recvs.clear();
    c.sends.clear();
    RecvChunked(c, out + roff[from], recv_bytes[from], from, kTagAlltoall);
    SendChunked(c, in + soff[to], send_bytes[to], to, kTagAlltoall);
    WaitVector(c, &c.recvs, "alltoallv receive");
    WaitVector(c, &c.sends, "alltoallv send");
  }
  return HVD_OK;
}

int DoBarrier(Comm& c) {
  if (c.size == 1) return HVD_OK;
  if (c.shm) {
    c.shm->Barrier("barrier");
    return HVD_OK;
  }
  MPI_Request req = MPI_REQUEST_NULL;
  {
    CallLock lock(c);
    CheckMpi(MPI_Ibarrier(c.comm, &req), "MPI_Ibarrier");
  }
  Wait(c, &req, "MPI_Ibarrier");
  return HVD_OK;
}

// ---------------------------------------------------------------------------
// Init and finalize.

void WriteErr(char* err, size_t err_len, const std::string& msg) {
  if (err == nullptr || err_len == 0) return;
  const size_t n = std::min(err_len - 1, msg.size());
  std::memcpy(err, msg.data(), n);
  err[n] = '\0';
}

// Frees the user-defined ops and, if hvd initialised MPI, finalises it, once
// no hvd communicator is left. Called with ps.mu held.
void ReleaseProcessLocked(ProcessState& ps, const Comm* c) {
  if (ps.live_comms > 0) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    ps.ops_ready = false;
    return;
  }
  if (ps.ops_ready) {
    for (auto& row : ps.ops) {
      for (MPI_Op& op : row) {
        if (op != MPI_OP_NULL) MPI_Op_free(&op);
      }
    }
    ps.ops_ready = false;
  }
  if (!ps.we_initialized) return;
  if (ps.abandoned) {
    // MPI_Finalize would wait for the abandoned requests forever.
    if (c != nullptr) {
      c->Log(HVD_LOG_WARNING,
             "mpi: not finalising MPI: a failed operation left requests pending or peers out "
             "of step (timeout, or a peer gone); the job "
             "launcher will report this process as having exited without MPI_Finalize");
    }
    return;
  }
  MPI_Finalize();
  ps.we_finalized = true;
}

// The allgather shm::Setup needs, over the plugin's own communicator: the
// lengths (MPI_Iallgather), then the bytes (MPI_Iallgatherv), each completed
// by WaitAll, so the transport timeout holds here too.
class MpiExchange : public shm::Exchange {
 public:
  explicit MpiExchange(Comm& c) : c_(c) {}

  int Allgather(const char* round, const std::string& mine, std::vector<std::string>* all,
                std::string* err) override {
    try {
      const int P = c_.size;
      if (mine.size() > static_cast<size_t>(INT_MAX) / static_cast<size_t>(P)) {
        *err = std::string("shm ") + round + ": string too long";
        return HVD_ERR_INTERNAL;
      }
      int len = static_cast<int>(mine.size());
      std::vector<int> lens(static_cast<size_t>(P)), displs(static_cast<size_t>(P));
      MPI_Request req = MPI_REQUEST_NULL;
      {
        CallLock lock(c_);
        CheckMpi(MPI_Iallgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, c_.comm, &req),
                 "MPI_Iallgather");
      }
      Wait(c_, &req, "MPI_Iallgather (shm setup)");
      size_t total = 0;
      for (int j = 0; j < P; ++j) {
        displs[j] = static_cast<int>(total);
        total += static_cast<size_t>(lens[j]);
        if (lens[j] < 0 || total > static_cast<size_t>(INT_MAX)) {
          *err = std::string("shm ") + round + ": bad lengths";
          return HVD_ERR_INTERNAL;
        }
      }
      std::vector<char> bytes(std::max<size_t>(total, 1));
      static char dummy;
      {
        CallLock lock(c_);
        CheckMpi(MPI_Iallgatherv(mine.empty() ? &dummy : mine.data(), len, MPI_CHAR,
                                 bytes.data(), lens.data(), displs.data(), MPI_CHAR, c_.comm,
                                 &req),
                 "MPI_Iallgatherv");
      }
      Wait(c_, &req, "MPI_Iallgatherv (shm setup)");
      all->resize(static_cast<size_t>(P));
      for (int j = 0; j < P; ++j) (*all)[j].assign(bytes.data() + displs[j], lens[j]);
      return HVD_OK;
    } catch (const Failure& f) {
      *err = f.msg;
      return f.code;
    }
  }

 private:
  Comm& c_;
};

// Agrees with every peer on whether the shm path is used (HVD_MPI_SHM not 0
// anywhere, one host identity) and maps the segment if so; any failure other
// than the exchange's own leaves every rank on MPI, logged.
int SetupShm(Comm& c, std::string* err) {
  shm::Options o;
  o.transport = "mpi";
  o.enabled = c.shm_enabled;
  o.switch_name = "HVD_MPI_SHM";
  o.name_prefix = "/hvd-mpi-";
  o.fallback = "MPI";
  o.rank = c.rank;
  o.size = c.size;
  o.timeout_s = c.timeout_s;
  o.slot_bytes = kShmSlotBytes;
  o.small_fanout_bytes = kShmSmallFanoutBytes;
  o.log = [&c](int level, const std::string& msg) { c.Log(level, msg); };
  MpiExchange ex(c);
  return shm::Setup(ex, o, &c.shm, err);
}

// The plugin's own settings, read once at init, here and nowhere else. The
// core resolves every other setting and hands it over in the env table, but
// tables of ABI versions 1 and 2 carry no field for these, so the plugin
// reads them from the process environment itself:
//   HVD_MPI_SHM  the shared-memory path (0, false, off, no: off; default on).
void ReadSettings(Comm* c) { c->shm_enabled = shm::SwitchOn(std::getenv("HVD_MPI_SHM")); }

// MPI_Comm_dup, MPI_Comm_split_type and MPI_Comm_split block until every rank
// of the communicator calls them: one rank that never gets here would hang the
// others inside hvd_init. A non-blocking barrier polled against the start
// timeout goes first: once it completes every rank has arrived, so the
// blocking calls that follow complete too. Returns HVD_OK, or HVD_ERR_TIMEOUT
// with *msg naming the limit (MPI cannot say which ranks are missing; the
// communicator is left as it is: MPI offers no way to cancel a barrier).
int AwaitEveryRank(MPI_Comm base, double timeout_s, std::string* msg) {
  if (timeout_s <= 0) return HVD_OK;  // unbounded, as configured
  MPI_Request req = MPI_REQUEST_NULL;
  int rc = MPI_Ibarrier(base, &req);
  if (rc != MPI_SUCCESS) {
    *msg = "mpi init: MPI_Ibarrier failed: " + MpiErrorText(rc);
    return HVD_ERR_TRANSPORT;
  }
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(timeout_s));
  for (;;) {
    int done = 0;
    rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      *msg = "mpi init: MPI_Test on the start-up barrier failed: " + MpiErrorText(rc);
      return HVD_ERR_TRANSPORT;
    }
    if (done) return HVD_OK;
    const auto now = Clock::now();
    if (now > deadline) {
      int size = 0;
      MPI_Comm_size(base, &size);
      char secs[32];
      std::snprintf(secs, sizeof(secs), "%g", timeout_s);
      *msg = std::string("mpi init: not every one of the ") + std::to_string(size) +
             " ranks reached hvd's start-up within " + secs +
             " s (start timeout, HVD_START_TIMEOUT): a rank never started, died, or has "
             "not called hvd_init; under hvdrun --transport mpi, hvdrun names the missing "
             "ranks";
      return HVD_ERR_TIMEOUT;
    }
    nanosleep(&kBackoffSleep, nullptr);
  }
}

int InitImpl(const hvd_transport_env_v1_t* env_in, std::unique_ptr<Comm>* out,
             std::string* msg) {
  if (env_in == nullptr || env_in->struct_size < offsetof(hvd_transport_env_v1_t, timeout_s) +
                                                     sizeof(double)) {
    *msg = "mpi init: missing or too small environment table";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  auto c = std::make_unique<Comm>();
  std::memcpy(&c->env, env_in, std::min(env_in->struct_size, sizeof(c->env)));
  ReadSettings(c.get());
  const hvd_transport_env_v1_t& env = c->env;
  const bool has_comm_field =
      env_in->struct_size >= offsetof(hvd_transport_env_v1_t, mpi_comm) + sizeof(void*);
  void* user_comm_ptr = has_comm_field ? env.mpi_comm : nullptr;
  c->timeout_s = env.timeout_s;
  c->reduce = env.reduce != nullptr ? env.reduce : &hvd_reduce_kernel;

  PinInMemory();
  ProcessState& ps = Process();
  std::lock_guard<std::mutex> guard(ps.mu);

  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) {
    *msg = ps.we_finalized
               ? "mpi init: hvd finalised MPI when this process's last MPI context was "
                 "destroyed, and MPI cannot be initialised twice; keep one hvd context alive, "
                 "or call MPI_Init_thread and MPI_Finalize in the application yourself"
               : "mpi init: the application has already finalised MPI";
    return HVD_ERR_UNSUPPORTED;
  }
  if (user_comm_ptr != nullptr && !initialized) {
    *msg = "mpi init: params.mpi_comm is set but MPI is not initialised (call MPI_Init_thread "
           "before creating the context)";
    return HVD_ERR_INVALID_ARGUMENT;
  }

  int provided = MPI_THREAD_SINGLE;
  bool initialized_now = false;
  if (!initialized) {
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) {
      *msg = "mpi init: MPI_Init_thread failed: " + MpiErrorText(rc);
      return HVD_ERR_TRANSPORT;
    }
    ps.we_initialized = true;
    initialized_now = true;
  } else {
    MPI_Query_thread(&provided);
  }
  // Undoes our MPI_Init_thread when this first communicator cannot start.
  auto fail = [&](int code, const std::string& text) {
    *msg = text;
    if (initialized_now && ps.live_comms == 0) ReleaseProcessLocked(ps, nullptr);
    return code;
  };
  c->thread_level = provided;
  if (provided < MPI_THREAD_SERIALIZED) {
    return fail(
        HVD_ERR_UNSUPPORTED,
        std::string("mpi init: MPI runs at ") + ThreadLevelName(provided) +
            (initialized_now ? " (the most this MPI library provides)"
                             : " (as the application initialised it)") +
            ", so only the thread that initialised MPI may call it, but hvd makes its MPI "
            "calls from the context's background thread. Initialise MPI with "
            "MPI_Init_thread(..., MPI_THREAD_MULTIPLE (or MPI_THREAD_SERIALIZED), ...) before "
            "hvd (mpi4py: set mpi4py.rc.thread_level = \"multiple\" before importing MPI), or "
            "leave MPI uninitialised and let hvd initialise it");
  }
  c->serialize = provided < MPI_THREAD_MULTIPLE;
  if (c->serialize) {
    c->Log(HVD_LOG_WARNING,
           std::string("mpi: MPI runs at ") + ThreadLevelName(provided) +
               ", not MPI_THREAD_MULTIPLE. hvd makes its MPI calls from its background thread "
               "and serialises them across its contexts, which is enough for hvd itself; but "
               "the application must not call MPI (mpi4py included) while hvd operations are "
               "in flight, i.e. between submitting an operation and its handle completing. "
               "Initialise MPI with MPI_THREAD_MULTIPLE to mix freely.");
  }

  MPI_Comm base = MPI_COMM_WORLD;
  if (user_comm_ptr != nullptr) {
    base = *static_cast<MPI_Comm*>(user_comm_ptr);
    if (base == MPI_COMM_NULL) return fail(HVD_ERR_INVALID_ARGUMENT, "mpi init: params.mpi_comm is MPI_COMM_NULL");
  }
  {
    CallLock lock(*c);
    const int gate = AwaitEveryRank(base, env.start_timeout_s, msg);
    if (gate != HVD_OK) {
      // Some ranks are inside the barrier: MPI cannot be finalised safely.
      c->abandoned = true;
      ps.abandoned = true;
      std::string text = *msg;
      return fail(gate, text);
    }
    int rc = MPI_Comm_dup(base, &c->comm);
    if (rc != MPI_SUCCESS) {
      c->comm = MPI_COMM_NULL;
      return fail(HVD_ERR_TRANSPORT, "mpi init: MPI_Comm_dup failed: " + MpiErrorText(rc));
    }
    MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->comm, &c->rank);
    MPI_Comm_size(c->comm, &c->size);

    // Topology: ranks sharing memory with us (one node), and ranks with our
    // local rank on the other nodes.
    MPI_Comm local = MPI_COMM_NULL, cross = MPI_COMM_NULL;
    rc = MPI_Comm_split_type(c->comm, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &local);
    if (rc == MPI_SUCCESS) {
      MPI_Comm_rank(local, &c->local_rank);
      MPI_Comm_size(local, &c->local_size);
      MPI_Comm_free(&local);
      rc = MPI_Comm_split(c->comm, c->local_rank, c->rank, &cross);
    }
    if (rc == MPI_SUCCESS) {
      MPI_Comm_rank(cross, &c->cross_rank);
      MPI_Comm_size(cross, &c->cross_size);
      MPI_Comm_free(&cross);
    }
    if (rc != MPI_SUCCESS) {
      MPI_Comm_free(&c->comm);
      return fail(HVD_ERR_TRANSPORT, "mpi init: splitting the communicator by node failed: " +
                                         MpiErrorText(rc));
    }
    if (!ps.ops_ready) {
      for (auto& row : ps.ops) {
        for (MPI_Op& op : row) op = MPI_OP_NULL;
      }
      rc = CreateOps<HVD_FLOAT16>(ps.ops[0]);
      if (rc == MPI_SUCCESS) rc = CreateOps<HVD_BFLOAT16>(ps.ops[1]);
      if (rc == MPI_SUCCESS) rc = CreateOps<HVD_BOOL>(ps.ops[2]);
      ps.ops_ready = true;  // so that a failure frees what was made
      if (rc != MPI_SUCCESS) {
        MPI_Comm_free(&c->comm);
        return fail(HVD_ERR_TRANSPORT, "mpi init: MPI_Op_create failed: " + MpiErrorText(rc));
      }
    }
  }
  if (c->size > 1) c->scratch = AllocTouched(2 * kSegmentBytes);
  if (c->size > 1 && c->local_size == c->size) {
    // Every rank shares memory with every other (the same answer on all
    // ranks, so all of them take part in the exchange or none does).
    std::string err;
    const int st = SetupShm(*c, &err);
    if (st != HVD_OK) {
      if (c->abandoned) {
        ps.abandoned = true;  // requests still reference the communicator
      } else {
        CallLock lock(*c);
        MPI_Comm_free(&c->comm);
      }
      return fail(st, "mpi init: setting up shared memory: " + err);
    }
  }
  ++ps.live_comms;

  char line[512];
  std::snprintf(line, sizeof(line),
                "mpi: rank %d of %d (local %d of %d, cross %d of %d), %s, %s communicator; "
                "allreduce: MPI below %zu B per rank, else a ring in segments of %zu B; "
                "messages of at most %zu B; shared memory %s",
                c->rank, c->size, c->local_rank, c->local_size, c->cross_rank, c->cross_size,
                ThreadLevelName(provided), user_comm_ptr != nullptr ? "the application's" : "world",
                kRingMinPartBytes, kSegmentBytes, kMaxMessageBytes, c->shm ? "on" : "off");
  c->Log(HVD_LOG_DEBUG, line);
  *out = std::move(c);
  return HVD_OK;
}

int Init(const hvd_transport_env_v1_t* env, void** comm, char* err, size_t err_len) noexcept {
  if (comm == nullptr) {
    WriteErr(err, err_len, "mpi init: comm is NULL");
    return HVD_ERR_INVALID_ARGUMENT;
  }
  *comm = nullptr;
  std::string msg;
  int status = HVD_ERR_INTERNAL;
  try {
    std::unique_ptr<Comm> c;
    status = InitImpl(env, &c, &msg);
    if (status == HVD_OK) {
      *comm = c.release();
      return HVD_OK;
    }
  } catch (const std::bad_alloc&) {
    msg = "mpi init: out of memory";
    status = HVD_ERR_NO_MEMORY;
  } catch (const std::exception& e) {
    msg = std::string("mpi init: ") + e.what();
    status = HVD_ERR_TRANSPORT;
  } catch (...) {
    msg = "mpi init: unknown exception";
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
  try {
    if (c->shm) c->shm->Depart();
    c->shm.reset();  // munmap; the segment was unlinked at init
  } catch (...) {
  }
  try {
    ProcessState& ps = Process();
    std::lock_guard<std::mutex> guard(ps.mu);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) {
      c->Log(HVD_LOG_WARNING,
             "mpi: MPI was finalised before this hvd context was destroyed; destroy hvd "
             "contexts (hvd_shutdown) before MPI_Finalize");
    } else if (c->abandoned) {
      ps.abandoned = true;  // requests still reference the communicator
    } else if (c->comm != MPI_COMM_NULL) {
      CallLock lock(*c);
      MPI_Comm_free(&c->comm);
    }
    --ps.live_comms;
    ReleaseProcessLocked(ps, c);
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
  return Guarded(comm, "allgatherv",
                 [&](Comm& c) { return DoAllgatherv(c, send, recv, recv_bytes); });
}

int Broadcast(void* comm, void* buf, size_t bytes, int32_t root) noexcept {
  return Guarded(comm, "broadcast", [&](Comm& c) { return DoBroadcast(c, buf, bytes, root); });
}

int Alltoallv(void* comm, const void* send, const size_t* send_bytes, void* recv,
              const size_t* recv_bytes) noexcept {
  return Guarded(comm, "alltoallv", [&](Comm& c) {
    return DoAlltoallv(c, send, send_bytes, recv, recv_bytes);
  });
}

int Barrier(void* comm) noexcept {
  return Guarded(comm, "barrier", [&](Comm& c) { return DoBarrier(c); });
}

int Query(void* comm, const char* key, int64_t* value) noexcept {
  const Comm* c = static_cast<const Comm*>(comm);
  if (c == nullptr || key == nullptr || value == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  struct {
    const char* key;
    int64_t value;
  } const props[] = {
      {"rank", c->rank},
      {"size", c->size},
      {"local_rank", c->local_rank},
      {"local_size", c->local_size},
      {"cross_rank", c->cross_rank},
      {"cross_size", c->cross_size},
      {"mpi_thread_level", c->thread_level},
      {"mpi_thread_multiple", c->thread_level >= MPI_THREAD_MULTIPLE ? 1 : 0},
  };
  if (shm::Query(c->shm.get(), key, value)) return HVD_OK;  // the shared-memory path's keys
  for (const auto& p : props) {
    if (std::strcmp(key, p.key) == 0) {
      *value = p.value;
      return HVD_OK;
    }
  }
  return HVD_ERR_UNSUPPORTED;
}

const char* LastError(void* comm) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return "mpi: no communicator";
  return c->last_error.c_str();
}

const hvd_transport_v1_t kTable = {
    HVD_TRANSPORT_ABI_V1,
    "mpi",
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

}  // namespace
}  // namespace mpi_transport
}  // namespace hvd

extern "C" __attribute__((visibility("default"))) const hvd_transport_v1_t*
hvd_transport_plugin_v1(void) {
  return &hvd::mpi_transport::kTable;
}

extern "C" __attribute__((visibility("default"))) const hvd_transport_v2_t*
hvd_transport_plugin_v2(void) {
  return &hvd::mpi_transport::kTableV2;
}
