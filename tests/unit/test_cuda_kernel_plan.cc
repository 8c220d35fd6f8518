// libhvd_cuda_kernels.so without a GPU: its plan and its per-block body
// (src/cuda/batched_copy.h, compiled here by the host compiler) and, where
// the library is built, its table loaded with dlopen.
//  - The plan: every element of every copy in exactly one block of one
//    launch, at most kBatchCapacity pieces and max_blocks blocks a launch,
//    empty copies (and plain copies in place) skipped, big copies many blocks.
//  - The kernel emulated: RunBlock for every block and thread of every
//    launch on host buffers, bit for bit against the host path
//    (common/kernels.h: ScaleCopy, DivideInPlace + ScaleInPlace), every dtype
//    x scale x divisor x in place / out of place, odd sizes, misaligned
//    pointers, random bits (NaN with payloads, inf, subnormals).
//  - The library: its table, argument checks, n == 0, and a real call that
//    fails with a CUDA error on a host without a GPU; with a GPU, the same
//    comparisons on device memory.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/kernels.h"

// Accesses the GPU would fault on (a vector or an element at a misaligned
// address), counted by the emulation instead of trapping.
namespace {
int misaligned_accesses = 0;
}  // namespace
#define HVD_BATCHED_COPY_ON_MISALIGNED(ptr, width) (++misaligned_accesses)
#include "cuda/batched_copy.h"
#include "cuda/cuda_kernels.h"

