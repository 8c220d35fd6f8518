// The NCCL transport: native collectives on CUDA device memory
// (allreduce, allgatherv, broadcast, alltoallv, reducescatter, barrier), no
// point-to-point (the core's own algorithms do not run over it), plus faults
// (abort, async_error) and set_timeout. It needs only hvd.h, hvd_transport.h,
// the CUDA runtime and NCCL. Built into libhvd_transport_nccl.so
// (hvd_transport_plugin).
//
// Init: cudaGetDeviceCount first (no device: HVD_ERR_UNSUPPORTED naming the
// host), then cudaSetDevice(local_rank % devices). Rank 0 makes the
// ncclUniqueId and publishes it in the store under "nccl/unique_id" (or, if
// it failed before that, its message, so the others fail at once naming it);
// the others read it within the start timeout. The communicator is made with
// ncclCommInitRankConfig(blocking = 0) and polled (ncclCommGetAsyncError)
// against the start timeout; ncclCommAbort on expiry.
//
// Collectives: every one runs on the plugin's own stream (non-blocking,
// highest priority), ordered after the caller's stream (the buffers' stream
// fields) by an event, and the caller's stream is made to wait for the
// plugin's by another event, so the result is ordered on the caller's stream
// (CAP_STREAM_ORDERED). The call then waits for completion by polling
// (cudaEventQuery, ncclCommGetAsyncError, the abort flag) against the limit
// in force (set_timeout's, else env.timeout_s), so every call returns
// complete and its failures are its own; async_error reports NCCL's
// asynchronous errors between calls.
//
// Faults: the first failure (a timeout, an NCCL or CUDA error, an abort)
// breaks the communicator: ncclCommAbort, the message kept, every later call
// returns that status. abort (any thread) only records the status and reason;
// the polling loop (the core's thread) sees it within microseconds and aborts
// the NCCL communicator. async_error (any thread) never blocks: it reads the
// recorded status and asks NCCL only when it can take the lock that guards
// the communicator's lifetime without waiting.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>
#include <nccl.h>

// Non-blocking communicators (ncclConfig_t.blocking, ncclInProgress) came in
// NCCL 2.14, ncclAvg in 2.10 (CMake refuses an older nccl.h first).
#if !defined(NCCL_VERSION_CODE) || NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "the NCCL transport needs NCCL 2.14 or later (non-blocking communicators)"
#endif

#include "hvd.h"
#include "hvd_transport.h"
#include "kit/deadline.h"
#include "kit/errors.h"
#include "kit/store.h"

namespace hvd_nccl_transport {

using hvd::kit::After;
using hvd::kit::Clock;
using hvd::kit::Secs;
using hvd::kit::WriteErr;

constexpr const char* kIdKey = "nccl/unique_id";
constexpr double kDefaultStartS = 30.0;  // start timeout when env gives none
constexpr double kFinalizeS = 30.0;      // ncclCommFinalize's bound when env gives none
constexpr unsigned kSpins = 200;         // polls with yield before sleeping between polls
constexpr auto kPollSleep = std::chrono::microseconds(50);
constexpr uint64_t kCaps = HVD_TRANSPORT_CAP_CUDA_MEMORY | HVD_TRANSPORT_CAP_STREAM_ORDERED |
                           HVD_TRANSPORT_CAP_ABORT | HVD_TRANSPORT_CAP_PEER_TIMEOUT |
                           HVD_TRANSPORT_CAP_AVERAGE;

inline std::string HostName() {
  char h[256] = {0};
  if (gethostname(h, sizeof(h) - 1) != 0) return "?";
  return h;
}
inline const char* DtypeName(hvd_dtype_t d) {
  switch (d) {
    case HVD_UINT8: return "uint8";
    case HVD_INT8: return "int8";
    case HVD_UINT16: return "uint16";
    case HVD_INT16: return "int16";
    case HVD_INT32: return "int32";
    case HVD_INT64: return "int64";
    case HVD_FLOAT16: return "float16";
    case HVD_BFLOAT16: return "bfloat16";
    case HVD_FLOAT32: return "float32";
    case HVD_FLOAT64: return "float64";
    case HVD_BOOL: return "bool";
  }
  return "unknown";
}
inline std::string CudaErr(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}
inline std::string NcclErr(ncclResult_t r, ncclComm_t comm) {
  std::string s = ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') s += std::string(" (") + last + ")";
  return s;
}

// What a reduction becomes in NCCL: its type, element size and op.
struct Reduction {
  ncclDataType_t type = ncclUint8;
  size_t elem = 1;
  ncclRedOp_t op = ncclSum;
};

struct Comm {
  int rank = 0;
  int size = 1;
  int device = 0;
  std::string host;
  std::string who;  // "nccl: rank R (host H): "
  double transfer_s = 0;    // env.timeout_s
  double limit_s = 0;       // the limit in force (set_timeout, else env.timeout_s)
  bool peer_limit = false;  // ... and it is the core's peer timeout
  void* logger = nullptr;
  void (*log)(void*, int, const char*) = nullptr;

