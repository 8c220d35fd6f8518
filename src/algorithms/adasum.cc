#include "algorithms/adasum.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/kernels.h"

namespace hvd {

namespace {

// a = adasum(a, b) over n elements of W (float or double).
template <typename W>
void CombinePair(W* a, const W* b, size_t n) {
  double dot = 0.0, aa = 0.0, bb = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double x = static_cast<double>(a[i]);
    const double y = static_cast<double>(b[i]);
    dot += x * y;
    aa += x * x;
    bb += y * y;
  }
  const double ca = aa == 0.0 ? 1.0 : 1.0 - dot / (2.0 * aa);
  const double cb = bb == 0.0 ? 1.0 : 1.0 - dot / (2.0 * bb);
  for (size_t i = 0; i < n; ++i) {
    const double x = ca * static_cast<double>(a[i]);
    const double y = cb * static_cast<double>(b[i]);
    a[i] = static_cast<W>(x + y);
  }
}

// The tree over P blocks of n elements of W, in place; the result is block 0.
template <typename W>
void Tree(W* blocks, int nranks, size_t n) {
  for (int d = 1; d < nranks; d *= 2) {
    for (int i = 0; i + d < nranks; i += 2 * d) {
      CombinePair(blocks + static_cast<size_t>(i) * n,
                  blocks + static_cast<size_t>(i + d) * n, n);
    }
  }
}

}  // namespace

bool AdasumSupportsDtype(hvd_dtype_t dtype) {
  return dtype == HVD_FLOAT16 || dtype == HVD_BFLOAT16 || dtype == HVD_FLOAT32 ||
         dtype == HVD_FLOAT64;
}

bool AdasumCombine(void* copies, int nranks, size_t count, hvd_dtype_t dtype, void* out) {
  if (!AdasumSupportsDtype(dtype) || nranks < 1) return false;
  if (count == 0) return true;
  switch (dtype) {
    case HVD_FLOAT64: {
      double* b = static_cast<double*>(copies);
      Tree(b, nranks, count);
      std::memcpy(out, b, count * sizeof(double));
      return true;
    }
    case HVD_FLOAT32: {
      float* b = static_cast<float*>(copies);
      Tree(b, nranks, count);
      std::memcpy(out, b, count * sizeof(float));
      return true;
    }
    default: {  // float16, bfloat16: float32 work copies
      const bool half = dtype == HVD_FLOAT16;
      const uint16_t* src = static_cast<const uint16_t*>(copies);
      const size_t total = static_cast<size_t>(nranks) * count;
      std::vector<float> work(total);
      for (size_t i = 0; i < total; ++i) {
        work[i] = half ? HalfToFloat(src[i]) : BFloat16ToFloat(src[i]);
      }
      Tree(work.data(), nranks, count);
      uint16_t* o = static_cast<uint16_t*>(out);
      for (size_t i = 0; i < count; ++i) {
        o[i] = half ? FloatToHalf(work[i]) : FloatToBFloat16(work[i]);
      }
      return true;
    }
  }
}

}  // namespace hvd
