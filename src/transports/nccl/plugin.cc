// The NCCL transport's entry: every read of the env (ReadEnv), init and the
// table; the plugin is described in comm.h.
#include "comm.h"
#include "kit/entries.h"

namespace hvd_nccl_transport {
namespace {

// Every read of the env: checked, into the set-up's Settings.
int ReadEnv(const hvd_transport_env_t* env, Settings* s) {
  if (env == nullptr || env->size < 1 || env->rank < 0 || env->rank >= env->size) {
    return HVD_ERR_INVALID_ARGUMENT;
  }
  s->rank = env->rank;
  s->size = env->size;
  s->local_rank = env->local_rank;
  s->store = {env->kv, env->kv_set, env->kv_get, env->kv_free};
  s->has_store = env->kv != nullptr && s->store.Usable();
  s->start_s = env->start_timeout_s > 0 ? env->start_timeout_s : kDefaultStartS;
  s->timeout_s = env->timeout_s;
  s->logger = env->logger;
  s->log = env->log;
  return HVD_OK;
}

int Init(const hvd_transport_env_t* env, hvd_transport_info_t* info, void** comm_out, char* err,
         size_t err_len) {
  if (comm_out != nullptr) *comm_out = nullptr;
  Settings s;
  if (comm_out == nullptr || ReadEnv(env, &s) != HVD_OK) {
    WriteErr(err, err_len, "nccl init: invalid arguments (env or comm NULL, or rank outside size)");
    return HVD_ERR_INVALID_ARGUMENT;
  }
  Comm* c = nullptr;
  std::string msg;
  const int status = Setup(s, &c, &msg);
  if (status != HVD_OK) {
    WriteErr(err, err_len, msg);
    return status;
  }
  if (info != nullptr) {
    size_t have = info->struct_size;
    if (have >= offsetof(hvd_transport_info_t, native_max_bytes) + sizeof(info->native_max_bytes))
      for (size_t& m : info->native_max_bytes) m = SIZE_MAX;
  }
  *comm_out = c;
  return HVD_OK;
}

hvd_transport_t MakeTable() {
  auto t = hvd::kit::NewTable<hvd_transport_t>(HVD_TRANSPORT_ABI, "nccl", kCaps);
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
  t.set_timeout = &hvd::kit::SetTimeout<Comm>;
  return t;
}

const hvd_transport_t kTable = MakeTable();

}  // namespace
}  // namespace hvd_nccl_transport

extern "C" __attribute__((visibility("default"))) const hvd_transport_t* hvd_transport_plugin(
    void) {
  return &hvd_nccl_transport::kTable;
}
