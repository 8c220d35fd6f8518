// Stragglers from every rank's wait: the wait's two-byte code, who was last
// and what it cost, the block's schedule (only after a step), and the
// warning once an interval names a rank late in most steps; a process set's
// steps, with every rank of the job sizing the negotiation alike.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/observability/set_stragglers.h"
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

// Every code a rank can send: exact below 1024 ns, within 2^-11 above,
// and ordered as the waits (Step compares codes, not waits).
TEST(Stragglers, CodesOrderAsWaitsAndStayWithin2ToTheMinus11) {
  uint64_t last_ns = 0;
  for (uint32_t c = 0; c < 0xFFFF; ++c) {
    const uint16_t code = static_cast<uint16_t>(c);
    const uint64_t ns = Stragglers::DecodeNanos(code);
    if (c > 0) {
      EXPECT_GT(ns, last_ns) << c;
    }
    last_ns = ns;
    if (ns > (uint64_t{1} << 62)) break;  // beyond any wait (146 years)
    EXPECT_EQ(Stragglers::EncodeNanos(ns), code) << c;
  }
  for (uint64_t ns = 1; ns < (uint64_t{1} << 62); ns = ns * 3 + 7) {
    const uint16_t code = Stragglers::EncodeNanos(ns);
    ASSERT_NE(code, 0xFFFF) << ns;
    const double back = static_cast<double>(Stragglers::DecodeNanos(code));
    EXPECT_LE(std::abs(back - static_cast<double>(ns)), static_cast<double>(ns) / 2048 + 0.5) << ns;
    EXPECT_LE(Stragglers::EncodeNanos(ns - 1), code) << ns;
    EXPECT_GE(Stragglers::EncodeNanos(ns + 1), code) << ns;
  }
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

// Four ranks, a set of ranks 1, 2 and 3 in slot 0; rank 2 submits 30 ms
// after the set's other members in each of its steps; rank 0 is outside.
TEST(SetStragglers, TheSetsBlockFollowsItsPendingStepsAndNamesItsLastMember) {
  constexpr int kRanks = 4;
  std::vector<std::string> lines;
  Logger log(HVD_LOG_WARNING, Collect, &lines);
  Stragglers::Settings set;
  set.warning_s = 0.5;
  SetStragglers ss[kRanks];
  std::vector<std::shared_ptr<Scope>> sets[kRanks];
  for (int r = 0; r < kRanks; ++r) {
    ss[r].Configure(r, kRanks, set, &log, [](int q) { return "h" + std::to_string(q); });
    std::shared_ptr<Scope> scope;
    if (r > 0) {
      scope = std::make_shared<Scope>();
      scope->members = {1, 2, 3};
      scope->label = "set [1, 2, 3]";
      scope->rank = r - 1;
      scope->size = 3;
      ss[r].Prepare(*scope);
    }
    sets[r].push_back(scope);
  }
  Clock::time_point t{};
  t += std::chrono::seconds(10);
  // One negotiation: every rank's blocks MIN-reduced, as the allreduce does.
  auto negotiate = [&](bool pending) {
    const size_t bytes = ss[0].BlockBytes();
    std::vector<uint8_t> all(bytes, 0xFF);
    for (int r = 0; r < kRanks; ++r) {
      EXPECT_EQ(ss[r].BlockBytes(), bytes) << "rank " << r << " sizes it otherwise";
      std::vector<uint8_t> mine(bytes, 0xFF);
      ss[r].Contribute(mine.data(), sets[r]);
      for (size_t i = 0; i < bytes; ++i) all[i] = std::min(all[i], mine[i]);
    }
    for (int r = 0; r < kRanks; ++r) {
      ss[r].Pending(0, pending ? 1 : 0);
      ss[r].Concluded(all.data(), sets[r], 1, t);
    }
    return bytes;
  };
  EXPECT_EQ(negotiate(false), 0u);  // nothing pending: no block
  for (int i = 0; i < 40; ++i) {
    t += std::chrono::milliseconds(40);
    negotiate(true);  // the step: the members run the set's operations
    for (int r = 1; r < kRanks; ++r) {
      Stragglers& s = sets[r][0]->stragglers;
      s.Begin(t);
      s.Saw(t - (r == 2 ? std::chrono::microseconds(100) : std::chrono::microseconds(30100)));
    }
  }
  EXPECT_EQ(negotiate(false), 8u);  // the last step's block, then none
  EXPECT_EQ(negotiate(false), 0u);
  for (int r = 1; r < kRanks; ++r) {
    const Stragglers& s = sets[r][0]->stragglers;
    EXPECT_EQ(s.steps(), 40u) << r;
    EXPECT_EQ(s.rank(2).last.Get(), 40u) << r;
    EXPECT_NEAR(static_cast<double>(s.rank(2).cost_nanos.Get()) * 1e-9, 40 * 0.030, 40 * 0.0003);
    EXPECT_GT(s.rank(2).warnings.Get(), 0u);
  }
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines.front().find("straggler in process set [1, 2, 3]: rank 2 (host h2)"),
            std::string::npos)
      << lines.front();
  // Only the set's first member speaks.
  EXPECT_EQ(lines.size(), static_cast<size_t>(sets[1][0]->stragglers.rank(2).warnings.Get()));
}

// HVD_METRICS=0: the block keeps its schedule (ranks may differ in the
// setting) but carries no wait, and no step is analysed.
TEST(Stragglers, OffSendsNoWaitButKeepsTheSchedule) {
  Stragglers s;
  Stragglers::Settings off;
  off.record = false;
  s.Configure(0, 2, off, nullptr, nullptr);
  Clock::time_point t{};
  s.Begin(t);
  s.Saw(t - std::chrono::milliseconds(5));
  s.Negotiated(nullptr, true, t);
  ASSERT_EQ(s.BlockBytes(), 4u);
  std::vector<uint8_t> b(4, 0xFF);
  s.Contribute(b.data());
  EXPECT_EQ(b, std::vector<uint8_t>(4, 0xFF));
  const std::vector<uint8_t> full = Block({0.005, 0.001});
  s.Negotiated(full.data(), false, t);
  EXPECT_EQ(s.steps(), 0u);
}

}  // namespace
}  // namespace hvd
