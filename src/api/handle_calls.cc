// The C calls on handles: waiting, polling, releasing, and reading results.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "api/default_context.h"
#include "api/errors.h"
#include "api/objects.h"
#include "api/submit.h"
#include "api/validate.h"
#include "common/kernels.h"
#include "hvd.h"

using namespace hvd::api;  // NOLINT: the C calls below are this module's shims

namespace {

// For results the handle owns: checks the op kind and completion.
hvd::Status RequireOwnedResult(const char* fn, hvd_handle_t h) {
  HVD_CHECK(CheckHandle(fn, h));
  if (h->type != hvd::OpType::kAllgather && h->type != hvd::OpType::kAlltoall &&
      h->type != hvd::OpType::kReducescatter && h->type != hvd::OpType::kJoin) {
    return Invalid(fn, Cat("handle is for ", h->impl->description(),
                           ", which writes into the caller's buffer; only allgather, alltoall, "
                           "reducescatter and join results are owned by the handle"));
  }
  hvd::Status s = h->impl->status();
  if (s.code() == HVD_IN_PROGRESS) return hvd::Status(HVD_IN_PROGRESS, "");
  return OpError(*h->impl, s);
}

// The completed operation's state for the two calls below: HVD_OK with its
// fence (null where none is needed), HVD_IN_PROGRESS, or its failure.
hvd::Status CompletedFence(const char* fn, hvd_handle_t handle,
                           std::shared_ptr<hvd::CudaFence>* fence) {
  HVD_CHECK(CheckHandle(fn, handle));
  hvd::Status s = handle->impl->status();
  if (s.code() == HVD_IN_PROGRESS) {
    return hvd::Status(HVD_IN_PROGRESS, Cat(fn, ": ", handle->impl->description(),
                                            " has not completed"));
  }
  HVD_CHECK(OpError(*handle->impl, s));
  *fence = handle->impl->cuda_fence;
  return hvd::Status::Ok();
}

}  // namespace

