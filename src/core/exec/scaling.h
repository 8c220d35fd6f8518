// The pre- and post-scaling of reductions (AVERAGE, scale factors), on
// host buffers and as the CUDA kernels' scalings; executor-internal.
#pragma once

#include <cstring>

#include "common/kernels.h"
#include "cuda/cuda_kernels.h"
#include "hvd.h"

namespace hvd {

// Result = post-op scaling of a reduced buffer (AVERAGE, postscale) while
// copying src -> dst (dst may equal src).
inline void Finalize(void* dst, const void* src, size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op,
              double postscale, int size) {
  if (op == HVD_AVERAGE && !IsFloatingDtype(dtype)) {
    if (dst != src) std::memcpy(dst, src, count * DtypeSize(dtype));
    DivideInPlace(dst, count, dtype, size);
    ScaleInPlace(dst, count, dtype, postscale);
    return;
  }
  double f = postscale;
  if (op == HVD_AVERAGE) f /= size;
  if (dst == src) {
    ScaleInPlace(dst, count, dtype, f);
  } else {
    ScaleCopy(dst, src, count, dtype, f);
  }
}

// dst = src * prescale (dst may equal src).
inline void Prepare(void* dst, const void* src, size_t count, hvd_dtype_t dtype, double prescale) {
  if (dst == src) {
    ScaleInPlace(dst, count, dtype, prescale);
  } else if (count > 0) {
    ScaleCopy(dst, src, count, dtype, prescale);
  }
}

inline hvd_reduce_op_t TransportOp(hvd_reduce_op_t op) { return op == HVD_AVERAGE ? HVD_SUM : op; }

// The result's scaling as the host path's Finalize does it: AVERAGE divides
// integers by the size (then postscale), and folds 1/size into the factor
// for floating types.

inline hvd_cuda_scale_t FinishScale(hvd_dtype_t dtype, hvd_reduce_op_t op, double postscale, int size) {
  hvd_cuda_scale_t how{};
  how.dtype = dtype;
  how.divisor = 1;
  how.scale = postscale;
  if (op == HVD_AVERAGE) {
    if (IsFloatingDtype(dtype)) {
      how.scale = postscale / size;
    } else {
      how.divisor = size;
    }
  }
  return how;
}

inline bool Identity(const hvd_cuda_scale_t& how) {
  return how.dtype == HVD_BOOL || (how.scale == 1.0 && how.divisor == 1);
}

inline hvd_cuda_scale_t Prescale(hvd_dtype_t dtype, double prescale) {
  hvd_cuda_scale_t how{};
  how.dtype = dtype;
  how.divisor = 1;
  how.scale = prescale;
  return how;
}

// How a device reduction is scaled. AVERAGE of a floating type with no
// postscale goes to the transport as it is (NCCL's ncclAvg) when it
// averages; otherwise the sum, scaled after.
struct DeviceScaling {
  hvd_reduce_op_t op;     // what the transport reduces with
  hvd_cuda_scale_t pre;   // before, into the buffer reduced
  hvd_cuda_scale_t post;  // after, into the result
};
inline DeviceScaling DeviceScalingOf(hvd_dtype_t dtype, hvd_reduce_op_t op, double prescale,
                                     double postscale, int size, bool device_average) {
  const bool native_average =
      op == HVD_AVERAGE && IsFloatingDtype(dtype) && postscale == 1.0 && device_average;
  DeviceScaling how;
  how.op = native_average ? HVD_AVERAGE : TransportOp(op);
  how.pre = Prescale(dtype, prescale);
  how.post = native_average ? Prescale(dtype, 1.0) : FinishScale(dtype, op, postscale, size);
  return how;
}

}  // namespace hvd
