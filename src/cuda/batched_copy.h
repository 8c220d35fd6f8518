// The batched scaled copy of libhvd_cuda_kernels.so (cuda_kernels.h), as
// code that compiles both with nvcc and with the host compiler: the element
// conversions, the launch plan and the work of one thread block. The kernel
// (cuda_kernels.cu) runs RunBlockAs for blockIdx.x / threadIdx.x; the unit
// test (tests/unit/test_cuda_kernel_plan.cc) runs the very same functions for
// every block and thread of a plan on host buffers and compares the result
// bit for bit with the host path (src/common/kernels.cc).
//
// The plan
//  - A call's copies are cut into pieces; a launch carries at most
//    kBatchCapacity pieces (its LaunchParams, one kernel parameter of
//    < 4 KiB) and at most kMaxBlocksPerLaunch blocks.
//  - A piece gets one block per kChunkBytes (16 KiB) of its bytes: a block
//    moves one chunk, each of its kThreadsPerBlock (256) threads every 256th
//    element (or 16-byte unit) of it, kUnroll at a time. A 4 MiB tensor gets
//    256 blocks, a 16 KiB one 1. block_start[] (a prefix sum of the pieces'
//    blocks) lets a block find its piece by binary search.
//  - Copies of 0 elements, and plain copies in place, get no piece. A copy
//    longer than a launch's room is split at a chunk boundary and continues
//    in the next launch, so each chunk keeps its copy's alignment.
//
// The element operations are the host path's, bit for bit: integer
// division in int64 toward zero (-1: wrapping negation), then
// trunc(double(y) * scale) saturated (NaN -> 0); float32 x * float(scale),
// float64 x * scale; float16/bfloat16 in float32 with round-to-nearest-even
// narrowing. No CUDA intrinsics for the conversions (the host build must
// give the same bits); on the device the arithmetic uses the explicitly
// rounded __fmul_rn/__fadd_rn/__dmul_rn, which are never contracted into an
// FMA. A NaN operand is propagated with its payload (quieted), first the
// element, then the factor, as x86-64 and AArch64 hosts do; only a NaN made
// by an invalid product (0 x inf) has the hardware's own default bits
// (0x7fffffff on the GPU, 0xffc00000 on x86-64).
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "common/dtypes.h"
#include "cuda/cuda_kernels.h"
#include "hvd.h"

#if defined(__CUDACC__)
#define HVD_HD __host__ __device__
#define HVD_HD_INLINE __host__ __device__ __forceinline__
#else
#define HVD_HD
#define HVD_HD_INLINE inline
#endif
#if defined(__CUDA_ARCH__)
#define HVD_UNROLL _Pragma("unroll")
#else
#define HVD_UNROLL
#endif