namespace {

namespace bc = hvd::batched_copy;

constexpr int kCudaErrorInvalidValue = 1;  // cudaErrorInvalidValue

const hvd_dtype_t kAllDtypes[] = {HVD_UINT8,   HVD_INT8,    HVD_UINT16,  HVD_INT16,
                                  HVD_INT32,   HVD_INT64,   HVD_FLOAT16, HVD_BFLOAT16,
                                  HVD_FLOAT32, HVD_FLOAT64, HVD_BOOL};

bool IsInt(hvd_dtype_t d) {
  return d == HVD_UINT8 || d == HVD_INT8 || d == HVD_UINT16 || d == HVD_INT16 || d == HVD_INT32 ||
         d == HVD_INT64;
}

hvd_cuda_scale_t How(hvd_dtype_t dtype, double scale = 1.0, int64_t divisor = 1) {
  hvd_cuda_scale_t h{};
  h.dtype = dtype;
  h.divisor = divisor;
  h.scale = scale;
  return h;
}

std::vector<bc::LaunchParams> Plan(const std::vector<hvd_cuda_copy_t>& copies,
                                   const hvd_cuda_scale_t& how, uint32_t max_blocks = 0) {
  bc::LaunchPlanner planner(copies.data(), copies.size(), how, max_blocks);
  std::vector<bc::LaunchParams> launches;
  bc::LaunchParams p;
  while (planner.Next(&p)) launches.push_back(p);
  return launches;
}

// Made-up device addresses, never dereferenced: 16-aligned and far apart,
// plus a misalignment.
const void* FakePtr(size_t i, unsigned misalign = 0) {
  return reinterpret_cast<const void*>(static_cast<uintptr_t>(0x100000000000ull) +
                                       static_cast<uintptr_t>(i) * 0x1000000000ull + misalign);
}

uintptr_t Addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// Checks a plan against its copies: launches within limits, pieces in copy
// order continuing where the last one stopped, every block of a piece one
// chunk of it in order, so each byte of each copy is in exactly one block.
// Block-level checks only where a launch has at most check_blocks blocks.
void CheckPlan(const std::vector<hvd_cuda_copy_t>& copies, const hvd_cuda_scale_t& how,
               const std::vector<bc::LaunchParams>& launches, uint32_t max_blocks,
               uint32_t check_blocks = 1u << 16) {
  const uint64_t esize = bc::ElementSize(how.dtype);
  const bool plain = bc::FlagsFor(how) == 0;
  size_t next = 0;      // the copy the next piece must come from
  uint64_t offset = 0;  // elements of it already seen
  auto skip_done = [&] {
    while (next < copies.size() &&
           (copies[next].count == 0 || (plain && copies[next].src == copies[next].dst))) {
      ++next;
    }
  };
  skip_done();
  for (size_t l = 0; l < launches.size(); ++l) {
    const bc::LaunchParams& p = launches[l];
    SCOPED_TRACE("launch " + std::to_string(l));
    ASSERT_GE(p.n, 1u);
    ASSERT_LE(p.n, bc::kBatchCapacity);
    ASSERT_EQ(p.block_start[0], 0u);
    ASSERT_EQ(p.blocks, p.block_start[p.n]);
    ASSERT_LE(p.blocks, max_blocks);
    EXPECT_EQ(p.dtype, how.dtype);
    EXPECT_EQ(p.esize, esize);
    EXPECT_EQ(p.flags, bc::FlagsFor(how));
    for (uint32_t i = 0; i < p.n; ++i) {
      const bc::Piece& pc = p.pieces[i];
      ASSERT_LT(next, copies.size()) << "a piece beyond the copies";
      const hvd_cuda_copy_t& c = copies[next];
      ASSERT_GT(pc.count, 0u);
      ASSERT_EQ(Addr(pc.src), Addr(c.src) + offset * esize) << "piece " << i << " of copy " << next;
      ASSERT_EQ(Addr(pc.dst), Addr(c.dst) + offset * esize) << "piece " << i << " of copy " << next;
      ASSERT_LE(pc.count, c.count - offset);
      const uint64_t bytes = pc.count * esize;
      const uint64_t want_blocks = (bytes + bc::kChunkBytes - 1) / bc::kChunkBytes;
      ASSERT_EQ(p.block_start[i + 1] - p.block_start[i], want_blocks) << "piece " << i;
      offset += pc.count;
      if (offset == c.count) {
        ++next;
        offset = 0;
        skip_done();
      } else {
        // A copy continues in the next launch only when this one is full,
        // and the cut is at a chunk boundary (the chunks keep their
        // alignment).
        EXPECT_TRUE(i + 1 == p.n) << "a copy cut inside a launch";
        EXPECT_TRUE(p.n == bc::kBatchCapacity || p.blocks == max_blocks);
        EXPECT_EQ(offset * esize % bc::kChunkBytes, 0u);
      }
    }
    if (p.blocks > check_blocks) continue;
    // Every block: the piece binary search finds, a chunk in order.
    uint64_t expect_first = 0;
    uint32_t piece = 0;
    for (uint32_t b = 0; b < p.blocks; ++b) {
      while (p.block_start[piece + 1] <= b) {
        ASSERT_EQ(expect_first, p.pieces[piece].count * esize)
            << "piece " << piece << " not covered";
        ++piece;
        expect_first = 0;
      }
      ASSERT_EQ(bc::FindPiece(p, b), piece) << "block " << b;
      uint64_t first = 0, len = 0;
      bc::BlockBytes(p, piece, b, &first, &len);
      ASSERT_EQ(first, expect_first) << "block " << b;
      ASSERT_GT(len, 0u);
      ASSERT_LE(len, bc::kChunkBytes);
      ASSERT_EQ(len % esize, 0u);
      expect_first += len;
    }
    ASSERT_EQ(piece, p.n - 1);
    ASSERT_EQ(expect_first, p.pieces[piece].count * esize);
  }
  EXPECT_EQ(next, copies.size()) << "copies left out of the plan";
}

// ---------------------------------------------------------------------------
// (a) The plan.

TEST(CudaKernelPlan, Constants) {
  EXPECT_LE(sizeof(bc::LaunchParams), 4096u);
  EXPECT_EQ(bc::kChunkBytes % 16, 0u);
  EXPECT_EQ(bc::kChunkBytes % (16 * bc::kThreadsPerBlock), 0u);
  EXPECT_LT(bc::kMaxBlocksPerLaunch, 1u << 31);
  for (hvd_dtype_t d : kAllDtypes) EXPECT_EQ(bc::ElementSize(d), hvd::DtypeSize(d));
  EXPECT_EQ(bc::ElementSize(11), 0u);
  EXPECT_EQ(bc::ElementSize(-1), 0u);
}

TEST(CudaKernelPlan, NothingToDoMeansNoLaunch) {
  EXPECT_TRUE(Plan({}, How(HVD_FLOAT32, 0.5)).empty());
  std::vector<hvd_cuda_copy_t> empty = {{FakePtr(0), const_cast<void*>(FakePtr(1)), 0},
                                        {FakePtr(2), const_cast<void*>(FakePtr(3)), 0}};
  EXPECT_TRUE(Plan(empty, How(HVD_FLOAT32, 0.5)).empty());
  // A plain copy in place moves nothing: no launch; scaled in place: one.
  std::vector<hvd_cuda_copy_t> in_place = {{FakePtr(0), const_cast<void*>(FakePtr(0)), 1000}};
  EXPECT_TRUE(Plan(in_place, How(HVD_FLOAT32)).empty());
  EXPECT_TRUE(Plan(in_place, How(HVD_BOOL, 0.5, 3)).empty());
  EXPECT_EQ(Plan(in_place, How(HVD_FLOAT32, 0.5)).size(), 1u);
  EXPECT_EQ(Plan(in_place, How(HVD_INT32, 1.0, 3)).size(), 1u);
}

TEST(CudaKernelPlan, Flags) {
  EXPECT_EQ(bc::FlagsFor(How(HVD_FLOAT32)), 0u);
  EXPECT_EQ(bc::FlagsFor(How(HVD_FLOAT32, 0.5)), bc::kScale);
  EXPECT_EQ(bc::FlagsFor(How(HVD_FLOAT16, NAN)), bc::kScale);
  EXPECT_EQ(bc::FlagsFor(How(HVD_INT32)), 0u);
  EXPECT_EQ(bc::FlagsFor(How(HVD_INT32, 1.0, 3)), bc::kDivide);
  EXPECT_EQ(bc::FlagsFor(How(HVD_INT8, 2.0, -1)), bc::kDivide | bc::kScale);
  EXPECT_EQ(bc::FlagsFor(How(HVD_BOOL, 0.5, 3)), 0u);
}

TEST(CudaKernelPlan, SplitsAboveCapacity) {
  std::vector<hvd_cuda_copy_t> copies;
  for (size_t i = 0; i < 300; ++i) {
    copies.push_back({FakePtr(2 * i), const_cast<void*>(FakePtr(2 * i + 1)), 10});
  }
  const hvd_cuda_scale_t how = How(HVD_FLOAT32, 0.5);
  const auto launches = Plan(copies, how);
  ASSERT_EQ(launches.size(), 3u);
  EXPECT_EQ(launches[0].n, bc::kBatchCapacity);
  EXPECT_EQ(launches[1].n, bc::kBatchCapacity);
  EXPECT_EQ(launches[2].n, 300 - 2 * bc::kBatchCapacity);
  CheckPlan(copies, how, launches, bc::kMaxBlocksPerLaunch);
}

TEST(CudaKernelPlan, BlocksFollowBytes) {
  const uint64_t mib4 = 4u << 20;
  std::vector<hvd_cuda_copy_t> copies = {
      {FakePtr(0), const_cast<void*>(FakePtr(1)), mib4 / 4},        // 4 MiB
      {FakePtr(2), const_cast<void*>(FakePtr(3)), 16384 / 4},       // 16 KiB
      {FakePtr(4), const_cast<void*>(FakePtr(5)), 1},               // 4 bytes
      {FakePtr(6), const_cast<void*>(FakePtr(7)), 16384 / 4 + 1}};  // 16 KiB + 4
  const hvd_cuda_scale_t how = How(HVD_FLOAT32, 0.5);
  const auto launches = Plan(copies, how);
  ASSERT_EQ(launches.size(), 1u);
  const bc::LaunchParams& p = launches[0];
  ASSERT_EQ(p.n, 4u);
  EXPECT_EQ(p.block_start[1] - p.block_start[0], mib4 / bc::kChunkBytes);
  EXPECT_EQ(p.block_start[2] - p.block_start[1], 1u);
  EXPECT_EQ(p.block_start[3] - p.block_start[2], 1u);
  EXPECT_EQ(p.block_start[4] - p.block_start[3], 2u);
  CheckPlan(copies, how, launches, bc::kMaxBlocksPerLaunch);
  // The same bytes in another dtype: the same blocks.
  std::vector<hvd_cuda_copy_t> halves = copies;
  for (auto& c : halves) c.count *= 2;
  const auto h = Plan(halves, How(HVD_FLOAT16, 0.5));
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].blocks, p.blocks);
}

