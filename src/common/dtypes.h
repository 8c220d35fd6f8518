// The dtypes as one table, for every dispatch over them: the host kernels
// (common/kernels.cc) and the CUDA kernels' element work (cuda/batched_copy.h,
// compiled by nvcc too, so this header needs nothing but hvd.h).
#pragma once

#include <stdint.h>

#include "hvd.h"

#if defined(__CUDACC__)
#define HVD_DTYPES_HD __host__ __device__
#else
#define HVD_DTYPES_HD
#endif

// X(dtype, the C type its elements are stored as, its name).
#define HVD_INTEGER_DTYPES(X)       \
  X(HVD_UINT8, uint8_t, "uint8")    \
  X(HVD_INT8, int8_t, "int8")       \
  X(HVD_UINT16, uint16_t, "uint16") \
  X(HVD_INT16, int16_t, "int16")    \
  X(HVD_INT32, int32_t, "int32")    \
  X(HVD_INT64, int64_t, "int64")
#define HVD_FLOATING_DTYPES(X)          \
  X(HVD_FLOAT16, uint16_t, "float16")   \
  X(HVD_BFLOAT16, uint16_t, "bfloat16") \
  X(HVD_FLOAT32, float, "float32")      \
  X(HVD_FLOAT64, double, "float64")
#define HVD_DTYPES(X)          \
  HVD_INTEGER_DTYPES(X)        \
  HVD_FLOATING_DTYPES(X)       \
  X(HVD_BOOL, uint8_t, "bool")

namespace hvd {
namespace dtypes {

// Bytes of one element; 0 for an unknown dtype.
HVD_DTYPES_HD constexpr uint32_t Bytes(int32_t dtype) {
  switch (dtype) {
#define HVD_DTYPES_BYTES(d, T, name) \
  case d:                            \
    return sizeof(T);
    HVD_DTYPES(HVD_DTYPES_BYTES)
#undef HVD_DTYPES_BYTES
    default:
      return 0;
  }
}

HVD_DTYPES_HD constexpr bool IsFloating(int32_t dtype) {
  return dtype == HVD_FLOAT16 || dtype == HVD_BFLOAT16 || dtype == HVD_FLOAT32 ||
         dtype == HVD_FLOAT64;
}

}  // namespace dtypes
}  // namespace hvd
