// The UCX transport's entry: every read of the env (ReadEnv), init and the
// table; the plugin is described in comm.h.
#include "comm.h"
#include "kit/entries.h"

namespace hvd_ucx_v4 {
namespace {

// Every read of the env: checked, copied into the set-up's Settings.
int ReadEnv(const hvd_transport_env_v1_t* env_in, Settings* s, std::string* msg) {
  if (env_in == nullptr || env_in->struct_size < offsetof(hvd_transport_env_v1_t, mpi_comm)) {
    *msg = "ucx init: missing or too small environment table";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  hvd_transport_env_v1_t env{};
  std::memcpy(&env, env_in, std::min(env_in->struct_size, sizeof(env)));
  if (env.size < 1 || env.rank < 0 || env.rank >= env.size) {
    *msg =
        "ucx init: bad rank " + std::to_string(env.rank) + " of size " + std::to_string(env.size);
    return HVD_ERR_INVALID_ARGUMENT;
  }
  s->store = {env.kv, env.kv_set, env.kv_get, env.kv_free};
  if (env.size > 1 && !s->store.Usable()) {
    *msg = "ucx init: no rendezvous store callbacks";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  s->rank = env.rank;
  s->size = env.size;
  s->local_size = env.local_size;
  s->timeout_s = env.timeout_s;
  s->start_s = env.start_timeout_s > 0 ? env.start_timeout_s : 30.0;
  s->logger = env.logger;
  s->log = env.log;
  if (env.network_interface != nullptr) s->network_interface = env.network_interface;
  return HVD_OK;
}

int Init(const hvd_transport_env_v1_t* env, hvd_transport_info_t* info, void** comm, char* err,
         size_t err_len) noexcept {
  if (comm == nullptr) {
    hvd::kit::WriteErr(err, err_len, "ucx init: comm is NULL");
    return HVD_ERR_INVALID_ARGUMENT;
  }
  *comm = nullptr;
  std::string msg;
  int status = HVD_ERR_INTERNAL;
  try {
    CommPtr c;
    Settings settings;
    status = ReadEnv(env, &settings, &msg);
    if (status == HVD_OK) status = Setup(settings, &c, &msg);
    if (status == HVD_OK) {
      hvd::kit::FillP2pInfo(info, kMaxTag);
      *comm = c.release();
      return HVD_OK;
    }
  } catch (const hvd::kit::StoreError& e) {
    msg = std::string("ucx init: ") + e.what();
    status = HVD_ERR_RENDEZVOUS;
  } catch (const std::bad_alloc&) {
    msg = "ucx init: out of memory";
    status = HVD_ERR_NO_MEMORY;
  } catch (const std::exception& e) {
    msg = std::string("ucx init: ") + e.what();
    status = HVD_ERR_TRANSPORT;
  } catch (...) {
    msg = "ucx init: unknown exception";
    status = HVD_ERR_TRANSPORT;
  }
  try {
    if (env != nullptr && env->log != nullptr) env->log(env->logger, HVD_LOG_ERROR, msg.c_str());
  } catch (...) {
  }
  hvd::kit::WriteErr(err, err_len, msg);
  return status;
}


hvd_transport_v4_t MakeTable() {
  hvd_transport_v4_t t;
  std::memset(&t, 0, sizeof(t));
  t.abi_version = HVD_TRANSPORT_ABI_V4;
  t.struct_size = sizeof(hvd_transport_v4_t);
  t.name = "ucx";
  t.caps = HVD_TRANSPORT_CAP_P2P | HVD_TRANSPORT_CAP_P2P_TEST | HVD_TRANSPORT_CAP_ABORT |
           HVD_TRANSPORT_CAP_PEER_TIMEOUT | HVD_TRANSPORT_CAP_ANY_THREAD;
  t.init = &Init;
  t.finalize = &Finalize;
  t.last_error = [](void* c) noexcept {
    return hvd::kit::LastError<Comm>(c, "ucx: no communicator");
  };
  t.isend = &Isend;
  t.irecv = &Irecv;
  t.wait = &Wait;
  t.test = &Test;
  t.progress = &Progress;
  t.abort = &Abort;
  t.async_error = &hvd::kit::AsyncError<Comm>;
  t.set_timeout = &hvd::kit::SetTimeout<Comm>;
  return t;
}

const hvd_transport_v4_t kTable = MakeTable();

}  // namespace
}  // namespace hvd_ucx_v4

extern "C" __attribute__((visibility("default"))) const hvd_transport_v4_t* hvd_transport_plugin_v4(
    void) {
  return &hvd_ucx_v4::kTable;
}