TEST(CudaKernelPlan, BlockLimitCutsCopiesAtChunks) {
  const uint64_t chunk = bc::kChunkBytes / 8;  // float64 elements per chunk
  std::vector<hvd_cuda_copy_t> copies = {
      {FakePtr(0), const_cast<void*>(FakePtr(1)), 12 * chunk - 3},
      {FakePtr(2), const_cast<void*>(FakePtr(3)), 0},
      {FakePtr(4), const_cast<void*>(FakePtr(5)), 2 * chunk},
      {FakePtr(6), const_cast<void*>(FakePtr(7)), 1}};
  const hvd_cuda_scale_t how = How(HVD_FLOAT64, 0.25);
  const auto launches = Plan(copies, how, 5);
  // 12 blocks, 2 and 1: 5 | 5 | 2 + 2 + 1.
  ASSERT_EQ(launches.size(), 3u);
  EXPECT_EQ(launches[0].blocks, 5u);
  EXPECT_EQ(launches[1].blocks, 5u);
  EXPECT_EQ(launches[2].blocks, 5u);
  EXPECT_EQ(launches[2].n, 3u);
  CheckPlan(copies, how, launches, 5);
}

TEST(CudaKernelPlan, HugeCopies) {
  // 2^45 float32 = 128 TiB: 2^33 blocks, eight full launches.
  std::vector<hvd_cuda_copy_t> copies = {{FakePtr(0), const_cast<void*>(FakePtr(0)), 1ull << 45},
                                         {FakePtr(1), const_cast<void*>(FakePtr(2)), 3}};
  const hvd_cuda_scale_t how = How(HVD_FLOAT32, 0.5);
  const auto launches = Plan(copies, how);
  ASSERT_EQ(launches.size(), 9u);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(launches[i].blocks, bc::kMaxBlocksPerLaunch);
  EXPECT_EQ(launches[8].n, 1u);
  CheckPlan(copies, how, launches, bc::kMaxBlocksPerLaunch, 0);
}

TEST(CudaKernelPlan, RandomBatchesCoverEveryElementOnce) {
  std::mt19937_64 rng(12345);
  for (int round = 0; round < 300; ++round) {
    const hvd_dtype_t dtype = kAllDtypes[rng() % 11];
    const uint64_t esize = hvd::DtypeSize(dtype);
    const size_t n = rng() % 400;
    std::vector<hvd_cuda_copy_t> copies;
    for (size_t i = 0; i < n; ++i) {
      uint64_t count;
      switch (rng() % 5) {
        case 0:
          count = 0;
          break;
        case 1:
          count = rng() % 16;
          break;
        case 2:
          count = rng() % 5000;
          break;
        case 3:
          count = rng() % (1u << 20);
          break;
        default:
          count = (bc::kChunkBytes / esize) * (1 + rng() % 4) + (rng() % 3) - 1;
          break;
      }
      const bool in_place = rng() % 4 == 0;
      const void* src = FakePtr(2 * i, static_cast<unsigned>(rng() % 2 ? 0 : esize * (rng() % 4)));
      const void* dst = in_place ? src : FakePtr(2 * i + 1);
      copies.push_back({src, const_cast<void*>(dst), count});
    }
    const hvd_cuda_scale_t how =
        rng() % 3 == 0 ? How(dtype) : How(dtype, 0.5, IsInt(dtype) ? 3 : 1);
    const uint32_t max_blocks =
        rng() % 2 ? bc::kMaxBlocksPerLaunch : static_cast<uint32_t>(1 + rng() % 300);
    SCOPED_TRACE("round " + std::to_string(round) + ", " + hvd::DtypeName(dtype) + ", " +
                 std::to_string(n) + " copies, max_blocks " + std::to_string(max_blocks));
    ASSERT_EQ(bc::CheckArguments(copies.data(), copies.size(), &how), nullptr);
    CheckPlan(copies, how, Plan(copies, how, max_blocks), max_blocks);
    if (HasFatalFailure()) return;
  }
}

