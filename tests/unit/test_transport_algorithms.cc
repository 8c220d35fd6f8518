// The core's side of the transport ABI (src/transport/transport.cc):
// the built-in Gloo table's point-to-point driven by the core's algorithms,
// every algorithm forced in turn, over TCP and over shared memory, with
// ranks as threads sharing an in-memory store; and Transport::Abort ending a
// blocked collective promptly.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/kernels.h"
#include "core/observability/logging.h"
#include "transport/transport.h"
#include "mem_kv.h"

namespace hvd {
namespace {

using Clock = std::chrono::steady_clock;

struct Rank {
  std::unique_ptr<Transport> t;
  Status st;
};

// Opens `n` ranks of the gloo transport as threads.
std::vector<Rank> OpenRanks(int n, test::MemKv* kv, const TransportOptions& opts, Logger* log) {
  std::vector<Rank> ranks(static_cast<size_t>(n));
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) {
    ts.emplace_back([&, r] {
      hvd_transport_env_t env = test::ThreadRankEnv(kv, r, n, 20, 20);
      env.reduce = hvd_reduce_kernel;
      const hvd_transport_option_t addr = {"local_address", "127.0.0.1", nullptr};
      env.options = &addr;
      env.noptions = 1;
      TransportOptions o = opts;
      o.hostname = "host" + std::to_string(r);
      auto t = Transport::Open("gloo", "", env, o, log);
      if (t.ok()) {
        ranks[r].t = std::move(t).value();
      } else {
        ranks[r].st = t.status();
      }
    });
  }
  for (auto& t : ts) t.join();
  return ranks;
}

void OnRanks(int n, const std::function<void(int)>& body) {
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) ts.emplace_back([&, r] { body(r); });
  for (auto& t : ts) t.join();
}

struct Case {
  bool shm;
  const char* allreduce;
  const char* broadcast;
};

class Forced : public ::testing::TestWithParam<Case> {};

TEST_P(Forced, EveryCollectiveExact) {
  const Case c = GetParam();
  constexpr int n = 3;
  test::MemKv kv;
  Logger log(HVD_LOG_ERROR, nullptr, nullptr);
  TransportOptions o;
  o.shm = c.shm;
  o.algorithm[HVD_TRANSPORT_ALLREDUCE] = c.allreduce;
  o.algorithm[HVD_TRANSPORT_BROADCAST] = c.broadcast;
  if (!c.shm) {
    o.algorithm[HVD_TRANSPORT_ALLGATHERV] = "ring";
    o.algorithm[HVD_TRANSPORT_REDUCESCATTER] = "ring";
    o.algorithm[HVD_TRANSPORT_BARRIER] = "dissemination";
  }
  auto ranks = OpenRanks(n, &kv, o, &log);
  for (int r = 0; r < n; ++r) ASSERT_TRUE(ranks[r].t) << ranks[r].st.message();
  EXPECT_EQ(*ranks[0].t->Query("abi"), HVD_TRANSPORT_ABI);
  EXPECT_EQ(ranks[0].t->Query("shm").ok(), c.shm);
  const size_t count = (size_t{3} << 20) / 4 + 5;  // beyond a ring segment per part
  OnRanks(n, [&](int r) {
    Transport& t = *ranks[r].t;
    // allreduce
    std::vector<int32_t> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = static_cast<int32_t>(i % 1000) * (r + 1);
    ASSERT_TRUE(t.Allreduce(v.data(), count, HVD_INT32, HVD_SUM).ok());
    for (size_t i = 0; i < count; i += 997) ASSERT_EQ(v[i], static_cast<int32_t>(i % 1000) * 6);
    // reducescatter over uneven blocks
    std::vector<size_t> counts = {5, 0, 100003};
    std::vector<int64_t> rs(100008);
    for (size_t i = 0; i < rs.size(); ++i) rs[i] = static_cast<int64_t>(i) + r;
    ASSERT_TRUE(t.Reducescatter(rs.data(), counts.data(), HVD_INT64, HVD_MAX).ok());
    size_t at = 0;
    for (int q = 0; q < r; ++q) at += counts[q];
    for (size_t i = at; i < at + counts[r]; ++i) ASSERT_EQ(rs[i], static_cast<int64_t>(i) + 2);
    // allgatherv
    std::vector<size_t> bytes = {3, 70001, 0};
    std::vector<uint8_t> mine(bytes[r] + 1, static_cast<uint8_t>(r + 1)), all(70004, 0);
    ASSERT_TRUE(t.Allgatherv(mine.data(), all.data(), bytes.data()).ok());
    at = 0;
    for (int q = 0; q < n; ++q) {
      for (size_t i = 0; i < bytes[q]; ++i) ASSERT_EQ(all[at + i], q + 1);
      at += bytes[q];
    }
    // broadcast from each root
    for (int root = 0; root < n; ++root) {
      std::vector<uint8_t> b((size_t{3} << 20) + 1, static_cast<uint8_t>(r == root ? 7 + root : 0));
      ASSERT_TRUE(t.Broadcast(b.data(), b.size(), root).ok());
      ASSERT_EQ(b.front(), 7 + root);
      ASSERT_EQ(b.back(), 7 + root);
    }
    // alltoallv: rank r sends q + 1 bytes of value 10r + q to q
    std::vector<size_t> sb(n), rb(n);
    std::vector<uint8_t> in, out;
    for (int q = 0; q < n; ++q) {
      sb[q] = static_cast<size_t>(q + 1);
      rb[q] = static_cast<size_t>(r + 1);
      in.insert(in.end(), sb[q], static_cast<uint8_t>(10 * r + q));
    }
    out.assign(static_cast<size_t>(n * (r + 1)), 0);
    ASSERT_TRUE(t.Alltoallv(in.data(), sb.data(), out.data(), rb.data()).ok());
    for (int q = 0; q < n; ++q) ASSERT_EQ(out[static_cast<size_t>(q * (r + 1))], 10 * q + r);
    ASSERT_TRUE(t.Barrier().ok());
  });
}

