// Element-wise kernels: reductions, scaling and dtype helpers.
//
// Performance notes
//  - The build uses -O2, where GCC's "very cheap" vectoriser only vectorises
//    loops whose trip count is a known multiple of the vector width. The hot
//    loops therefore walk the data in blocks of kBlock elements (a constant
//    trip count the vectoriser accepts) and finish the tail with a scalar
//    loop. No pragmas, no target-specific code: SSE2 (baseline x86-64) is
//    what the compiler uses, and any wider ISA when built with -march.
//  - dst and src may be the same pointer but must not partially overlap.
//  - float16/bfloat16 are widened to float32, combined and rounded back to
//    nearest even. One float32 operation followed by one rounding to the
//    narrow type gives the correctly rounded narrow result for +, * (float32
//    has at least 2p+2 bits for both), so no double-rounding error appears.
#include "common/kernels.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

namespace hvd {
namespace {

constexpr size_t kBlock = 16;

// Applies d[i] = f(d[i], s[i]) with a vectoriser-friendly block structure.
template <typename T, typename F>
inline void Combine(T* __restrict d, const T* __restrict s, size_t n, F f) {
  size_t i = 0;
  const size_t nb = n - n % kBlock;
  for (; i < nb; i += kBlock) {
    for (size_t j = 0; j < kBlock; ++j) d[i + j] = f(d[i + j], s[i + j]);
  }
  for (; i < n; ++i) d[i] = f(d[i], s[i]);
}

// Wrapping integer arithmetic without signed-overflow UB.
template <typename T>
inline T WrapAdd(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
}
template <typename T>
inline T WrapMul(T a, T b) {
  using U = std::make_unsigned_t<T>;
  // Promote small unsigned types to unsigned int so the multiply itself never
  // happens in (signed) int.
  using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
  return static_cast<T>(static_cast<U>(static_cast<W>(static_cast<U>(a)) *
                                       static_cast<W>(static_cast<U>(b))));
}

template <typename T>
void ReduceInt(void* dst, const void* src, size_t n, hvd_reduce_op_t op) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  switch (op) {
    case HVD_SUM:
    case HVD_AVERAGE:
      Combine(d, s, n, [](T a, T b) { return WrapAdd(a, b); });
      break;
    case HVD_MIN:
      Combine(d, s, n, [](T a, T b) { return b < a ? b : a; });
      break;
    case HVD_MAX:
      Combine(d, s, n, [](T a, T b) { return b > a ? b : a; });
      break;
    case HVD_PRODUCT:
      Combine(d, s, n, [](T a, T b) { return WrapMul(a, b); });
      break;
  }
}

// MIN/MAX propagate NaN: if either operand is NaN the result is NaN.
template <typename T>
inline T FMin(T a, T b) {
  return (b < a || b != b) ? b : a;
}
template <typename T>
inline T FMax(T a, T b) {
  return (b > a || b != b) ? b : a;
}

template <typename T>
void ReduceFloat(void* dst, const void* src, size_t n, hvd_reduce_op_t op) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  switch (op) {
    case HVD_SUM:
    case HVD_AVERAGE:
      Combine(d, s, n, [](T a, T b) { return a + b; });
      break;
    case HVD_MIN:
      Combine(d, s, n, [](T a, T b) { return FMin(a, b); });
      break;
    case HVD_MAX:
      Combine(d, s, n, [](T a, T b) { return FMax(a, b); });
      break;
    case HVD_PRODUCT:
      Combine(d, s, n, [](T a, T b) { return a * b; });
      break;
  }
}

// float16/bfloat16: widen a block into float32 scratch on the stack, combine,
// narrow back. Blocks keep the conversions in tight loops.
template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void ReduceNarrow(void* dst, const void* src, size_t n, hvd_reduce_op_t op) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* s = static_cast<const uint16_t*>(src);
  constexpr size_t kChunk = 256;
  float a[kChunk];
  float b[kChunk];
  for (size_t base = 0; base < n; base += kChunk) {
    const size_t m = n - base < kChunk ? n - base : kChunk;
    for (size_t i = 0; i < m; ++i) a[i] = ToF(d[base + i]);
    for (size_t i = 0; i < m; ++i) b[i] = ToF(s[base + i]);
    ReduceFloat<float>(a, b, m, op);
    for (size_t i = 0; i < m; ++i) d[base + i] = FromF(a[i]);
  }
}

