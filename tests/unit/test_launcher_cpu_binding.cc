// Tests of hvdrun's CPU binding plan (src/launcher/cpu_binding.h): which CPUs
// each local rank gets under --bind-to core and auto, on machine shapes this
// machine does not have (hyperthreads numbered either way, two packages, a
// taskset subset), and the reading of the affinity mask and topology.

#include "launcher/cpu_binding.h"

#include <sched.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

using hvd::launcher::BindMode;
using hvd::launcher::CpuBlocks;
using hvd::launcher::CpuInfo;
using hvd::launcher::FormatCpuList;
using hvd::launcher::ParseBindMode;
using hvd::launcher::PickBlock;
using hvd::launcher::UsableCpus;
using Blocks = std::vector<std::vector<int>>;

// n CPUs, CPU i on core core_of(i) of package 0.
template <typename F>
std::vector<CpuInfo> Machine(int n, F core_of) {
  std::vector<CpuInfo> v;
  for (int i = 0; i < n; ++i) v.push_back({i, 0, core_of(i)});
  return v;
}

std::vector<CpuInfo> NoSmt(int n) {
  return Machine(n, [](int i) { return i; });
}

TEST(CpuBinding, ParseBindMode) {
  BindMode m = BindMode::kNone;
  EXPECT_TRUE(ParseBindMode("auto", &m));
  EXPECT_EQ(m, BindMode::kAuto);
  EXPECT_TRUE(ParseBindMode("core", &m));
  EXPECT_EQ(m, BindMode::kCore);
  EXPECT_TRUE(ParseBindMode("none", &m));
  EXPECT_EQ(m, BindMode::kNone);
  for (const char* bad : {"", "Auto", "cores", "socket", "core "}) {
    EXPECT_FALSE(ParseBindMode(bad, &m)) << bad;
  }
}

TEST(CpuBinding, TwoCpusNoSmt) {
  auto m = NoSmt(2);
  EXPECT_EQ(CpuBlocks(BindMode::kAuto, m, 1), (Blocks{{0, 1}}));
  EXPECT_EQ(CpuBlocks(BindMode::kAuto, m, 2), (Blocks{{0}, {1}}));
  EXPECT_EQ(CpuBlocks(BindMode::kAuto, m, 3), Blocks{});  // more ranks than CPUs
  EXPECT_EQ(CpuBlocks(BindMode::kCore, m, 1), (Blocks{{0}}));
  EXPECT_EQ(CpuBlocks(BindMode::kCore, m, 2), (Blocks{{0}, {1}}));
  EXPECT_EQ(CpuBlocks(BindMode::kCore, m, 3), (Blocks{{0}, {1}, {0}}));  // round robin
  EXPECT_EQ(CpuBlocks(BindMode::kNone, m, 2), Blocks{});
  EXPECT_EQ(CpuBlocks(BindMode::kAuto, m, 0), Blocks{});
  EXPECT_EQ(CpuBlocks(BindMode::kAuto, {}, 2), Blocks{});
  EXPECT_EQ(CpuBlocks(BindMode::kCore, {}, 2), Blocks{});
}