INSTANTIATE_TEST_SUITE_P(
    V4, Forced,
    ::testing::Values(Case{false, "ring", "chain"}, Case{false, "direct", "tree"},
                      Case{false, "", ""}, Case{true, "", ""}),
    [](const auto& info) {
      return std::string(info.param.shm ? "shm" : "tcp") + "_" +
             (info.param.allreduce[0] ? info.param.allreduce : "auto") + "_" +
             (info.param.broadcast[0] ? info.param.broadcast : "auto");
    });

// A rank that never joins the collective: the two that did are blocked until
// Abort, and must return within a second of it with its status.
class Abort : public ::testing::TestWithParam<bool> {};

TEST_P(Abort, EndsABlockedCollectiveWithinOneSecond) {
  constexpr int n = 3;
  test::MemKv kv;
  Logger log(HVD_LOG_ERROR, nullptr, nullptr);
  TransportOptions o;
  o.shm = GetParam();
  auto ranks = OpenRanks(n, &kv, o, &log);
  for (int r = 0; r < n; ++r) ASSERT_TRUE(ranks[r].t) << ranks[r].st.message();
  std::atomic<int> returned{0};
  std::vector<Status> st(2);
  std::vector<double> at(2);
  const auto t0 = Clock::now();
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    EXPECT_TRUE(ranks[0].t->Abort(HVD_ERR_ABORTED, "test abort"));
    EXPECT_TRUE(ranks[1].t->Abort(HVD_ERR_ABORTED, "test abort"));
  });
  OnRanks(2, [&](int r) {
    std::vector<float> v(1 << 16, 1.0f);
    st[r] = ranks[r].t->Allreduce(v.data(), v.size(), HVD_FLOAT32, HVD_SUM);
    at[r] = std::chrono::duration<double>(Clock::now() - t0).count();
  });
  aborter.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(st[r].ok()) << "rank " << r;
    EXPECT_GE(at[r], 0.45) << "rank " << r << " returned before the abort";
    EXPECT_LT(at[r], 1.5) << "rank " << r << " took " << at[r] << " s (abort at 0.5 s)";
  }
  // Later calls fail at once.
  std::vector<float> v(4, 1.0f);
  const auto t1 = Clock::now();
  EXPECT_FALSE(ranks[0].t->Allreduce(v.data(), v.size(), HVD_FLOAT32, HVD_SUM).ok());
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t1).count(), 1.0);
  // Rank 2 never entered: abort it too so its finalize does not wait.
  ranks[2].t->Abort(HVD_ERR_ABORTED, "test over");
}

INSTANTIATE_TEST_SUITE_P(V4, Abort, ::testing::Values(false, true),
                         [](const auto& info) { return std::string(info.param ? "shm" : "tcp"); });

}  // namespace
}  // namespace hvd
