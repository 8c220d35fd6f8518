// What every point-to-point plugin does alike: its list of pending requests,
// the checks of an isend/irecv's arguments, the info it fills at init.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "hvd.h"
#include "hvd_transport.h"

namespace hvd::kit {

// A doubly linked list of requests threaded through their prev/next fields.
// Not locked: the plugin guards it where more than one thread may touch it.
template <typename Request>
struct PendingList {
  Request* head = nullptr;

  void Link(Request* r) {
    r->next = head;
    if (head != nullptr) head->prev = r;
    head = r;
  }
  void Unlink(Request* r) {
    (r->prev != nullptr ? r->prev->next : head) = r->next;
    if (r->next != nullptr) r->next->prev = r->prev;
    r->prev = r->next = nullptr;
  }
};

// The checks of an isend/irecv's arguments, `op` naming it ("gloo isend: "):
// HVD_OK, or the status with its message in *error.
inline int CheckPost(const char* op, int32_t peer, uint32_t tag, const hvd_transport_buffer_t* buf,
                     hvd_transport_request_t** req, int rank, int size, uint32_t max_tag,
                     std::string* error) {
  if (req == nullptr || buf == nullptr || (buf->data == nullptr && buf->bytes > 0)) {
    *error = std::string(op) + "NULL request, buffer or data";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  *req = nullptr;
  if (peer < 0 || peer >= size || peer == rank || tag > max_tag) {
    *error = std::string(op) + "bad peer " + std::to_string(peer) + " or tag " +
             std::to_string(tag) + " (rank " + std::to_string(rank) + " of " +
             std::to_string(size) + ", max tag " + std::to_string(max_tag) + ")";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  if (buf->memory_type != HVD_MEMORY_HOST) {
    *error = std::string(op) + "only host memory is supported";
    return HVD_ERR_UNSUPPORTED;
  }
  return HVD_OK;
}

// The info of a point-to-point plugin without native collectives: its
// largest tag, no MPI thread level, no native collective; only the fields
// that fit in info->struct_size.
inline void FillP2pInfo(hvd_transport_info_t* info, uint32_t max_tag) {
  if (info != nullptr && info->struct_size >= offsetof(hvd_transport_info_t, native_max_bytes) +
                                                  sizeof(info->native_max_bytes)) {
    info->max_tag = max_tag;
    info->mpi_thread_level = -1;
    std::fill(info->native_max_bytes, info->native_max_bytes + HVD_TRANSPORT_COLLECTIVES, 0);
  }
}

// isend and irecv over a plugin's one function that posts either.
using PostFn = int (*)(void* comm, int32_t peer, uint32_t tag, const hvd_transport_buffer_t* buf,
                       hvd_transport_request_t** req, bool send) noexcept;

template <PostFn Post>
int Isend(void* comm, int32_t peer, uint32_t tag, const hvd_transport_buffer_t* buf,
          hvd_transport_request_t** req) noexcept {
  return Post(comm, peer, tag, buf, req, true);
}

template <PostFn Post>
int Irecv(void* comm, int32_t peer, uint32_t tag, const hvd_transport_buffer_t* buf,
          hvd_transport_request_t** req) noexcept {
  return Post(comm, peer, tag, buf, req, false);
}

}  // namespace hvd::kit
