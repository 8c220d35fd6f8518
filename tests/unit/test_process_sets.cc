// Process sets with ranks as threads (the whole engine: C API -> core ->
// Gloo): the shared checks of tests/common/process_set_checks.h at 1-8
// ranks, over shared memory and over TCP; destroying a set with operations
// pending; a parent destroyed before its sets; a rank that shuts down while
// the others run a set without it; 1,000 create/destroy cycles
// that must leak nothing (fds, threads, memory).
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <string>
#include <tuple>
#include <vector>

#include "process_set_checks.h"
#include "scoped_env.h"
#include "thread_ranks.h"

namespace {

using hvd::test::RunRanks;
using hvd::test::ScopedEnv;

// Failures from every rank thread, checked on the test's thread.
class Failures {
 public:
  hvd::test::Report For(int rank) {
    return [this, rank](bool ok, const std::string& what) {
      std::lock_guard<std::mutex> lock(mu_);
      ++checks_;
      if (!ok && failures_.size() < 40) failures_.push_back("rank " + std::to_string(rank) + ": " + what);
    };
  }
  void Expect(int min_checks) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& f : failures_) ADD_FAILURE() << f;
    EXPECT_GE(checks_, min_checks);
  }

 private:
  std::mutex mu_;
  std::vector<std::string> failures_;
  int checks_ = 0;
};

class ProcessSetMatrix : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(ProcessSetMatrix, OverlappingAndDisjointSetsEveryCollective) {
  const int n = std::get<0>(GetParam());
  ScopedEnv shm("HVD_SHM", std::get<1>(GetParam()) ? "1" : "0");
  Failures f;
  RunRanks(n, [&](hvd_context_t ctx, int rank) { hvd::test::ProcessSetChecks(ctx, rank, n, f.For(rank)); });
  f.Expect(n * 100);
}

INSTANTIATE_TEST_SUITE_P(Ranks, ProcessSetMatrix,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 8), ::testing::Bool()),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks_" +
                                  (std::get<1>(info.param) ? "shm" : "tcp");
                         });

hvd_status_t One(hvd_context_t ctx, const char* name, hvd_handle_t* h, int32_t* buf) {
  static const int64_t shape[1] = {1};
  hvd_tensor_t t = {buf, HVD_INT32, 1, shape, HVD_DEVICE_CPU, nullptr};
  return hvd_allreduce_async(ctx, name, &t, buf, HVD_SUM, 1.0, 1.0, h);
}

TEST(ProcessSets, DestroyingASetAbortsItsPendingOperations) {
  RunRanks(3, [&](hvd_context_t ctx, int rank) {
    const int32_t ranks[] = {0, 1};
    hvd_context_t set = nullptr;
    ASSERT_EQ(hvd_process_set_create(ctx, 2, ranks, &set), HVD_OK) << hvd_last_error();
    if (set != nullptr) {
      // Only rank 0 submits: it can never complete.
      int32_t v = 1;
      hvd_handle_t h = nullptr;
      if (rank == 0) {
        ASSERT_EQ(One(set, "lonely", &h, &v), HVD_OK);
      }
      EXPECT_EQ(hvd_context_destroy(set), HVD_OK) << hvd_last_error();
      if (h != nullptr) {
        EXPECT_EQ(hvd_handle_wait(h, 10), HVD_ERR_ABORTED);
        EXPECT_NE(std::strstr(hvd_last_error(), "process set was destroyed"), nullptr)
            << hvd_last_error();
        hvd_handle_release(h);
      }
    }
    // The slot is free again, and the parent works.
    hvd_context_t again = nullptr;
    ASSERT_EQ(hvd_process_set_create(ctx, 2, ranks, &again), HVD_OK) << hvd_last_error();
    for (hvd_context_t c : {again, ctx}) {
      if (c == nullptr) continue;
      int32_t v = rank;
      hvd_handle_t h = nullptr;
      ASSERT_EQ(One(c, "after", &h, &v), HVD_OK);
      EXPECT_EQ(hvd_handle_wait(h, 30), HVD_OK) << hvd_last_error();
      hvd_handle_release(h);
      EXPECT_EQ(v, c == again ? 1 : 3);
    }
    if (again != nullptr) {
      EXPECT_EQ(hvd_context_destroy(again), HVD_OK);
    }
  });
}