void ReduceBool(void* dst, const void* src, size_t n, hvd_reduce_op_t op) {
  uint8_t* d = static_cast<uint8_t*>(dst);
  const uint8_t* s = static_cast<const uint8_t*>(src);
  switch (op) {
    case HVD_SUM:
    case HVD_AVERAGE:
    case HVD_MAX:
      Combine(d, s, n, [](uint8_t a, uint8_t b) -> uint8_t { return (a != 0) | (b != 0); });
      break;
    case HVD_MIN:
    case HVD_PRODUCT:
      Combine(d, s, n, [](uint8_t a, uint8_t b) -> uint8_t { return (a != 0) & (b != 0); });
      break;
  }
}

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Converts a double to integer type T: truncation toward zero, saturating at
// the type's range; NaN becomes 0 (a plain cast would be undefined behaviour).
template <typename T>
inline T TruncSaturate(double v) {
  constexpr double lo = static_cast<double>(std::numeric_limits<T>::min());
  // 2^bits for unsigned / 2^(bits-1) for signed: the first value out of range.
  constexpr double hi_excl = static_cast<double>(std::numeric_limits<T>::max()) + 1.0;
  if (!(v == v)) return 0;
  if (v <= lo) return std::numeric_limits<T>::min();
  if (v >= hi_excl) return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

template <typename T>
void ScaleIntCopy(T* __restrict d, const T* __restrict s, size_t n, double f) {
  for (size_t i = 0; i < n; ++i) d[i] = TruncSaturate<T>(static_cast<double>(s[i]) * f);
}

template <typename T>
void ScaleFloatCopy(T* d, const T* s, size_t n, double f) {
  // In place (d == s) is allowed, so no restrict; the element-wise pattern is
  // still safe for the vectoriser since each d[i] depends only on s[i].
  size_t i = 0;
  const size_t nb = n - n % kBlock;
  for (; i < nb; i += kBlock) {
    T tmp[kBlock];
    for (size_t j = 0; j < kBlock; ++j) tmp[j] = static_cast<T>(static_cast<double>(s[i + j]) * f);
    for (size_t j = 0; j < kBlock; ++j) d[i + j] = tmp[j];
  }
  for (; i < n; ++i) d[i] = static_cast<T>(static_cast<double>(s[i]) * f);
}

template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void ScaleNarrowCopy(uint16_t* d, const uint16_t* s, size_t n, double factor) {
  const float f = static_cast<float>(factor);
  for (size_t i = 0; i < n; ++i) d[i] = FromF(ToF(s[i]) * f);
}

void ScaleDispatch(void* dst, const void* src, size_t count, hvd_dtype_t dtype, double f) {
  switch (dtype) {
    case HVD_UINT8:
      ScaleIntCopy(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), count, f);
      break;
    case HVD_INT8:
      ScaleIntCopy(static_cast<int8_t*>(dst), static_cast<const int8_t*>(src), count, f);
      break;
    case HVD_UINT16:
      ScaleIntCopy(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), count, f);
      break;
    case HVD_INT16:
      ScaleIntCopy(static_cast<int16_t*>(dst), static_cast<const int16_t*>(src), count, f);
      break;
    case HVD_INT32:
      ScaleIntCopy(static_cast<int32_t*>(dst), static_cast<const int32_t*>(src), count, f);
      break;
    case HVD_INT64:
      ScaleIntCopy(static_cast<int64_t*>(dst), static_cast<const int64_t*>(src), count, f);
      break;
    case HVD_FLOAT16:
      ScaleNarrowCopy<HalfToFloat, FloatToHalf>(static_cast<uint16_t*>(dst),
                                                static_cast<const uint16_t*>(src), count, f);
      break;
    case HVD_BFLOAT16:
      ScaleNarrowCopy<BFloat16ToFloat, FloatToBFloat16>(
          static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), count, f);
      break;
    case HVD_FLOAT32:
      ScaleFloatCopy(static_cast<float*>(dst), static_cast<const float*>(src), count, f);
      break;
    case HVD_FLOAT64:
      ScaleFloatCopy(static_cast<double*>(dst), static_cast<const double*>(src), count, f);
      break;
    case HVD_BOOL:
      if (dst != src) std::memmove(dst, src, count);
      break;
  }
}

