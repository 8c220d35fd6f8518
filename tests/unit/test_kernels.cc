// Element-wise kernels: every dtype x op against references computed here
// independently (wide arithmetic, and a float16/bfloat16 rounding reference
// written with frexp/nearbyint rather than bit manipulation).
#include <gtest/gtest.h>

#include <cfenv>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/kernels.h"

namespace hvd::kernels_internal {
// Defined in kernels.cc: the portable float16 reduction, which the F16C path
// replaces on CPUs that have it.
void ReduceHalfPortable(void* dst, const void* src, size_t count, hvd_reduce_op_t op);
}  // namespace hvd::kernels_internal

namespace {

using hvd::BFloat16ToFloat;
using hvd::FloatToBFloat16;
using hvd::FloatToHalf;
using hvd::HalfToFloat;

// ---------------------------------------------------------------------------
// Reference rounding of a double to a binary format with precision p
// (significand bits incl. the implicit one), minimum normal exponent emin and
// largest finite value max_finite; round to nearest, ties to even; overflow
// to infinity. Uses the FPU's default rounding mode (nearest-even).
double RefRound(double x, int p, int emin, double max_finite) {
  if (std::isnan(x)) return x;
  if (x == 0) return x;
  const double ax = std::fabs(x);
  int ex;
  std::frexp(ax, &ex);  // ax = m * 2^ex, m in [0.5, 1): floor(log2 ax) = ex - 1
  const int e = std::max(ex - 1, emin);
  const double ulp = std::ldexp(1.0, e - p + 1);
  // Anything at or above max + ulp(max)/2 rounds to infinity.
  int emax;
  std::frexp(max_finite, &emax);
  const double overflow = max_finite + std::ldexp(1.0, (emax - 1) - p);
  if (ax >= overflow) return std::copysign(INFINITY, x);
  const double q = std::nearbyint(ax / ulp) * ulp;
  return std::copysign(q, x);
}

double RefHalf(double x) { return RefRound(x, 11, -14, 65504.0); }
double RefBf16(double x) { return RefRound(x, 8, -126, std::ldexp(255.0, 120)); }

// Decoding reference: the definition of the formats, by arithmetic.
double RefDecodeHalf(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
  double v;
  if (exp == 0) {
    v = std::ldexp(man, -24);
  } else if (exp == 31) {
    v = man ? NAN : INFINITY;
  } else {
    v = std::ldexp(1024 + man, exp - 25);
  }
  return sign ? -v : v;
}

double RefDecodeBf16(uint16_t b) {
  const int sign = b >> 15, exp = (b >> 7) & 255, man = b & 127;
  double v;
  if (exp == 0) {
    v = std::ldexp(man, -133);
  } else if (exp == 255) {
    v = man ? NAN : INFINITY;
  } else {
    v = std::ldexp(128 + man, exp - 134);
  }
  return sign ? -v : v;
}

float FloatFromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool SameValue(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

// ---------------------------------------------------------------------------
// float16

TEST(Half, ExactValues) {
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(0.5f), 0x3800);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);                   // largest finite
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14)), 0x0400);      // smallest normal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);      // smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1023.0f, -24)), 0x03ff);   // largest subnormal
  EXPECT_EQ(FloatToHalf(1.0f / 3.0f), 0x3555);
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xc000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::signbit(HalfToFloat(0x8000)));
}

TEST(Half, DecodesEveryBitPattern) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float got = HalfToFloat(static_cast<uint16_t>(h));
    ASSERT_TRUE(SameValue(got, RefDecodeHalf(static_cast<uint16_t>(h)))) << std::hex << h;
    // Round trip: every half survives half -> float -> half (NaN stays NaN).
    const uint16_t back = FloatToHalf(got);
    if (std::isnan(got)) {
      ASSERT_TRUE(std::isnan(HalfToFloat(back))) << std::hex << h;
    } else {
      ASSERT_EQ(back, h) << std::hex << h;
    }
  }
}

TEST(Half, RoundsTiesToEven) {
  // Normal range: 1 + 2^-11 is halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(FloatToHalf(2049.0f), FloatToHalf(2048.0f));
  EXPECT_EQ(HalfToFloat(FloatToHalf(2051.0f)), 2052.0f);
  EXPECT_EQ(HalfToFloat(FloatToHalf(std::nextafter(2049.0f, 0.0f))), 2048.0f);
  EXPECT_EQ(HalfToFloat(FloatToHalf(std::nextafter(2049.0f, 1e9f))), 2050.0f);
  // Subnormal range: 2^-25 is halfway between 0 and the smallest subnormal.
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(FloatToHalf(-std::ldexp(1.0f, -25)), 0x8000);
  EXPECT_EQ(FloatToHalf(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(FloatToHalf(3 * std::ldexp(1.0f, -25)), 0x0002);  // 1.5 ulp -> 2
  EXPECT_EQ(FloatToHalf(5 * std::ldexp(1.0f, -25)), 0x0002);  // 2.5 ulp -> 2
  // Largest subnormal + half an ulp rounds up into the smallest normal.
  EXPECT_EQ(FloatToHalf(std::ldexp(2047.0f, -25)), 0x0400);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -30)), 0x0000);  // far below: zero
}

