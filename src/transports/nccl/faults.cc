// The NCCL transport's faults: the first failure (Break, BreakForAbort), the
// check every entry point starts with (Enter), NCCL's asynchronous state;
// abort, async_error, last_error.
#include "comm.h"

namespace hvd_nccl_transport {

// The first failure: abort NCCL, keep the message, fail every later call.
int Comm::Break(int status, const std::string& msg) {
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
int Comm::Enter() {
  int b = broken.load();
  if (b != HVD_OK) return b;
  int a = abort_status.load();
  if (a != HVD_OK) return BreakForAbort(a);
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess)
    return Break(HVD_ERR_TRANSPORT, "cudaSetDevice(" + std::to_string(device) + "): " + CudaErr(e));
  return HVD_OK;
}

int Comm::BreakForAbort(int status) {
  std::string reason;
  {
    std::lock_guard<std::mutex> lk(reason_mu);
    reason = abort_reason;
  }
  return Break(status, "aborted" + (reason.empty() ? std::string() : ": " + reason));
}

// NCCL's asynchronous state: HVD_OK, or the failure (broken).
int Comm::CheckAsync(const char* what) {
  ncclResult_t a = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(nccl, &a);
  if (r != ncclSuccess) a = r;
  if (a == ncclSuccess || a == ncclInProgress) return HVD_OK;
  return Break(HVD_ERR_TRANSPORT,
               std::string(what) + ": NCCL reports " + NcclErr(a, nccl) +
                   "; a rank failed or left, or the network broke; the communicator is aborted");
}

const char* LastError(void* comm) {
  if (comm == nullptr) return "nccl: no communicator";
  return static_cast<Comm*>(comm)->last_error.c_str();
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

}  // namespace hvd_nccl_transport
