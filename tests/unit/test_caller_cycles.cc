// Cycles on waiting callers' threads: a caller that blocks on a handle while
// the background thread is idle runs the negotiation and the collective
// itself. These tests check that it happens (the context counts such
// cycles), that HVD_CALLER_CYCLES=0 turns it off, and that results stay
// exact when user threads and the loop hand the cycle back and forth: many
// threads per rank waiting at once, handles waited by other threads than
// their submitters, polls that never wait, and shutdown with a wait pending.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/context.h"
#include "core/request.h"
#include "scoped_env.h"
#include "thread_ranks.h"

namespace hvd {
namespace {

using test::OobGroup;
using test::ScopedEnv;

// Runs fn(ctx, rank) on n thread-ranks, each with its own hvd::Context.
void RunContexts(int n, const std::function<void(Context&, int)>& fn,
                 const char* transport = "gloo") {
  OobGroup group(n);
  std::vector<std::pair<OobGroup*, int>> users;
  for (int r = 0; r < n; ++r) users.emplace_back(&group, r);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      const hvd_params_t p = test::ThreadRankParams(r, n, transport, &users[r]);
      auto ctx = Context::Create(&p);
      ASSERT_TRUE(ctx.ok()) << "rank " << r << ": " << ctx.status().message();
      fn(**ctx, r);
      EXPECT_TRUE((*ctx)->Shutdown().ok());
    });
  }
  for (auto& t : threads) t.join();
}

// An in-place int64 SUM allreduce of `v` named `name`.
Result<std::shared_ptr<Handle>> Allreduce(Context& ctx, const std::string& name, int64_t* v,
                                          int64_t count) {
  OpRequest req;
  req.type = OpType::kAllreduce;
  req.reduce_op = HVD_SUM;
  TensorSpec t;
  t.name = name;
  t.dtype = HVD_INT64;
  t.shape = {count};
  t.input = v;
  t.output = v;
  req.tensors.push_back(std::move(t));
  req.handle = std::make_shared<Handle>("allreduce", name);
  return ctx.Enqueue(std::move(req));
}

int64_t CallerCycles(Context& ctx) {
  auto n = ctx.Query("caller_cycles");
  EXPECT_TRUE(n.ok()) << n.status().message();
  return n.ok() ? *n : -1;
}

// Submit-and-wait steps, as a training loop's small allreduces: the values
// are exact, and the waiting threads ran cycles (on every rank: the wait
// comes right after the submit, before the woken loop thread gets going,
// for at least some of the steps).
TEST(CallerCycles, SubmitAndWaitRunsTheCycleOnTheCaller) {
  for (int n : {1, 2, 3}) {
    RunContexts(n, [n](Context& ctx, int rank) {
      constexpr int kSteps = 300;
      for (int s = 0; s < kSteps; ++s) {
        int64_t v[3] = {rank + 1, s, -rank * s};
        auto h = Allreduce(ctx, "step", v, 3);
        ASSERT_TRUE(h.ok()) << h.status().message();
        Status st = (*h)->Wait(-1);
        ASSERT_TRUE(st.ok()) << st.message();
        const int64_t sum_r = static_cast<int64_t>(n) * (n - 1) / 2;
        ASSERT_EQ(v[0], n * (n + 1) / 2) << "step " << s;
        ASSERT_EQ(v[1], static_cast<int64_t>(n) * s) << "step " << s;
        ASSERT_EQ(v[2], -sum_r * s) << "step " << s;
      }
      EXPECT_GT(CallerCycles(ctx), 0) << "rank " << rank << " of " << n;
    });
  }
}

TEST(CallerCycles, OffWhenAskedSo) {
  ScopedEnv off("HVD_CALLER_CYCLES", "0");
  RunContexts(2, [](Context& ctx, int rank) {
    for (int s = 0; s < 100; ++s) {
      int64_t v = rank + s;
      auto h = Allreduce(ctx, "step", &v, 1);
      ASSERT_TRUE(h.ok());
      ASSERT_TRUE((*h)->Wait(-1).ok());
      ASSERT_EQ(v, 1 + 2 * s);
    }
    EXPECT_EQ(CallerCycles(ctx), 0);
  });
}

// Short waits (polls and waits under 10 ms) never run the cycle: the loop
// thread completes the operation.
TEST(CallerCycles, PollsLeaveTheCycleToTheLoop) {
  RunContexts(2, [](Context& ctx, int rank) {
    for (int s = 0; s < 50; ++s) {
      int64_t v = 10 * rank + s;
      auto h = Allreduce(ctx, "polled", &v, 1);
      ASSERT_TRUE(h.ok());
      const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      Status st = (*h)->Wait(0.001);
      while (st.code() == HVD_ERR_TIMEOUT && std::chrono::steady_clock::now() < limit) {
        st = (*h)->Wait(0.001);
      }
      ASSERT_TRUE(st.ok()) << st.message();
      ASSERT_EQ(v, 10 + 2 * s);
    }
    EXPECT_EQ(CallerCycles(ctx), 0);
  });
}