TEST(CudaKernelPlan, ArgumentChecks) {
  float buf[16];
  std::vector<hvd_cuda_copy_t> ok = {{buf, buf + 4, 4}};
  const hvd_cuda_scale_t f32 = How(HVD_FLOAT32, 0.5);
  EXPECT_EQ(bc::CheckArguments(ok.data(), 1, &f32), nullptr);
  EXPECT_EQ(bc::CheckArguments(nullptr, 0, &f32), nullptr);
  EXPECT_NE(bc::CheckArguments(ok.data(), 1, nullptr), nullptr);
  EXPECT_NE(bc::CheckArguments(nullptr, 1, &f32), nullptr);
  hvd_cuda_scale_t bad = How(static_cast<hvd_dtype_t>(11));
  EXPECT_NE(bc::CheckArguments(ok.data(), 1, &bad), nullptr);
  bad = How(static_cast<hvd_dtype_t>(-1));
  EXPECT_NE(bc::CheckArguments(ok.data(), 1, &bad), nullptr);
  bad = How(HVD_INT32, 1.0, 0);
  EXPECT_NE(bc::CheckArguments(ok.data(), 1, &bad), nullptr);
  for (hvd_dtype_t d : {HVD_FLOAT16, HVD_BFLOAT16, HVD_FLOAT32, HVD_FLOAT64}) {
    bad = How(d, 1.0, 2);
    EXPECT_NE(bc::CheckArguments(ok.data(), 1, &bad), nullptr) << hvd::DtypeName(d);
  }
  const hvd_cuda_scale_t i32 = How(HVD_INT32, 1.0, -1);
  EXPECT_EQ(bc::CheckArguments(ok.data(), 1, &i32), nullptr);
  // NULL pointers only matter with elements to copy.
  std::vector<hvd_cuda_copy_t> null_src = {{nullptr, buf, 4}};
  EXPECT_NE(bc::CheckArguments(null_src.data(), 1, &f32), nullptr);
  std::vector<hvd_cuda_copy_t> null_empty = {{nullptr, nullptr, 0}};
  EXPECT_EQ(bc::CheckArguments(null_empty.data(), 1, &f32), nullptr);
  // Scaling needs element alignment; a plain copy takes any bytes.
  char* raw = reinterpret_cast<char*>(buf);
  std::vector<hvd_cuda_copy_t> odd = {{raw + 1, raw + 32, 2}};
  EXPECT_NE(bc::CheckArguments(odd.data(), 1, &f32), nullptr);
  const hvd_cuda_scale_t f32_copy = How(HVD_FLOAT32);
  EXPECT_EQ(bc::CheckArguments(odd.data(), 1, &f32_copy), nullptr);
  // Sizes whose bytes overflow 64 bits.
  std::vector<hvd_cuda_copy_t> huge = {{buf, buf + 4, UINT64_MAX / 2}};
  EXPECT_NE(bc::CheckArguments(huge.data(), 1, &f32), nullptr);
}

TEST(CudaKernelPlan, CopyWidth) {
  alignas(16) unsigned char a[64];
  EXPECT_EQ(bc::CopyWidth(a, a + 16), 16u);
  EXPECT_EQ(bc::CopyWidth(a + 3, a + 19), 16u);  // same misalignment: bytes, then 16s
  EXPECT_EQ(bc::CopyWidth(a, a + 8), 8u);
  EXPECT_EQ(bc::CopyWidth(a + 4, a + 8), 4u);
  EXPECT_EQ(bc::CopyWidth(a, a + 2), 2u);
  EXPECT_EQ(bc::CopyWidth(a, a + 1), 1u);
}

// ---------------------------------------------------------------------------
// (b) The kernel, emulated on the host.

// Every block and every thread of every launch of the plan.
void Emulate(const std::vector<hvd_cuda_copy_t>& copies, const hvd_cuda_scale_t& how,
             uint32_t max_blocks = 0) {
  misaligned_accesses = 0;
  bc::LaunchPlanner planner(copies.data(), copies.size(), how, max_blocks);
  bc::LaunchParams p;
  while (planner.Next(&p)) {
    for (uint32_t b = 0; b < p.blocks; ++b) {
      for (unsigned t = 0; t < bc::kThreadsPerBlock; ++t)
        bc::RunBlock(p, b, t, bc::kThreadsPerBlock);
    }
  }
  EXPECT_EQ(misaligned_accesses, 0) << "accesses the GPU would fault on (misaligned)";
}

// The host path for one copy, as the core runs it on host tensors.
void Reference(void* dst, const void* src, size_t count, const hvd_cuda_scale_t& how) {
  const auto dtype = static_cast<hvd_dtype_t>(how.dtype);
  if (how.divisor == 1 || dtype == HVD_BOOL) {
    hvd::ScaleCopy(dst, src, count, dtype, how.scale);
    return;
  }
  hvd::ScaleCopy(dst, src, count, dtype, 1.0);
  hvd::DivideInPlace(dst, count, dtype, how.divisor);
  hvd::ScaleInPlace(dst, count, dtype, how.scale);
}

