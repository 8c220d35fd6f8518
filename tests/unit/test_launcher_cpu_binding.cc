// Tests of hvdrun's CPU binding plan (src/launcher/cpu_binding.h): which CPUs
// each local rank gets under --bind-to core and auto, on machine shapes this
// machine does not have (hyperthreads numbered either way, two packages, a
// taskset subset), the reading of the affinity mask and topology, and what
// hvdrun --bind-exec (a remote rank binding itself on its host) is given and
// decides.

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

using hvd::launcher::BindDecision;
using hvd::launcher::BindExecArgs;
using hvd::launcher::BindExecArgv;
using hvd::launcher::BindMode;
using hvd::launcher::DecideBinding;
using hvd::launcher::ParseBindExecArgs;
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

// --bind-exec's arguments: what BindExecArgv writes, ParseBindExecArgs reads
// back, whatever the words hold.
TEST(CpuBinding, BindExecArgsRoundTrip) {
  BindExecArgs a;
  a.mode = BindMode::kCore;
  a.local_rank = 2;
  a.local_size = 3;
  a.verbose = true;
  a.host = "node-7";
  a.who = "rank 5 (host node-7)";
  a.command = {"-dash-first", "a b", "it's", ""};
  std::vector<std::string> argv = BindExecArgv("/opt/hvd/bin/hvdrun", a);
  ASSERT_GE(argv.size(), 3u);
  EXPECT_EQ(argv[0], "/opt/hvd/bin/hvdrun");
  EXPECT_EQ(argv[1], "--bind-exec");
  BindExecArgs b;
  std::string err;
  ASSERT_TRUE(ParseBindExecArgs(std::vector<std::string>(argv.begin() + 2, argv.end()), &b, &err))
      << err;
  EXPECT_EQ(b.mode, BindMode::kCore);
  EXPECT_EQ(b.local_rank, 2);
  EXPECT_EQ(b.local_size, 3);
  EXPECT_TRUE(b.verbose);
  EXPECT_EQ(b.host, "node-7");
  EXPECT_EQ(b.who, "rank 5 (host node-7)");
  EXPECT_EQ(b.command, a.command);
}

TEST(CpuBinding, BindExecArgsRefused) {
  using V = std::vector<std::string>;
  BindExecArgs b;
  std::string err;
  const V good = {"auto", "0", "2", "0", "h", "rank 0 (host h)", "--", "true"};
  EXPECT_TRUE(ParseBindExecArgs(good, &b, &err)) << err;
  EXPECT_FALSE(b.verbose);
  auto with = [&](size_t i, const std::string& v) {
    V x = good;
    x[i] = v;
    return x;
  };
  for (const V& bad : {V{}, V(good.begin(), good.end() - 1),  // no command
                       with(0, "none"), with(0, "cores"), with(1, "2"), with(1, "-1"),
                       with(1, "x"), with(2, "0"), with(2, "2x"), with(3, "yes"),
                       with(6, "true")}) {
    err.clear();
    EXPECT_FALSE(ParseBindExecArgs(bad, &b, &err));
    EXPECT_FALSE(err.empty());
  }
}

// On the remote host: that host's CPUs shared among its ranks, as for local
// ranks; unbound (with a note from the first rank only) where they do not fit.
TEST(CpuBinding, DecideBinding) {
  BindExecArgs a;
  a.mode = BindMode::kAuto;
  a.local_size = 2;
  a.host = "h2";
  a.who = "rank 3 (host h2)";
  // A 4-CPU host with hyperthreads 0/2, 1/3: whole cores.
  auto ht = Machine(4, [](int i) { return i % 2; });
  a.local_rank = 0;
  EXPECT_EQ(DecideBinding(a, ht).cpus, (std::vector<int>{0, 2}));
  a.local_rank = 1;
  BindDecision d = DecideBinding(a, ht);
  EXPECT_EQ(d.cpus, (std::vector<int>{1, 3}));
  EXPECT_EQ(d.note, "");

  // Three ranks on a host whose mask holds two CPUs (5 and 9): auto binds none.
  auto two = std::vector<CpuInfo>{{5, 0, -1}, {9, 0, -1}};
  a.local_size = 3;
  a.local_rank = 0;
  d = DecideBinding(a, two);
  EXPECT_TRUE(d.cpus.empty());
  EXPECT_EQ(d.note, "--bind-to auto: 3 local rank(s) on host h2 do not fit its 2 usable CPU(s) "
                    "(5,9): not bound");
  a.local_rank = 2;
  d = DecideBinding(a, two);
  EXPECT_TRUE(d.cpus.empty());
  EXPECT_EQ(d.note, "");  // said once a host, by its first rank
  // core: round robin instead.
  a.mode = BindMode::kCore;
  EXPECT_EQ(DecideBinding(a, two).cpus, (std::vector<int>{5}));
  a.local_rank = 1;
  EXPECT_EQ(DecideBinding(a, two).cpus, (std::vector<int>{9}));

  // No mask to read: unbound, said.
  d = DecideBinding(a, {});
  EXPECT_TRUE(d.cpus.empty());
  EXPECT_EQ(d.note, "--bind-to core: rank 3 (host h2): the usable CPUs of host h2 cannot be read: "
                    "not bound");
}

}  // namespace