namespace hvd {
namespace batched_copy {

// ---- the plan's constants ---------------------------------------------------

// Pieces one launch carries (hvd_cuda_kernels_v1_t.batch_capacity).
constexpr uint32_t kBatchCapacity = 128;
// Threads of a block (the kernel is launched with exactly this many).
constexpr uint32_t kThreadsPerBlock = 256;
// Bytes of a piece per block (a multiple of 16 and of every element size).
constexpr uint64_t kChunkBytes = 16384;
// Elements (or 16-byte units) a thread loads before it stores them.
constexpr uint32_t kUnroll = 4;
// Blocks of one launch (gridDim.x allows 2^31 - 1): 16 TiB at most.
constexpr uint32_t kMaxBlocksPerLaunch = 1u << 30;

// flags: what a launch does to each element; 0 is a plain copy of bytes.
constexpr uint32_t kDivide = 1;  // integers: y = x / divisor
constexpr uint32_t kScale = 2;   // y = y * scale

// One piece of a copy (a whole copy, or the part of it in this launch).
struct Piece {
  const void* src;
  void* dst;
  uint64_t count;  // elements
};

// The kernel's one parameter (a __grid_constant__, read in place).
struct LaunchParams {
  Piece pieces[kBatchCapacity];
  double scale;     // integers and float64
  int64_t divisor;  // integers
  float scale_f;    // float32, float16, bfloat16: float(scale), rounded on the host
  int32_t dtype;    // hvd_dtype_t
  uint32_t esize;   // bytes per element
  uint32_t flags;   // kDivide | kScale; 0: a plain copy
  uint32_t n;       // pieces used, 1..kBatchCapacity
  uint32_t blocks;  // the grid: block_start[n]
  // block_start[i]: the first block of piece i (strictly increasing).
  uint32_t block_start[kBatchCapacity + 1];
};
// The classic kernel parameter limit (4 KiB, all parameters together).
static_assert(sizeof(LaunchParams) <= 4096, "LaunchParams must fit the 4 KiB parameter space");
static_assert(kChunkBytes % (16 * kThreadsPerBlock) == 0, "a chunk is whole 16-byte rows");

// The element size and kind (common/dtypes.h, shared with the host path).
HVD_HD_INLINE uint32_t ElementSize(int32_t dtype) { return dtypes::Bytes(dtype); }
HVD_HD_INLINE bool IsFloatDtype(int32_t dtype) { return dtypes::IsFloating(dtype); }

// ---- bit casts and explicitly rounded arithmetic ----------------------------

// The device's reinterpreting and explicitly rounded intrinsics; on the
// host, memcpy and one IEEE operation, rounded to nearest even, never fused
// with another (the host build is standard C++ without -ffp-contract=fast).
#if defined(__CUDA_ARCH__)
HVD_HD_INLINE uint32_t BitsOf(float f) { return __float_as_uint(f); }
HVD_HD_INLINE float FloatOf(uint32_t u) { return __uint_as_float(u); }
HVD_HD_INLINE uint64_t BitsOf(double d) { return static_cast<uint64_t>(__double_as_longlong(d)); }
HVD_HD_INLINE double DoubleOf(uint64_t u) {
  return __longlong_as_double(static_cast<long long>(u));
}
HVD_HD_INLINE float MulRn(float a, float b) { return __fmul_rn(a, b); }
HVD_HD_INLINE float AddRn(float a, float b) { return __fadd_rn(a, b); }
HVD_HD_INLINE double MulRn(double a, double b) { return __dmul_rn(a, b); }
#else
template <typename To, typename From>
HVD_HD_INLINE To BitCast(From v) {
  static_assert(sizeof(To) == sizeof(From), "a bit cast keeps the size");
  To t;
  memcpy(&t, &v, sizeof(t));
  return t;
}
HVD_HD_INLINE uint32_t BitsOf(float f) { return BitCast<uint32_t>(f); }
HVD_HD_INLINE float FloatOf(uint32_t u) { return BitCast<float>(u); }
HVD_HD_INLINE uint64_t BitsOf(double d) { return BitCast<uint64_t>(d); }
HVD_HD_INLINE double DoubleOf(uint64_t u) { return BitCast<double>(u); }
HVD_HD_INLINE float MulRn(float a, float b) { return a * b; }
HVD_HD_INLINE float AddRn(float a, float b) { return a + b; }
HVD_HD_INLINE double MulRn(double a, double b) { return a * b; }
#endif

// x * f with the hosts' NaN rule: a NaN element is returned quieted, else a
// NaN factor quieted, else the product (the GPU would give its canonical
// NaN 0x7fffffff instead of the operand's payload).
HVD_HD_INLINE float ScaleValue(float x, float f) {
  const uint32_t xb = BitsOf(x);
  const uint32_t fb = BitsOf(f);
  if ((xb & 0x7fffffffu) > 0x7f800000u) return FloatOf(xb | 0x00400000u);
  if ((fb & 0x7fffffffu) > 0x7f800000u) return FloatOf(fb | 0x00400000u);
  return MulRn(x, f);
}
HVD_HD_INLINE double ScaleValue(double x, double f) {
  const uint64_t xb = BitsOf(x);
  const uint64_t fb = BitsOf(f);
  constexpr uint64_t kAbs = 0x7fffffffffffffffull;
  constexpr uint64_t kInf = 0x7ff0000000000000ull;
  constexpr uint64_t kQuiet = 0x0008000000000000ull;
  if ((xb & kAbs) > kInf) return DoubleOf(xb | kQuiet);
  if ((fb & kAbs) > kInf) return DoubleOf(fb | kQuiet);
  return MulRn(x, f);
}

// ---- float16 and bfloat16 (round to nearest even) --------------------------

HVD_HD_INLINE float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;  // exponent and mantissa
  uint32_t bits;
  if (em >= 0x7c00u) {
    // Inf, or NaN with its payload and the quiet bit.
    bits = (em << 13) | 0x7f800000u | ((em & 0x3ffu) != 0 ? 0x00400000u : 0u);
  } else if (em < 0x0400u) {
    // Zero or subnormal: mantissa * 2^-24, exact (and a float32 normal).
    bits = BitsOf(MulRn(static_cast<float>(static_cast<int32_t>(em)), 5.9604644775390625e-08f));
  } else {
    bits = (em << 13) + 0x38000000u;  // exponent bias 15 -> 127
  }
  return FloatOf(sign | bits);
}

HVD_HD_INLINE uint16_t FloatToHalf(float f) {
  const uint32_t x = BitsOf(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  uint32_t r;
  if (ax > 0x7f800000u) {
    r = 0x7e00u | ((ax >> 13) & 0x3ffu);  // NaN: quiet, top payload bits kept
  } else if (ax >= 0x477ff000u) {
    r = 0x7c00u;  // from 65520 (half way to 2^16, ties to even): infinity
  } else if (ax < 0x38800000u) {
    // Below 2^-14, a half subnormal: |f| + 0.5 puts the half's step (2^-24)
    // at float32's last bit, so the addition rounds to nearest even; its low
    // bits are the result (0x400, the smallest normal, when it rounds up).
    r = BitsOf(AddRn(FloatOf(ax), 0.5f)) - 0x3f000000u;
  } else {
    // Normal: rebias and round the 13 dropped bits to nearest even; a carry
    // out of the mantissa steps the exponent.
    const uint32_t base = ax - 0x38000000u;
    r = (base + 0x0fffu + ((base >> 13) & 1u)) >> 13;
  }
  return static_cast<uint16_t>(sign | r);
}

HVD_HD_INLINE float BFloat16ToFloat(uint16_t b) { return FloatOf(static_cast<uint32_t>(b) << 16); }

HVD_HD_INLINE uint16_t FloatToBFloat16(float f) {
  const uint32_t x = BitsOf(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  // Round the 16 dropped bits to nearest even; overflow carries into inf.
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// ---- integers ----------------------------------------------------------------

// The range of integer type T (std::numeric_limits is not device code).
template <typename T>
struct IntTraits {
  using Unsigned = typename std::make_unsigned<T>::type;
  static constexpr bool kSigned = static_cast<T>(-1) < static_cast<T>(0);
  static constexpr T kMax =
      static_cast<T>(static_cast<Unsigned>(~Unsigned(0)) >> (kSigned ? 1 : 0));
  static constexpr T kMin = kSigned ? static_cast<T>(-kMax - 1) : static_cast<T>(0);
};

// double -> T: truncation toward zero, saturated to T's range, NaN -> 0.
template <typename T>
HVD_HD_INLINE T TruncSaturate(double v) {
  constexpr double lo = static_cast<double>(IntTraits<T>::kMin);
  // The first value above the range: 2^bits (unsigned) or 2^(bits-1).
  constexpr double hi_excl = static_cast<double>(IntTraits<T>::kMax) + 1.0;
  if (!(v == v)) return 0;
  if (v <= lo) return IntTraits<T>::kMin;
  if (v >= hi_excl) return IntTraits<T>::kMax;
  return static_cast<T>(v);
}

// x / divisor in int64, toward zero; -1 is negation modulo 2^bits (the one
// quotient that may not fit T, and INT64_MIN / -1 would trap).
template <typename T>
HVD_HD_INLINE T DivideInt(T x, int64_t divisor) {
  using U = typename IntTraits<T>::Unsigned;
  if (divisor == -1) return static_cast<T>(static_cast<U>(0u - static_cast<U>(x)));
  return static_cast<T>(static_cast<int64_t>(x) / divisor);
}

// ---- the element operations ----------------------------------------------

template <typename T>
struct IntOp {
  using Elem = T;
  static HVD_HD_INLINE T Apply(T x, const LaunchParams& p) {
    T y = x;
    if (p.flags & kDivide) y = DivideInt<T>(y, p.divisor);
    if (p.flags & kScale) y = TruncSaturate<T>(MulRn(static_cast<double>(y), p.scale));
    return y;
  }
};

struct Float32Op {
  using Elem = float;
  static HVD_HD_INLINE float Apply(float x, const LaunchParams& p) {
    return ScaleValue(x, p.scale_f);
  }
};

struct Float64Op {
  using Elem = double;
  static HVD_HD_INLINE double Apply(double x, const LaunchParams& p) {
    return ScaleValue(x, p.scale);
  }
};

struct Float16Op {
  using Elem = uint16_t;
  static HVD_HD_INLINE uint16_t Apply(uint16_t x, const LaunchParams& p) {
    return FloatToHalf(ScaleValue(HalfToFloat(x), p.scale_f));
  }
};

struct BFloat16Op {
  using Elem = uint16_t;
  static HVD_HD_INLINE uint16_t Apply(uint16_t x, const LaunchParams& p) {
    return FloatToBFloat16(ScaleValue(BFloat16ToFloat(x), p.scale_f));
  }
};

// A plain copy of bytes (flags == 0, or bool).
struct CopyOp {};

// The scaling operations by dtype, X(dtype, Op), for the two dispatches
// (RunBlock here, the kernel's choice in cuda_kernels.cu). A plain copy is
// CopyOp whatever the dtype; bool is only ever copied.
#define HVD_BATCHED_COPY_SCALING_OPS(X)               \
  X(HVD_UINT8, ::hvd::batched_copy::IntOp<uint8_t>)   \
  X(HVD_INT8, ::hvd::batched_copy::IntOp<int8_t>)     \
  X(HVD_UINT16, ::hvd::batched_copy::IntOp<uint16_t>) \
  X(HVD_INT16, ::hvd::batched_copy::IntOp<int16_t>)   \
  X(HVD_INT32, ::hvd::batched_copy::IntOp<int32_t>)   \
  X(HVD_INT64, ::hvd::batched_copy::IntOp<int64_t>)   \
  X(HVD_FLOAT16, ::hvd::batched_copy::Float16Op)      \
  X(HVD_BFLOAT16, ::hvd::batched_copy::BFloat16Op)    \
  X(HVD_FLOAT32, ::hvd::batched_copy::Float32Op)      \
  X(HVD_FLOAT64, ::hvd::batched_copy::Float64Op)

// ---- byte moves ---------------------------------------------------------------

// On the host (the emulation), what a misaligned access the GPU would fault
// on does: trap, unless the includer (a test) counts them instead.
#ifndef HVD_BATCHED_COPY_ON_MISALIGNED
#define HVD_BATCHED_COPY_ON_MISALIGNED(ptr, width) __builtin_trap()
#endif
#if defined(__CUDA_ARCH__)
#define HVD_BATCHED_COPY_CHECK_ALIGNED(ptr, width) ((void)0)
#else
#define HVD_BATCHED_COPY_CHECK_ALIGNED(ptr, width)         \
  do {                                                     \
    if (reinterpret_cast<uintptr_t>(ptr) % (width) != 0) { \
      HVD_BATCHED_COPY_ON_MISALIGNED(ptr, width);          \
    }                                                      \
  } while (0)
#endif

// W bytes, as one load and one store of the device's vector types (the
// addresses are W-aligned); on the host, memcpy.
template <unsigned W>
struct Unit;
#if defined(__CUDA_ARCH__)
template <> struct Unit<16> { using Type = uint4; };
template <> struct Unit<8> { using Type = uint2; };
template <> struct Unit<4> { using Type = uint32_t; };
template <> struct Unit<2> { using Type = uint16_t; };
template <> struct Unit<1> { using Type = uint8_t; };
#else
template <unsigned W>
struct Unit {
  struct Type {
    unsigned char b[W];
  };
};
#endif

template <unsigned W>
HVD_HD_INLINE typename Unit<W>::Type LoadUnit(const unsigned char* s) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const typename Unit<W>::Type*>(s);
#else
  HVD_BATCHED_COPY_CHECK_ALIGNED(s, W);
  typename Unit<W>::Type v;
  memcpy(&v, s, W);
  return v;
#endif
}

template <unsigned W>
HVD_HD_INLINE void StoreUnit(unsigned char* d, const typename Unit<W>::Type& v) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<typename Unit<W>::Type*>(d) = v;
#else
  HVD_BATCHED_COPY_CHECK_ALIGNED(d, W);
  memcpy(d, &v, W);
#endif
}

// The widest unit (16, 8, 4, 2 or 1 bytes) both s and d can be aligned to
// after the same number of leading bytes.
HVD_HD_INLINE unsigned CopyWidth(const void* s, const void* d) {
  const uintptr_t x = reinterpret_cast<uintptr_t>(s) ^ reinterpret_cast<uintptr_t>(d);
  if ((x & 15u) == 0) return 16;
  if ((x & 7u) == 0) return 8;
  if ((x & 3u) == 0) return 4;
  if ((x & 1u) == 0) return 2;
  return 1;
}

// Thread `thread` of `threads`' share of copying len bytes: the leading
// bytes up to W-alignment, then W-byte units (kUnroll loads, then their
// stores), then the trailing bytes.
template <unsigned W>
HVD_HD_INLINE void CopyBytesAs(const unsigned char* s, unsigned char* d, uint64_t len,
                               unsigned thread, unsigned threads) {
  uint64_t head = (W - (reinterpret_cast<uintptr_t>(s) & (W - 1))) & (W - 1);
  if (head > len) head = len;
  for (uint64_t i = thread; i < head; i += threads) d[i] = s[i];
  const unsigned char* us = s + head;
  unsigned char* ud = d + head;
  const uint64_t units = (len - head) / W;
  const uint64_t step = static_cast<uint64_t>(threads) * kUnroll;
  for (uint64_t base = thread; base < units; base += step) {
    typename Unit<W>::Type v[kUnroll];
    HVD_UNROLL
    for (unsigned k = 0; k < kUnroll; ++k) {
      const uint64_t u = base + static_cast<uint64_t>(k) * threads;
      if (u < units) v[k] = LoadUnit<W>(us + u * W);
    }
    HVD_UNROLL
    for (unsigned k = 0; k < kUnroll; ++k) {
      const uint64_t u = base + static_cast<uint64_t>(k) * threads;
      if (u < units) StoreUnit<W>(ud + u * W, v[k]);
    }
  }
  for (uint64_t i = head + units * W + thread; i < len; i += threads) d[i] = s[i];
}

HVD_HD_INLINE void CopyBytes(const unsigned char* s, unsigned char* d, uint64_t len,
                             unsigned thread, unsigned threads) {
  switch (CopyWidth(s, d)) {
    case 16: return CopyBytesAs<16>(s, d, len, thread, threads);
    case 8: return CopyBytesAs<8>(s, d, len, thread, threads);
    case 4: return CopyBytesAs<4>(s, d, len, thread, threads);
    case 2: return CopyBytesAs<2>(s, d, len, thread, threads);
    default: return CopyBytesAs<1>(s, d, len, thread, threads);
  }
}

// Thread `thread`'s share of applying Op to n elements: each element is
// read and then written by the same thread, so s == d is safe.
template <typename Op>
HVD_HD_INLINE void ApplyElements(const typename Op::Elem* s, typename Op::Elem* d, uint64_t n,
                                 const LaunchParams& p, unsigned thread, unsigned threads) {
  using E = typename Op::Elem;
  HVD_BATCHED_COPY_CHECK_ALIGNED(s, sizeof(E));
  HVD_BATCHED_COPY_CHECK_ALIGNED(d, sizeof(E));
  const uint64_t step = static_cast<uint64_t>(threads) * kUnroll;
  for (uint64_t base = thread; base < n; base += step) {
    E v[kUnroll];
    HVD_UNROLL
    for (unsigned k = 0; k < kUnroll; ++k) {
      const uint64_t i = base + static_cast<uint64_t>(k) * threads;
      if (i < n) v[k] = s[i];
    }
    HVD_UNROLL
    for (unsigned k = 0; k < kUnroll; ++k) {
      const uint64_t i = base + static_cast<uint64_t>(k) * threads;
      if (i < n) d[i] = Op::Apply(v[k], p);
    }
  }
}

// ---- one block ------------------------------------------------------------------

// The piece block `block` belongs to: the last i with block_start[i] <= block.
HVD_HD_INLINE uint32_t FindPiece(const LaunchParams& p, uint32_t block) {
  uint32_t lo = 0, hi = p.n;  // block_start[lo] <= block < block_start[hi]
  while (hi - lo > 1) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (p.block_start[mid] <= block) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// The bytes of piece `piece` that block `block` covers: [*first, *first + *len).
HVD_HD_INLINE void BlockBytes(const LaunchParams& p, uint32_t piece, uint32_t block,
                              uint64_t* first, uint64_t* len) {
  const uint64_t bytes = p.pieces[piece].count * p.esize;
  const uint64_t start = static_cast<uint64_t>(block - p.block_start[piece]) * kChunkBytes;
  *first = start;
  *len = bytes - start < kChunkBytes ? bytes - start : kChunkBytes;
}

template <typename Op>
struct BlockBody {
  static HVD_HD_INLINE void Run(const LaunchParams& p, const unsigned char* s, unsigned char* d,
                                uint64_t len, unsigned thread, unsigned threads) {
    using E = typename Op::Elem;
    ApplyElements<Op>(reinterpret_cast<const E*>(s), reinterpret_cast<E*>(d), len / sizeof(E), p,
                      thread, threads);
  }
};
template <>
struct BlockBody<CopyOp> {
  static HVD_HD_INLINE void Run(const LaunchParams&, const unsigned char* s, unsigned char* d,
                                uint64_t len, unsigned thread, unsigned threads) {
    CopyBytes(s, d, len, thread, threads);
  }
};

// The work of thread `thread` (of `threads`) of block `block`, for Op: the
// kernel's whole body.
template <typename Op>
HVD_HD_INLINE void RunBlockAs(const LaunchParams& p, unsigned block, unsigned thread,
                              unsigned threads) {
  if (block >= p.blocks) return;
  const uint32_t i = FindPiece(p, block);
  uint64_t first = 0, len = 0;
  BlockBytes(p, i, block, &first, &len);
  const unsigned char* s = static_cast<const unsigned char*>(p.pieces[i].src) + first;
  unsigned char* d = static_cast<unsigned char*>(p.pieces[i].dst) + first;
  BlockBody<Op>::Run(p, s, d, len, thread, threads);
}

// RunBlockAs for the operation p's dtype and flags call for.
HVD_HD inline void RunBlock(const LaunchParams& p, unsigned block, unsigned thread,
                            unsigned threads) {
  if (p.flags == 0) {
    RunBlockAs<CopyOp>(p, block, thread, threads);
    return;
  }
  switch (p.dtype) {
#define HVD_BATCHED_COPY_CASE(dtype, Op)       \
  case dtype:                                  \
    RunBlockAs<Op>(p, block, thread, threads); \
    return;
    HVD_BATCHED_COPY_SCALING_OPS(HVD_BATCHED_COPY_CASE)
#undef HVD_BATCHED_COPY_CASE
    default:
      return;
  }
}

// ---- the plan (host) --------------------------------------------------------------

// flags for `how` (a valid one): 0 for a plain copy.
inline uint32_t FlagsFor(const hvd_cuda_scale_t& how) {
  if (how.dtype == HVD_BOOL) return 0;
  uint32_t flags = 0;
  if (!IsFloatDtype(how.dtype) && how.divisor != 1) flags |= kDivide;
  if (how.scale != 1.0) flags |= kScale;  // NaN scales too
  return flags;
}

// nullptr where scale_copy may run these arguments, else why not (the call
// then returns cudaErrorInvalidValue and launches nothing).
inline const char* CheckArguments(const hvd_cuda_copy_t* copies, size_t n,
                                  const hvd_cuda_scale_t* how) {
  if (how == nullptr) return "no scaling (how is NULL)";
  const uint32_t esize = ElementSize(how->dtype);
  if (esize == 0) return "unknown dtype";
  if (how->divisor == 0) return "divisor 0";
  if (IsFloatDtype(how->dtype) && how->divisor != 1) {
    return "a divisor other than 1 on a floating dtype (fold it into scale)";
  }
  if (n == 0) return nullptr;
  if (copies == nullptr) return "copies is NULL";
  const bool elementwise = FlagsFor(*how) != 0;
  for (size_t i = 0; i < n; ++i) {
    const hvd_cuda_copy_t& c = copies[i];
    if (c.count == 0) continue;
    if (c.src == nullptr || c.dst == nullptr) return "a NULL pointer in a copy";
    if (c.count > UINT64_MAX / esize) return "a copy's size in bytes overflows";
    const uintptr_t addr = reinterpret_cast<uintptr_t>(c.src) | reinterpret_cast<uintptr_t>(c.dst);
    if (elementwise && (addr & (esize - 1)) != 0) {
      return "a scaled copy's pointer is not aligned to its element size";
    }
  }
  return nullptr;
}

// The launches for n copies with scaling `how` (arguments CheckArguments
// accepted), one at a time: while (plan.Next(&params)) launch(params).
// max_blocks (<= kMaxBlocksPerLaunch) is there for tests.
class LaunchPlanner {
 public:
  LaunchPlanner(const hvd_cuda_copy_t* copies, size_t n, const hvd_cuda_scale_t& how,
                uint32_t max_blocks = kMaxBlocksPerLaunch)
      : copies_(copies),
        n_(n),
        how_(how),
        esize_(ElementSize(how.dtype)),
        flags_(FlagsFor(how)),
        max_blocks_(max_blocks == 0 || max_blocks > kMaxBlocksPerLaunch ? kMaxBlocksPerLaunch
                                                                        : max_blocks) {}

  // Fills *out with the next launch; false when there is none left.
  bool Next(LaunchParams* out) {
    uint32_t pieces = 0;
    uint32_t blocks = 0;
    const uint64_t chunk_elems = kChunkBytes / esize_;
    while (next_ < n_ && pieces < kBatchCapacity && blocks < max_blocks_) {
      const hvd_cuda_copy_t& c = copies_[next_];
      if (c.count == 0 || (flags_ == 0 && c.src == c.dst)) {  // nothing to do
        ++next_;
        offset_ = 0;
        continue;
      }
      const uint64_t left = c.count - offset_;
      const uint64_t room = static_cast<uint64_t>(max_blocks_ - blocks) * chunk_elems;
      const uint64_t count = left < room ? left : room;
      const uint64_t bytes = offset_ * esize_;
      Piece& piece = out->pieces[pieces];
      piece.src = static_cast<const unsigned char*>(c.src) + bytes;
      piece.dst = static_cast<unsigned char*>(c.dst) + bytes;
      piece.count = count;
      out->block_start[pieces] = blocks;
      blocks += static_cast<uint32_t>((count * esize_ + kChunkBytes - 1) / kChunkBytes);
      ++pieces;
      offset_ += count;
      if (offset_ == c.count) {
        ++next_;
        offset_ = 0;
      }
    }
    if (pieces == 0) return false;
    out->block_start[pieces] = blocks;
    out->n = pieces;
    out->blocks = blocks;
    out->dtype = how_.dtype;
    out->esize = esize_;
    out->flags = flags_;
    out->divisor = how_.divisor;
    out->scale = how_.scale;
    out->scale_f = static_cast<float>(how_.scale);
    return true;
  }

 private:
  const hvd_cuda_copy_t* copies_;
  size_t n_;
  hvd_cuda_scale_t how_;
  uint32_t esize_;
  uint32_t flags_;
  uint32_t max_blocks_;
  size_t next_ = 0;      // the copy the next piece comes from
  uint64_t offset_ = 0;  // elements of it already planned
};

}  // namespace batched_copy
}  // namespace hvd