template <typename T>
void DivideInt(T* d, size_t n, int64_t divisor) {
  // Division in int64 truncates toward zero (C++ semantics); the quotient of
  // a value of T by an integer other than -1 always fits back into T. -1 is
  // negation, done with wrapping arithmetic (INT_MIN / -1 would trap).
  if (divisor == -1) {
    for (size_t i = 0; i < n; ++i) d[i] = WrapMul<T>(d[i], static_cast<T>(-1));
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    d[i] = static_cast<T>(static_cast<int64_t>(d[i]) / divisor);
  }
}

}  // namespace

// ---------------------------------------------------------------------------
// Conversions.

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: man * 2^-24, exact in float32.
    const float mag = static_cast<float>(man) * 5.9604644775390625e-08f;  // 2^-24
    return sign ? -mag : mag;
  }
  if (exp == 0x1f) {
    // Inf (man == 0) or NaN (payload kept, quiet bit set).
    return BitsFloat(sign | 0x7f800000u | (man << 13) | (man ? 0x00400000u : 0u));
  }
  return BitsFloat(sign | ((exp + (127 - 15)) << 23) | (man << 13));
}

uint16_t FloatToHalf(float f) {
  const uint32_t x = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {
    if (ax == 0x7f800000u) return sign | 0x7c00u;  // inf
    // NaN: quiet, keep the top payload bits.
    return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  }
  // 65520 = halfway between 65504 (largest half) and 2^16: ties to even go up.
  if (ax >= 0x477ff000u) return sign | 0x7c00u;
  if (ax >= 0x38800000u) {
    // Normal half: rebias exponent (127 -> 15), round 13 dropped bits.
    const uint32_t base = ax - 0x38000000u;
    uint32_t q = base >> 13;
    const uint32_t rem = base & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  // Subnormal half (or zero): value / 2^-24, rounded to nearest even. Values
  // below 2^-25 round to zero; 2^-25 itself is a tie and goes to even (0).
  if (ax < 0x33000000u) return sign;
  const uint32_t e = ax >> 23;                       // 102..112
  const uint32_t m = (ax & 0x7fffffu) | 0x800000u;   // 24-bit significand
  const uint32_t shift = 126u - e;                   // 14..24
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // may carry into the
  return static_cast<uint16_t>(sign | q);            // smallest normal: right
}

float BFloat16ToFloat(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

uint16_t FloatToBFloat16(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((x >> 16) | 0x0040u);  // NaN stays NaN (quiet)
  }
  // Round to nearest even on the 16 dropped bits; overflow carries into inf.
  const uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

// ---------------------------------------------------------------------------
// Reductions.

void ReduceInto(void* dst, const void* src, size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op) {
  if (count == 0 || dst == nullptr || src == nullptr) return;
  if (op != HVD_SUM && op != HVD_AVERAGE && op != HVD_MIN && op != HVD_MAX &&
      op != HVD_PRODUCT) {
    return;
  }
  switch (dtype) {
    case HVD_UINT8: ReduceInt<uint8_t>(dst, src, count, op); break;
    case HVD_INT8: ReduceInt<int8_t>(dst, src, count, op); break;
    case HVD_UINT16: ReduceInt<uint16_t>(dst, src, count, op); break;
    case HVD_INT16: ReduceInt<int16_t>(dst, src, count, op); break;
    case HVD_INT32: ReduceInt<int32_t>(dst, src, count, op); break;
    case HVD_INT64: ReduceInt<int64_t>(dst, src, count, op); break;
    case HVD_FLOAT16: ReduceNarrow<HalfToFloat, FloatToHalf>(dst, src, count, op); break;
    case HVD_BFLOAT16:
      ReduceNarrow<BFloat16ToFloat, FloatToBFloat16>(dst, src, count, op);
      break;
    case HVD_FLOAT32: ReduceFloat<float>(dst, src, count, op); break;
    case HVD_FLOAT64: ReduceFloat<double>(dst, src, count, op); break;
    case HVD_BOOL: ReduceBool(dst, src, count, op); break;
  }
}

extern "C" void hvd_reduce_kernel(void* dst, const void* src, size_t count, hvd_dtype_t dtype,
                                  hvd_reduce_op_t op) {
  ReduceInto(dst, src, count, dtype, op);
}

// ---------------------------------------------------------------------------
// Scaling.

void ScaleInPlace(void* buf, size_t count, hvd_dtype_t dtype, double factor) {
  if (factor == 1.0 || count == 0 || buf == nullptr || dtype == HVD_BOOL) return;
  ScaleDispatch(buf, buf, count, dtype, factor);
}

void ScaleCopy(void* dst, const void* src, size_t count, hvd_dtype_t dtype, double factor) {
  if (count == 0 || dst == nullptr || src == nullptr) return;
  if (factor == 1.0 || dtype == HVD_BOOL) {
    if (dst != src) std::memmove(dst, src, count * DtypeSize(dtype));
    return;
  }
  ScaleDispatch(dst, src, count, dtype, factor);
}

void DivideInPlace(void* buf, size_t count, hvd_dtype_t dtype, int64_t divisor) {
  if (count == 0 || buf == nullptr || divisor == 1 || dtype == HVD_BOOL) return;
  if (IsFloatingDtype(dtype)) {
    ScaleInPlace(buf, count, dtype, 1.0 / static_cast<double>(divisor));
    return;
  }
  if (divisor == 0) return;  // undefined; leave the data alone
  switch (dtype) {
    case HVD_UINT8: DivideInt(static_cast<uint8_t*>(buf), count, divisor); break;
    case HVD_INT8: DivideInt(static_cast<int8_t*>(buf), count, divisor); break;
    case HVD_UINT16: DivideInt(static_cast<uint16_t*>(buf), count, divisor); break;
    case HVD_INT16: DivideInt(static_cast<int16_t*>(buf), count, divisor); break;
    case HVD_INT32: DivideInt(static_cast<int32_t*>(buf), count, divisor); break;
    case HVD_INT64: DivideInt(static_cast<int64_t*>(buf), count, divisor); break;
    default: break;
  }
}

// ---------------------------------------------------------------------------
// Dtype helpers.

size_t DtypeSize(int dtype) {
  switch (dtype) {
    case HVD_UINT8:
    case HVD_INT8:
    case HVD_BOOL:
      return 1;
    case HVD_UINT16:
    case HVD_INT16:
    case HVD_FLOAT16:
    case HVD_BFLOAT16:
      return 2;
    case HVD_INT32:
    case HVD_FLOAT32:
      return 4;
    case HVD_INT64:
    case HVD_FLOAT64:
      return 8;
    default:
      return 0;
  }
}

bool IsValidDtype(int dtype) { return DtypeSize(dtype) != 0; }

bool IsFloatingDtype(hvd_dtype_t dtype) {
  return dtype == HVD_FLOAT16 || dtype == HVD_BFLOAT16 || dtype == HVD_FLOAT32 ||
         dtype == HVD_FLOAT64;
}

const char* DtypeName(int dtype) {
  switch (dtype) {
    case HVD_UINT8: return "uint8";
    case HVD_INT8: return "int8";
    case HVD_UINT16: return "uint16";
    case HVD_INT16: return "int16";
    case HVD_INT32: return "int32";
    case HVD_INT64: return "int64";
    case HVD_FLOAT16: return "float16";
    case HVD_BFLOAT16: return "bfloat16";
    case HVD_FLOAT32: return "float32";
    case HVD_FLOAT64: return "float64";
    case HVD_BOOL: return "bool";
    default: return "unknown";
  }
}

const char* ReduceOpName(int op) {
  switch (op) {
    case HVD_SUM: return "sum";
    case HVD_AVERAGE: return "average";
    case HVD_MIN: return "min";
    case HVD_MAX: return "max";
    case HVD_PRODUCT: return "product";
    default: return "unknown";
  }
}

}  // namespace hvd