// Random elements of a dtype, as raw bytes: floats are a mix of random bit
// patterns (NaNs with payloads, infinities, subnormals), ordinary values,
// subnormals and special values; integers are random bits, bool 0/1.
void FillRandom(unsigned char* p, size_t count, hvd_dtype_t dtype, std::mt19937_64& rng) {
  const size_t es = hvd::DtypeSize(dtype);
  for (size_t i = 0; i < count; ++i) {
    unsigned char* e = p + i * es;
    uint64_t bits = rng();
    const unsigned kind = static_cast<unsigned>(rng() % 8);
    if (dtype == HVD_BOOL) {
      e[0] = static_cast<unsigned char>(bits & 1);
      continue;
    }
    if (dtype == HVD_FLOAT32 && kind < 4) {
      static const uint32_t special[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,
                                         0x7fc00000u, 0x7f800001u, 0xffc12345u, 0x00000001u,
                                         0x807fffffu, 0x7f7fffffu, 0x00800000u, 0x3f800000u};
      float f;
      if (kind == 0) {
        const uint32_t s = special[rng() % (sizeof(special) / sizeof(special[0]))];
        std::memcpy(&f, &s, 4);
      } else if (kind == 1) {
        const uint32_t s = static_cast<uint32_t>(bits) & 0x807fffffu;  // subnormal
        std::memcpy(&f, &s, 4);
      } else {
        const double m = static_cast<double>(bits >> 11) / static_cast<double>(1ull << 52);
        f = static_cast<float>(std::ldexp(bits & 1 ? -m : m, static_cast<int>(rng() % 60) - 30));
      }
      std::memcpy(e, &f, 4);
      continue;
    }
    if (dtype == HVD_FLOAT64 && kind < 4) {
      static const uint64_t special[] = {0x0ull,
                                         0x8000000000000000ull,
                                         0x7ff0000000000000ull,
                                         0xfff0000000000000ull,
                                         0x7ff8000000000000ull,
                                         0x7ff0000000000001ull,
                                         0xfff8123456789abcull,
                                         0x1ull,
                                         0x7fefffffffffffffull};
      double d;
      if (kind == 0) {
        const uint64_t s = special[rng() % (sizeof(special) / sizeof(special[0]))];
        std::memcpy(&d, &s, 8);
      } else if (kind == 1) {
        const uint64_t s = bits & 0x800fffffffffffffull;  // subnormal
        std::memcpy(&d, &s, 8);
      } else {
        const double m = static_cast<double>(bits >> 11);
        d = std::ldexp(bits & 1 ? -m : m, -static_cast<int>(rng() % 100));
      }
      std::memcpy(e, &d, 8);
      continue;
    }
    if (kind == 0) {
      // Integer edges: 0, +-1, the extremes, +-2^(bits-2), 2^(bits-1).
      const int shift = static_cast<int>(8 * es);
      const uint64_t top = 1ull << (shift - 1);
      const uint64_t edges[] = {0, 1, ~0ull, top, top - 1, top >> 1, 0 - (top >> 1), top + 1};
      bits = edges[rng() % (sizeof(edges) / sizeof(edges[0]))];
    }
    std::memcpy(e, &bits, es);  // little-endian: the low bytes
  }
}

std::string Hex(const unsigned char* p, size_t n) {
  std::string s;
  char b[4];
  for (size_t i = n; i-- > 0;) {
    std::snprintf(b, sizeof(b), "%02x", p[i]);
    s += b;
  }
  return s;
}

std::string Describe(const hvd_cuda_scale_t& how, bool in_place) {
  char b[160];
  std::snprintf(b, sizeof(b), "%s scale %.17g divisor %lld %s", hvd::DtypeName(how.dtype),
                how.scale, static_cast<long long>(how.divisor),
                in_place ? "in place" : "out of place");
  return b;
}

constexpr size_t kGuard = 32;  // bytes around each destination that must stay

// One batch of copies of `sizes` elements at rotating misalignments, run by
// the emulated kernel and by the host path; equal bit for bit, and nothing
// outside the destinations written.
void CheckBatch(const std::vector<uint64_t>& sizes, const hvd_cuda_scale_t& how, bool in_place,
                unsigned seed, uint32_t max_blocks = 0) {
  const auto dtype = static_cast<hvd_dtype_t>(how.dtype);
  const size_t es = hvd::DtypeSize(dtype);
  const bool plain = bc::FlagsFor(how) == 0;
  std::mt19937_64 rng(seed);
  struct Buffers {
    std::vector<unsigned char> src, dst, want_src, want_dst;
    size_t src_off, dst_off;
  };
  std::vector<Buffers> bufs(sizes.size());
  std::vector<hvd_cuda_copy_t> copies;
  for (size_t i = 0; i < sizes.size(); ++i) {
    Buffers& b = bufs[i];
    const size_t bytes = sizes[i] * es;
    // Misalignments from a 16-aligned base: any for a plain copy, whole
    // elements for scaling (tensors are element-aligned).
    b.src_off = (i * 5 + seed * 3) % 16;
    b.dst_off = (i * 7 + seed) % 16;
    if (!plain) {
      b.src_off -= b.src_off % es;
      b.dst_off -= b.dst_off % es;
    }
    b.src.assign(bytes + 2 * kGuard + 16, 0x5a);
    b.dst.assign(bytes + 2 * kGuard + 16, 0xa5);
    const size_t s0 = kGuard + (16 - Addr(b.src.data()) % 16) % 16 + b.src_off;
    const size_t d0 = kGuard + (16 - Addr(b.dst.data()) % 16) % 16 + b.dst_off;
    b.src_off = s0;
    b.dst_off = d0;
    FillRandom(b.src.data() + s0, sizes[i], dtype, rng);
    b.want_src = b.src;
    b.want_dst = b.dst;
    if (in_place) {
      Reference(b.want_src.data() + s0, b.want_src.data() + s0, sizes[i], how);
      copies.push_back({b.src.data() + s0, b.src.data() + s0, sizes[i]});
    } else {
      Reference(b.want_dst.data() + d0, b.want_src.data() + s0, sizes[i], how);
      copies.push_back({b.src.data() + s0, b.dst.data() + d0, sizes[i]});
    }
  }
  ASSERT_EQ(bc::CheckArguments(copies.data(), copies.size(), &how), nullptr);
  Emulate(copies, how, max_blocks);
  for (size_t i = 0; i < sizes.size(); ++i) {
    const Buffers& b = bufs[i];
    for (int which = 0; which < 2; ++which) {
      const std::vector<unsigned char>& got = which == 0 ? b.src : b.dst;
      const std::vector<unsigned char>& want = which == 0 ? b.want_src : b.want_dst;
      if (got == want) continue;
      size_t k = 0;
      while (got[k] == want[k]) ++k;
      const size_t base = which == 0 ? b.src_off : b.dst_off;
      const bool inside = k >= base && k < base + sizes[i] * es;
      const size_t elem = inside ? (k - base) / es : 0;
      const size_t at = base + elem * es;
      ADD_FAILURE() << Describe(how, in_place) << ": copy " << i << " (" << sizes[i]
                    << " elements, offset " << base % 16 << "), "
                    << (which == 0 ? "source" : "destination") << " "
                    << (inside ? "element " + std::to_string(elem) + ": got 0x" +
                                     Hex(got.data() + at, es) + ", want 0x" +
                                     Hex(want.data() + at, es) +
                                     (which == 0 || in_place
                                          ? std::string()
                                          : " (source 0x" +
                                                Hex(b.src.data() + b.src_off + elem * es, es) + ")")
                               : "byte " + std::to_string(k) + " outside the copy was written");
      return;
    }
  }
}