TEST(Half, OverflowInfinityNan) {
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);  // the tie goes to even = infinity
  EXPECT_EQ(FloatToHalf(1e6f), 0x7c00);
  EXPECT_EQ(FloatToHalf(-1e6f), 0xfc00);
  EXPECT_EQ(FloatToHalf(FLT_MAX), 0x7c00);
  EXPECT_EQ(FloatToHalf(INFINITY), 0x7c00);
  EXPECT_EQ(FloatToHalf(-INFINITY), 0xfc00);
  EXPECT_TRUE(std::isinf(HalfToFloat(0x7c00)));
  const uint16_t n = FloatToHalf(NAN);
  EXPECT_EQ(n & 0x7c00, 0x7c00);
  EXPECT_NE(n & 0x03ff, 0);
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7e00)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7c01)));  // signalling pattern is still NaN
  // A NaN whose payload sits only in the low float bits must not become inf.
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(FloatFromBits(0x7f800001u)))));
}

TEST(Half, MatchesReferenceNearEveryHalfAndOnRandomFloats) {
  // Around each positive finite half h: the midpoint to the next half, and
  // the floats just below and above it.
  for (uint32_t h = 0; h < 0x7bff; ++h) {
    const double lo = RefDecodeHalf(static_cast<uint16_t>(h));
    const double hi = RefDecodeHalf(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((lo + hi) / 2);  // exact in float
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f), -mid}) {
      ASSERT_TRUE(SameValue(HalfToFloat(FloatToHalf(f)), RefHalf(f)))
          << "f=" << f << " got " << HalfToFloat(FloatToHalf(f)) << " want " << RefHalf(f);
    }
  }
  std::mt19937 rng(1234);
  std::uniform_int_distribution<uint32_t> bits;
  std::uniform_real_distribution<float> range(-70000.0f, 70000.0f);
  for (int i = 0; i < 2000000; ++i) {
    const float f = (i & 1) ? FloatFromBits(bits(rng)) : range(rng);
    ASSERT_TRUE(SameValue(HalfToFloat(FloatToHalf(f)), RefHalf(f)))
        << "f=" << f << " got " << HalfToFloat(FloatToHalf(f)) << " want " << RefHalf(f);
  }
}

// ---------------------------------------------------------------------------
// bfloat16

TEST(BFloat16, ExactValuesTiesOverflowNan) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToBFloat16(3.140625f), 0x4049);
  EXPECT_EQ(FloatToBFloat16(0.0f), 0x0000);
  EXPECT_EQ(FloatToBFloat16(-0.0f), 0x8000);
  EXPECT_EQ(BFloat16ToFloat(0x3f80), 1.0f);
  // Ties: 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(FloatToBFloat16(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)), 0x3f81);
  // Overflow: FLT_MAX is above the midpoint between bf16's max and 2^128.
  EXPECT_EQ(FloatToBFloat16(FLT_MAX), 0x7f80);
  EXPECT_EQ(FloatToBFloat16(-FLT_MAX), 0xff80);
  EXPECT_EQ(FloatToBFloat16(std::ldexp(255.0f, 120)), 0x7f7f);  // largest finite
  EXPECT_EQ(FloatToBFloat16(INFINITY), 0x7f80);
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(NAN))));
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(FloatFromBits(0x7f800001u)))));
  // Subnormals survive and round.
  EXPECT_EQ(FloatToBFloat16(FloatFromBits(0x00010000u)), 0x0001);
  EXPECT_EQ(FloatToBFloat16(FloatFromBits(0x00018000u)), 0x0002);  // tie -> even
  EXPECT_EQ(FloatToBFloat16(FloatFromBits(0x00008000u)), 0x0000);  // tie -> even (0)
}

