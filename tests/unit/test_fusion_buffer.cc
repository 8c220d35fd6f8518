// The fusion buffer and the context's reusable memory: growth leaves the
// part the caller is about to write untouched (its pages are faulted in by
// that write, not by a memset first) and pre-faults only the headroom past
// it; reducescatter's scratch goes back to the pool, within its cap, rather
// than growing the fusion buffer for the context's life.
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/context.h"
#include "core/fusion/fusion_buffer.h"
#include "core/loop/request.h"
#include "scoped_env.h"

namespace hvd {
namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

// The whole pages of [p + from, p + to).
void WholePages(const uint8_t* p, size_t from, size_t to, uintptr_t* lo, uintptr_t* hi) {
  *lo = (reinterpret_cast<uintptr_t>(p) + from + kPage - 1) / kPage * kPage;
  *hi = (reinterpret_cast<uintptr_t>(p) + to) / kPage * kPage;
  if (*hi < *lo) *hi = *lo;
}
size_t Pages(const uint8_t* p, size_t from, size_t to) {
  uintptr_t lo, hi;
  WholePages(p, from, to, &lo, &hi);
  return (hi - lo) / kPage;
}
// How many of those are resident.
size_t ResidentPages(const uint8_t* p, size_t from, size_t to) {
  uintptr_t lo, hi;
  WholePages(p, from, to, &lo, &hi);
  if (hi == lo) return 0;
  std::vector<unsigned char> vec((hi - lo) / kPage);
  EXPECT_EQ(mincore(reinterpret_cast<void*>(lo), hi - lo, vec.data()), 0);
  size_t n = 0;
  for (unsigned char v : vec) n += v & 1;
  return n;
}

// Large enough that the allocator maps fresh pages (never recycled heap).
constexpr size_t kMiB = size_t{1} << 20;

TEST(FusionBuffer, GrowthDoesNotTouchWhatTheCallerWrites) {
  FusionBuffer fb;
  uint8_t* p = fb.Reserve(32 * kMiB);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(fb.capacity(), 32 * kMiB);
  // Nothing written yet: (almost) nothing resident. A memset of the whole
  // capacity would have faulted in all 8192 pages.
  EXPECT_LE(ResidentPages(p, 0, 32 * kMiB), 2u);

  // Growing to 48 MiB doubles to 64 MiB: [0, 48) MiB is the caller's to
  // write, [48, 64) MiB is headroom, pre-faulted.
  p = fb.Reserve(48 * kMiB);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(fb.capacity(), 64 * kMiB);
  EXPECT_LE(ResidentPages(p, 0, 48 * kMiB), 2u);
  EXPECT_EQ(ResidentPages(p, 48 * kMiB, 64 * kMiB), Pages(p, 48 * kMiB, 64 * kMiB));

  // Within the capacity: the same buffer, nothing more.
  EXPECT_EQ(fb.Reserve(10), p);
  EXPECT_EQ(fb.Reserve(64 * kMiB), p);
}

TEST(FusionBuffer, ReserveFaultedFaultsInEverything) {
  FusionBuffer fb;
  uint8_t* p = fb.ReserveFaulted(8 * kMiB);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(ResidentPages(p, 0, 8 * kMiB), Pages(p, 0, 8 * kMiB));
}

TEST(FusionBuffer, ZeroBytesIsABufferToo) {
  FusionBuffer fb;
  EXPECT_NE(fb.Reserve(0), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(fb.Reserve(0)) % 64, 0u);
}

// ---- the context's buffers -----------------------------------------------------

using hvd::test::ScopedEnv;

// A reducescatter of rows x cols floats in a world of one; checks the result.
void Reducescatter(Context& ctx, const std::string& name, int64_t rows, int64_t cols) {
  std::vector<float> in(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 1000);
  OpRequest req;
  req.type = OpType::kReducescatter;
  req.reduce_op = HVD_SUM;
  TensorSpec t;
  t.name = name;
  t.dtype = HVD_FLOAT32;
  t.shape = {rows, cols};
  t.input = in.data();
  req.tensors.push_back(t);
  req.handle = MakeHandle("reducescatter", name);
  auto h = ctx.Enqueue(std::move(req));
  ASSERT_TRUE(h.ok()) << h.status().message();
  Status s = (*h)->Wait(60.0);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ((*h)->output.size(), in.size() * sizeof(float));
  EXPECT_EQ(std::memcmp((*h)->output.data(), in.data(), in.size() * sizeof(float)), 0);
}

// The pool's spare bytes once they reach `want` (or after 10 s, whatever
// they are then).
size_t SpareSettlesAt(Context& ctx, size_t want) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  size_t have = ctx.buffer_stats().pool_spare_bytes;
  while (have != want && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    have = ctx.buffer_stats().pool_spare_bytes;
  }
  return have;
}

TEST(ContextBuffers, ReducescatterScratchDoesNotPinTheFusionBuffer) {
  ScopedEnv pool("HVD_BUFFER_POOL_SIZE", "1048576");  // 1 MiB
  ScopedEnv initial("HVD_FUSION_BUFFER_INITIAL", "65536");
  ScopedEnv transport("HVD_TRANSPORT", "local");
  auto ctx = Context::Create(nullptr);
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  EXPECT_EQ((*ctx)->buffer_stats().fusion_capacity, 65536u);
  // 16 MiB of input: more than the fusion buffer and the pool's cap.
  Reducescatter(**ctx, "big", 1024, 4096);
  Context::BufferStats b = (*ctx)->buffer_stats();
  EXPECT_EQ(b.fusion_capacity, 65536u) << "the scratch grew the fusion buffer";
  EXPECT_LE(b.pool_spare_bytes, 1048576u) << "the pool kept more than its cap";
  // A small one runs in the fusion buffer: nothing new is kept.
  Reducescatter(**ctx, "small", 4, 1024);
  b = (*ctx)->buffer_stats();
  EXPECT_EQ(b.fusion_capacity, 65536u);
  EXPECT_LE(b.pool_spare_bytes, 1048576u);
}

TEST(ContextBuffers, ReducescatterScratchGoesBackToThePool) {
  ScopedEnv pool("HVD_BUFFER_POOL_SIZE", "67108864");  // 64 MiB
  ScopedEnv initial("HVD_FUSION_BUFFER_INITIAL", "65536");
  ScopedEnv transport("HVD_TRANSPORT", "local");
  auto ctx = Context::Create(nullptr);
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  Reducescatter(**ctx, "big", 1024, 1024);  // 4 MiB
  Context::BufferStats b = (*ctx)->buffer_stats();
  EXPECT_EQ(b.fusion_capacity, 65536u);
  // The scratch went back before the handle completed.
  EXPECT_GE(b.pool_spare_bytes, 4 * kMiB);
  // The result goes back when the last reference to its handle does (the
  // loop thread may hold one a moment longer): then both are kept.
  EXPECT_EQ(SpareSettlesAt(**ctx, 2 * 4 * kMiB), 2 * 4 * kMiB);
  // The next one of that size reuses them: the pool does not grow.
  Reducescatter(**ctx, "big", 1024, 1024);
  EXPECT_EQ(SpareSettlesAt(**ctx, 2 * 4 * kMiB), 2 * 4 * kMiB);
  EXPECT_EQ((*ctx)->buffer_stats().fusion_capacity, 65536u);
}

}  // namespace
}  // namespace hvd