std::vector<uint64_t> OddSizes(hvd_dtype_t dtype) {
  const uint64_t chunk = bc::kChunkBytes / hvd::DtypeSize(dtype);
  return {1, 7, 0, 255, chunk - 1, chunk + 1, 2 * chunk + 17, 5 * chunk / 2 + 3, 33};
}

// 2.0 takes integer edge values exactly to 2^(bits-1) and 2^bits, the first
// values out of range.
const double kScales[] = {1.0, 0.5, 1.0 / 3.0, -2.5, 2.0, 1e30, NAN};

TEST(CudaKernelEmulation, EveryDtypeScaleDivisorAgainstHostPath) {
  unsigned seed = 1;
  for (hvd_dtype_t dtype : kAllDtypes) {
    std::vector<int64_t> divisors = {1};
    if (IsInt(dtype)) divisors = {1, 3, -1};
    if (dtype == HVD_BOOL) divisors = {1, 3};
    for (double scale : kScales) {
      // NaN as a factor is an integer case (it makes 0); float dtypes get
      // the other factors, and NaNs in their data.
      if (std::isnan(scale) && !IsInt(dtype) && dtype != HVD_BOOL) continue;
      for (int64_t divisor : divisors) {
        for (bool in_place : {false, true}) {
          const hvd_cuda_scale_t how = How(dtype, scale, divisor);
          SCOPED_TRACE(Describe(how, in_place));
          CheckBatch(OddSizes(dtype), how, in_place, seed++);
          if (HasFailure()) return;
        }
      }
    }
  }
}

TEST(CudaKernelEmulation, ManyCopiesAndCutCopies) {
  // More copies than a launch carries, and launches of few blocks (copies
  // cut between launches), against the host path.
  std::mt19937_64 rng(7);
  std::vector<uint64_t> small(300);
  for (auto& s : small) s = rng() % 60;
  for (const hvd_cuda_scale_t& how : {How(HVD_FLOAT16, 0.5), How(HVD_INT32, 1.0 / 3.0, 3),
                                      How(HVD_UINT8), How(HVD_BFLOAT16, -2.5)}) {
    for (bool in_place : {false, true}) {
      SCOPED_TRACE(Describe(how, in_place));
      CheckBatch(small, how, in_place, 11);
      CheckBatch(OddSizes(static_cast<hvd_dtype_t>(how.dtype)), how, in_place, 12, 2);
      if (HasFailure()) return;
    }
  }
}

TEST(CudaKernelEmulation, EachElementIsOneThreads) {
  // Thread by thread on a fresh destination: the bytes each thread writes
  // are disjoint and together the whole copy (every source element nonzero
  // and changed by the operation, so a write shows).
  struct Case {
    hvd_cuda_scale_t how;
    size_t src_mis, dst_mis;
  };
  const Case cases[] = {{How(HVD_UINT8), 0, 0},          {How(HVD_UINT8), 3, 3},
                        {How(HVD_UINT8), 1, 6},          {How(HVD_UINT8), 4, 12},
                        {How(HVD_UINT8), 2, 0},          {How(HVD_INT8, 1.0, -1), 0, 5},
                        {How(HVD_INT32, 1.0, -1), 4, 8}, {How(HVD_FLOAT16, 0.5), 2, 2}};
  for (const Case& c : cases) {
    const size_t es = hvd::DtypeSize(static_cast<hvd_dtype_t>(c.how.dtype));
    const uint64_t count = (2 * bc::kChunkBytes + 1234) / es;
    const size_t bytes = count * es;
    std::vector<unsigned char> src_buf(bytes + 32), dst_buf(bytes + 32);
    unsigned char* src = src_buf.data() + (16 - Addr(src_buf.data()) % 16) % 16 + c.src_mis;
    unsigned char* dst = dst_buf.data() + (16 - Addr(dst_buf.data()) % 16) % 16 + c.dst_mis;
    for (size_t i = 0; i < bytes; ++i) src[i] = static_cast<unsigned char>(1 + i % 97);
    if (c.how.dtype == HVD_FLOAT16) {
      for (size_t i = 0; i < count; ++i) {
        const uint16_t h = hvd::FloatToHalf(static_cast<float>(1 + i % 1000));
        std::memcpy(src + 2 * i, &h, 2);
      }
    }
    const std::vector<hvd_cuda_copy_t> copies = {{src, dst, count}};
    bc::LaunchPlanner planner(copies.data(), 1, c.how);
    bc::LaunchParams p;
    ASSERT_TRUE(planner.Next(&p));
    std::vector<int> writers(bytes, 0);
    misaligned_accesses = 0;
    for (unsigned t = 0; t < bc::kThreadsPerBlock; ++t) {
      std::memset(dst, 0, bytes);
      for (uint32_t b = 0; b < p.blocks; ++b) bc::RunBlock(p, b, t, bc::kThreadsPerBlock);
      for (size_t i = 0; i < bytes; ++i) writers[i] += dst[i] != 0;
    }
    EXPECT_FALSE(planner.Next(&p));
    EXPECT_EQ(misaligned_accesses, 0) << Describe(c.how, false);
    // A changed element may keep a zero byte (e.g. -1 as int32 has none, a
    // half's low byte may be 0): count per element.
    for (size_t e = 0; e < count; ++e) {
      int n = 0;
      for (size_t k = 0; k < es; ++k) n = std::max(n, writers[e * es + k]);
      ASSERT_EQ(n, 1) << Describe(c.how, false) << " misaligned " << c.src_mis << "/" << c.dst_mis
                      << ": element " << e << " written by " << n << " threads";
    }
  }
}