TEST(BFloat16, DecodesEveryBitPatternAndMatchesReference) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float got = BFloat16ToFloat(static_cast<uint16_t>(b));
    ASSERT_TRUE(SameValue(got, RefDecodeBf16(static_cast<uint16_t>(b)))) << std::hex << b;
    if (!std::isnan(got)) {
      ASSERT_EQ(FloatToBFloat16(got), b) << std::hex << b;
    }
  }
  std::mt19937 rng(99);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 2000000; ++i) {
    const float f = FloatFromBits(bits(rng));
    ASSERT_TRUE(SameValue(BFloat16ToFloat(FloatToBFloat16(f)), RefBf16(f)))
        << "f=" << f << " bits " << std::hex << bits(rng);
  }
}

// ---------------------------------------------------------------------------
// Reductions against a wide-arithmetic reference.

const hvd_dtype_t kAllDtypes[] = {HVD_UINT8,   HVD_INT8,     HVD_UINT16,  HVD_INT16,
                                  HVD_INT32,   HVD_INT64,    HVD_FLOAT16, HVD_BFLOAT16,
                                  HVD_FLOAT32, HVD_FLOAT64,  HVD_BOOL};
const hvd_reduce_op_t kAllOps[] = {HVD_SUM, HVD_AVERAGE, HVD_MIN, HVD_MAX, HVD_PRODUCT};

// Integer reference: exact result in 128-bit-free form, then wrapped to the
// type's width (the kernels wrap on overflow, like the hardware).
template <typename T>
T RefInt(hvd_reduce_op_t op, T a, T b) {
  const uint64_t ua = static_cast<uint64_t>(static_cast<int64_t>(a));
  const uint64_t ub = static_cast<uint64_t>(static_cast<int64_t>(b));
  switch (op) {
    case HVD_SUM:
    case HVD_AVERAGE: return static_cast<T>(ua + ub);
    case HVD_PRODUCT: return static_cast<T>(ua * ub);
    case HVD_MIN: return a < b ? a : b;
    case HVD_MAX: return a > b ? a : b;
    case HVD_ADASUM: break;  // not element-wise; ReduceInto leaves dst alone
  }
  return 0;
}

template <typename T>
void CheckIntOp(hvd_dtype_t dt, hvd_reduce_op_t op, size_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int64_t> dist(std::numeric_limits<T>::min(),
                                              std::numeric_limits<T>::max());
  std::vector<T> a(n), b(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = static_cast<T>(dist(rng));
    b[i] = static_cast<T>(dist(rng));
  }
  // Extremes at the front so overflow and sign cases always appear.
  if (n >= 4) {
    a[0] = std::numeric_limits<T>::max(); b[0] = std::numeric_limits<T>::max();
    a[1] = std::numeric_limits<T>::min(); b[1] = std::numeric_limits<T>::min();
    a[2] = std::numeric_limits<T>::min(); b[2] = static_cast<T>(-1);
    a[3] = 0; b[3] = std::numeric_limits<T>::max();
  }
  std::vector<T> d = a;
  hvd::ReduceInto(d.data(), b.data(), n, dt, op);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(d[i], RefInt<T>(op, a[i], b[i]))
        << hvd::DtypeName(dt) << " " << hvd::ReduceOpName(op) << " n=" << n << " i=" << i
        << " a=" << +a[i] << " b=" << +b[i];
  }
}

double RefFloatOp(hvd_reduce_op_t op, double a, double b) {
  switch (op) {
    case HVD_SUM:
    case HVD_AVERAGE: return a + b;  // exact in double for float16/bfloat16 inputs
    case HVD_PRODUCT: return a * b;
    case HVD_MIN: return (std::isnan(a) || std::isnan(b)) ? NAN : std::min(a, b);
    case HVD_MAX: return (std::isnan(a) || std::isnan(b)) ? NAN : std::max(a, b);
    case HVD_ADASUM: break;  // not element-wise
  }
  return 0;
}

using ReduceFn = void (*)(void*, const void*, size_t, hvd_dtype_t, hvd_reduce_op_t);

void CheckNarrowOp(hvd_dtype_t dt, hvd_reduce_op_t op, size_t n, std::mt19937& rng,
                   ReduceFn reduce = &hvd::ReduceInto) {
  const bool half = dt == HVD_FLOAT16;
  auto enc = half ? FloatToHalf : FloatToBFloat16;
  auto dec = half ? RefDecodeHalf : RefDecodeBf16;
  auto ref = half ? RefHalf : RefBf16;
  std::uniform_int_distribution<uint32_t> bits(0, 0xffff);
  std::uniform_real_distribution<float> val(-300.0f, 300.0f);
  std::vector<uint16_t> a(n), b(n);
  for (size_t i = 0; i < n; ++i) {
    // Mix arbitrary bit patterns (inf, nan, subnormals) with ordinary values.
    a[i] = (i % 3 == 0) ? static_cast<uint16_t>(bits(rng)) : enc(val(rng));
    b[i] = (i % 5 == 0) ? static_cast<uint16_t>(bits(rng)) : enc(val(rng));
  }
  std::vector<uint16_t> d = a;
  reduce(d.data(), b.data(), n, dt, op);
  for (size_t i = 0; i < n; ++i) {
    const double want = ref(RefFloatOp(op, dec(a[i]), dec(b[i])));
    const double got = dec(d[i]);
    // MIN/MAX of +0 and -0 may return either zero.
    const bool zeros = want == 0 && got == 0 && (op == HVD_MIN || op == HVD_MAX);
    ASSERT_TRUE(zeros || SameValue(got, want))
        << hvd::DtypeName(dt) << " " << hvd::ReduceOpName(op) << " i=" << i << " a="
        << dec(a[i]) << " b=" << dec(b[i]) << " got " << got << " want " << want;
  }
}

