// The MPI transport: point-to-point over MPI_Isend/MPI_Irecv
// and MPI's nonblocking collectives as the native entries. It needs only
// hvd.h, hvd_transport.h, MPI and the standard library: the model of a
// plugin written outside the project.
//
// Communicator: a duplicate of the application's (option mpi_comm) or of
// MPI_COMM_WORLD, returning errors (MPI_ERRORS_RETURN); its ranks must be
// hvd's. MPI: if uninitialised, init calls MPI_Init_thread (MULTIPLE) and the
// last communicator to go calls MPI_Finalize, unless requests were left that
// MPI could not complete or cancel (MPI_Finalize could hang; the job ends
// without it). Below MPI_THREAD_SERIALIZED init fails (hvd calls MPI from its
// loop thread, or from a waiting caller's: HVD_TRANSPORT_CAP_ANY_THREAD); at SERIALIZED every MPI call takes one process-wide lock.
// Start-up is bounded: an MPI_Ibarrier polled against env.start_timeout_s
// comes first, so a missing rank fails init instead of hanging in
// MPI_Comm_dup; then processor names are exchanged for "rank R (host H)".
//
// Waiting: one polling loop (MPI_Testall: spin 100 us, then yield, after 5 ms
// sleep 50 us) until done, the limit (HVD_ERR_TIMEOUT naming the peer; the
// communicator is then broken) or an abort (from any thread: an atomic read
// at every poll). A request given up is cancelled where MPI allows it
// (receives) and kept; finalize completes what it can within a bound, frees
// what it may (sends) and leaves the rest.
//
// native_max_bytes, measured on the development machine (2 cores, Open MPI
// 4.1 over shared memory, 2 and 4 ranks (4: oversubscribed); float32 SUM;
// median of 9 runs): native MPI_I* vs a ring (allreduce, reducescatter,
// allgatherv), a chain in 256 KiB segments (broadcast) or an all-at-once
// exchange (alltoallv) over Isend/Irecv, polled as here. Times in us,
// native / point-to-point:
//                 1 KiB       64 KiB      1 MiB       4 MiB       16 MiB
//   2 ranks
//   allreduce     1.1/1.0     33/25       358/282     1611/1040   11321/6845
//   allgatherv    1.4/1.1     7.4/7.1     50/48       177/197     802/810
//   broadcast     1.3/1.1     8.6/8.4     87/99       352/410     2886/3068
//   alltoallv     1.5/1.4     8.0/8.2     67/67       272/256     2601/2096
//   reducescatter 2.4/1.4     71/33       915/436     3426/1695   17033/4511
//   4 ranks
//   allreduce     10/11       89/104      779/996     4152/2991   22517/20025
//   allgatherv    5.7/7.6     29/40       168/179     683/698     8687/11381
//   broadcast     11/9.0      34/32       296/367     1175/1589   7168/9437
//   alltoallv     12/9.2      63/58       355/354     2647/2249   10776/9746
//   reducescatter 13/14       76/108      898/996     5086/4197   43459/22413
// A limit is the largest size up to which native is never slower by more
// than 10% or 1 us (a second series, under more load, agreed): 2 ranks:
// allreduce and reducescatter never, alltoallv to 4 MiB, allgatherv and
// broadcast always; 3 ranks and more: allreduce and reducescatter to 1 MiB,
#pragma once

// allgatherv and broadcast always (broadcast loses 1-2 us below 64 KiB, wins
// 20-35% from 1 MiB), alltoallv never. Barrier: always.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hvd_transport.h"
#include "kit/deadline.h"
#include "kit/errors.h"
#include "kit/p2p.h"

// A request: one MPI request, or several when a message exceeds INT_MAX bytes
// (sent and received as chunks of kChunk bytes with the same tag, which MPI
// keeps in order).
struct hvd_transport_request {
  std::vector<MPI_Request> mpi;
  int32_t peer = -1;
  uint32_t tag = 0;
  size_t bytes = 0;
  bool recv = false;
};