// Shutting down is not a failure: rank 2 destroys its context at once (on
// returning: RunRanks destroys it); ranks 0 and 1, once it is inside its
// destroy, go on in their set (exact sums) and fail the context's own
// collective naming rank 2.
TEST(ProcessSets, ARankThatShutsDownLetsSetsWithoutItFinish) {
  std::atomic<bool> leaving{false};
  RunRanks(3, [&](hvd_context_t ctx, int rank) {
    const int32_t ranks[] = {0, 1};
    hvd_context_t set = nullptr;
    ASSERT_EQ(hvd_process_set_create(ctx, 2, ranks, &set), HVD_OK) << hvd_last_error();
    if (rank == 2) {
      leaving = true;
      return;
    }
    while (!leaving) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    for (int step = 0; step < 30; ++step) {
      int32_t v = rank + 1 + step;
      hvd_handle_t h = nullptr;
      const std::string name = "s" + std::to_string(step);
      ASSERT_EQ(One(set, name.c_str(), &h, &v), HVD_OK) << hvd_last_error();
      ASSERT_EQ(hvd_handle_wait(h, 30), HVD_OK) << hvd_last_error();
      hvd_handle_release(h);
      EXPECT_EQ(v, 3 + 2 * step);
    }
    int32_t v = 1;
    hvd_handle_t h = nullptr;
    hvd_status_t s = One(ctx, "whole", &h, &v);
    if (s == HVD_OK) s = hvd_handle_wait(h, 30);
    const std::string why = hvd_last_error();
    if (h != nullptr) hvd_handle_release(h);
    EXPECT_EQ(s, HVD_ERR_ABORTED) << why;
    EXPECT_NE(why.find("rank 2 "), std::string::npos) << why;
    EXPECT_NE(why.find("shut down its context"), std::string::npos) << why;
    EXPECT_EQ(hvd_context_destroy(set), HVD_OK) << hvd_last_error();
  });
}

// The parent destroyed while a set lives: the set's pending operation
// fails, later ones fail at once, and destroying the set afterwards only
// frees it.
TEST(ProcessSets, SetOutlivesItsParent) {
  hvd::test::OobGroup group(2);
  std::vector<std::pair<hvd::test::OobGroup*, int>> users{{&group, 0}, {&group, 1}};
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      hvd_params_t p = HVD_PARAMS_INIT;
      p.rank = r;
      p.size = 2;
      p.transport = "gloo";
      p.oob_allgather = &hvd::test::OobGroup::Allgather;
      p.oob_user = &users[r];
      p.start_timeout_s = 30;
      p.mask = HVD_PARAM_RANK | HVD_PARAM_SIZE | HVD_PARAM_TRANSPORT | HVD_PARAM_OOB |
               HVD_PARAM_START_TIMEOUT;
      hvd_context_t ctx = nullptr;
      ASSERT_EQ(hvd_context_create(&p, &ctx), HVD_OK) << hvd_last_error();
      hvd_context_t set = nullptr;
      ASSERT_EQ(hvd_context_split(ctx, 0, -r, &set), HVD_OK) << hvd_last_error();
      int rank_in_set = -1;
      hvd_context_rank(set, &rank_in_set);
      EXPECT_EQ(rank_in_set, 1 - r);
      int32_t v = 1;
      hvd_handle_t pending = nullptr;
      if (r == 0) {
        ASSERT_EQ(One(set, "never", &pending, &v), HVD_OK);
      }
      EXPECT_EQ(hvd_context_destroy(ctx), HVD_OK);
      if (pending != nullptr) {
        EXPECT_EQ(hvd_handle_wait(pending, 10), HVD_ERR_ABORTED);
        // Both ranks shut down at once: the error names this rank's parent
        // stopping, or the other rank's shutdown if the cycle learnt it first.
        const char* why = hvd_last_error();
        EXPECT_TRUE(std::strstr(why, "parent context stopped") != nullptr ||
                    (std::strstr(why, "rank 1 (host ") != nullptr &&
                     std::strstr(why, "shut down its context") != nullptr))
            << why;
        hvd_handle_release(pending);
      }
      hvd_handle_t later = nullptr;
      EXPECT_EQ(One(set, "later", &later, &v), HVD_ERR_ABORTED);
      int size = 0;
      EXPECT_EQ(hvd_context_size(set, &size), HVD_OK);
      EXPECT_EQ(size, 2);
      EXPECT_EQ(hvd_context_destroy(set), HVD_OK) << hvd_last_error();
    });
  }
  for (auto& t : threads) t.join();
}