template <typename T>
void CheckFloatOp(hvd_dtype_t dt, hvd_reduce_op_t op, size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<T> val(-1000, 1000);
  std::vector<T> a(n), b(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = val(rng);
    b[i] = val(rng);
  }
  if (n >= 3) {
    a[0] = std::numeric_limits<T>::quiet_NaN();
    b[1] = std::numeric_limits<T>::quiet_NaN();
    a[2] = std::numeric_limits<T>::infinity();
  }
  std::vector<T> d = a;
  hvd::ReduceInto(d.data(), b.data(), n, dt, op);
  for (size_t i = 0; i < n; ++i) {
    T want;
    switch (op) {
      case HVD_SUM:
      case HVD_AVERAGE: want = a[i] + b[i]; break;  // one IEEE operation in T
      case HVD_PRODUCT: want = a[i] * b[i]; break;
      default: want = static_cast<T>(RefFloatOp(op, a[i], b[i])); break;
    }
    ASSERT_TRUE(SameValue(d[i], want))
        << hvd::DtypeName(dt) << " " << hvd::ReduceOpName(op) << " i=" << i << " got " << d[i]
        << " want " << want;
  }
}

void CheckBoolOp(hvd_reduce_op_t op, size_t n, std::mt19937& rng) {
  std::vector<uint8_t> a(n), b(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = rng() & 1;
    b[i] = rng() & 1;
  }
  std::vector<uint8_t> d = a;
  hvd::ReduceInto(d.data(), b.data(), n, HVD_BOOL, op);
  const bool is_or = op == HVD_SUM || op == HVD_AVERAGE || op == HVD_MAX;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t want = is_or ? (a[i] || b[i]) : (a[i] && b[i]);
    ASSERT_EQ(d[i], want) << "bool " << hvd::ReduceOpName(op) << " i=" << i;
  }
}

