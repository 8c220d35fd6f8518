/* The CUDA kernels of the core: batched copies with scaling, for the device
 * fusion buffer and for the result's post-op scaling (AVERAGE, pre/post
 * scale factors).
 *
 * They live in their own library, libhvd_cuda_kernels.so, built with nvcc
 * (sm_80 and sm_90 code plus compute_90 PTX) where the CUDA toolkit is
 * found, and loaded at run time by the core next to the CUDA runtime, so
 * libhvd.so links no CUDA. The library links the shared CUDA runtime
 * (libcudart.so), the same instance the core dlopens. This header is the
 * whole interface between the two: plain C, no CUDA header needed.
 *
 * The core and this library are built together; the table still carries
 * its version and size so a stale library next to a newer core is refused
 * with a message instead of being called wrongly. */
#ifndef HVD_CUDA_KERNELS_H_
#define HVD_CUDA_KERNELS_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HVD_CUDA_KERNELS_ABI 1

/* One copy of a batch: count elements from src to dst (device memory of
 * the current device; dst == src is allowed: in place). */
typedef struct hvd_cuda_copy_s {
  const void* src;
  void* dst;
  uint64_t count;
} hvd_cuda_copy_t;

/* What each element becomes, with the host path's semantics exactly
 * (src/common/kernels.cc: ScaleCopy, DivideInPlace):
 *  - integer dtypes: y = x / divisor (int64 division, truncation toward
 *    zero; -1 negates with wrap-around) when divisor != 1, then, when
 *    scale != 1, y = trunc(double(y) * scale) saturated to the type's
 *    range (NaN -> 0);
 *  - float32 / float64: y = x * T(scale) (one rounding in T); divisor must
 *    be 1 (fold it into scale);
 *  - float16 / bfloat16: y = narrow(float(x) * float(scale)), round to
 *    nearest even, as the core's conversions;
 *  - bool: a copy.
 * scale == 1 and divisor == 1: a plain copy of the bytes (any alignment;
 * nothing to do in place). Scaling needs src and dst aligned to the element
 * size, as every tensor is. The results are meant to be the host path's
 * bit for bit, NaN payloads included (src/cuda/batched_copy.h); only a NaN
 * made by an invalid product (0 x inf) has the GPU's default bits rather
 * than the host CPU's. */
typedef struct hvd_cuda_scale_s {
  int32_t dtype; /* hvd_dtype_t */
  int32_t reserved;
  int64_t divisor;
  double scale;
} hvd_cuda_scale_t;

typedef struct hvd_cuda_kernels_v1_s {
  uint32_t abi_version; /* HVD_CUDA_KERNELS_ABI */
  uint32_t struct_size; /* sizeof(hvd_cuda_kernels_v1_t) */
  /* Copies one launch carries; a call with more is split into launches. */
  uint32_t batch_capacity;
  uint32_t reserved;
  /* n copies of one dtype with one scaling, enqueued on `stream` (a
   * cudaStream_t; NULL: the legacy default stream) of the calling thread's
   * current device. Returns 0 or the CUDA error of the launch (a
   * cudaError_t value); asynchronous like any launch. Copies of 0
   * elements are skipped; n == 0 launches nothing. Copies must not
   * overlap each other except a copy in place. Arguments it cannot run
   * (how NULL, copies NULL with n > 0, an unknown dtype, divisor 0, a
   * divisor other than 1 on a floating dtype, a NULL or, for scaling,
   * misaligned pointer in a copy of elements) return cudaErrorInvalidValue
   * and launch nothing; nothing escapes as an exception. */
  int (*scale_copy)(const hvd_cuda_copy_t* copies, size_t n, const hvd_cuda_scale_t* how,
                    void* stream);
  /* CUDA's text for an error this table returned (cudaGetErrorString). */
  const char* (*error_string)(int err);
} hvd_cuda_kernels_v1_t;

/* The library's one export. */
typedef const hvd_cuda_kernels_v1_t* (*hvd_cuda_kernels_v1_fn)(void);
const hvd_cuda_kernels_v1_t* hvd_cuda_kernels_v1(void);

#ifdef __cplusplus
}
#endif

#endif /* HVD_CUDA_KERNELS_H_ */