TEST(CudaKernelEmulation, ConversionsMatchHostPath) {
  // Every float16 and bfloat16 value widened, and float32 values narrowed
  // (random bits plus every boundary of the half range), as the host does.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float a = bc::HalfToFloat(static_cast<uint16_t>(h));
    const float b = hvd::HalfToFloat(static_cast<uint16_t>(h));
    ASSERT_EQ(bc::BitsOf(a), bc::BitsOf(b)) << "half 0x" << std::hex << h;
    ASSERT_EQ(bc::BitsOf(bc::BFloat16ToFloat(static_cast<uint16_t>(h))),
              bc::BitsOf(hvd::BFloat16ToFloat(static_cast<uint16_t>(h))));
  }
  std::mt19937_64 rng(99);
  std::vector<uint32_t> bits;
  for (int i = 0; i < 2000000; ++i) bits.push_back(static_cast<uint32_t>(rng()));
  for (uint32_t edge : {0x33000000u, 0x33000001u, 0x387fe000u, 0x387fffffu, 0x38800000u,
                        0x477fe000u, 0x477fefffu, 0x477ff000u, 0x7f7fffffu, 0x7f800000u,
                        0x7f800001u, 0x7fffffffu, 0x00000001u, 0x3f7fffffu}) {
    for (int d = -2; d <= 2; ++d) {
      bits.push_back(edge + d);
      bits.push_back((edge + d) | 0x80000000u);
    }
  }
  for (uint32_t u : bits) {
    const float f = bc::FloatOf(u);
    ASSERT_EQ(bc::FloatToHalf(f), hvd::FloatToHalf(f)) << "float 0x" << std::hex << u;
    ASSERT_EQ(bc::FloatToBFloat16(f), hvd::FloatToBFloat16(f)) << "float 0x" << std::hex << u;
  }
}

// ---------------------------------------------------------------------------
// (c) The library, loaded as the core loads it.

#ifdef HVD_CUDA_KERNELS_LIB
struct Library {
  void* dl = nullptr;
  const hvd_cuda_kernels_v1_t* table = nullptr;
  std::string error;
  Library() {
    dl = dlopen(HVD_CUDA_KERNELS_LIB, RTLD_NOW | RTLD_LOCAL);
    if (dl == nullptr) {
      const char* e = dlerror();
      error = e != nullptr ? e : "dlopen failed";
      return;
    }
    auto fn = reinterpret_cast<hvd_cuda_kernels_v1_fn>(dlsym(dl, "hvd_cuda_kernels_v1"));
    if (fn == nullptr) {
      error = "no hvd_cuda_kernels_v1";
      return;
    }
    table = fn();
  }
  ~Library() {
    if (dl != nullptr) dlclose(dl);
  }
  // A CUDA runtime function, from the runtime the library links.
  template <typename F>
  F Cuda(const char* name) const {
    return reinterpret_cast<F>(dlsym(dl, name));
  }
};
#endif

// The CUDA runtime's entry points the device comparison needs (no CUDA
// header here: the test builds without the toolkit).
using CudaGetDeviceCountFn = int (*)(int*);
using CudaMallocFn = int (*)(void**, size_t);
using CudaFreeFn = int (*)(void*);
using CudaMemcpyFn = int (*)(void*, const void*, size_t, int);
using CudaSyncFn = int (*)();
constexpr int kHostToDevice = 1, kDeviceToHost = 2;