namespace hvd_mpi_transport {


using hvd::kit::Clock;
using hvd::kit::Secs;
using Request = hvd_transport_request;
#ifndef HVD_MPI_MAX_MESSAGE_BYTES
#define HVD_MPI_MAX_MESSAGE_BYTES (size_t{1} << 30)
#endif
constexpr size_t kChunk = HVD_MPI_MAX_MESSAGE_BYTES;
constexpr int kMaxHost = 256;

// Process-wide: MPI is one per process.
struct Process {
  std::mutex mu;  // guards the fields below
  int live = 0;
  bool we_initialized = false, abandoned = false, ops_ready = false;
  MPI_Op half_ops[2][4];  // float16, bfloat16 x SUM, MIN, MAX, PRODUCT
  std::mutex call_mu;     // below MPI_THREAD_MULTIPLE: taken around every MPI call
};
inline Process& Proc() {
  static Process* p = new Process();  // never destroyed: used until exit
  return *p;
}
inline std::atomic<hvd_reduce_kernel_fn> g_reduce{nullptr};  // the core's kernel, for the user ops

template <hvd_dtype_t D, hvd_reduce_op_t O>
void HalfOp(void* in, void* inout, int* len, MPI_Datatype*) {
  g_reduce.load()(inout, in, static_cast<size_t>(*len), D, O);
}

struct Comm {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  uint32_t max_tag = 32767;
  bool serialize = false;
  std::vector<std::string> hosts;
  double env_timeout = 0, limit = 0;
  bool limit_set = false;
  int32_t limit_kind = HVD_TRANSPORT_LIMIT_TRANSFER;
  void* logger = nullptr;
  void (*log)(void*, int, const char*) = nullptr;
  std::string last_error = "mpi: no error";
  int broken = HVD_OK;               // loop thread: the error that broke it
  std::atomic<int> failure{HVD_OK};  // any thread: broken or aborted (async_error)
  std::atomic<int> aborted{HVD_OK};
  std::mutex abort_mu;
  std::string abort_reason;
  struct Left {
    MPI_Request req;
    bool recv, coll;
  };
  std::vector<Left> left;  // requests given up, completed at finalize

  std::string Peer(int r) const {
    return "rank " + std::to_string(r) + " (host " +
           (r >= 0 && r < static_cast<int>(hosts.size()) ? hosts[r] : "?") + ")";
  }
  void Log(int level, const std::string& m) const {
    if (log != nullptr) log(logger, level, m.c_str());
  }
};

// Takes the process-wide call lock when MPI runs below MPI_THREAD_MULTIPLE.
struct CallLock {
  std::unique_lock<std::mutex> lk;
  explicit CallLock(bool serialize) {
    if (serialize) lk = std::unique_lock<std::mutex>(Proc().call_mu);
  }
};

inline std::string MpiText(int rc) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS || len <= 0)
    return "MPI error " + std::to_string(rc);
  return std::string(text, static_cast<size_t>(len));
}
// A failure thrown inside an entry point; `breaks` marks the communicator.
struct Fail {
  int code;
  std::string msg;
  bool breaks;
};
[[noreturn]] inline void Throw(int code, std::string msg, bool breaks = false) {
  throw Fail{code, std::move(msg), breaks};
}
inline void Check(int rc, const char* what) {
  if (rc != MPI_SUCCESS)
    Throw(HVD_ERR_TRANSPORT, std::string("mpi ") + what + ": " + MpiText(rc), true);
}

// Fails fast when the communicator is aborted or broken (loop thread).
inline int Failed(Comm& c) {
  if (int st = c.aborted.load()) {
    std::lock_guard<std::mutex> g(c.abort_mu);
    c.last_error = c.abort_reason;
    return st;
  }
  return c.broken;
}

