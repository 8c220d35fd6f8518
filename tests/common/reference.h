// Reference values for collective tests: what rank r contributes and what
// the reduction must produce, computed in double / int64 independently of
// hvd's kernels. Shared by the thread-rank and the multi-process suites.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/kernels.h"
#include "hvd.h"

namespace hvd::test {

inline const hvd_dtype_t kDtypes[] = {HVD_UINT8, HVD_INT8,     HVD_UINT16,  HVD_INT16,
                               HVD_INT32, HVD_INT64,    HVD_FLOAT16, HVD_BFLOAT16,
                               HVD_FLOAT32, HVD_FLOAT64, HVD_BOOL};
inline const hvd_reduce_op_t kOps[] = {HVD_SUM, HVD_AVERAGE, HVD_MIN, HVD_MAX, HVD_PRODUCT};

inline bool IsSigned(hvd_dtype_t d) {
  return d == HVD_INT8 || d == HVD_INT16 || d == HVD_INT32 || d == HVD_INT64 ||
         hvd::IsFloatingDtype(d);
}

// The value rank r contributes at index i: small integers, exactly
// representable in every dtype, whose reductions over up to 8 ranks fit.
inline double Value(hvd_dtype_t d, hvd_reduce_op_t op, int r, size_t i) {
  if (d == HVD_BOOL) return static_cast<double>((i + static_cast<size_t>(r)) % 3 != 0);
  if (op == HVD_PRODUCT) {
    if (r >= 3) return (i % 2 == 0 || !IsSigned(d)) ? 1 : -1;
    return static_cast<double>(1 + (i + static_cast<size_t>(r)) % 2);
  }
  int v = static_cast<int>((i * 7 + static_cast<size_t>(r) * 3) % 11);
  return IsSigned(d) ? v - 5 : v;
}

inline void Store(hvd_dtype_t d, void* base, size_t i, double v) {
  switch (d) {
    case HVD_UINT8: static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v); break;
    case HVD_BOOL: static_cast<uint8_t*>(base)[i] = v != 0; break;
    case HVD_INT8: static_cast<int8_t*>(base)[i] = static_cast<int8_t>(v); break;
    case HVD_UINT16: static_cast<uint16_t*>(base)[i] = static_cast<uint16_t>(v); break;
    case HVD_INT16: static_cast<int16_t*>(base)[i] = static_cast<int16_t>(v); break;
    case HVD_INT32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); break;
    case HVD_INT64: static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); break;
    case HVD_FLOAT16: static_cast<uint16_t*>(base)[i] = hvd::FloatToHalf(static_cast<float>(v)); break;
    case HVD_BFLOAT16: static_cast<uint16_t*>(base)[i] = hvd::FloatToBFloat16(static_cast<float>(v)); break;
    case HVD_FLOAT32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case HVD_FLOAT64: static_cast<double*>(base)[i] = v; break;
  }
}

inline double Load(hvd_dtype_t d, const void* base, size_t i) {
  switch (d) {
    case HVD_UINT8: case HVD_BOOL: return static_cast<const uint8_t*>(base)[i];
    case HVD_INT8: return static_cast<const int8_t*>(base)[i];
    case HVD_UINT16: return static_cast<const uint16_t*>(base)[i];
    case HVD_INT16: return static_cast<const int16_t*>(base)[i];
    case HVD_INT32: return static_cast<const int32_t*>(base)[i];
    case HVD_INT64: return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case HVD_FLOAT16: return hvd::HalfToFloat(static_cast<const uint16_t*>(base)[i]);
    case HVD_BFLOAT16: return hvd::BFloat16ToFloat(static_cast<const uint16_t*>(base)[i]);
    case HVD_FLOAT32: return static_cast<const float*>(base)[i];
    case HVD_FLOAT64: return static_cast<const double*>(base)[i];
  }
  return 0;
}

// The expected result, computed in double / int64 independently of hvd.
inline double Expected(hvd_dtype_t d, hvd_reduce_op_t op, int n, size_t i) {
  double acc = Value(d, op, 0, i);
  for (int r = 1; r < n; ++r) {
    double v = Value(d, op, r, i);
    switch (op) {
      case HVD_SUM: case HVD_AVERAGE: acc += v; break;
      case HVD_MIN: acc = std::min(acc, v); break;
      case HVD_MAX: acc = std::max(acc, v); break;
      case HVD_PRODUCT: acc *= v; break;
      case HVD_ADASUM: break;  // not element-wise: not covered here (see test_adasum)
    }
  }
  if (d == HVD_BOOL) {
    if (op == HVD_SUM || op == HVD_MAX) {
      acc = 0;
      for (int r = 0; r < n; ++r) acc = acc || Value(d, op, r, i);
    } else if (op == HVD_MIN || op == HVD_PRODUCT) {
      acc = 1;
      for (int r = 0; r < n; ++r) acc = acc && Value(d, op, r, i);
    }
    return acc;
  }
  if (op == HVD_AVERAGE) {
    if (hvd::IsFloatingDtype(d)) return acc / n;
    return static_cast<double>(static_cast<int64_t>(acc) / n);  // toward zero
  }
  return acc;
}

inline double Tolerance(hvd_dtype_t d, hvd_reduce_op_t op) {
  if (op != HVD_AVERAGE) return 0;  // integer-valued: exact in every dtype
  switch (d) {
    case HVD_FLOAT16: return 2e-3;
    case HVD_BFLOAT16: return 1e-2;
    case HVD_FLOAT32: return 1e-6;
    case HVD_FLOAT64: return 1e-12;
    default: return 0;
  }
}

}  // namespace hvd::test