TEST(CudaKernelsLibrary, TableAndCalls) {
#ifndef HVD_CUDA_KERNELS_LIB
  GTEST_SKIP() << "libhvd_cuda_kernels.so is not built here (no CUDA compiler found, or "
                  "HVD_WITH_CUDA_KERNELS=OFF)";
#else
  Library lib;
  ASSERT_NE(lib.table, nullptr) << HVD_CUDA_KERNELS_LIB << ": " << lib.error;
  const hvd_cuda_kernels_v1_t* t = lib.table;
  EXPECT_EQ(t->abi_version, static_cast<uint32_t>(HVD_CUDA_KERNELS_ABI));
  EXPECT_EQ(t->struct_size, sizeof(hvd_cuda_kernels_v1_t));
  EXPECT_EQ(t->batch_capacity, bc::kBatchCapacity);
  EXPECT_EQ(t->reserved, 0u);
  ASSERT_NE(t->scale_copy, nullptr);
  ASSERT_NE(t->error_string, nullptr);

  // Arguments refused before anything reaches CUDA.
  const hvd_cuda_scale_t f32 = How(HVD_FLOAT32, 0.5);
  EXPECT_EQ(t->scale_copy(nullptr, 0, &f32, nullptr), 0);
  EXPECT_EQ(t->scale_copy(nullptr, 3, &f32, nullptr), kCudaErrorInvalidValue);
  hvd_cuda_copy_t fake = {FakePtr(0), const_cast<void*>(FakePtr(1)), 1000};
  EXPECT_EQ(t->scale_copy(&fake, 1, nullptr, nullptr), kCudaErrorInvalidValue);
  hvd_cuda_scale_t bad = How(static_cast<hvd_dtype_t>(42), 0.5);
  EXPECT_EQ(t->scale_copy(&fake, 1, &bad, nullptr), kCudaErrorInvalidValue);
  bad = How(HVD_FLOAT32, 0.5, 2);
  EXPECT_EQ(t->scale_copy(&fake, 1, &bad, nullptr), kCudaErrorInvalidValue);
  bad = How(HVD_INT32, 1.0, 0);
  EXPECT_EQ(t->scale_copy(&fake, 1, &bad, nullptr), kCudaErrorInvalidValue);
  const char* text = t->error_string(kCudaErrorInvalidValue);
  ASSERT_NE(text, nullptr);
  EXPECT_GT(std::strlen(text), 0u);

  auto device_count = lib.Cuda<CudaGetDeviceCountFn>("cudaGetDeviceCount");
  ASSERT_NE(device_count, nullptr) << "the library's CUDA runtime has no cudaGetDeviceCount";
  int devices = 0;
  const int count_err = device_count(&devices);
  if (count_err != 0 || devices == 0) {
    // No GPU: the launch fails with CUDA's error (no driver, no device),
    // returned, not a crash; the pointers are never touched.
    const int err = t->scale_copy(&fake, 1, &f32, nullptr);
    EXPECT_NE(err, 0);
    EXPECT_NE(err, kCudaErrorInvalidValue);
    const char* s = t->error_string(err);
    ASSERT_NE(s, nullptr);
    EXPECT_GT(std::strlen(s), 0u);
    std::printf("no CUDA device (cudaGetDeviceCount: %d): scale_copy returned %d \"%s\"\n",
                count_err, err, s);
    return;
  }

  // A GPU: the emulation's comparisons on device memory.
  auto cuda_malloc = lib.Cuda<CudaMallocFn>("cudaMalloc");
  auto cuda_free = lib.Cuda<CudaFreeFn>("cudaFree");
  auto cuda_memcpy = lib.Cuda<CudaMemcpyFn>("cudaMemcpy");
  auto cuda_sync = lib.Cuda<CudaSyncFn>("cudaDeviceSynchronize");
  ASSERT_TRUE(cuda_malloc && cuda_free && cuda_memcpy && cuda_sync);
  std::printf("%d CUDA device(s): comparing the kernels with the host path on device 0\n", devices);
  std::mt19937_64 rng(2024);
  for (hvd_dtype_t dtype : kAllDtypes) {
    const size_t es = hvd::DtypeSize(dtype);
    const std::vector<uint64_t> sizes = OddSizes(dtype);
    for (double scale : kScales) {
      if (std::isnan(scale) && !IsInt(dtype)) continue;
      for (int64_t divisor :
           IsInt(dtype) ? std::vector<int64_t>{1, 3, -1} : std::vector<int64_t>{1}) {
        for (bool in_place : {false, true}) {
          const hvd_cuda_scale_t how = How(dtype, scale, divisor);
          SCOPED_TRACE(Describe(how, in_place));
          const bool plain = bc::FlagsFor(how) == 0;
          std::vector<hvd_cuda_copy_t> copies;
          std::vector<void*> allocations;
          std::vector<std::vector<unsigned char>> src(sizes.size()), want(sizes.size());
          std::vector<unsigned char*> dsrc(sizes.size()), ddst(sizes.size());
          for (size_t i = 0; i < sizes.size(); ++i) {
            const size_t bytes = sizes[i] * es;
            size_t so = (i * 5 + static_cast<size_t>(rng() % 16)) % 16;
            size_t dof = (i * 3 + static_cast<size_t>(rng() % 16)) % 16;
            if (!plain) {
              so -= so % es;
              dof -= dof % es;
            }
            void* a = nullptr;
            void* b = nullptr;
            ASSERT_EQ(cuda_malloc(&a, bytes + 16), 0);
            ASSERT_EQ(cuda_malloc(&b, bytes + 16), 0);
            allocations.push_back(a);
            allocations.push_back(b);
            dsrc[i] = static_cast<unsigned char*>(a) + so;
            ddst[i] = in_place ? dsrc[i] : static_cast<unsigned char*>(b) + dof;
            src[i].resize(bytes + 1);
            FillRandom(src[i].data(), sizes[i], dtype, rng);
            want[i].resize(bytes + 1);
            Reference(want[i].data(), src[i].data(), sizes[i], how);
            ASSERT_EQ(cuda_memcpy(dsrc[i], src[i].data(), bytes, kHostToDevice), 0);
            copies.push_back({dsrc[i], ddst[i], sizes[i]});
          }
          ASSERT_EQ(t->scale_copy(copies.data(), copies.size(), &how, nullptr), 0);
          ASSERT_EQ(cuda_sync(), 0);
          for (size_t i = 0; i < sizes.size(); ++i) {
            const size_t bytes = sizes[i] * es;
            std::vector<unsigned char> got(bytes + 1);
            ASSERT_EQ(cuda_memcpy(got.data(), ddst[i], bytes, kDeviceToHost), 0);
            for (size_t e = 0; e < sizes[i]; ++e) {
              ASSERT_EQ(std::memcmp(got.data() + e * es, want[i].data() + e * es, es), 0)
                  << "copy " << i << " element " << e << ": got 0x" << Hex(got.data() + e * es, es)
                  << ", want 0x" << Hex(want[i].data() + e * es, es) << " (source 0x"
                  << Hex(src[i].data() + e * es, es) << ")";
            }
          }
          for (void* a : allocations) cuda_free(a);
        }
      }
    }
  }
#endif
}

}  // namespace