TEST(CpuBinding, FloorShares) {
  auto m = NoSmt(8);
  EXPECT_EQ(CpuBlocks(BindMode::kAuto, m, 2), (Blocks{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  // floor(8/3) = 2 each; CPUs 6-7 stay free.
  EXPECT_EQ(CpuBlocks(BindMode::kAuto, m, 3), (Blocks{{0, 1}, {2, 3}, {4, 5}}));
  EXPECT_EQ(CpuBlocks(BindMode::kAuto, m, 8).size(), 8u);
  EXPECT_EQ(CpuBlocks(BindMode::kAuto, m, 9), Blocks{});
}

// 4 cores with 2 hyperthreads each, siblings numbered 4 apart (0 and 4 share
// core 0), as Linux numbers most Intel machines.
TEST(CpuBinding, HyperthreadsApart) {
  auto m = Machine(8, [](int i) { return i % 4; });
  // Whole cores, siblings included: no core is split between two ranks.
  EXPECT_EQ(CpuBlocks(BindMode::kAuto, m, 1), (Blocks{{0, 1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_EQ(CpuBlocks(BindMode::kAuto, m, 2), (Blocks{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  EXPECT_EQ(CpuBlocks(BindMode::kAuto, m, 3), (Blocks{{0, 4}, {1, 5}, {2, 6}}));
  EXPECT_EQ(CpuBlocks(BindMode::kAuto, m, 4), (Blocks{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  // More ranks than cores: distinct cores first, then the siblings.
  EXPECT_EQ(CpuBlocks(BindMode::kAuto, m, 6), (Blocks{{0}, {1}, {2}, {3}, {4}, {5}}));
  EXPECT_EQ(CpuBlocks(BindMode::kAuto, m, 8).size(), 8u);
  EXPECT_EQ(CpuBlocks(BindMode::kCore, m, 4), (Blocks{{0}, {1}, {2}, {3}}));
  EXPECT_EQ(CpuBlocks(BindMode::kCore, m, 5), (Blocks{{0}, {1}, {2}, {3}, {4}}));
  EXPECT_EQ(CpuBlocks(BindMode::kCore, m, 10).back(), (std::vector<int>{1}));
}

// The same shape with siblings numbered next to each other (0 and 1 share
// core 0), as on many AMD machines.
TEST(CpuBinding, HyperthreadsAdjacent) {
  auto m = Machine(8, [](int i) { return i / 2; });
  EXPECT_EQ(CpuBlocks(BindMode::kAuto, m, 2), (Blocks{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(CpuBlocks(BindMode::kAuto, m, 4), (Blocks{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(CpuBlocks(BindMode::kAuto, m, 5), (Blocks{{0}, {2}, {4}, {6}, {1}}));
  EXPECT_EQ(CpuBlocks(BindMode::kCore, m, 4), (Blocks{{0}, {2}, {4}, {6}}));
  EXPECT_EQ(CpuBlocks(BindMode::kCore, m, 6), (Blocks{{0}, {2}, {4}, {6}, {1}, {3}}));
}

// 6 cores x 2: four ranks get one whole core each (floor(6/4)), not three
// CPUs that would split a core between two ranks.
TEST(CpuBinding, WholeCoresWhenRanksFitTheCores) {
  auto m = Machine(12, [](int i) { return i % 6; });
  EXPECT_EQ(CpuBlocks(BindMode::kAuto, m, 4), (Blocks{{0, 6}, {1, 7}, {2, 8}, {3, 9}}));
}

TEST(CpuBinding, TwoPackagesWithTheSameCoreIds) {
  std::vector<CpuInfo> m = {{0, 0, 0}, {1, 0, 1}, {2, 1, 0}, {3, 1, 1}};
  EXPECT_EQ(CpuBlocks(BindMode::kAuto, m, 2), (Blocks{{0, 1}, {2, 3}}));
  EXPECT_EQ(CpuBlocks(BindMode::kAuto, m, 4), (Blocks{{0}, {1}, {2}, {3}}));
}

// hvdrun under taskset: only the CPUs of its mask, whatever their numbers.
TEST(CpuBinding, AffinitySubset) {
  std::vector<CpuInfo> m = {{2, 0, 2}, {3, 0, 3}};
  EXPECT_EQ(CpuBlocks(BindMode::kAuto, m, 2), (Blocks{{2}, {3}}));
  EXPECT_EQ(CpuBlocks(BindMode::kAuto, {{0, 0, 0}}, 2), Blocks{});
  EXPECT_EQ(CpuBlocks(BindMode::kCore, {{0, 0, 0}}, 2), (Blocks{{0}, {0}}));
  // A core whose sibling is outside the mask.
  std::vector<CpuInfo> part = {{0, 0, 0}, {1, 0, 1}, {4, 0, 0}};
  EXPECT_EQ(CpuBlocks(BindMode::kAuto, part, 2), (Blocks{{0, 4}, {1}}));
  EXPECT_EQ(CpuBlocks(BindMode::kAuto, part, 3), (Blocks{{0}, {1}, {4}}));
  // Unsorted input gives the same plan.
  std::vector<CpuInfo> rev = {{4, 0, 0}, {1, 0, 1}, {0, 0, 0}};
  EXPECT_EQ(CpuBlocks(BindMode::kAuto, rev, 2), (Blocks{{0, 4}, {1}}));
}

TEST(CpuBinding, NoTopology) {
  std::vector<CpuInfo> m = {{0, -1, -1}, {1, -1, -1}, {2, -1, -1}};
  EXPECT_EQ(CpuBlocks(BindMode::kAuto, m, 3), (Blocks{{0}, {1}, {2}}));
  EXPECT_EQ(CpuBlocks(BindMode::kAuto, m, 2), (Blocks{{0}, {1}}));
}

TEST(CpuBinding, PickBlock) {
  Blocks two = {{0}, {1}};
  EXPECT_EQ(PickBlock(two, {}, true), (std::vector<int>{0}));
  EXPECT_EQ(PickBlock(two, {{0}}, true), (std::vector<int>{1}));
  EXPECT_EQ(PickBlock(two, {{1}}, true), (std::vector<int>{0}));
  EXPECT_EQ(PickBlock(two, {{0}, {1}}, true), std::vector<int>{});
  EXPECT_EQ(PickBlock(two, {{0}, {1}}, false), (std::vector<int>{0}));
  EXPECT_EQ(PickBlock(two, {{0}, {1}, {0}}, false), (std::vector<int>{1}));
  // A worker holding a larger share from a smaller plan blocks both halves.
  EXPECT_EQ(PickBlock(two, {{0, 1}}, true), std::vector<int>{});
  EXPECT_EQ(PickBlock({{0, 1}, {2, 3}}, {{1}}, true), (std::vector<int>{2, 3}));
  EXPECT_EQ(PickBlock({}, {}, false), std::vector<int>{});
}

TEST(CpuBinding, FormatCpuList) {
  EXPECT_EQ(FormatCpuList({}), "");
  EXPECT_EQ(FormatCpuList({5}), "5");
  EXPECT_EQ(FormatCpuList({3, 0, 1, 2, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(FormatCpuList({1, 1, 2}), "1-2");
  EXPECT_EQ(FormatCpuList({0, 2, 4}), "0,2,4");
}

// The real affinity mask, with the topology from a sysfs tree of our own.
TEST(CpuBinding, UsableCpusReadsMaskAndTopology) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  std::vector<int> want;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) want.push_back(c);
  }
  ASSERT_FALSE(want.empty());

  char tmpl[] = "/tmp/hvd_cpu_test.XXXXXX";  // mkdtemp's template
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string root = tmpl;
  // Removed however the test ends (a failed ASSERT returns early).
  struct RemoveAll {
    std::string path;
    ~RemoveAll() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } cleanup{root};
  for (int c : want) {
    const std::string dir = root + "/cpu" + std::to_string(c) + "/topology";
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/physical_package_id") << "1\n";
    std::ofstream(dir + "/core_id") << (c == want.front() ? "oops\n" : "7\n");
  }
  auto got = UsableCpus(root);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].cpu, want[i]);
    EXPECT_EQ(got[i].package, 1);
    EXPECT_EQ(got[i].core, i == 0 ? -1 : 7);  // malformed: unknown
  }
  // No topology at all: every CPU its own core.
  auto bare = UsableCpus(root + "/missing");
  ASSERT_EQ(bare.size(), want.size());
  for (const auto& c : bare) EXPECT_EQ(c.core, -1);

  // The real machine: the same CPUs as the mask.
  auto real = UsableCpus();
  ASSERT_EQ(real.size(), want.size());
  for (size_t i = 0; i < real.size(); ++i) EXPECT_EQ(real[i].cpu, want[i]);
}

}  // namespace
