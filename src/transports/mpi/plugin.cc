// The MPI transport's entry: every read of the env (ReadEnv), init and the
// table; the plugin is described in comm.h.
#include "comm.h"

namespace hvd_mpi_transport {
namespace {

// Every read of the env, into the set-up's Settings; throws Fail.
Settings ReadEnv(const hvd_transport_env_t* env) {
  if (env == nullptr ||
      env->struct_size < offsetof(hvd_transport_env_t, timeout_s) + sizeof(double)) {
    Throw(HVD_ERR_INVALID_ARGUMENT, "mpi init: missing or too small environment table");
  }
  const auto has = [&](size_t off, size_t len) { return env->struct_size >= off + len; };
  Settings s;
  const hvd_transport_option_t* comm_opt = hvd_transport_find_option(env, "mpi_comm");
  s.user_comm = comm_opt != nullptr ? comm_opt->pointer : nullptr;
  s.start_timeout =
      has(offsetof(hvd_transport_env_t, start_timeout_s), sizeof(double)) ? env->start_timeout_s
                                                                             : env->timeout_s;
  s.timeout_s = env->timeout_s;
  s.logger = env->logger;
  s.log = env->log;
  s.reduce = env->reduce;
  return s;
}

int Init(const hvd_transport_env_t* env, hvd_transport_info_t* info, void** comm, char* err,
         size_t err_len) noexcept {
  if (comm == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  *comm = nullptr;
  Comm* c = nullptr;
  int status = HVD_OK;
  std::string msg;
  try {
    c = new Comm();
    Setup(ReadEnv(env), info, c);
    *comm = c;
    return HVD_OK;
  } catch (const Fail& f) {
    status = f.code;
    msg = f.msg;
  } catch (const std::bad_alloc&) {
    status = HVD_ERR_NO_MEMORY;
    msg = "mpi init: out of memory";
  } catch (...) {
    status = HVD_ERR_INTERNAL;
    msg = "mpi init: unexpected exception";
  }
  try {
    if (c != nullptr) {
      c->Log(HVD_LOG_ERROR, msg);
      std::lock_guard<std::mutex> guard(Proc().mu);
      CleanUp(c, 0);  // a failed start-up: nothing to wait for
    }
  } catch (...) {
  }
  delete c;
  hvd::kit::WriteErr(err, err_len, msg);
  return status;
}

// clang-format off
const hvd_transport_t kTable = {
    HVD_TRANSPORT_ABI, sizeof(hvd_transport_t), "mpi",
    HVD_TRANSPORT_CAP_P2P | HVD_TRANSPORT_CAP_P2P_TEST | HVD_TRANSPORT_CAP_ABORT |
        HVD_TRANSPORT_CAP_PEER_TIMEOUT | HVD_TRANSPORT_CAP_ANY_THREAD,
    &Init, &Finalize, &LastError, &hvd::kit::Isend<&Post>, &hvd::kit::Irecv<&Post>, &Wait, &Test,
    &Progress,
    nullptr, nullptr,  // register_memory, deregister_memory
    &Allreduce, &Allgatherv, &Broadcast, &Alltoallv, &Reducescatter, &Barrier,
    &Abort, &AsyncError, &SetTimeout,
    0};  // reduce_dtypes: every dtype
// clang-format on

}  // namespace
}  // namespace hvd_mpi_transport

extern "C" __attribute__((visibility("default"))) const hvd_transport_t* hvd_transport_plugin(
    void) {
  return &hvd_mpi_transport::kTable;
}
