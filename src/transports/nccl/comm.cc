// The NCCL transport's teardown and the wait of its set-up; finalize.
#include "comm.h"

namespace hvd_nccl_transport {

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

// ---------------------------------------------------------------------------
// Set-up.

// Rank 0's failure before the id exists, under kIdKey for the others.
void TellFailure(const Settings& s, const std::string& m) {
  if (s.rank == 0 && s.size > 1 && s.has_store) {
    std::string v = "E" + m;
    s.store.set(s.store.kv, kIdKey, v.data(), v.size());
  }
}

// The NCCL unique id: rank 0 makes it and publishes it under kIdKey (or, if
// it failed before that, its message, so the others fail at once naming
// it); the others read it within the start timeout.
int ShareId(const Settings& s, const std::string& who, ncclUniqueId* id, std::string* msg) {
  // Rank 0 tells the others when it cannot make the id, so they do not wait
  // for it until the start timeout.
  auto fail = [&](int status, const std::string& m) {
    TellFailure(s, m);
    *msg = m;
    return status;
  };
  std::memset(id, 0, sizeof(*id));
  if (s.rank == 0) {
    ncclResult_t r = ncclGetUniqueId(id);
    if (r != ncclSuccess) {
      return fail(HVD_ERR_TRANSPORT, who + "ncclGetUniqueId: " + NcclErr(r, nullptr));
    }
    if (s.size > 1) {
      std::string v(1 + sizeof(*id), 'I');
      std::memcpy(&v[1], id, sizeof(*id));
      int st = s.store.set(s.store.kv, kIdKey, v.data(), v.size());
      if (st != HVD_OK) {
        *msg = who + "publishing the NCCL unique id in the store failed (status " +
               std::to_string(st) + ")";
        return HVD_ERR_RENDEZVOUS;
      }
    }
  } else {
    void* v = nullptr;
    size_t len = 0;
    int st = s.store.get(s.store.kv, kIdKey, &v, &len, s.start_s);
    std::string value;
    if (st == HVD_OK && v != nullptr) value.assign(static_cast<const char*>(v), len);
    if (v != nullptr) s.store.free(v);
    std::string& m = *msg;
    if (st != HVD_OK)
      m = who + "did not get rank 0's NCCL unique id within " + Secs(s.start_s) +
            " s (the start timeout; status " + std::to_string(st) +
            "): rank 0 has not started or failed before publishing it";
    else if (!value.empty() && value[0] == 'E')
      m = who + "rank 0 could not set up NCCL: " + value.substr(1);
    else if (value.size() != 1 + sizeof(*id) || value[0] != 'I')
      m = who + "the NCCL unique id in the store is malformed (" + std::to_string(value.size()) +
            " bytes)";
    if (!m.empty()) return HVD_ERR_RENDEZVOUS;
    std::memcpy(id, value.data() + 1, sizeof(*id));
  }
  return HVD_OK;
}

// The plugin's stream (non-blocking, highest priority), its events and the
// barrier's scratch int.
int MakeStream(Comm* c, std::string* msg) {
  int least = 0, greatest = 0;
  cudaError_t ce = cudaDeviceGetStreamPriorityRange(&least, &greatest);
  if (ce == cudaSuccess) ce = cudaStreamCreateWithPriority(&c->stream, cudaStreamNonBlocking, greatest);
  for (cudaEvent_t& e : c->ready)
    if (ce == cudaSuccess) ce = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  if (ce == cudaSuccess) ce = cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming);
  if (ce == cudaSuccess)
    ce = cudaMallocAsync(reinterpret_cast<void**>(&c->scratch), sizeof(int32_t), c->stream);
  if (ce == cudaSuccess) ce = cudaMemsetAsync(c->scratch, 0, sizeof(int32_t), c->stream);
  if (ce != cudaSuccess) {
    *msg = "creating the plugin's stream, events and scratch: " + CudaErr(ce);
    return HVD_ERR_TRANSPORT;
  }
  return HVD_OK;
}

