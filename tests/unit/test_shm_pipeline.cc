// The shared-memory allreduce's per-chunk flags (algorithms/shm/): ranks as
// threads on one segment with a 4 KiB slot, so a few KiB make many chunks.
// The result is the rank-ordered fold, bit for bit, on every rank, whatever
// the timing (ranks are delayed at random between and inside calls); the
// flag rounds interleave with the barrier rounds of the other collectives;
// a peer that never comes, aborts or leaves fails the wait, named.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/shm/shm.h"
#include "common/kernels.h"
#include "shm_threads.h"

namespace hvd {
namespace {

// n mapped segments of one communicator (4 KiB slots), or empty.
std::vector<std::unique_ptr<shm::Segment>> SetupRanks(int n, double timeout_s) {
  test::ThreadExchange::Board board(n);
  std::vector<std::unique_ptr<shm::Segment>> segs(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      shm::Options o;
      o.transport = "test";
      o.name_prefix = "/hvd-test-";
      o.rank = r;
      o.size = n;
      o.timeout_s = timeout_s;
      o.slot_bytes = 4096;
      test::ThreadExchange ex(&board, r);
      if (!shm::Setup(ex, o, &segs[static_cast<size_t>(r)]).ok()) segs[static_cast<size_t>(r)].reset();
    });
  }
  for (std::thread& t : threads) t.join();
  for (auto& s : segs) {
    if (!s) return {};
  }
  return segs;
}

#define SEGMENTS(segs, n, timeout)                                                          \
  if (shm::HostIdentity().empty()) GTEST_SKIP() << "this host cannot tell its identity";   \
  std::vector<std::unique_ptr<shm::Segment>> segs = SetupRanks(n, timeout);                 \
  ASSERT_EQ(segs.size(), static_cast<size_t>(n)) << "setup failed"

// Rank r's contribution: magnitudes far apart, so a different fold order
// rounds differently.
std::vector<float> Input(int r, size_t count, uint32_t seed) {
  std::mt19937 g(seed * 131 + static_cast<uint32_t>(r));
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(count);
  const float scale[] = {1e8f, 1.f, 1e-3f, 3e4f};
  for (float& x : v) x = u(g) * scale[r % 4];
  return v;
}

std::vector<float> RankOrdered(int n, size_t count, uint32_t seed) {
  std::vector<float> acc = Input(0, count, seed);
  for (int r = 1; r < n; ++r) {
    const std::vector<float> v = Input(r, count, seed);
    for (size_t i = 0; i < count; ++i) acc[i] = acc[i] + v[i];
  }
  return acc;
}

// Random short stalls: yields and sleeps of up to 200 us.
void Jitter(std::mt19937& g) {
  const uint32_t x = g() % 8;
  if (x == 0) std::this_thread::sleep_for(std::chrono::microseconds(g() % 200));
  if (x == 1) std::this_thread::yield();
}

// Sizes around the chunk (4 KiB = 1024 floats) and the small path's limit;
// several calls in a row, each rank delayed at random in between, the
// fused form (spans) every other call.
TEST(ShmPipeline, RankOrderedBitsOnEveryRankWhateverTheTiming) {
  for (int n : {2, 3, 4}) {
    SCOPED_TRACE("ranks " + std::to_string(n));
    SEGMENTS(segs, n, 20);
    const size_t counts[] = {1025, 4096, 3 * 1024 + 17, 40000, 1024 * 9, 77};
    std::vector<std::string> errors(static_cast<size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        std::mt19937 g(static_cast<uint32_t>(r) + 7);
        for (int round = 0; round < 3; ++round) {
          for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); ++c) {
            const uint32_t seed = static_cast<uint32_t>(round * 100 + c);
            std::vector<float> buf = Input(r, counts[c], seed);
            Jitter(g);
            Status st;
            if (c % 2 == 0) {
              st = shm::Allreduce(*segs[r], hvd_reduce_kernel, reinterpret_cast<uint8_t*>(buf.data()),
                                  buf.size(), 4, HVD_FLOAT32, HVD_SUM);
            } else {
              const size_t cut = buf.size() / 3;
              const hvd_transport_span_t spans[2] = {{buf.data(), cut}, {buf.data() + cut, buf.size() - cut}};
              st = shm::AllreduceSpans(*segs[r], hvd_reduce_kernel, spans, 2, 4, HVD_FLOAT32, HVD_SUM);
            }
            if (!st.ok()) {
              errors[r] = st.message();
              return;
            }
            const std::vector<float> want = RankOrdered(n, counts[c], seed);
            if (std::memcmp(buf.data(), want.data(), buf.size() * 4) != 0) {
              errors[r] = "count " + std::to_string(counts[c]) + ": not the rank-ordered bits";
              return;
            }
          }
        }
      });
    }
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  }
}