  ncclComm_t nccl = nullptr;   // guarded by life_mu against async_error
  bool nccl_live = false;      // not yet aborted or destroyed (under life_mu)
  std::mutex life_mu;
  cudaStream_t stream = nullptr;
  cudaEvent_t ready[2] = {nullptr, nullptr};  // recorded on the callers' streams
  cudaEvent_t done = nullptr;                 // recorded on ours after the work
  int32_t* scratch = nullptr;                 // barrier's one device int

  std::string last_error = "nccl: no error";  // the core thread's
  std::atomic<int> broken{HVD_OK};            // the status that broke it
  std::atomic<int> abort_status{HVD_OK};      // abort's, until acted on
  std::mutex reason_mu;
  std::string abort_reason;

  void Log(int level, const std::string& m) {
    if (log != nullptr) log(logger, level, m.c_str());
  }
  // A refused call that leaves the communicator usable (bad arguments).
  int Refuse(int status, const std::string& msg) {
    last_error = who + msg;
    return status;
  }
  // The first failure: abort NCCL, keep the message, fail every later call.
  int Break(int status, const std::string& msg);
  // Every entry point starts here: the communicator's device, and the failure
  // or abort that broke it.
  int Enter();
  int BreakForAbort(int status);
  // NCCL's asynchronous state: HVD_OK, or the failure (broken).
  int CheckAsync(const char* what);
  std::string TimeoutMsg(const char* what, size_t bytes, bool enqueue);
  // Polls until NCCL has taken a non-blocking call (ncclInProgress ends).
  int WaitEnqueued(const char* what, size_t bytes, Clock::time_point deadline);
  // Polls until the work before `done` finished on our stream.
  int WaitDone(const char* what, size_t bytes, Clock::time_point deadline);
  // Runs one collective: our stream waits for the callers' streams, enqueue()
  // issues the NCCL calls on it, the callers' streams wait for ours, and the
  // call waits for completion.
  int Run(const char* what, size_t bytes, std::vector<cudaStream_t> callers,
          const std::function<ncclResult_t()>& enqueue);
  // A buffer the collective reads or writes `need` bytes of.
  int CheckBuf(const char* what, const char* which, const hvd_transport_buffer_t* b, size_t need);
  int ReductionOf(const char* what, hvd_dtype_t dtype, hvd_reduce_op_t op, Reduction* out);
};


// ---------------------------------------------------------------------------
// Across the plugin's files (faults.cc, comm.cc, collectives.cc, plugin.cc).

// What init reads from the env (plugin.cc, ReadEnv): the set-up's input.
struct Settings {
  int rank = 0;
  int size = 1;
  int local_rank = -1;
  double timeout_s = 0;  // the transfer limit
  double start_s = kDefaultStartS;
  void* logger = nullptr;
  void (*log)(void*, int, const char*) = nullptr;
  hvd::kit::StoreCalls store;
  bool has_store = false;  // the store and all its callbacks are given
};

// comm.cc
void Destroy(Comm* c, bool healthy);
int WaitInit(Comm* c, double limit_s, std::string* msg);
int Setup(const Settings& s, Comm** out, std::string* msg);
void Finalize(void* comm);

// collectives.cc
int Allreduce(void* comm, const hvd_transport_buffer_t* buf, size_t count, hvd_dtype_t dtype,
              hvd_reduce_op_t op);
int Allgatherv(void* comm, const hvd_transport_buffer_t* send, const hvd_transport_buffer_t* recv,
               const size_t* recv_bytes);
int Broadcast(void* comm, const hvd_transport_buffer_t* buf, int32_t root);
int Alltoallv(void* comm, const hvd_transport_buffer_t* send, const size_t* send_bytes,
              const hvd_transport_buffer_t* recv, const size_t* recv_bytes);
int Reducescatter(void* comm, const hvd_transport_buffer_t* buf, const size_t* counts,
                  hvd_dtype_t dtype, hvd_reduce_op_t op);
int Barrier(void* comm);

// faults.cc
const char* LastError(void* comm);
int Abort(void* comm, int status, const char* reason);
int AsyncError(void* comm);

}  // namespace hvd_nccl_transport