// The NCCL communicator (non-blocking, polled against the start timeout),
// then the plugin's stream, events and scratch.
int Connect(Comm* c, const ncclUniqueId& id, double start_s, std::string* msg) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&c->nccl, c->size, id, c->rank, &config);
  if (c->nccl != nullptr) c->nccl_live = true;
  int s = HVD_OK;
  if (r != ncclSuccess && r != ncclInProgress) {
    *msg = "ncclCommInitRankConfig: " + NcclErr(r, c->nccl);
    s = HVD_ERR_TRANSPORT;
  } else if (c->nccl == nullptr) {
    *msg = "ncclCommInitRankConfig gave no communicator";
    s = HVD_ERR_INTERNAL;
  } else {
    s = WaitInit(c, start_s, msg);
  }
  if (s == HVD_OK) s = MakeStream(c, msg);
  return s;
}



// The set-up's steps: the CUDA device (local rank modulo the devices), the
// unique id through the store, the NCCL communicator and the stream.
int Setup(const Settings& s, Comm** out, std::string* msg) {
  const std::string host = HostName();
  const std::string who = "nccl: rank " + std::to_string(s.rank) + " (host " + host + "): ";
  int ndev = 0;
  cudaError_t ce = cudaGetDeviceCount(&ndev);
  std::string m;
  int status = HVD_OK;
  if (ce != cudaSuccess || ndev <= 0) {
    std::string why = ce != cudaSuccess ? CudaErr(ce) : std::string("0 devices");
    m = "nccl: no CUDA device on host " + host + " (cudaGetDeviceCount: " + why +
        "); the nccl transport needs one GPU per rank";
    status = HVD_ERR_UNSUPPORTED;
  } else if (s.size > 1 && !s.has_store) {
    m = who + "the NCCL unique id goes through the rendezvous store, and this launch has "
              "none (MPI launches): use hvdrun's store, or another transport";
    status = HVD_ERR_UNSUPPORTED;
  }
  Comm* c = status == HVD_OK ? new (std::nothrow) Comm : nullptr;
  if (status == HVD_OK && c == nullptr) {
    m = who + "out of memory";
    status = HVD_ERR_NO_MEMORY;
  }
  if (status != HVD_OK) {
    TellFailure(s, m);
    *msg = m;
    return status;
  }
  c->rank = s.rank;
  c->size = s.size;
  c->host = host;
  c->who = who;
  c->transfer_s = s.timeout_s;
  c->limit_s = s.timeout_s;
  c->logger = s.logger;
  c->log = s.log;
  int local = s.local_rank >= 0 ? s.local_rank : s.rank;
  c->device = local % ndev;
  ce = cudaSetDevice(c->device);
  if (ce != cudaSuccess) {
    Destroy(c, false);
    m = who + "cudaSetDevice(" + std::to_string(local % ndev) + "): " + CudaErr(ce);
    TellFailure(s, m);
    *msg = m;
    return HVD_ERR_TRANSPORT;
  }
  ncclUniqueId id;
  status = ShareId(s, who, &id, msg);
  if (status == HVD_OK) {
    status = Connect(c, id, s.start_s, msg);
    if (status != HVD_OK) *msg = who + *msg;
  }
  if (status != HVD_OK) {
    Destroy(c, false);
    return status;
  }
  int version = 0;
  ncclGetVersion(&version);
  c->Log(HVD_LOG_DEBUG, who + "NCCL " + std::to_string(version) + " communicator of " + std::to_string(c->size) +
                " ranks on CUDA device " + std::to_string(c->device) + " of " + std::to_string(ndev));
  *out = c;
  return HVD_OK;
}

void Finalize(void* comm) {
  if (comm == nullptr) return;
  Comm* c = static_cast<Comm*>(comm);
  bool healthy = c->broken.load() == HVD_OK && c->abort_status.load() == HVD_OK;
  Destroy(c, healthy);
}

}  // namespace hvd_nccl_transport