// A busy set does not starve another: while set A runs one operation after
// another without pause, an operation of set B (the same ranks) completes
// long before A's stream ends (every cycle serves every busy set).
TEST(ProcessSets, ABusySetDoesNotStarveAnother) {
  RunRanks(2, [&](hvd_context_t ctx, int rank) {
    const int32_t both[] = {0, 1};
    hvd_context_t a = nullptr, b = nullptr;
    ASSERT_EQ(hvd_process_set_create(ctx, 2, both, &a), HVD_OK) << hvd_last_error();
    ASSERT_EQ(hvd_process_set_create(ctx, 2, both, &b), HVD_OK) << hvd_last_error();
    std::atomic<int> a_done{0};
    std::thread busy([&] {
      std::vector<float> buf(1 << 18, 1.0f);  // 1 MiB per operation
      const int64_t shape[1] = {1 << 18};
      for (int i = 0; i < 400; ++i) {  // the same 400 on both ranks
        hvd_tensor_t t = {buf.data(), HVD_FLOAT32, 1, shape, HVD_DEVICE_CPU, nullptr};
        const std::string name = "a." + std::to_string(i);
        hvd_handle_t h = nullptr;
        if (hvd_allreduce_async(a, name.c_str(), &t, buf.data(), HVD_SUM, 1, 1, &h) != HVD_OK) break;
        hvd_handle_wait(h, 60);
        hvd_handle_release(h);
        ++a_done;
      }
    });
    // Let A's stream get going, then run B.
    while (a_done.load() < 5) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    int32_t v = rank + 1;
    hvd_handle_t h = nullptr;
    ASSERT_EQ(One(b, "b", &h, &v), HVD_OK);
    EXPECT_EQ(hvd_handle_wait(h, 60), HVD_OK) << hvd_last_error();
    hvd_handle_release(h);
    const int when = a_done.load();
    EXPECT_EQ(v, 3);
    EXPECT_LT(when, 100) << "set B's operation waited for " << when << " of set A's";
    busy.join();
    EXPECT_EQ(a_done.load(), 400);
    EXPECT_EQ(hvd_context_destroy(b), HVD_OK);
    EXPECT_EQ(hvd_context_destroy(a), HVD_OK);
  });
}

// The same name in the context and in two sets: rank 0's timeline shows
// three rows, the sets' labelled with their ranks.
TEST(ProcessSets, TimelineRowsOfSetsAreLabelled) {
  char dir[] = "/tmp/hvd-ps-timeline.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/timeline.json";
  RunRanks(3, [&](hvd_context_t ctx, int rank) {
    ASSERT_EQ(hvd_timeline_start(ctx, path.c_str(), 0), HVD_OK) << hvd_last_error();
    const int32_t first[] = {0, 1}, other[] = {0, 2};
    hvd_context_t a = nullptr, b = nullptr;
    ASSERT_EQ(hvd_process_set_create(ctx, 2, first, &a), HVD_OK) << hvd_last_error();
    ASSERT_EQ(hvd_process_set_create(ctx, 2, other, &b), HVD_OK) << hvd_last_error();
    for (hvd_context_t c : {ctx, a, b}) {
      if (c == nullptr) continue;
      int32_t v = rank + 1;
      hvd_handle_t h = nullptr;
      ASSERT_EQ(One(c, "grad", &h, &v), HVD_OK) << hvd_last_error();
      ASSERT_EQ(hvd_handle_wait(h, 60), HVD_OK) << hvd_last_error();
      hvd_handle_release(h);
    }
    ASSERT_EQ(hvd_timeline_stop(ctx), HVD_OK) << hvd_last_error();
    if (a != nullptr) EXPECT_EQ(hvd_context_destroy(a), HVD_OK);
    if (b != nullptr) EXPECT_EQ(hvd_context_destroy(b), HVD_OK);
  });
  std::string text;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
    std::fclose(f);
  }
  EXPECT_NE(text.find("\"args\":{\"name\":\"grad\"}"), std::string::npos) << text;
  EXPECT_NE(text.find("\"args\":{\"name\":\"set [0, 1]: grad\"}"), std::string::npos) << text;
  EXPECT_NE(text.find("\"args\":{\"name\":\"set [0, 2]: grad\"}"), std::string::npos) << text;
  std::remove(path.c_str());
  rmdir(dir);
}

