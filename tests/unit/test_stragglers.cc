// Stragglers from every rank's wait: the wait's two-byte code, who was last
// and what it cost, the block's schedule (only after a step), and the
// warning once an interval names a rank late in most steps.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/observability/stragglers.h"

namespace hvd {
namespace {

using Clock = Stragglers::Clock;

void Collect(int, const char* msg, void* user) {
  static_cast<std::vector<std::string>*>(user)->push_back(msg);
}

// The block every rank would see: each rank's wait in its two bytes.
std::vector<uint8_t> Block(const std::vector<double>& waits) {
  std::vector<uint8_t> b(2 * waits.size());
  for (size_t r = 0; r < waits.size(); ++r) {
    const uint16_t c = Stragglers::Encode(waits[r]);
    b[2 * r] = static_cast<uint8_t>(c >> 8);
    b[2 * r + 1] = static_cast<uint8_t>(c & 0xFF);
  }
  return b;
}

TEST(Stragglers, CodeRoundTripsWithinATenthOfAPercent) {
  for (double s : {1e-6, 3e-5, 1e-3, 0.03, 1.0, 100.0, 3000.0}) {
    EXPECT_NEAR(Stragglers::Decode(Stragglers::Encode(s)), s, s * 1e-3 + 1e-9) << s;
  }
  EXPECT_EQ(Stragglers::Encode(0), 0);
  EXPECT_LT(Stragglers::Encode(1e9), 0xFFFF);  // 0xFFFF means "no wait known"
}

TEST(Stragglers, NamesTheLastRankWithItsCostAndWarnsOnce) {
  std::vector<std::string> lines;
  Logger log(HVD_LOG_WARNING, Collect, &lines);
  Stragglers s;
  Stragglers::Settings set;
  set.warning_s = 1;
  set.share = 0.1;
  s.Configure(0, 4, set, &log, [](int r) { return "h" + std::to_string(r); });
  Clock::time_point t{};
  t += std::chrono::seconds(10);
  EXPECT_EQ(s.BlockBytes(), 0u);  // nothing to carry before a step
  s.Negotiated(nullptr, true, t);
  ASSERT_EQ(s.BlockBytes(), 8u);
  // 40 steps of 40 ms: rank 2 submits 30 ms after the others.
  for (int i = 0; i < 40; ++i) {
    t += std::chrono::milliseconds(40);
    const std::vector<uint8_t> b = Block({0.0302, 0.0301, 0.0001, 0.0303});
    s.Negotiated(b.data(), true, t);
    ASSERT_EQ(s.BlockBytes(), 8u);
  }
  EXPECT_EQ(s.steps(), 40u);
  EXPECT_EQ(s.rank(2).last.Get(), 40u);
  EXPECT_EQ(s.rank(2).late.Get(), 39u);  // the first step has no step time yet
  EXPECT_NEAR(s.rank(2).cost_nanos.Get() * 1e-9 / 40, 0.0300, 0.0001);
  EXPECT_NEAR(s.rank(2).waited_nanos.Get() * 1e-9 / 40, 0.0301, 0.0001);  // rank 0's own wait
  EXPECT_EQ(s.rank(2).warnings.Get(), 1u);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("straggler: rank 2 (host h2)"), std::string::npos) << lines[0];
  for (int r : {0, 1, 3}) EXPECT_EQ(s.rank(r).last.Get(), 0u);
}

TEST(Stragglers, EvenRanksAreNeverNamed) {
  std::vector<std::string> lines;
  Logger log(HVD_LOG_WARNING, Collect, &lines);
  Stragglers s;
  Stragglers::Settings set;
  set.warning_s = 0.5;
  s.Configure(1, 3, set, &log, nullptr);
  Clock::time_point t{};
  t += std::chrono::seconds(1);
  s.Negotiated(nullptr, true, t);
  for (int i = 0; i < 60; ++i) {
    t += std::chrono::milliseconds(20);
    // The last rank changes every step, and is late by 0.1 ms (noise).
    std::vector<double> w(3, 0.0051);
    w[static_cast<size_t>(i % 3)] = 0.0050;
    const std::vector<uint8_t> b = Block(w);
    s.Negotiated(b.data(), true, t);
  }
  EXPECT_EQ(s.steps(), 60u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(s.rank(r).late.Get(), 0u);
    EXPECT_EQ(s.rank(r).warnings.Get(), 0u);
  }
  EXPECT_TRUE(lines.empty());
}

TEST(Stragglers, BlockOnlyAfterAStepAndSparserForLargeJobs) {
  Stragglers s;
  s.Configure(0, 256, Stragglers::Settings{}, nullptr, nullptr);  // 512 bytes: every 4th
  Clock::time_point t{};
  s.Negotiated(nullptr, false, t);
  EXPECT_EQ(s.BlockBytes(), 0u);  // no step: nothing to carry
  s.Negotiated(nullptr, true, t);
  EXPECT_EQ(s.BlockBytes(), 0u);
  s.Negotiated(nullptr, false, t);
  s.Negotiated(nullptr, false, t);
  EXPECT_EQ(s.BlockBytes(), 512u);
  std::vector<uint8_t> b(512, 0xFF);
  s.Negotiated(b.data(), false, t);  // carried (no waits known: no step counted)
  EXPECT_EQ(s.steps(), 0u);
  EXPECT_EQ(s.BlockBytes(), 0u);
}

}  // namespace
}  // namespace hvd