TEST(Reduce, EveryDtypeAndOpMatchesReference) {
  std::mt19937 rng(7);
  // Lengths around the kernels' internal block sizes (16, 256) plus one long.
  for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{255},
                   size_t{257}, size_t{10007}}) {
    for (hvd_reduce_op_t op : kAllOps) {
      for (hvd_dtype_t dt : kAllDtypes) {
        SCOPED_TRACE(::testing::Message() << hvd::DtypeName(dt) << " "
                                          << hvd::ReduceOpName(op) << " n=" << n);
        switch (dt) {
          case HVD_UINT8: CheckIntOp<uint8_t>(dt, op, n, rng); break;
          case HVD_INT8: CheckIntOp<int8_t>(dt, op, n, rng); break;
          case HVD_UINT16: CheckIntOp<uint16_t>(dt, op, n, rng); break;
          case HVD_INT16: CheckIntOp<int16_t>(dt, op, n, rng); break;
          case HVD_INT32: CheckIntOp<int32_t>(dt, op, n, rng); break;
          case HVD_INT64: CheckIntOp<int64_t>(dt, op, n, rng); break;
          case HVD_FLOAT16:
          case HVD_BFLOAT16: CheckNarrowOp(dt, op, n, rng); break;
          case HVD_FLOAT32: CheckFloatOp<float>(dt, op, n, rng); break;
          case HVD_FLOAT64: CheckFloatOp<double>(dt, op, n, rng); break;
          case HVD_BOOL: CheckBoolOp(op, n, rng); break;
        }
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(Reduce, PortableFloat16PathMatchesReference) {
  // On CPUs with F16C, ReduceInto takes the hardware path; check the portable
  // (vectorised software) path on its own too.
  auto portable = [](void* d, const void* s, size_t n, hvd_dtype_t, hvd_reduce_op_t op) {
    hvd::kernels_internal::ReduceHalfPortable(d, s, n, op);
  };
  std::mt19937 rng(11);
  for (size_t n : {size_t{1}, size_t{255}, size_t{256}, size_t{257}, size_t{20011}}) {
    for (hvd_reduce_op_t op : kAllOps) {
      SCOPED_TRACE(::testing::Message() << hvd::ReduceOpName(op) << " n=" << n);
      CheckNarrowOp(HVD_FLOAT16, op, n, rng, portable);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(Reduce, BoolNormalisesNonzeroBytes) {
  uint8_t d[4] = {0, 2, 7, 0};
  const uint8_t s[4] = {0, 0, 9, 255};
  hvd::ReduceInto(d, s, 4, HVD_BOOL, HVD_SUM);
  EXPECT_EQ(d[0], 0);
  EXPECT_EQ(d[1], 1);
  EXPECT_EQ(d[2], 1);
  EXPECT_EQ(d[3], 1);
  for (hvd_reduce_op_t op : {HVD_PRODUCT, HVD_MIN}) {
    uint8_t e[3] = {2, 3, 0};  // 2 & 4 == 0 bitwise, but true AND true is true
    const uint8_t t[3] = {4, 0, 5};
    hvd::ReduceInto(e, t, 3, HVD_BOOL, op);
    EXPECT_EQ(e[0], 1);
    EXPECT_EQ(e[1], 0);
    EXPECT_EQ(e[2], 0);
  }
}

TEST(Reduce, MinMaxPropagateNan) {
  float d[2] = {1.0f, NAN};
  const float s[2] = {NAN, 1.0f};
  hvd::ReduceInto(d, s, 2, HVD_FLOAT32, HVD_MIN);
  EXPECT_TRUE(std::isnan(d[0]));
  EXPECT_TRUE(std::isnan(d[1]));
  double e[2] = {1.0, NAN};
  const double t[2] = {NAN, 1.0};
  hvd::ReduceInto(e, t, 2, HVD_FLOAT64, HVD_MAX);
  EXPECT_TRUE(std::isnan(e[0]));
  EXPECT_TRUE(std::isnan(e[1]));
}

TEST(Reduce, InPlaceWithItselfAndCWrapper) {
  std::vector<float> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  hvd::ReduceInto(v.data(), v.data(), v.size(), HVD_FLOAT32, HVD_SUM);
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], 2.0f * static_cast<float>(i));
  int32_t a[3] = {1, 5, -3};
  const int32_t b[3] = {4, 2, -9};
  hvd::hvd_reduce_kernel(a, b, 3, HVD_INT32, HVD_MAX);
  EXPECT_EQ(a[0], 4);
  EXPECT_EQ(a[1], 5);
  EXPECT_EQ(a[2], -3);
  // Unknown dtype or op: nothing is touched.
  int32_t c[2] = {1, 2};
  hvd::ReduceInto(c, b, 2, static_cast<hvd_dtype_t>(42), HVD_SUM);
  hvd::ReduceInto(c, b, 2, HVD_INT32, static_cast<hvd_reduce_op_t>(42));
  EXPECT_EQ(c[0], 1);
  EXPECT_EQ(c[1], 2);
}

// ---------------------------------------------------------------------------
// Scaling and integer division.

TEST(Scale, IntegersTruncateTowardZero) {
  int32_t v[7] = {-7, -1, 0, 1, 7, 100, -101};
  hvd::ScaleInPlace(v, 7, HVD_INT32, 0.5);
  const int32_t want[7] = {-3, 0, 0, 0, 3, 50, -50};
  for (int i = 0; i < 7; ++i) EXPECT_EQ(v[i], want[i]) << i;
  int64_t w[3] = {-9, 9, (int64_t{1} << 40) + 3};
  hvd::ScaleInPlace(w, 3, HVD_INT64, 1.0 / 3.0);
  // Computed in double: -9 * (1/3) rounds to exactly -3 there.
  EXPECT_EQ(w[0], static_cast<int64_t>(-9.0 * (1.0 / 3.0)));
  EXPECT_EQ(w[0], -3);
  EXPECT_EQ(w[1], 3);
  EXPECT_EQ(w[2], 366503875926);  // (2^40 + 3) / 3 = 366503875926.33
  int8_t s[4] = {-128, 127, -3, 3};
  hvd::ScaleInPlace(s, 4, HVD_INT8, -1.0);
  EXPECT_EQ(s[0], 127);  // saturates instead of wrapping
  EXPECT_EQ(s[1], -127);
  EXPECT_EQ(s[2], 3);
  EXPECT_EQ(s[3], -3);
  uint8_t u[3] = {200, 7, 1};
  hvd::ScaleInPlace(u, 3, HVD_UINT8, 2.0);
  EXPECT_EQ(u[0], 255);
  EXPECT_EQ(u[1], 14);
  EXPECT_EQ(u[2], 2);
  uint16_t uu[2] = {10, 11};
  hvd::ScaleInPlace(uu, 2, HVD_UINT16, -0.5);
  EXPECT_EQ(uu[0], 0);
  EXPECT_EQ(uu[1], 0);
  int16_t h[2] = {-5, 5};
  hvd::ScaleInPlace(h, 2, HVD_INT16, 0.4);
  EXPECT_EQ(h[0], -2);
  EXPECT_EQ(h[1], 2);
}

TEST(Scale, FloatsAndNarrowFloats) {
  std::vector<float> f(37);
  for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>(i) - 18.0f;
  hvd::ScaleInPlace(f.data(), f.size(), HVD_FLOAT32, 0.25);
  for (size_t i = 0; i < f.size(); ++i) {
    EXPECT_EQ(f[i], static_cast<float>((static_cast<double>(i) - 18.0) * 0.25));
  }
  double d[2] = {1.0, -3.0};
  hvd::ScaleInPlace(d, 2, HVD_FLOAT64, 1.0 / 3.0);
  EXPECT_EQ(d[0], 1.0 / 3.0);
  EXPECT_EQ(d[1], -3.0 * (1.0 / 3.0));
  uint16_t hv[3] = {FloatToHalf(3.0f), FloatToHalf(-1.0f), FloatToHalf(60000.0f)};
  hvd::ScaleInPlace(hv, 3, HVD_FLOAT16, 0.5);
  EXPECT_EQ(HalfToFloat(hv[0]), 1.5f);
  EXPECT_EQ(HalfToFloat(hv[1]), -0.5f);
  EXPECT_EQ(HalfToFloat(hv[2]), 30000.0f);
  uint16_t over = FloatToHalf(60000.0f);
  hvd::ScaleInPlace(&over, 1, HVD_FLOAT16, 2.0);
  EXPECT_TRUE(std::isinf(HalfToFloat(over)));
  uint16_t bv[2] = {FloatToBFloat16(3.0f), FloatToBFloat16(-8.0f)};
  hvd::ScaleInPlace(bv, 2, HVD_BFLOAT16, 0.25);
  EXPECT_EQ(BFloat16ToFloat(bv[0]), 0.75f);
  EXPECT_EQ(BFloat16ToFloat(bv[1]), -2.0f);
}

TEST(Scale, Float32FactorRoundedToFloatAsHorovod) {
  // 5.0f * (1/3): float32(5 * double(1/3)) is 0x3FD55555, 5.0f * float32(1/3)
  // is 0x3FD55556. The kernel must give the latter (Horovod multiplies a
  // float32 buffer by the float32-rounded factor), for prescale, postscale and
  // the 1/size of AVERAGE alike, on the blocked path and the tail.
  const double third = 1.0 / 3.0;
  const float five = 5.0f;
  const float via_double = static_cast<float>(static_cast<double>(five) * third);
  const float via_float = five * static_cast<float>(third);
  uint32_t bd, bf;
  std::memcpy(&bd, &via_double, 4);
  std::memcpy(&bf, &via_float, 4);
  ASSERT_EQ(bd, 0x3FD55555u);  // the two roundings really differ here
  ASSERT_EQ(bf, 0x3FD55556u);
  std::vector<float> buf(37, five), out(37);
  hvd::ScaleCopy(out.data(), buf.data(), buf.size(), HVD_FLOAT32, third);
  hvd::ScaleInPlace(buf.data(), buf.size(), HVD_FLOAT32, third);
  for (size_t i = 0; i < buf.size(); ++i) {
    uint32_t got_inplace, got_copy;
    std::memcpy(&got_inplace, &buf[i], 4);
    std::memcpy(&got_copy, &out[i], 4);
    ASSERT_EQ(got_inplace, 0x3FD55556u) << i;
    ASSERT_EQ(got_copy, 0x3FD55556u) << i;
  }
  float avg[1] = {five};
  hvd::DivideInPlace(avg, 1, HVD_FLOAT32, 3);  // AVERAGE over 3 ranks of a sum of 5
  uint32_t ba;
  std::memcpy(&ba, &avg[0], 4);
  EXPECT_EQ(ba, 0x3FD55556u);
  // float64 keeps the double factor: 5 * (1/3) in double.
  double d[1] = {5.0};
  hvd::ScaleInPlace(d, 1, HVD_FLOAT64, third);
  EXPECT_EQ(d[0], 5.0 * third);
  // Random float32 values and factors: always x * float(factor).
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> val(-1000.0f, 1000.0f);
  std::uniform_real_distribution<double> fac(-4.0, 4.0);
  for (int rep = 0; rep < 20; ++rep) {
    const double factor = fac(rng);
    std::vector<float> src(101), dst(101);
    for (auto& x : src) x = val(rng);
    hvd::ScaleCopy(dst.data(), src.data(), src.size(), HVD_FLOAT32, factor);
    for (size_t i = 0; i < src.size(); ++i) {
      const float want = src[i] * static_cast<float>(factor);
      ASSERT_EQ(std::memcmp(&dst[i], &want, 4), 0) << "factor " << factor << " x " << src[i];
    }
  }
}

TEST(Scale, NarrowFloatsMatchReferenceOnLongBuffers) {
  // Long enough for the blocked (vectorised) path. As documented, the product
  // is computed in float32 (x * float(factor), rounded to float32) and then
  // rounded to the narrow type; the reference does exactly that in double
  // (the 11x24-bit product is exact there, then rounded once to float).
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> bits(0, 0xffff);
  const double factor = 0.3;
  const double f32 = static_cast<float>(factor);
  for (hvd_dtype_t dt : {HVD_FLOAT16, HVD_BFLOAT16}) {
    auto dec = dt == HVD_FLOAT16 ? RefDecodeHalf : RefDecodeBf16;
    auto ref = dt == HVD_FLOAT16 ? RefHalf : RefBf16;
    std::vector<uint16_t> src(1031);
    for (auto& x : src) x = static_cast<uint16_t>(bits(rng));
    std::vector<uint16_t> copy(src.size()), inplace = src;
    hvd::ScaleCopy(copy.data(), src.data(), src.size(), dt, factor);
    hvd::ScaleInPlace(inplace.data(), inplace.size(), dt, factor);
    for (size_t i = 0; i < src.size(); ++i) {
      const double want = ref(static_cast<float>(dec(src[i]) * f32));
      ASSERT_TRUE(SameValue(dec(copy[i]), want))
          << hvd::DtypeName(dt) << " i=" << i << " x=" << dec(src[i]) << " got " << dec(copy[i])
          << " want " << want;
      ASSERT_EQ(inplace[i], copy[i]) << i;
    }
  }
}

TEST(Scale, OneIsANoOpAndBoolIsUnchanged) {
  float f[2] = {NAN, 1.5f};
  uint32_t bits0;
  std::memcpy(&bits0, &f[0], 4);
  hvd::ScaleInPlace(f, 2, HVD_FLOAT32, 1.0);
  uint32_t bits1;
  std::memcpy(&bits1, &f[0], 4);
  EXPECT_EQ(bits0, bits1);
  EXPECT_EQ(f[1], 1.5f);
  uint8_t b[3] = {0, 1, 1};
  hvd::ScaleInPlace(b, 3, HVD_BOOL, 0.0);
  EXPECT_EQ(b[1], 1);
  EXPECT_EQ(b[2], 1);
}

TEST(Scale, CopyLeavesSourceAlone) {
  const int32_t src[5] = {-5, -4, 4, 5, 9};
  int32_t dst[5] = {};
  hvd::ScaleCopy(dst, src, 5, HVD_INT32, 0.5);
  const int32_t want[5] = {-2, -2, 2, 2, 4};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(dst[i], want[i]);
  }
  EXPECT_EQ(src[0], -5);
  std::vector<double> s(40), d(40, 0.0);
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<double>(i);
  hvd::ScaleCopy(d.data(), s.data(), s.size(), HVD_FLOAT64, 1.0);
  EXPECT_EQ(d, s);
  hvd::ScaleCopy(d.data(), s.data(), s.size(), HVD_FLOAT64, -2.0);
  for (size_t i = 0; i < s.size(); ++i) EXPECT_EQ(d[i], -2.0 * s[i]);
  const uint8_t bs[3] = {1, 0, 1};
  uint8_t bd[3] = {9, 9, 9};
  hvd::ScaleCopy(bd, bs, 3, HVD_BOOL, 0.5);
  EXPECT_EQ(bd[0], 1);
  EXPECT_EQ(bd[1], 0);
  EXPECT_EQ(bd[2], 1);
}

TEST(Divide, IntegersRoundTowardZero) {
  int32_t v[6] = {-7, 7, -8, 8, -1, 1};
  hvd::DivideInPlace(v, 6, HVD_INT32, 2);
  const int32_t want2[6] = {-3, 3, -4, 4, 0, 0};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(v[i], want2[i]) << i;
  int8_t s[4] = {-128, 127, -7, 7};
  hvd::DivideInPlace(s, 4, HVD_INT8, 3);
  EXPECT_EQ(s[0], -42);
  EXPECT_EQ(s[1], 42);
  EXPECT_EQ(s[2], -2);
  EXPECT_EQ(s[3], 2);
  // int64 beyond double precision is divided exactly.
  int64_t big[2] = {(int64_t{1} << 62) + 1, -((int64_t{1} << 62) + 1)};
  hvd::DivideInPlace(big, 2, HVD_INT64, 3);
  EXPECT_EQ(big[0], ((int64_t{1} << 62) + 1) / 3);
  EXPECT_EQ(big[1], -(((int64_t{1} << 62) + 1) / 3));
  uint8_t u[2] = {255, 10};
  hvd::DivideInPlace(u, 2, HVD_UINT8, 4);
  EXPECT_EQ(u[0], 63);
  EXPECT_EQ(u[1], 2);
  uint16_t uu[1] = {65535};
  hvd::DivideInPlace(uu, 1, HVD_UINT16, 8);
  EXPECT_EQ(uu[0], 8191);
  int16_t n[2] = {7, -7};
  hvd::DivideInPlace(n, 2, HVD_INT16, -2);  // negative divisor
  EXPECT_EQ(n[0], -3);
  EXPECT_EQ(n[1], 3);
  int32_t m[1] = {std::numeric_limits<int32_t>::min()};
  hvd::DivideInPlace(m, 1, HVD_INT32, -1);  // wraps, does not trap
  EXPECT_EQ(m[0], std::numeric_limits<int32_t>::min());
  int32_t z[1] = {5};
  hvd::DivideInPlace(z, 1, HVD_INT32, 0);  // undefined: left alone
  EXPECT_EQ(z[0], 5);
}

TEST(Divide, FloatsScaleByReciprocal) {
  float f[2] = {1.0f, -3.0f};
  hvd::DivideInPlace(f, 2, HVD_FLOAT32, 4);
  EXPECT_EQ(f[0], 0.25f);
  EXPECT_EQ(f[1], -0.75f);
  uint16_t h[1] = {FloatToHalf(3.0f)};
  hvd::DivideInPlace(h, 1, HVD_FLOAT16, 2);
  EXPECT_EQ(HalfToFloat(h[0]), 1.5f);
  uint8_t b[2] = {1, 0};
  hvd::DivideInPlace(b, 2, HVD_BOOL, 3);
  EXPECT_EQ(b[0], 1);
}

// ---------------------------------------------------------------------------
// Dtype helpers.

TEST(Dtype, SizesNamesAndValidity) {
  const size_t sizes[] = {1, 1, 2, 2, 4, 8, 2, 2, 4, 8, 1};
  const char* names[] = {"uint8",   "int8",     "uint16",  "int16",   "int32", "int64",
                         "float16", "bfloat16", "float32", "float64", "bool"};
  for (int d = 0; d <= HVD_BOOL; ++d) {
    EXPECT_EQ(hvd::DtypeSize(d), sizes[d]) << d;
    EXPECT_STREQ(hvd::DtypeName(d), names[d]);
    EXPECT_TRUE(hvd::IsValidDtype(d));
  }
  EXPECT_EQ(hvd::DtypeSize(-1), 0u);
  EXPECT_EQ(hvd::DtypeSize(11), 0u);
  EXPECT_FALSE(hvd::IsValidDtype(-1));
  EXPECT_FALSE(hvd::IsValidDtype(11));
  EXPECT_STREQ(hvd::DtypeName(99), "unknown");
  EXPECT_TRUE(hvd::IsFloatingDtype(HVD_FLOAT16));
  EXPECT_TRUE(hvd::IsFloatingDtype(HVD_BFLOAT16));
  EXPECT_TRUE(hvd::IsFloatingDtype(HVD_FLOAT32));
  EXPECT_TRUE(hvd::IsFloatingDtype(HVD_FLOAT64));
  EXPECT_FALSE(hvd::IsFloatingDtype(HVD_INT64));
  EXPECT_FALSE(hvd::IsFloatingDtype(HVD_BOOL));
  EXPECT_STREQ(hvd::ReduceOpName(HVD_SUM), "sum");
  EXPECT_STREQ(hvd::ReduceOpName(HVD_AVERAGE), "average");
  EXPECT_STREQ(hvd::ReduceOpName(HVD_MIN), "min");
  EXPECT_STREQ(hvd::ReduceOpName(HVD_MAX), "max");
  EXPECT_STREQ(hvd::ReduceOpName(HVD_PRODUCT), "product");
  EXPECT_STREQ(hvd::ReduceOpName(HVD_ADASUM), "adasum");
  EXPECT_STREQ(hvd::ReduceOpName(-3), "unknown");
}

}  // namespace
