// The UCX transport's entry: every read of the env (ReadEnv), init and the
// table; the plugin is described in comm.h.
#include "comm.h"
#include "kit/entries.h"

namespace hvd_ucx_transport {
namespace {

// Every read of the env: checked, copied into the set-up's Settings.
int ReadEnv(const hvd_transport_env_t* env_in, Settings* s, std::string* msg) {
  hvd_transport_env_t env;
  int status = hvd::kit::CopyEnv(env_in, offsetof(hvd_transport_env_t, hosts), "ucx",
                                 &env, msg);
  if (status == HVD_OK) status = hvd::kit::ReadSettings(env, "ucx", s, msg);
  if (status != HVD_OK) return status;
  const hvd_transport_option_t* iface = hvd_transport_find_option(env_in, "network_interface");
  if (iface != nullptr && iface->value != nullptr) s->network_interface = iface->value;
  return HVD_OK;
}

int Init(const hvd_transport_env_t* env, hvd_transport_info_t* info, void** comm, char* err,
         size_t err_len) noexcept {
  const auto start = [&](void** out, std::string* msg) -> int {
    CommPtr c;
    Settings settings;
    int status = ReadEnv(env, &settings, msg);
    if (status == HVD_OK) status = Setup(settings, &c, msg);
    if (status != HVD_OK) return status;
    hvd::kit::FillP2pInfo(info, kMaxTag);
    *out = c.release();
    return HVD_OK;
  };
  const auto describe = [](const std::exception& e, std::string* msg) -> int {
    if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) {
      *msg = "ucx init: out of memory";
      return HVD_ERR_NO_MEMORY;
    }
    *msg = std::string("ucx init: ") + e.what();
    return HVD_ERR_TRANSPORT;
  };
  return hvd::kit::InitFrame("ucx", env, comm, err, err_len, start, describe);
}

hvd_transport_t MakeTable() {
  constexpr uint64_t kCaps = HVD_TRANSPORT_CAP_P2P | HVD_TRANSPORT_CAP_P2P_TEST |
                             HVD_TRANSPORT_CAP_ABORT | HVD_TRANSPORT_CAP_PEER_TIMEOUT |
                             HVD_TRANSPORT_CAP_ANY_THREAD;
  auto t = hvd::kit::NewTable<hvd_transport_t>(HVD_TRANSPORT_ABI, "ucx", kCaps);
  t.init = &Init;
  t.finalize = &Finalize;
  t.last_error = [](void* c) noexcept {
    return hvd::kit::LastError<Comm>(c, "ucx: no communicator");
  };
  t.isend = &hvd::kit::Isend<&Post>;
  t.irecv = &hvd::kit::Irecv<&Post>;
  t.wait = &Wait;
  t.test = &Test;
  t.progress = &Progress;
  t.abort = &Abort;
  t.async_error = &hvd::kit::AsyncError<Comm>;
  t.set_timeout = &hvd::kit::SetTimeout<Comm>;
  return t;
}

const hvd_transport_t kTable = MakeTable();

}  // namespace
}  // namespace hvd_ucx_transport

extern "C" __attribute__((visibility("default"))) const hvd_transport_t* hvd_transport_plugin(
    void) {
  return &hvd_ucx_transport::kTable;
}