// ---------------------------------------------------------------------------
// Across the plugin's files (faults.cc, comm.cc, p2p.cc, collectives.cc,
// plugin.cc).

// p2p.cc
void GiveUp(Comm& c, MPI_Request* reqs, int n, bool recv, bool coll);
void Poll(Comm& c, MPI_Request* reqs, int n, double timeout_s, const Request* p2p,
          const char* what);
int Post(void* comm, int32_t peer, uint32_t tag, const hvd_transport_buffer_t* buf,
         hvd_transport_request_t** req, bool send) noexcept;
int Wait(void* comm, hvd_transport_request_t* req, double timeout_s) noexcept;
int Test(void* comm, hvd_transport_request_t* req, int* done) noexcept;
int Progress(void* comm) noexcept;

// collectives.cc
int Allreduce(void* comm, const hvd_transport_buffer_t* buf, size_t count, hvd_dtype_t dtype,
              hvd_reduce_op_t op) noexcept;
int Reducescatter(void* comm, const hvd_transport_buffer_t* buf, const size_t* counts,
                  hvd_dtype_t dtype, hvd_reduce_op_t op) noexcept;
int Allgatherv(void* comm, const hvd_transport_buffer_t* send, const hvd_transport_buffer_t* recv,
               const size_t* recv_bytes) noexcept;
int Broadcast(void* comm, const hvd_transport_buffer_t* buf, int32_t root) noexcept;
int Alltoallv(void* comm, const hvd_transport_buffer_t* send, const size_t* send_bytes,
              const hvd_transport_buffer_t* recv, const size_t* recv_bytes) noexcept;
int Barrier(void* comm) noexcept;

// faults.cc
int Abort(void* comm, int status, const char* reason) noexcept;
int AsyncError(void* comm) noexcept;
int SetTimeout(void* comm, double timeout_s, int32_t kind) noexcept;
const char* LastError(void* comm) noexcept;

// comm.cc
// What init reads from the env (plugin.cc, ReadEnv): the set-up's input.
struct Settings {
  void* user_comm = nullptr;  // the application's MPI_Comm*, or none
  double start_timeout = 0;   // the start-up barrier's bound
  double timeout_s = 0;       // the transfer limit
  void* logger = nullptr;
  void (*log)(void*, int, const char*) = nullptr;
  hvd_reduce_kernel_fn reduce = nullptr;  // the core's kernel, for the user ops
};
void Setup(const Settings& s, hvd_transport_info_t* info, Comm* c);
void CleanUp(Comm* c, double wait_s);
void Finalize(void* comm) noexcept;


// The exception wall of every entry point but init and finalize.
template <typename F>
int Guard(void* handle, F&& body) noexcept {
  Comm* c = static_cast<Comm*>(handle);
  if (c == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  try {
    if (int st = Failed(*c)) return st;
    return body(*c);
  } catch (const Fail& f) {
    if (f.code == c->aborted.load()) return Failed(*c);
    try {
      c->last_error = f.msg;
    } catch (...) {
    }
    if (f.breaks) {
      c->broken = f.code;
      int ok = HVD_OK;
      c->failure.compare_exchange_strong(ok, f.code);
    }
    return f.code;
  } catch (const std::bad_alloc&) {
    c->last_error = "mpi: out of memory";
    return HVD_ERR_NO_MEMORY;
  } catch (...) {
    c->last_error = "mpi: unexpected exception";
    return HVD_ERR_INTERNAL;
  }
}

// Starts one MPI_I* collective under the call lock and completes it.
template <typename Start>
void Coll(Comm& c, const char* what, Start&& start, double timeout_s = -1) {
  MPI_Request r = MPI_REQUEST_NULL;
  {
    CallLock lock(c.serialize);
    Check(start(&r), what);
  }
  Poll(c, &r, 1, timeout_s, nullptr, what);
}

}  // namespace hvd_mpi_transport
