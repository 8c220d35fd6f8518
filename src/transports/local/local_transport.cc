// The single-rank transport: a world of one needs no network and no plugin
// file. A table of the one plugin ABI, built into libhvd; every collective
// is native and a copy (or nothing).
#include <cstdio>
#include <cstring>
#include <new>

#include "hvd_transport.h"

namespace {

struct LocalComm {
  int unused = 0;
};

int LocalInit(const hvd_transport_env_t* env, hvd_transport_info_t*, void** comm, char* err,
              size_t err_len) noexcept {
  if (env->size != 1) {
    std::snprintf(err, err_len, "the local transport serves a world of one, not %d ranks",
                  static_cast<int>(env->size));
    *comm = nullptr;
    return HVD_ERR_INVALID_ARGUMENT;
  }
  *comm = new (std::nothrow) LocalComm();
  return *comm ? HVD_OK : HVD_ERR_NO_MEMORY;
}

void LocalFinalize(void* comm) noexcept { delete static_cast<LocalComm*>(comm); }

const char* LocalLastError(void*) noexcept { return ""; }

int LocalAllreduce(void*, const hvd_transport_buffer_t*, size_t, hvd_dtype_t,
                   hvd_reduce_op_t) noexcept {
  return HVD_OK;
}

int LocalAllgatherv(void*, const hvd_transport_buffer_t* send, const hvd_transport_buffer_t* recv,
                    const size_t* recv_bytes) noexcept {
  if (recv_bytes[0] > 0 && send->data != recv->data) {
    std::memmove(recv->data, send->data, recv_bytes[0]);
  }
  return HVD_OK;
}

int LocalBroadcast(void*, const hvd_transport_buffer_t*, int32_t) noexcept { return HVD_OK; }

int LocalAlltoallv(void*, const hvd_transport_buffer_t* send, const size_t* send_bytes,
                   const hvd_transport_buffer_t* recv, const size_t*) noexcept {
  if (send_bytes[0] > 0 && send->data != recv->data) {
    std::memmove(recv->data, send->data, send_bytes[0]);
  }
  return HVD_OK;
}

int LocalBarrier(void*) noexcept { return HVD_OK; }

const hvd_transport_t kLocalTable = {
    HVD_TRANSPORT_ABI,
    static_cast<uint32_t>(sizeof(hvd_transport_t)),
    "local",
    HVD_TRANSPORT_CAP_ANY_THREAD,  // it keeps no state
    LocalInit,
    LocalFinalize,
    LocalLastError,
    nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,  // no point-to-point
    LocalAllreduce,
    LocalAllgatherv,
    LocalBroadcast,
    LocalAlltoallv,
    nullptr,  // reducescatter: none
    LocalBarrier,
    nullptr, nullptr, nullptr,  // abort, async_error, set_timeout
    0,                          // reduce_dtypes: every dtype
};

}  // namespace

extern "C" const hvd_transport_t* hvd_local_transport_table(void) { return &kLocalTable; }
