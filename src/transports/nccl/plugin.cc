// The NCCL transport's entry: init and the table; the plugin is described in
// comm.h.
#include "comm.h"

namespace hvd_nccl_v4 {
namespace {

int Init(const hvd_transport_env_v1_t* env, hvd_transport_info_t* info, void** comm_out, char* err,
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

hvd_transport_v4_t MakeTable() {
  hvd_transport_v4_t t;
  std::memset(&t, 0, sizeof(t));
  t.abi_version = HVD_TRANSPORT_ABI_V4;
  t.struct_size = sizeof(hvd_transport_v4_t);
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

const hvd_transport_v4_t kTable = MakeTable();

}  // namespace
}  // namespace hvd_nccl_v4

extern "C" __attribute__((visibility("default"))) const hvd_transport_v4_t* hvd_transport_plugin_v4(
    void) {
  return &hvd_nccl_v4::kTable;
}
