// The NCCL transport's faults: abort, async_error, set_timeout, last_error.
#include "comm.h"

namespace hvd_nccl_v4 {

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

}  // namespace hvd_nccl_v4
