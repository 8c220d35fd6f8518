// The UCX transport's entry: init (the env read, the info filled) and the
// table; the plugin is described in comm.h.
#include "comm.h"

namespace hvd_ucx_v4 {
namespace {

int Init(const hvd_transport_env_v1_t* env, hvd_transport_info_t* info, void** comm, char* err,
         size_t err_len) noexcept {
  if (comm == nullptr) {
    WriteErr(err, err_len, "ucx init: comm is NULL");
    return HVD_ERR_INVALID_ARGUMENT;
  }
  *comm = nullptr;
  std::string msg;
  int status = HVD_ERR_INTERNAL;
  try {
    CommPtr c;
    status = InitImpl(env, &c, &msg);
    if (status == HVD_OK) {
      if (info != nullptr &&
          info->struct_size >= offsetof(hvd_transport_info_t, native_max_bytes) +
                                   sizeof(info->native_max_bytes)) {
        info->max_tag = kMaxTag;
        info->mpi_thread_level = -1;
        std::fill(info->native_max_bytes, info->native_max_bytes + HVD_TRANSPORT_COLLECTIVES, 0);
      }
      *comm = c.release();
      return HVD_OK;
    }
  } catch (const StoreError& e) {
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
  WriteErr(err, err_len, msg);
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
  t.last_error = &LastError;
  t.isend = &Isend;
  t.irecv = &Irecv;
  t.wait = &Wait;
  t.test = &Test;
  t.progress = &Progress;
  t.abort = &Abort;
  t.async_error = &AsyncError;
  t.set_timeout = &SetTimeout;
  return t;
}

const hvd_transport_v4_t kTable = MakeTable();

}  // namespace
}  // namespace hvd_ucx_v4

extern "C" __attribute__((visibility("default"))) const hvd_transport_v4_t* hvd_transport_plugin_v4(
    void) {
  return &hvd_ucx_v4::kTable;
}
