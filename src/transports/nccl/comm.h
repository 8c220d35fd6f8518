// The NCCL transport, ABI version 4: native collectives on CUDA device memory
// (allreduce, allgatherv, broadcast, alltoallv, reducescatter, barrier), no
// point-to-point (the core's own algorithms do not run over it), plus faults
// (abort, async_error) and set_timeout. It needs only hvd.h, hvd_transport.h,
// the CUDA runtime and NCCL. Built into libhvd_transport_nccl.so
// (hvd_transport_plugin_v4).
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

namespace hvd_nccl_v4 {

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
  int Break(int status, const std::string& msg) {
    int prev = broken.load();
    if (prev != HVD_OK) return prev;
    last_error = who + msg;
    Log(HVD_LOG_ERROR, last_error);
    {
      std::lock_guard<std::mutex> lk(life_mu);
      if (nccl_live) {
        ncclCommAbort(nccl);
        nccl_live = false;
      }
    }
    broken.store(status);
    return status;
  }
  // Every entry point starts here: the communicator's device, and the failure
  // or abort that broke it.
  int Enter() {
    int b = broken.load();
    if (b != HVD_OK) return b;
    int a = abort_status.load();
    if (a != HVD_OK) return BreakForAbort(a);
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess)
      return Break(HVD_ERR_TRANSPORT, "cudaSetDevice(" + std::to_string(device) + "): " + CudaErr(e));
    return HVD_OK;
  }
  int BreakForAbort(int status) {
    std::string reason;
    {
      std::lock_guard<std::mutex> lk(reason_mu);
      reason = abort_reason;
    }
    return Break(status, "aborted" + (reason.empty() ? std::string() : ": " + reason));
  }
  // NCCL's asynchronous state: HVD_OK, or the failure (broken).
  int CheckAsync(const char* what) {
    ncclResult_t a = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(nccl, &a);
    if (r != ncclSuccess) a = r;
    if (a == ncclSuccess || a == ncclInProgress) return HVD_OK;
    return Break(HVD_ERR_TRANSPORT,
                 std::string(what) + ": NCCL reports " + NcclErr(a, nccl) +
                     "; a rank failed or left, or the network broke; the communicator is aborted");
  }
  std::string TimeoutMsg(const char* what, size_t bytes, bool enqueue) {
    std::string m = std::string(what) + " (" + std::to_string(bytes) + " bytes) ";
    m += enqueue ? "was not enqueued" : "did not complete";
    if (peer_limit)
      return m + " within " + Secs(limit_s) +
             " s: a rank has not answered (stopped or cut off?; peer timeout, HVD_PEER_TIMEOUT); "
             "NCCL does not say which rank; the communicator is aborted";
    return m + " within " + Secs(limit_s) +
           " s (the transfer limit): a rank has not entered it or is stuck; NCCL does not say "
           "which rank; the communicator is aborted";
  }
  // Polls until NCCL has taken a non-blocking call (ncclInProgress ends).
  int WaitEnqueued(const char* what, size_t bytes, Clock::time_point deadline) {
    for (unsigned i = 0;; ++i) {
      int a = abort_status.load();
      if (a != HVD_OK) return BreakForAbort(a);
      ncclResult_t st = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(nccl, &st);
      if (r != ncclSuccess) st = r;
      if (st == ncclSuccess) return HVD_OK;
      if (st != ncclInProgress) return CheckAsync(what);
      if (Clock::now() >= deadline) return Break(HVD_ERR_TIMEOUT, TimeoutMsg(what, bytes, true));
      if (i < kSpins) std::this_thread::yield();
      else std::this_thread::sleep_for(kPollSleep);
    }
  }
  // Polls until the work before `done` finished on our stream.
  int WaitDone(const char* what, size_t bytes, Clock::time_point deadline) {
    for (unsigned i = 0;; ++i) {
      int a = abort_status.load();
      if (a != HVD_OK) return BreakForAbort(a);
      cudaError_t e = cudaEventQuery(done);
      if (e == cudaSuccess) return CheckAsync(what);
      if (e != cudaErrorNotReady)
        return Break(HVD_ERR_TRANSPORT, std::string(what) + ": CUDA error while waiting: " +
                                            CudaErr(e) + "; the communicator is aborted");
      int s = CheckAsync(what);
      if (s != HVD_OK) return s;
      if (Clock::now() >= deadline) return Break(HVD_ERR_TIMEOUT, TimeoutMsg(what, bytes, false));
      if (i < kSpins) std::this_thread::yield();
      else std::this_thread::sleep_for(kPollSleep);
    }
  }
  // Runs one collective: our stream waits for the callers' streams, enqueue()
  // issues the NCCL calls on it, the callers' streams wait for ours, and the
  // call waits for completion.
  int Run(const char* what, size_t bytes, std::vector<cudaStream_t> callers,
          const std::function<ncclResult_t()>& enqueue) {
    std::sort(callers.begin(), callers.end());
    callers.erase(std::unique(callers.begin(), callers.end()), callers.end());
    if (callers.size() > 2) return Refuse(HVD_ERR_INTERNAL, std::string(what) + ": too many streams");
    for (size_t i = 0; i < callers.size(); ++i) {
      cudaError_t e = cudaEventRecord(ready[i], callers[i]);
      if (e == cudaSuccess) e = cudaStreamWaitEvent(stream, ready[i], 0);
      if (e != cudaSuccess)
        return Break(HVD_ERR_TRANSPORT, std::string(what) +
                                            ": ordering after the caller's stream: " + CudaErr(e));
    }
    Clock::time_point deadline = After(limit_s);
    ncclResult_t r = enqueue();
    if (r != ncclSuccess && r != ncclInProgress)
      return Break(HVD_ERR_TRANSPORT, std::string(what) + ": " + NcclErr(r, nccl) +
                                          "; the communicator is aborted");
    int s = WaitEnqueued(what, bytes, deadline);
    if (s != HVD_OK) return s;
    cudaError_t e = cudaEventRecord(done, stream);
    for (size_t i = 0; e == cudaSuccess && i < callers.size(); ++i)
      e = cudaStreamWaitEvent(callers[i], done, 0);
    if (e != cudaSuccess)
      return Break(HVD_ERR_TRANSPORT, std::string(what) +
                                          ": ordering the caller's stream after ours: " + CudaErr(e));
    return WaitDone(what, bytes, deadline);
  }
  // A buffer the collective reads or writes `need` bytes of.
  int CheckBuf(const char* what, const char* which, const hvd_transport_buffer_t* b, size_t need) {
    if (b == nullptr) return Refuse(HVD_ERR_INVALID_ARGUMENT, std::string(what) + ": " + which + " buffer is NULL");
    if (need == 0) return HVD_OK;
    if (b->memory_type == HVD_MEMORY_HOST)
      return Refuse(HVD_ERR_UNSUPPORTED,
                    std::string(what) + ": the " + which +
                        " buffer is in host memory; the nccl transport takes CUDA device memory "
                        "only (host tensors must be staged through device memory by the core, or "
                        "go over another transport)");
    if (b->memory_type != HVD_MEMORY_CUDA)
      return Refuse(HVD_ERR_UNSUPPORTED, std::string(what) + ": the " + which +
                                             " buffer has memory type " +
                                             std::to_string(b->memory_type) + ", not CUDA");
    if (b->device != device)
      return Refuse(HVD_ERR_UNSUPPORTED,
                    std::string(what) + ": the " + which + " buffer is on CUDA device " +
                        std::to_string(b->device) + ", this rank's NCCL communicator on device " +
                        std::to_string(device));
    if (b->data == nullptr)
      return Refuse(HVD_ERR_INVALID_ARGUMENT, std::string(what) + ": " + which + " data is NULL");
    if (b->bytes < need)
      return Refuse(HVD_ERR_INVALID_ARGUMENT,
                    std::string(what) + ": the " + which + " buffer holds " +
                        std::to_string(b->bytes) + " bytes, the operation needs " +
                        std::to_string(need));
    return HVD_OK;
  }
  int ReductionOf(const char* what, hvd_dtype_t dtype, hvd_reduce_op_t op, Reduction* out) {
    bool boolean = false;
    switch (dtype) {
      case HVD_UINT8: *out = {ncclUint8, 1, ncclSum}; break;
      case HVD_INT8: *out = {ncclInt8, 1, ncclSum}; break;
      case HVD_INT32: *out = {ncclInt32, 4, ncclSum}; break;
      case HVD_INT64: *out = {ncclInt64, 8, ncclSum}; break;
      case HVD_FLOAT16: *out = {ncclFloat16, 2, ncclSum}; break;
      case HVD_BFLOAT16: *out = {ncclBfloat16, 2, ncclSum}; break;
      case HVD_FLOAT32: *out = {ncclFloat32, 4, ncclSum}; break;
      case HVD_FLOAT64: *out = {ncclFloat64, 8, ncclSum}; break;
      case HVD_BOOL: *out = {ncclUint8, 1, ncclMax}; boolean = true; break;
      case HVD_UINT16:
      case HVD_INT16:
        return Refuse(HVD_ERR_UNSUPPORTED, std::string(what) + ": dtype " + DtypeName(dtype) +
                                               " is not supported (NCCL has no 16-bit integer type)");
      default:
        return Refuse(HVD_ERR_INVALID_ARGUMENT,
                      std::string(what) + ": unknown dtype " + std::to_string(static_cast<int>(dtype)));
    }
    switch (op) {
      case HVD_SUM: out->op = boolean ? ncclMax : ncclSum; break;  // bool: logical or
      case HVD_MAX: out->op = ncclMax; break;
      case HVD_MIN: out->op = ncclMin; break;
      case HVD_PRODUCT: out->op = boolean ? ncclMin : ncclProd; break;  // bool: logical and
      case HVD_AVERAGE:
        if (boolean)
          return Refuse(HVD_ERR_INVALID_ARGUMENT, std::string(what) + ": AVERAGE of dtype bool is refused");
        out->op = ncclAvg;
        break;
      case HVD_ADASUM:
        return Refuse(HVD_ERR_UNSUPPORTED,
                      std::string(what) + ": op ADASUM is not an NCCL reduction (the core computes Adasum)");
      default:
        return Refuse(HVD_ERR_INVALID_ARGUMENT,
                      std::string(what) + ": unknown op " + std::to_string(static_cast<int>(op)));
    }
    return HVD_OK;
  }
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

}  // namespace hvd_nccl_v4