extern "C" {

// ===========================================================================
// Handles.
// ===========================================================================

hvd_status_t hvd_handle_wait(hvd_handle_t handle, double timeout_s) {
  HVD_API_BEGIN();
  hvd::Status s = CheckHandle(__func__, handle);
  if (!s.ok()) return Report(s);
  if (std::isnan(timeout_s)) return Report(Invalid(__func__, "timeout_s is NaN"));
  // Negative, infinite or absurdly long (> ~30 years) all mean "no limit";
  // the cap keeps the core's duration arithmetic from overflowing.
  if (timeout_s < 0 || timeout_s > 1e9) timeout_s = -1.0;
  if (handle->impl->succeeded()) return HVD_OK;  // a fused step's caller waits on hundreds
  s = handle->impl->Wait(timeout_s);
  return Report(OpError(*handle->impl, s));
  HVD_API_END();
}

hvd_status_t hvd_handle_poll(hvd_handle_t handle) {
  HVD_API_BEGIN();
  hvd::Status s = CheckHandle(__func__, handle);
  if (!s.ok()) return Report(s);
  s = handle->impl->status();
  if (s.code() == HVD_IN_PROGRESS) return HVD_IN_PROGRESS;
  return Report(OpError(*handle->impl, s));
  HVD_API_END();
}

hvd_status_t hvd_handle_release(hvd_handle_t handle) {
  HVD_API_BEGIN();
  hvd::Status s = CheckHandle(__func__, handle);
  if (!s.ok()) return Report(s);
  handle->magic = kDeadMagic;
  // The wrapper is part of the handle impl references: move impl out before
  // dropping it (a pending op keeps its own reference). The last reference
  // gives the handle back to its context's pool.
  hvd::HandleRef last = std::move(handle->impl);
  last.reset();
  return HVD_OK;
  HVD_API_END();
}

hvd_status_t hvd_handle_output(hvd_handle_t handle, const void** data, size_t* bytes) {
  HVD_API_BEGIN();
  if (data != nullptr) *data = nullptr;
  if (bytes != nullptr) *bytes = 0;
  hvd::Status s = CheckHandle(__func__, handle);
  if (s.ok() && data == nullptr) s = Invalid(__func__, "data is NULL");
  if (s.ok() && bytes == nullptr) s = Invalid(__func__, "bytes is NULL");
  if (s.ok()) s = RequireOwnedResult(__func__, handle);
  if (!s.ok()) return Report(s);
  auto out = handle->impl->HostOutput();  // copies a device result on the first call
  if (!out.ok()) return Report(out.status());
  *data = out.value()->data();
  *bytes = out.value()->size();
  return HVD_OK;
  HVD_API_END();
}

hvd_status_t hvd_handle_output_device(hvd_handle_t handle, const void** data, size_t* bytes,
                                      int32_t* device) {
  HVD_API_BEGIN();
  if (data != nullptr) *data = nullptr;
  if (bytes != nullptr) *bytes = 0;
  if (device != nullptr) *device = HVD_DEVICE_CPU;
  hvd::Status s = CheckHandle(__func__, handle);
  if (s.ok() && data == nullptr) s = Invalid(__func__, "data is NULL");
  if (s.ok() && bytes == nullptr) s = Invalid(__func__, "bytes is NULL");
  if (s.ok() && device == nullptr) s = Invalid(__func__, "device is NULL");
  if (s.ok()) s = RequireOwnedResult(__func__, handle);
  if (!s.ok()) return Report(s);
  hvd::Handle& h = *handle->impl;
  if (h.output_device == HVD_DEVICE_CPU) {
    *data = h.output.data();
    *bytes = h.output.size();
  } else {
    *data = h.device_output.data;
    *bytes = h.device_bytes;
    *device = h.output_device;
  }
  return HVD_OK;
  HVD_API_END();
}

hvd_status_t hvd_handle_cuda_event(hvd_handle_t handle, void** event) {
  HVD_API_BEGIN();
  if (event != nullptr) *event = nullptr;
  std::shared_ptr<hvd::CudaFence> fence;
  hvd::Status s = event == nullptr ? Invalid(__func__, "event is NULL")
                                   : CompletedFence(__func__, handle, &fence);
  if (!s.ok()) return Report(s);
  if (fence) *event = fence->event();
  return HVD_OK;
  HVD_API_END();
}

hvd_status_t hvd_handle_stream_wait(hvd_handle_t handle, void* stream) {
  HVD_API_BEGIN();
  std::shared_ptr<hvd::CudaFence> fence;
  hvd::Status s = CompletedFence(__func__, handle, &fence);
  if (s.ok() && fence) s = fence->OrderBefore(stream);
  if (!s.ok()) return Report(s);
  return HVD_OK;
  HVD_API_END();
}

hvd_status_t hvd_handle_output_shape(hvd_handle_t handle, int64_t* shape, int32_t max_ndim,
                                     int32_t* ndim) {
  HVD_API_BEGIN();
  hvd::Status s = CheckHandle(__func__, handle);
  if (s.ok() && ndim == nullptr) s = Invalid(__func__, "ndim is NULL");
  if (s.ok() && max_ndim < 0) s = Invalid(__func__, Cat("max_ndim is ", max_ndim, ", must be >= 0"));
  if (s.ok() && shape == nullptr && max_ndim > 0) {
    s = Invalid(__func__, Cat("shape is NULL but max_ndim is ", max_ndim));
  }
  if (s.ok()) s = RequireOwnedResult(__func__, handle);
  if (!s.ok()) return Report(s);
  const std::vector<int64_t>& dims = handle->impl->output_shape;
  const size_t n = dims.size() < static_cast<size_t>(max_ndim) ? dims.size()
                                                               : static_cast<size_t>(max_ndim);
  for (size_t i = 0; i < n; ++i) shape[i] = dims[i];
  *ndim = static_cast<int32_t>(dims.size());
  return HVD_OK;
  HVD_API_END();
}

// Writes size entries; entries past size (n > size) are set to 0.
hvd_status_t hvd_handle_recv_splits(hvd_handle_t handle, int64_t* splits, int32_t n) {
  HVD_API_BEGIN();
  const char* fn = __func__;
  hvd::Status s = CheckHandle(fn, handle);
  if (s.ok() && splits == nullptr) s = Invalid(fn, "splits is NULL");
  if (s.ok() && handle->type != hvd::OpType::kAlltoall) {
    s = Invalid(fn, Cat("handle is for ", handle->impl->description(),
                        "; receive splits exist only for alltoall"));
  }
  if (s.ok() && n < handle->size) {
    s = Invalid(fn, Cat("n is ", n, ", must be >= the context size ", handle->size));
  }
  if (s.ok()) s = RequireOwnedResult(fn, handle);
  if (!s.ok()) return Report(s);
  const std::vector<int64_t>& got = handle->impl->recv_splits;
  if (got.size() != static_cast<size_t>(handle->size)) {
    return Fail(HVD_ERR_INTERNAL,
                Cat(fn, ": ", handle->impl->description(), " completed with ", got.size(),
                    " receive splits for ", handle->size, " ranks (a bug in hvd: please report)")
                    .c_str());
  }
  for (int32_t j = 0; j < n; ++j) {
    splits[j] = j < handle->size ? got[static_cast<size_t>(j)] : 0;
  }
  return HVD_OK;
  HVD_API_END();
}

}  // extern "C"
