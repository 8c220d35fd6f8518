// The NCCL transport's teardown and the wait of its set-up; finalize.
#include "comm.h"

namespace hvd_nccl_v4 {

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

void Finalize(void* comm) {
  if (comm == nullptr) return;
  Comm* c = static_cast<Comm*>(comm);
  bool healthy = c->broken.load() == HVD_OK && c->abort_status.load() == HVD_OK;
  Destroy(c, healthy);
}

}  // namespace hvd_nccl_v4
