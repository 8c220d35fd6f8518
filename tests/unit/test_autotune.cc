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

#include "core/autotune.h"
#include "core/config.h"
#include "core/logging.h"

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
TuneParams Drive(Autotuner& root, Autotuner& follower, Score score, int* cycles_out) {
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
  EXPECT_EQ(line, "kind,fusion_threshold_bytes,cycle_time_ms,bytes_per_s");
  int samples = 0;
  std::string last;
  while (std::getline(f, line)) {
    if (line.rfind("sample,", 0) == 0) ++samples;
    last = line;
  }
  EXPECT_EQ(samples, static_cast<int>(2 * candidates));
  EXPECT_EQ(last, "best," + std::to_string(16ll << 20) + ",0.05,");
  std::remove(path.c_str());
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