// After many submit-and-wait steps the loop is no longer woken by submits
// (lazy wake-ups); a submit that nobody waits for (polls only) must still
// run, within a poll of the loop (a cycle time), and submit-and-wait steps
// keep working afterwards.
TEST(CallerCycles, AnUnwaitedSubmitStillRunsAfterManyDrivenSteps) {
  RunContexts(2, [](Context& ctx, int rank) {
    for (int round = 0; round < 3; ++round) {
      for (int s = 0; s < 40; ++s) {
        int64_t v = rank + s;
        auto h = Allreduce(ctx, "driven", &v, 1);
        ASSERT_TRUE(h.ok());
        ASSERT_TRUE((*h)->Wait(-1).ok());
        ASSERT_EQ(v, 1 + 2 * s);
      }
      auto lazy = ctx.Query("lazy_wake");
      ASSERT_TRUE(lazy.ok());
      EXPECT_EQ(*lazy, 1) << "rank " << rank << " round " << round
                          << ": 40 driven steps did not make submits lazy";
      int64_t w = 100 * (rank + 1) + round;
      auto h = Allreduce(ctx, "polled", &w, 1);
      ASSERT_TRUE(h.ok());
      const auto t0 = std::chrono::steady_clock::now();
      while (!(*h)->done() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20)) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      ASSERT_TRUE((*h)->done()) << "round " << round << ": an unwaited submit did not run";
      EXPECT_TRUE((*h)->status().ok()) << (*h)->status().message();
      EXPECT_EQ(w, 300 + 2 * round);
      EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2)) << "round " << round;
      // The poll found it: submits wake the loop again.
      lazy = ctx.Query("lazy_wake");
      ASSERT_TRUE(lazy.ok());
      EXPECT_EQ(*lazy, 0) << "rank " << rank << " round " << round;
    }
  });
}

// Several user threads per rank submit and wait at once, under their own
// names, in a different order on every rank; some handles are waited by a
// thread other than the one that submitted them. Whoever holds the cycle,
// every result is exact.
TEST(CallerCycles, ManyWaitingThreadsHandTheCycleAround) {
  constexpr int kThreads = 4;
  constexpr int kSteps = 60;
  for (int n : {2, 4}) {
    RunContexts(n, [n](Context& ctx, int rank) {
      std::vector<std::thread> users;
      std::atomic<int> failures{0};
      for (int u = 0; u < kThreads; ++u) {
        // Rank r runs its threads' names in a rotated order.
        const int me = (u + rank) % kThreads;
        users.emplace_back([&, me] {
          for (int s = 0; s < kSteps; ++s) {
            int64_t a[4] = {rank, me, s, 1};
            int64_t b[2] = {rank * s, me};
            const std::string tag = std::to_string(me) + "." + std::to_string(s);
            auto ha = Allreduce(ctx, "a" + tag, a, 4);
            auto hb = Allreduce(ctx, "b" + tag, b, 2);
            if (!ha.ok() || !hb.ok()) {
              ++failures;
              return;
            }
            // The second handle is waited by a helper thread half the time.
            Status sb;
            std::thread other;
            if (s % 2 == 0) {
              other = std::thread([&] { sb = (*hb)->Wait(-1); });
            }
            Status sa = (*ha)->Wait(-1);
            if (other.joinable()) {
              other.join();
            } else {
              sb = (*hb)->Wait(-1);
            }
            const int64_t sum_r = static_cast<int64_t>(n) * (n - 1) / 2;
            if (!sa.ok() || !sb.ok() || a[0] != sum_r || a[1] != int64_t{n} * me ||
                a[2] != int64_t{n} * s || a[3] != n || b[0] != sum_r * s ||
                b[1] != int64_t{n} * me) {
              ADD_FAILURE() << "rank " << rank << " thread " << me << " step " << s << ": "
                            << sa.message() << " / " << sb.message() << " a=" << a[0] << ","
                            << a[1] << "," << a[2] << "," << a[3] << " b=" << b[0] << "," << b[1];
              ++failures;
              return;
            }
          }
        });
      }
      for (auto& t : users) t.join();
      EXPECT_EQ(failures.load(), 0);
    });
  }
}

// A wait whose operation no other rank submits: the caller's cycles find
// nothing to run and hand the cycle back; the shutdown of the context (from
// another thread) ends the wait with HVD_ERR_ABORTED, and nothing hangs.
TEST(CallerCycles, ShutdownEndsAPendingCallerWait) {
  RunContexts(2, [](Context& ctx, int rank) {
    int64_t v = 1;
    if (rank == 0) {
      auto h = Allreduce(ctx, "only-rank-0", &v, 1);
      ASSERT_TRUE(h.ok());
      std::thread stopper([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        (void)ctx.Shutdown();
      });
      const auto t0 = std::chrono::steady_clock::now();
      Status st = (*h)->Wait(-1);
      stopper.join();
      EXPECT_EQ(st.code(), HVD_ERR_ABORTED) << st.message();
      EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
    } else {
      // Rank 1 stays idle until rank 0 shuts down (its context then stops too).
      std::this_thread::sleep_for(std::chrono::milliseconds(600));
    }
  });
}

}  // namespace
}  // namespace hvd
