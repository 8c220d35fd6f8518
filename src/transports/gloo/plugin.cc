// The Gloo transport's entry: every read of the env (ReadEnv), init and the
// table; the plugin is described in comm.h.
#include "comm.h"
#include "kit/entries.h"

namespace hvd_gloo_transport {
namespace {

// Every read of the env: checked, copied into the set-up's Settings.
int ReadEnv(const hvd_transport_env_t* env_in, Settings* s, std::string* msg) {
  hvd_transport_env_t env;
  int status = hvd::kit::CopyEnv(env_in, offsetof(hvd_transport_env_t, hosts), "gloo",
                                 &env, msg);
  if (status == HVD_OK) status = hvd::kit::ReadSettings(env, "gloo", s, msg);
  if (status != HVD_OK) return status;
  const hvd_transport_option_t* iface = hvd_transport_find_option(env_in, "network_interface");
  const hvd_transport_option_t* addr = hvd_transport_find_option(env_in, "local_address");
  if (iface != nullptr && iface->value != nullptr) s->network_interface = iface->value;
  if (addr != nullptr && addr->value != nullptr) s->local_address = addr->value;
  return HVD_OK;
}

int Init(const hvd_transport_env_t* env, hvd_transport_info_t* info, void** comm, char* err,
         size_t err_len) noexcept {
  SigpipeBlock no_sigpipe;  // also inherited by Gloo's event-loop thread
  const auto start = [&](void** out, std::string* msg) -> int {
    std::unique_ptr<Comm> c;
    Settings settings;
    int status = ReadEnv(env, &settings, msg);
    if (status == HVD_OK) status = Setup(settings, &c, msg);
    if (status != HVD_OK) return status;
    hvd::kit::FillP2pInfo(info, kMaxTag);  // only the fields that fit in info->struct_size
    // Pipelines cut large transfers into 4 MiB messages here: every message
    // costs a receive-ready round trip through Gloo, and on loopback TCP
    // (2 ranks, 2 cores) 4 MiB segments were 1.1-1.4x faster than 1 MiB
    // for 16-64 MiB allreduce and allgather, and equal at 4 MiB.
    if (info != nullptr && info->struct_size >= offsetof(hvd_transport_info_t, segment_bytes) +
                                                    sizeof(info->segment_bytes)) {
      info->segment_bytes = size_t{4} << 20;
    }
    *out = c.release();
    return HVD_OK;
  };
  const auto describe = [](const std::exception& e, std::string* msg) -> int {
    *msg = std::string("gloo init: ") + WithoutLocation(e.what());
    return dynamic_cast<const std::bad_alloc*>(&e) != nullptr ? HVD_ERR_NO_MEMORY
           : LooksLikeTimeout(e.what())                       ? HVD_ERR_TIMEOUT
                                                              : HVD_ERR_TRANSPORT;
  };
  return hvd::kit::InitFrame("gloo", env, comm, err, err_len, start, describe);
}

hvd_transport_t MakeTable() {
  constexpr uint64_t kCaps = HVD_TRANSPORT_CAP_P2P | HVD_TRANSPORT_CAP_ABORT |
                             HVD_TRANSPORT_CAP_PEER_TIMEOUT | HVD_TRANSPORT_CAP_ANY_THREAD;
  auto t = hvd::kit::NewTable<hvd_transport_t>(HVD_TRANSPORT_ABI, "gloo", kCaps);
  t.init = &Init;
  t.finalize = &Finalize;
  t.last_error = [](void* c) noexcept {
    return hvd::kit::LastError<Comm>(c, "gloo: no communicator");
  };
  t.isend = &hvd::kit::Isend<&Post>;
  t.irecv = &hvd::kit::Irecv<&Post>;
  t.wait = &Wait;
  t.abort = &Abort;
  t.async_error = &hvd::kit::AsyncError<Comm>;
  t.set_timeout = &hvd::kit::SetTimeout<Comm>;
  return t;
}

const hvd_transport_t kTable = MakeTable();

}  // namespace
}  // namespace hvd_gloo_transport

extern "C" const hvd_transport_t* hvd_gloo_transport_table(void) {
  return &hvd_gloo_transport::kTable;
}

#ifndef HVD_BUILTIN_GLOO
extern "C" __attribute__((visibility("default"))) const hvd_transport_t* hvd_transport_plugin(
    void) {
  return &hvd_gloo_transport::kTable;
}
#endif
