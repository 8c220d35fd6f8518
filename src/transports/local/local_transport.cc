// The single-rank transport: a world of one needs no network and no plugin.
// Every collective is a copy (or nothing).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "hvd_transport.h"

namespace {

struct LocalComm {
  int unused = 0;
};

int LocalInit(const hvd_transport_env_v1_t* env, void** comm, char* err, size_t err_len) noexcept {
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

int LocalAllreduce(void*, void*, size_t, hvd_dtype_t, hvd_reduce_op_t) noexcept { return HVD_OK; }

int LocalAllgatherv(void*, const void* send, void* recv, const size_t* recv_bytes) noexcept {
  if (recv_bytes[0] > 0 && send != recv) std::memmove(recv, send, recv_bytes[0]);
  return HVD_OK;
}

int LocalBroadcast(void*, void*, size_t, int32_t) noexcept { return HVD_OK; }

int LocalAlltoallv(void*, const void* send, const size_t* send_bytes, void* recv,
                   const size_t*) noexcept {
  if (send_bytes[0] > 0 && send != recv) std::memmove(recv, send, send_bytes[0]);
  return HVD_OK;
}

int LocalBarrier(void*) noexcept { return HVD_OK; }

const char* LocalLastError(void*) noexcept { return ""; }

const hvd_transport_v1_t kLocalTable = {
    HVD_TRANSPORT_ABI_V1, "local",        LocalInit,      LocalFinalize, LocalAllreduce,
    LocalAllgatherv,      LocalBroadcast, LocalAlltoallv, LocalBarrier,  LocalLastError,
    nullptr,  // query: nothing to report
};

}  // namespace

extern "C" const hvd_transport_v1_t* hvd_local_transport_table(void) { return &kLocalTable; }