// Pipelined rounds followed by barrier rounds and back (a broadcast and an
// allgatherv right after a large allreduce, and the next allreduce right
// after them), ranks delayed at random: every result is right.
TEST(ShmPipeline, BarrierRoundsAndPipelinedRoundsInterleave) {
  const int n = 3;
  SEGMENTS(segs, n, 20);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::mt19937 g(static_cast<uint32_t>(r) + 1);
      for (int it = 0; it < 20 && errors[r].empty(); ++it) {
        std::vector<float> buf = Input(r, 5000, static_cast<uint32_t>(it));
        Status st = shm::Allreduce(*segs[r], hvd_reduce_kernel, reinterpret_cast<uint8_t*>(buf.data()),
                                   buf.size(), 4, HVD_FLOAT32, HVD_SUM);
        if (st.ok() && buf != RankOrdered(n, 5000, static_cast<uint32_t>(it))) errors[r] = "allreduce";
        Jitter(g);
        std::vector<uint8_t> b(9000, static_cast<uint8_t>(r == it % n ? it : 0xEE));
        if (st.ok()) st = shm::Broadcast(*segs[r], b.data(), b.size(), it % n);
        if (st.ok() && b != std::vector<uint8_t>(9000, static_cast<uint8_t>(it))) errors[r] = "broadcast";
        std::vector<size_t> sizes = {5000, 1, 6000};
        std::vector<uint8_t> out(12001, 0);
        std::vector<uint8_t> mine(sizes[r], static_cast<uint8_t>(r + it));
        if (st.ok()) st = shm::Allgatherv(*segs[r], mine.data(), out.data(), sizes.data());
        size_t off = 0;
        for (int k = 0; k < n && st.ok(); ++k) {
          for (size_t i = 0; i < sizes[k]; ++i) {
            if (out[off + i] != static_cast<uint8_t>(k + it)) errors[r] = "allgatherv";
          }
          off += sizes[k];
        }
        if (!st.ok()) errors[r] = st.message();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Rank 1 never calls: rank 0 waits for its written flag and times out,
// naming it. Then rank 1 aborts while rank 0 waits: rank 0 fails at once
// with rank 1's reason. And a rank that left: "has finalized".
TEST(ShmPipeline, AMissingAbortingOrLeavingPeerFailsTheFlagWait) {
  {
    SEGMENTS(segs, 2, 0.3);
    std::vector<float> buf(5000, 1.f);
    const Status st = shm::Allreduce(*segs[0], hvd_reduce_kernel,
                                     reinterpret_cast<uint8_t*>(buf.data()), buf.size(), 4,
                                     HVD_FLOAT32, HVD_SUM);
    EXPECT_EQ(st.code(), HVD_ERR_TIMEOUT);
    EXPECT_EQ(st.message(), "allreduce (shm): rank 0: ranks [1] did not arrive within 0.3 s");
    EXPECT_EQ(segs[0]->missing(), std::vector<int>{1});
  }
  {
    SEGMENTS(segs, 2, 20);
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      segs[1]->Abort(HVD_ERR_TRANSPORT, "rank 1's own failure");
    });
    std::vector<float> buf(5000, 1.f);
    const auto t0 = std::chrono::steady_clock::now();
    const Status st = shm::Allreduce(*segs[0], hvd_reduce_kernel,
                                     reinterpret_cast<uint8_t*>(buf.data()), buf.size(), 4,
                                     HVD_FLOAT32, HVD_SUM);
    aborter.join();
    EXPECT_EQ(st.code(), HVD_ERR_TRANSPORT);
    EXPECT_EQ(st.message(), "allreduce (shm): rank 0: rank 1 broke the communicator: rank 1's own failure");
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  }
  {
    SEGMENTS(segs, 2, 20);
    segs[1]->Depart();
    std::vector<float> buf(5000, 1.f);
    const Status st = shm::Allreduce(*segs[0], hvd_reduce_kernel,
                                     reinterpret_cast<uint8_t*>(buf.data()), buf.size(), 4,
                                     HVD_FLOAT32, HVD_SUM);
    EXPECT_EQ(st.message(), "allreduce (shm): rank 0: rank 1 has finalized (left the job)");
  }
}

}  // namespace
}  // namespace hvd
