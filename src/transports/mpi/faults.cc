// The MPI transport's faults: abort, async_error, set_timeout, last_error.
#include "comm.h"

namespace hvd_mpi_transport {

// ---- faults ---------------------------------------------------------------

int Abort(void* comm, int status, const char* reason) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  if (status == HVD_OK) status = HVD_ERR_ABORTED;
  try {
    std::lock_guard<std::mutex> g(c->abort_mu);
    if (c->aborted.load() != HVD_OK) return HVD_OK;  // idempotent: the first abort wins
    c->abort_reason =
        std::string("mpi: aborted: ") + (reason != nullptr ? reason : "no reason given");
    int ok = HVD_OK;
    c->failure.compare_exchange_strong(ok, status);
    c->aborted.store(status);
  } catch (...) {
    c->aborted.store(status);  // no text, but the waits still return
  }
  return HVD_OK;
}

int AsyncError(void* comm) noexcept {
  const Comm* c = static_cast<const Comm*>(comm);
  return c == nullptr ? HVD_ERR_INVALID_ARGUMENT : c->failure.load();
}

int SetTimeout(void* comm, double timeout_s, int32_t kind) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  c->limit = timeout_s;
  c->limit_kind = kind;
  c->limit_set = true;
  return HVD_OK;
}

const char* LastError(void* comm) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return "mpi: no communicator";
  Failed(*c);  // an abort's reason, once seen on this thread
  return c->last_error.c_str();
}

}  // namespace hvd_mpi_transport
