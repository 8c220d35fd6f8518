// The NCCL transport, ABI version 4: native collectives on CUDA device memory
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

namespace hvd_nccl_v4 {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kIdKey = "nccl/unique_id";
constexpr double kDefaultStartS = 30.0;  // start timeout when env gives none
constexpr double kFinalizeS = 30.0;      // ncclCommFinalize's bound when env gives none
constexpr unsigned kSpins = 200;         // polls with yield before sleeping between polls
constexpr auto kPollSleep = std::chrono::microseconds(50);
constexpr uint64_t kCaps = HVD_TRANSPORT_CAP_CUDA_MEMORY | HVD_TRANSPORT_CAP_STREAM_ORDERED |
                           HVD_TRANSPORT_CAP_ABORT | HVD_TRANSPORT_CAP_PEER_TIMEOUT |
                           HVD_TRANSPORT_CAP_AVERAGE;

Clock::time_point After(double s) {
  if (!(s > 0) || s > 3.0e7) return Clock::time_point::max();
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}
std::string Secs(double s) {
  char b[32];
  std::snprintf(b, sizeof(b), "%g", s);
  return b;
}
std::string HostName() {
  char h[256] = {0};
  if (gethostname(h, sizeof(h) - 1) != 0) return "?";
  return h;
}
void WriteErr(char* err, size_t err_len, const std::string& msg) {
  if (err == nullptr || err_len == 0) return;
  size_t n = std::min(msg.size(), err_len - 1);
  std::memcpy(err, msg.data(), n);
  err[n] = '\0';
}
const char* DtypeName(hvd_dtype_t d) {
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
std::string CudaErr(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}
std::string NcclErr(ncclResult_t r, ncclComm_t comm) {
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

// Frees whatever exists (init's failures and finalize): NCCL first (finalized
// within the limit while healthy, else aborted), then our stream's objects.
void Destroy(Comm* c, bool healthy) {
  if (c->stream != nullptr || c->nccl != nullptr) cudaSetDevice(c->device);
  {
    std::lock_guard<std::mutex> lk(c->life_mu);
    if (c->nccl_live) {
      bool finalized = false;
      if (healthy && ncclCommFinalize(c->nccl) == ncclSuccess) {
        Clock::time_point deadline = After(c->transfer_s > 0 ? c->transfer_s : kFinalizeS);
        for (unsigned i = 0;; ++i) {
          ncclResult_t st = ncclSuccess;
          if (ncclCommGetAsyncError(c->nccl, &st) != ncclSuccess) break;
          if (st == ncclSuccess) { finalized = true; break; }
          if (st != ncclInProgress || Clock::now() >= deadline) break;
          if (i < kSpins) std::this_thread::yield();
          else std::this_thread::sleep_for(kPollSleep);
        }
      }
      if (finalized) ncclCommDestroy(c->nccl);
      else ncclCommAbort(c->nccl);
      c->nccl_live = false;
    }
    c->nccl = nullptr;
  }
  if (c->scratch != nullptr) cudaFreeAsync(c->scratch, c->stream);
  for (cudaEvent_t& e : c->ready)
    if (e != nullptr) cudaEventDestroy(e);
  if (c->done != nullptr) cudaEventDestroy(c->done);
  if (c->stream != nullptr) cudaStreamDestroy(c->stream);
  delete c;
}

// Polls a non-blocking ncclCommInitRankConfig until it finished.
int WaitInit(Comm* c, double limit_s, std::string* msg) {
  Clock::time_point deadline = After(limit_s);
  for (unsigned i = 0;; ++i) {
    ncclResult_t st = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(c->nccl, &st);
    if (r != ncclSuccess) st = r;
    if (st == ncclSuccess) return HVD_OK;
    if (st != ncclInProgress) {
      *msg = "ncclCommInitRankConfig: " + NcclErr(st, c->nccl);
      return HVD_ERR_TRANSPORT;
    }
    if (Clock::now() >= deadline) {
      *msg = "the NCCL communicator of " + std::to_string(c->size) + " ranks was not set up within " +
             Secs(limit_s) + " s (the start timeout): a rank did not join or could not connect; "
             "NCCL does not say which";
      return HVD_ERR_TIMEOUT;
    }
    if (i < kSpins) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

int Init(const hvd_transport_env_t* env, hvd_transport_info_t* info, void** comm_out, char* err,
         size_t err_len) {
  if (comm_out != nullptr) *comm_out = nullptr;
  if (env == nullptr || comm_out == nullptr || env->size < 1 || env->rank < 0 ||
      env->rank >= env->size) {
    WriteErr(err, err_len, "nccl init: invalid arguments (env or comm NULL, or rank outside size)");
    return HVD_ERR_INVALID_ARGUMENT;
  }
  const std::string host = HostName();
  const int rank = env->rank;
  const bool store = env->kv != nullptr && env->kv_set != nullptr && env->kv_get != nullptr &&
                     env->kv_free != nullptr;
  const double start_s = env->start_timeout_s > 0 ? env->start_timeout_s : kDefaultStartS;
  std::string who = "nccl: rank " + std::to_string(rank) + " (host " + host + "): ";
  // Rank 0 tells the others when it cannot make the id, so they do not wait
  // for it until the start timeout.
  auto fail = [&](int status, const std::string& msg) {
    if (rank == 0 && env->size > 1 && store) {
      std::string v = "E" + msg;
      env->kv_set(env->kv, kIdKey, v.data(), v.size());
    }
    WriteErr(err, err_len, msg);
    return status;
  };

  int ndev = 0;
  cudaError_t ce = cudaGetDeviceCount(&ndev);
  if (ce != cudaSuccess || ndev <= 0) {
    std::string why = ce != cudaSuccess ? CudaErr(ce) : std::string("0 devices");
    return fail(HVD_ERR_UNSUPPORTED, "nccl: no CUDA device on host " + host +
                                         " (cudaGetDeviceCount: " + why +
                                         "); the nccl transport needs one GPU per rank");
  }
  if (env->size > 1 && !store)
    return fail(HVD_ERR_UNSUPPORTED,
                who + "the NCCL unique id goes through the rendezvous store, and this launch has "
                      "none (MPI launches): use hvdrun's store, or another transport");

  Comm* c = new (std::nothrow) Comm;
  if (c == nullptr) return fail(HVD_ERR_NO_MEMORY, who + "out of memory");
  c->rank = rank;
  c->size = env->size;
  c->host = host;
  c->who = who;
  c->transfer_s = env->timeout_s;
  c->limit_s = env->timeout_s;
  c->logger = env->logger;
  c->log = env->log;
  int local = env->local_rank >= 0 ? env->local_rank : rank;
  c->device = local % ndev;
  ce = cudaSetDevice(c->device);
  if (ce != cudaSuccess) {
    Destroy(c, false);
    return fail(HVD_ERR_TRANSPORT, who + "cudaSetDevice(" + std::to_string(local % ndev) + "): " + CudaErr(ce));
  }

  // The unique id: rank 0 makes it, the store carries it.
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
      Destroy(c, false);
      return fail(HVD_ERR_TRANSPORT, who + "ncclGetUniqueId: " + NcclErr(r, nullptr));
    }
    if (env->size > 1) {
      std::string v(1 + sizeof(id), 'I');
      std::memcpy(&v[1], &id, sizeof(id));
      int s = env->kv_set(env->kv, kIdKey, v.data(), v.size());
      if (s != HVD_OK) {
        Destroy(c, false);
        WriteErr(err, err_len, who + "publishing the NCCL unique id in the store failed (status " +
                                   std::to_string(s) + ")");
        return HVD_ERR_RENDEZVOUS;
      }
    }
  } else {
    void* v = nullptr;
    size_t len = 0;
    int s = env->kv_get(env->kv, kIdKey, &v, &len, start_s);
    std::string value;
    if (s == HVD_OK && v != nullptr) value.assign(static_cast<const char*>(v), len);
    if (v != nullptr) env->kv_free(v);
    std::string msg;
    if (s != HVD_OK)
      msg = who + "did not get rank 0's NCCL unique id within " + Secs(start_s) +
            " s (the start timeout; status " + std::to_string(s) +
            "): rank 0 has not started or failed before publishing it";
    else if (!value.empty() && value[0] == 'E')
      msg = who + "rank 0 could not set up NCCL: " + value.substr(1);
    else if (value.size() != 1 + sizeof(id) || value[0] != 'I')
      msg = who + "the NCCL unique id in the store is malformed (" + std::to_string(value.size()) +
            " bytes)";
    if (!msg.empty()) {
      Destroy(c, false);
      WriteErr(err, err_len, msg);
      return HVD_ERR_RENDEZVOUS;
    }
    std::memcpy(&id, value.data() + 1, sizeof(id));
  }

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&c->nccl, c->size, id, rank, &config);
  if (c->nccl != nullptr) c->nccl_live = true;
  std::string msg;
  int s = HVD_OK;
  if (r != ncclSuccess && r != ncclInProgress) {
    msg = "ncclCommInitRankConfig: " + NcclErr(r, c->nccl);
    s = HVD_ERR_TRANSPORT;
  } else if (c->nccl == nullptr) {
    msg = "ncclCommInitRankConfig gave no communicator";
    s = HVD_ERR_INTERNAL;
  } else {
    s = WaitInit(c, start_s, &msg);
  }
  if (s == HVD_OK) {
    int least = 0, greatest = 0;
    ce = cudaDeviceGetStreamPriorityRange(&least, &greatest);
    if (ce == cudaSuccess) ce = cudaStreamCreateWithPriority(&c->stream, cudaStreamNonBlocking, greatest);
    for (cudaEvent_t& e : c->ready)
      if (ce == cudaSuccess) ce = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    if (ce == cudaSuccess) ce = cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming);
    if (ce == cudaSuccess)
      ce = cudaMallocAsync(reinterpret_cast<void**>(&c->scratch), sizeof(int32_t), c->stream);
    if (ce == cudaSuccess) ce = cudaMemsetAsync(c->scratch, 0, sizeof(int32_t), c->stream);
    if (ce != cudaSuccess) {
      msg = "creating the plugin's stream, events and scratch: " + CudaErr(ce);
      s = HVD_ERR_TRANSPORT;
    }
  }
  if (s != HVD_OK) {
    Destroy(c, false);
    WriteErr(err, err_len, who + msg);
    return s;
  }

  if (info != nullptr) {
    size_t have = info->struct_size;
    if (have >= offsetof(hvd_transport_info_t, native_max_bytes) + sizeof(info->native_max_bytes))
      for (size_t& m : info->native_max_bytes) m = SIZE_MAX;
  }
  int version = 0;
  ncclGetVersion(&version);
  c->Log(HVD_LOG_DEBUG, who + "NCCL " + std::to_string(version) + " communicator of " + std::to_string(c->size) +
                " ranks on CUDA device " + std::to_string(c->device) + " of " + std::to_string(ndev));
  *comm_out = c;
  return HVD_OK;
}

void Finalize(void* comm) {
  if (comm == nullptr) return;
  Comm* c = static_cast<Comm*>(comm);
  bool healthy = c->broken.load() == HVD_OK && c->abort_status.load() == HVD_OK;
  Destroy(c, healthy);
}

const char* LastError(void* comm) {
  if (comm == nullptr) return "nccl: no communicator";
  return static_cast<Comm*>(comm)->last_error.c_str();
}

int Allreduce(void* comm, const hvd_transport_buffer_t* buf, size_t count, hvd_dtype_t dtype,
              hvd_reduce_op_t op) {
  Comm* c = static_cast<Comm*>(comm);
  int s = c->Enter();
  if (s != HVD_OK) return s;
  Reduction red;
  if ((s = c->ReductionOf("allreduce", dtype, op, &red)) != HVD_OK) return s;
  if (count > SIZE_MAX / red.elem) return c->Refuse(HVD_ERR_INVALID_ARGUMENT, "allreduce: count too large");
  size_t bytes = count * red.elem;
  if ((s = c->CheckBuf("allreduce", "in-place", buf, bytes)) != HVD_OK) return s;
  if (count == 0) return HVD_OK;
  return c->Run("allreduce", bytes, {static_cast<cudaStream_t>(buf->stream)}, [&] {
    return ncclAllReduce(buf->data, buf->data, count, red.type, red.op, c->nccl, c->stream);
  });
}

int Allgatherv(void* comm, const hvd_transport_buffer_t* send, const hvd_transport_buffer_t* recv,
               const size_t* recv_bytes) {
  Comm* c = static_cast<Comm*>(comm);
  int s = c->Enter();
  if (s != HVD_OK) return s;
  if (recv_bytes == nullptr) return c->Refuse(HVD_ERR_INVALID_ARGUMENT, "allgatherv: recv_bytes is NULL");
  size_t total = 0;
  bool equal = true;
  for (int r = 0; r < c->size; ++r) {
    total += recv_bytes[r];
    equal = equal && recv_bytes[r] == recv_bytes[0];
  }
  if ((s = c->CheckBuf("allgatherv", "receive", recv, total)) != HVD_OK) return s;
  if ((s = c->CheckBuf("allgatherv", "send", send, recv_bytes[c->rank])) != HVD_OK) return s;
  if (total == 0) return HVD_OK;
  char* out = static_cast<char*>(recv->data);
  return c->Run("allgatherv", total,
                {static_cast<cudaStream_t>(send->stream), static_cast<cudaStream_t>(recv->stream)}, [&] {
                  if (equal)
                    return ncclAllGather(send->data, out, recv_bytes[0], ncclUint8, c->nccl, c->stream);
                  ncclResult_t r = ncclGroupStart();
                  size_t off = 0;
                  for (int p = 0; r == ncclSuccess && p < c->size; off += recv_bytes[p], ++p) {
                    if (recv_bytes[p] == 0) continue;
                    const void* from = p == c->rank ? send->data : out + off;
                    r = ncclBroadcast(from, out + off, recv_bytes[p], ncclUint8, p, c->nccl, c->stream);
                  }
                  ncclResult_t e = ncclGroupEnd();
                  return r != ncclSuccess ? r : e;
                });
}

int Broadcast(void* comm, const hvd_transport_buffer_t* buf, int32_t root) {
  Comm* c = static_cast<Comm*>(comm);
  int s = c->Enter();
  if (s != HVD_OK) return s;
  if (root < 0 || root >= c->size)
    return c->Refuse(HVD_ERR_INVALID_ARGUMENT, "broadcast: root " + std::to_string(root) + " is not a rank");
  if ((s = c->CheckBuf("broadcast", "in-place", buf, buf != nullptr ? buf->bytes : 0)) != HVD_OK) return s;
  if (buf->bytes == 0) return HVD_OK;
  return c->Run("broadcast", buf->bytes, {static_cast<cudaStream_t>(buf->stream)}, [&] {
    return ncclBroadcast(buf->data, buf->data, buf->bytes, ncclUint8, root, c->nccl, c->stream);
  });
}

int Alltoallv(void* comm, const hvd_transport_buffer_t* send, const size_t* send_bytes,
              const hvd_transport_buffer_t* recv, const size_t* recv_bytes) {
  Comm* c = static_cast<Comm*>(comm);
  int s = c->Enter();
  if (s != HVD_OK) return s;
  if (send_bytes == nullptr || recv_bytes == nullptr)
    return c->Refuse(HVD_ERR_INVALID_ARGUMENT, "alltoallv: send_bytes or recv_bytes is NULL");
  size_t stotal = 0, rtotal = 0;
  for (int r = 0; r < c->size; ++r) {
    stotal += send_bytes[r];
    rtotal += recv_bytes[r];
  }
  if (send_bytes[c->rank] != recv_bytes[c->rank])
    return c->Refuse(HVD_ERR_INVALID_ARGUMENT, "alltoallv: this rank sends itself " +
                                                   std::to_string(send_bytes[c->rank]) +
                                                   " bytes but receives " +
                                                   std::to_string(recv_bytes[c->rank]));
  if ((s = c->CheckBuf("alltoallv", "send", send, stotal)) != HVD_OK) return s;
  if ((s = c->CheckBuf("alltoallv", "receive", recv, rtotal)) != HVD_OK) return s;
  if (stotal == 0 && rtotal == 0) return HVD_OK;
  const char* in = static_cast<const char*>(send->data);
  char* out = static_cast<char*>(recv->data);
  bool copy_failed = false;
  cudaError_t copy_err = cudaSuccess;
  s = c->Run("alltoallv", std::max(stotal, rtotal),
             {static_cast<cudaStream_t>(send->stream), static_cast<cudaStream_t>(recv->stream)}, [&] {
               size_t soff = 0, roff = 0;
               for (int p = 0; p < c->rank; ++p) {
                 soff += send_bytes[p];
                 roff += recv_bytes[p];
               }
               if (send_bytes[c->rank] > 0) {  // this rank's own block: a device copy
                 copy_err = cudaMemcpyAsync(out + roff, in + soff, send_bytes[c->rank],
                                            cudaMemcpyDeviceToDevice, c->stream);
                 if (copy_err != cudaSuccess) {
                   copy_failed = true;
                   return ncclInvalidUsage;
                 }
               }
               ncclResult_t r = ncclGroupStart();
               soff = roff = 0;
               for (int p = 0; r == ncclSuccess && p < c->size;
                    soff += send_bytes[p], roff += recv_bytes[p], ++p) {
                 if (p == c->rank) continue;
                 if (send_bytes[p] > 0)
                   r = ncclSend(in + soff, send_bytes[p], ncclUint8, p, c->nccl, c->stream);
                 if (r == ncclSuccess && recv_bytes[p] > 0)
                   r = ncclRecv(out + roff, recv_bytes[p], ncclUint8, p, c->nccl, c->stream);
               }
               ncclResult_t e = ncclGroupEnd();
               return r != ncclSuccess ? r : e;
             });
  if (copy_failed && s != HVD_OK && c->broken.load() == s)
    c->last_error = c->who + "alltoallv: copying this rank's own block: " + CudaErr(copy_err) +
                    "; the communicator is aborted";
  return s;
}

int Reducescatter(void* comm, const hvd_transport_buffer_t* buf, const size_t* counts,
                  hvd_dtype_t dtype, hvd_reduce_op_t op) {
  Comm* c = static_cast<Comm*>(comm);
  int s = c->Enter();
  if (s != HVD_OK) return s;
  if (counts == nullptr) return c->Refuse(HVD_ERR_INVALID_ARGUMENT, "reducescatter: counts is NULL");
  Reduction red;
  if ((s = c->ReductionOf("reducescatter", dtype, op, &red)) != HVD_OK) return s;
  size_t total = 0;
  bool equal = true;
  for (int r = 0; r < c->size; ++r) {
    total += counts[r];
    equal = equal && counts[r] == counts[0];
  }
  if (total > SIZE_MAX / red.elem) return c->Refuse(HVD_ERR_INVALID_ARGUMENT, "reducescatter: counts too large");
  if ((s = c->CheckBuf("reducescatter", "in-place", buf, total * red.elem)) != HVD_OK) return s;
  if (total == 0) return HVD_OK;
  char* data = static_cast<char*>(buf->data);
  return c->Run("reducescatter", total * red.elem, {static_cast<cudaStream_t>(buf->stream)}, [&] {
    if (equal)  // NCCL's in-place form: recvbuff = sendbuff + rank * recvcount
      return ncclReduceScatter(data, data + c->rank * counts[0] * red.elem, counts[0], red.type,
                               red.op, c->nccl, c->stream);
    ncclResult_t r = ncclGroupStart();
    size_t off = 0;
    for (int p = 0; r == ncclSuccess && p < c->size; off += counts[p], ++p) {
      if (counts[p] == 0) continue;
      char* block = data + off * red.elem;
      r = ncclReduce(block, block, counts[p], red.type, red.op, p, c->nccl, c->stream);
    }
    ncclResult_t e = ncclGroupEnd();
    return r != ncclSuccess ? r : e;
  });
}

int Barrier(void* comm) {
  Comm* c = static_cast<Comm*>(comm);
  int s = c->Enter();
  if (s != HVD_OK) return s;
  return c->Run("barrier", sizeof(int32_t), {}, [&] {
    return ncclAllReduce(c->scratch, c->scratch, 1, ncclInt32, ncclSum, c->nccl, c->stream);
  });
}

int Abort(void* comm, int status, const char* reason) {
  if (comm == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  Comm* c = static_cast<Comm*>(comm);
  if (status == HVD_OK) status = HVD_ERR_ABORTED;
  {
    std::lock_guard<std::mutex> lk(c->reason_mu);
    if (c->abort_status.load() == HVD_OK) c->abort_reason = reason != nullptr ? reason : "";
  }
  int expected = HVD_OK;
  c->abort_status.compare_exchange_strong(expected, status);
  return HVD_OK;
}

int AsyncError(void* comm) {
  if (comm == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  Comm* c = static_cast<Comm*>(comm);
  int b = c->broken.load();
  if (b != HVD_OK) return b;
  int a = c->abort_status.load();
  if (a != HVD_OK) return a;
  std::unique_lock<std::mutex> lk(c->life_mu, std::try_to_lock);
  if (!lk.owns_lock()) return c->broken.load();  // Break or Destroy holds it
  if (!c->nccl_live) return c->broken.load();
  ncclResult_t st = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(c->nccl, &st);
  if (r != ncclSuccess) st = r;
  return st == ncclSuccess || st == ncclInProgress ? HVD_OK : HVD_ERR_TRANSPORT;
}

int SetTimeout(void* comm, double timeout_s, int32_t kind) {
  if (comm == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  Comm* c = static_cast<Comm*>(comm);
  c->limit_s = timeout_s;
  c->peer_limit = kind == HVD_TRANSPORT_LIMIT_PEER;
  return HVD_OK;
}

hvd_transport_t MakeTable() {
  hvd_transport_t t;
  std::memset(&t, 0, sizeof(t));
  t.abi_version = HVD_TRANSPORT_ABI;
  t.struct_size = sizeof(hvd_transport_t);
  t.name = "nccl";
  t.caps = kCaps;
  // NCCL has no 16-bit integer type: the core stages those reductions.
  t.reduce_dtypes = ~uint64_t{0} & ~(uint64_t{1} << HVD_INT16) & ~(uint64_t{1} << HVD_UINT16);
  t.init = Init;
  t.finalize = Finalize;
  t.last_error = LastError;
  t.allreduce = Allreduce;
  t.allgatherv = Allgatherv;
  t.broadcast = Broadcast;
  t.alltoallv = Alltoallv;
  t.reducescatter = Reducescatter;
  t.barrier = Barrier;
  t.abort = Abort;
  t.async_error = AsyncError;
  t.set_timeout = SetTimeout;
  return t;
}

const hvd_transport_t kTable = MakeTable();

}  // namespace
}  // namespace hvd_nccl_v4

extern "C" __attribute__((visibility("default"))) const hvd_transport_t* hvd_transport_plugin(
    void) {
  return &hvd_nccl_v4::kTable;
}