int CountEntries(const char* dir) {
  int n = 0;
  if (DIR* d = opendir(dir)) {
    while (readdir(d) != nullptr) ++n;
    closedir(d);
  }
  return n;
}

long ResidentKiB() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

// 1,000 cycles of create, one allreduce, destroy (split and list, over
// shared memory): the fds, threads and resident memory after them are those
// after a warm-up.
TEST(ProcessSets, ThousandCreateDestroyCyclesLeakNothing) {
  constexpr int kWarmup = 50, kCycles = 1000;
  struct Sample {
    int fds = 0, threads = 0;
    long rss_kib = 0;
  };
  Sample before, after;
  std::mutex mu;
  std::atomic<int> at_mark{0};
  RunRanks(2, [&](hvd_context_t ctx, int rank) {
    auto cycle = [&](int i) {
      hvd_context_t set = nullptr;
      hvd_status_t s;
      if (i % 2 == 0) {
        s = hvd_context_split(ctx, 0, i % 3 == 0 ? rank : -rank, &set);
      } else {
        const int32_t ranks[] = {0, 1};
        s = hvd_process_set_create(ctx, 2, ranks, &set);
      }
      if (s != HVD_OK || set == nullptr) return s;
      int32_t v = rank + i;
      hvd_handle_t h = nullptr;
      s = One(set, "cycle", &h, &v);
      if (s == HVD_OK) s = hvd_handle_wait(h, 30);
      if (h != nullptr) hvd_handle_release(h);
      if (s == HVD_OK && v != 2 * i + 1) s = HVD_ERR_INTERNAL;
      const hvd_status_t d = hvd_context_destroy(set);
      return s != HVD_OK ? s : d;
    };
    auto sync = [&](Sample* sample) {
      // Both ranks stop between cycles; rank 0 samples, then both go on.
      ASSERT_EQ(hvd_barrier(ctx), HVD_OK);
      if (rank == 0) {
        std::lock_guard<std::mutex> lock(mu);
        sample->fds = CountEntries("/proc/self/fd");
        sample->threads = CountEntries("/proc/self/task");
        sample->rss_kib = ResidentKiB();
      }
      ASSERT_EQ(hvd_barrier(ctx), HVD_OK);
    };
    for (int i = 0; i < kWarmup; ++i) {
      ASSERT_EQ(cycle(i), HVD_OK) << "cycle " << i << ": " << hvd_last_error();
    }
    sync(&before);
    for (int i = 0; i < kCycles; ++i) {
      ASSERT_EQ(cycle(i), HVD_OK) << "cycle " << i << ": " << hvd_last_error();
    }
    sync(&after);
    ++at_mark;
  });
  EXPECT_EQ(at_mark.load(), 2);
  EXPECT_EQ(after.fds, before.fds) << "file descriptors";
  EXPECT_EQ(after.threads, before.threads) << "threads";
  // Memory: allocator noise only (each cycle maps and unmaps a segment and
  // makes a controller; a leak of either would be megabytes).
  EXPECT_LT(after.rss_kib - before.rss_kib, 4096) << before.rss_kib << " KiB -> " << after.rss_kib << " KiB";
}

}  // namespace
