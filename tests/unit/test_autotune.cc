// The autotuner's search on rank 0, driven with synthetic windows whose
// throughput depends on the settings in force: it must find the best grid
// point, in the documented order, and write every sample to its CSV log.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/observability/autotune.h"
#include "core/config/config.h"
#include "core/observability/logging.h"

namespace hvd {
namespace {

using TClock = Autotuner::Clock;

Config TuneConfig(int rank, const std::string& log_path) {
  Config c;
  c.rank = rank;
  c.size = 2;
  c.autotune = true;
  c.autotune_log = log_path;
  c.autotune_warmup_samples = 2;
  c.autotune_steps_per_sample = 3;
  c.autotune_samples = 2;
  c.fusion_threshold = 128ll << 20;
  c.cycle_time_ms = 1.0;
  return c;
}

// Drives rank 0 (and a follower) until the tuner is done; the throughput of
// a window is a function of the settings in force.
template <typename Score>
TuneParams Drive(Autotuner& root, Autotuner& follower, Score score, int* cycles_out,
                 std::vector<int>* hier_seen = nullptr) {
  TuneParams in_force{128ll << 20, 1.0};
  TuneParams follower_params = in_force;
  TClock::time_point t = TClock::now();
  int cycles = 0;
  for (; cycles < 100000 && !(root.done() && root.Proposal() == Autotuner::kKeep); ++cycles) {
    // The negotiation: the MIN of the proposals (the follower always says 255).
    uint8_t decided = std::min(root.Proposal(), follower.Proposal());
    TuneParams p{}, q{};
    bool a = root.Apply(decided, &p);
    bool b = follower.Apply(decided, &q);
    EXPECT_EQ(a, b) << "both ranks switch in the same cycle";
    if (a) {
      in_force = p;
      follower_params = q;
      EXPECT_EQ(p.fusion_threshold, q.fusion_threshold);
      EXPECT_EQ(p.cycle_time_ms, q.cycle_time_ms);
      EXPECT_EQ(p.hierarchical, q.hierarchical);
      if (hier_seen != nullptr) hier_seen->push_back(p.hierarchical);
    }
    // One busy cycle: 1 MB in a time that depends on the settings.
    const double secs = 1e6 / score(in_force);
    auto end = t + std::chrono::duration_cast<TClock::duration>(std::chrono::duration<double>(secs));
    root.Observe(1000000, t, end);
    follower.Observe(1000000, t, end);  // ignored: not rank 0
    t = end;
  }
  *cycles_out = cycles;
  EXPECT_EQ(follower_params.fusion_threshold, in_force.fusion_threshold);
  return in_force;
}

TEST(Autotune, FindsTheBestThresholdThenTheBestCycleTime) {
  const std::string path = ::testing::TempDir() + "hvd_autotune.csv";
  Logger log(HVD_LOG_ERROR, nullptr, nullptr);
  Autotuner root(TuneConfig(0, path), &log);
  Autotuner follower(TuneConfig(1, ""), &log);
  ASSERT_TRUE(root.enabled());
  // Best at 16 MiB and 0.05 ms, separably (coordinate descent's premise).
  auto score = [](const TuneParams& p) {
    double s = 1e9;
    s -= std::abs(static_cast<double>(p.fusion_threshold - (16ll << 20))) / 1e3;
    s -= std::abs(p.cycle_time_ms - 0.05) * 1e7;
    return s;
  };
  int cycles = 0;
  TuneParams best = Drive(root, follower, score, &cycles);
  EXPECT_EQ(best.fusion_threshold, 16ll << 20);
  EXPECT_DOUBLE_EQ(best.cycle_time_ms, 0.05);
  // warm-up 2 windows, then per candidate 1 transition + 2 scored windows of 3 cycles.
  const size_t candidates = root.thresholds().size() + root.cycles().size();
  EXPECT_GE(cycles, static_cast<int>(3 * (2 + 3 * candidates)));
  EXPECT_LE(cycles, static_cast<int>(3 * (2 + 3 * candidates)) + 3 * static_cast<int>(candidates) + 3);

  std::ifstream f(path);
  ASSERT_TRUE(f.good());
  std::string line;
  std::getline(f, line);
  EXPECT_EQ(line, "kind,fusion_threshold_bytes,cycle_time_ms,bytes_per_s,hierarchical");
  int samples = 0;
  std::string last;
  while (std::getline(f, line)) {
    if (line.rfind("sample,", 0) == 0) ++samples;
    last = line;
  }
  EXPECT_EQ(samples, static_cast<int>(2 * candidates));
  EXPECT_EQ(last, "best," + std::to_string(16ll << 20) + ",0.05,,");
  std::remove(path.c_str());
}

// Where the transport chose hierarchical collectives, a third stage tries
// them on and off with the best threshold and cycle time: here off is
// better, and every switch reaches both ranks with the same setting.
TEST(Autotune, ThenHierarchicalOnAndOff) {
  const std::string path = ::testing::TempDir() + "hvd_autotune_hier.csv";
  Logger log(HVD_LOG_ERROR, nullptr, nullptr);
  Autotuner root(TuneConfig(0, path), &log);
  Autotuner follower(TuneConfig(1, ""), &log);
  root.TuneHierarchical();
  follower.TuneHierarchical();
  ASSERT_TRUE(root.tunes_hierarchical() && follower.tunes_hierarchical());
  auto score = [](const TuneParams& p) {
    double s = 1e9;
    s -= std::abs(static_cast<double>(p.fusion_threshold - (4ll << 20))) / 1e3;
    s -= std::abs(p.cycle_time_ms - 0.1) * 1e7;
    if (p.hierarchical == 1) s -= 1e6;  // the flat collectives win
    return s;
  };
  int cycles = 0;
  std::vector<int> seen;
  TuneParams best = Drive(root, follower, score, &cycles, &seen);
  EXPECT_EQ(best.fusion_threshold, 4ll << 20);
  EXPECT_DOUBLE_EQ(best.cycle_time_ms, 0.1);
  EXPECT_EQ(best.hierarchical, 0);
  // On (as configured) through the first two stages, then on, off, and off for good.
  ASSERT_GE(seen.size(), 3u);
  const size_t first_off = static_cast<size_t>(std::find(seen.begin(), seen.end(), 0) - seen.begin());
  ASSERT_LT(first_off, seen.size());
  for (size_t i = 0; i < first_off; ++i) EXPECT_EQ(seen[i], 1) << "switch " << i;
  EXPECT_EQ(seen.back(), 0);
  EXPECT_EQ(root.thresholds().size() + root.cycles().size() + 2, first_off + 1)
      << "off is the last stage's second candidate";

  std::ifstream f(path);
  std::string line, last;
  int samples = 0, off_samples = 0;
  while (std::getline(f, line)) {
    if (line.rfind("sample,", 0) == 0) {
      ++samples;
      if (line.size() >= 2 && line.compare(line.size() - 2, 2, ",0") == 0) ++off_samples;
    }
    last = line;
  }
  EXPECT_EQ(samples, static_cast<int>(2 * (root.thresholds().size() + root.cycles().size() + 2)));
  EXPECT_EQ(off_samples, 2);
  EXPECT_EQ(last, "best," + std::to_string(4ll << 20) + ",0.1,,0");
  std::remove(path.c_str());

  // Where hierarchical collectives win, they stay on.
  Autotuner root2(TuneConfig(0, ""), &log), follower2(TuneConfig(1, ""), &log);
  root2.TuneHierarchical();
  follower2.TuneHierarchical();
  auto prefer_on = [&](const TuneParams& p) { return score(p) + (p.hierarchical == 1 ? 2e6 : 0); };
  EXPECT_EQ(Drive(root2, follower2, prefer_on, &cycles).hierarchical, 1);
}

// Without TuneHierarchical the parameters say nothing about it.
TEST(Autotune, HierarchicalUntouchedUnlessTuned) {
  Logger log(HVD_LOG_ERROR, nullptr, nullptr);
  Autotuner a(TuneConfig(1, ""), &log);
  TuneParams p{};
  ASSERT_TRUE(a.Apply(0, &p));
  EXPECT_EQ(p.hierarchical, -1);
  EXPECT_FALSE(a.Apply(static_cast<uint8_t>(a.thresholds().size() * a.cycles().size()), &p))
      << "an index of the hierarchical stage is off this grid";
  a.TuneHierarchical();
  ASSERT_TRUE(a.Apply(static_cast<uint8_t>(a.thresholds().size() * a.cycles().size()), &p));
  EXPECT_EQ(p.hierarchical, 0);
  EXPECT_EQ(p.fusion_threshold, a.thresholds()[0]);
  ASSERT_TRUE(a.Apply(1, &p));
  EXPECT_EQ(p.hierarchical, 1);
}

TEST(Autotune, DisabledOrAloneProposesNothing) {
  Logger log(HVD_LOG_ERROR, nullptr, nullptr);
  Config off = TuneConfig(0, "");
  off.autotune = false;
  Autotuner a(off, &log);
  EXPECT_FALSE(a.enabled());
  EXPECT_EQ(a.Proposal(), Autotuner::kKeep);
  TuneParams p{};
  EXPECT_FALSE(a.Apply(3, &p));
  Config alone = TuneConfig(0, "");
  alone.size = 1;
  Autotuner b(alone, &log);
  EXPECT_FALSE(b.enabled());
}

TEST(Autotune, ConfiguredSettingsAreOnTheGridAndOutOfGridBytesAreIgnored) {
  Logger log(HVD_LOG_ERROR, nullptr, nullptr);
  Config c = TuneConfig(1, "");
  c.fusion_threshold = 3ll << 20;
  c.cycle_time_ms = 2.5;
  Autotuner a(c, &log);
  bool has_t = false, has_c = false;
  for (int64_t t : a.thresholds()) has_t |= t == (3ll << 20);
  for (double x : a.cycles()) has_c |= x == 2.5;
  EXPECT_TRUE(has_t);
  EXPECT_TRUE(has_c);
  TuneParams p{};
  EXPECT_FALSE(a.Apply(static_cast<uint8_t>(a.thresholds().size() * a.cycles().size()), &p));
  EXPECT_TRUE(a.Apply(0, &p));
  EXPECT_EQ(p.fusion_threshold, a.thresholds()[0]);
  EXPECT_EQ(p.cycle_time_ms, a.cycles()[0]);
}

}  // namespace
}  // namespace hvd
