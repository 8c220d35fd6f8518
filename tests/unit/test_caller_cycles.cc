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
#include "core/loop/request.h"
#include "scoped_env.h"
#include "context_ranks.h"
#include "thread_ranks.h"

namespace hvd {
namespace {

using test::RunContexts;
using test::ScopedEnv;

// An in-place int64 allreduce (SUM unless `op`) of `v` named `name`.
Result<HandleRef> Allreduce(Context& ctx, const std::string& name, int64_t* v,
                                          int64_t count, hvd_reduce_op_t op = HVD_SUM) {
  OpRequest req;
  req.type = OpType::kAllreduce;
  req.reduce_op = op;
  TensorSpec t;
  t.name = name;
  t.dtype = HVD_INT64;
  t.shape = {count};
  t.input = v;
  t.output = v;
  req.tensors.push_back(std::move(t));
  req.handle = MakeHandle("allreduce", name);
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
      // Lazy mode needs 8 drives in a row that took submitted requests; on
      // a loaded host the loop thread may take some, so every rank steps in
      // chunks of 40 until all of them are lazy (agreed by a driven MIN
      // allreduce, itself a step that keeps lazy mode), at most 25 chunks.
      int64_t all_lazy = 0;
      for (int chunk = 0; chunk < 25 && all_lazy == 0; ++chunk) {
        for (int s = 0; s < 40; ++s) {
          int64_t v = rank + s;
          auto h = Allreduce(ctx, "driven", &v, 1);
          ASSERT_TRUE(h.ok());
          ASSERT_TRUE((*h)->Wait(-1).ok());
          ASSERT_EQ(v, 1 + 2 * s);
        }
        auto lazy = ctx.Query("lazy_wake");
        ASSERT_TRUE(lazy.ok());
        all_lazy = *lazy;
        auto h = Allreduce(ctx, "all_lazy", &all_lazy, 1, HVD_MIN);
        ASSERT_TRUE(h.ok());
        ASSERT_TRUE((*h)->Wait(-1).ok());
      }
      EXPECT_EQ(all_lazy, 1) << "rank " << rank << " round " << round
                             << ": 1,000 driven steps did not make submits lazy";
      auto lazy = ctx.Query("lazy_wake");
      ASSERT_TRUE(lazy.ok());
      EXPECT_EQ(*lazy, 1) << "rank " << rank << " round " << round;
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
      // The poll found it: the callers' lazy mode is over (submits wake the
      // loop again), unless the loop's own takes of lone requests have made
      // it lazy for a trickle meanwhile (WakePolicy: on a loaded host the
      // loop thread takes some of the driven steps' requests before their
      // callers wait, and those count).
      lazy = ctx.Query("lazy_wake");
      ASSERT_TRUE(lazy.ok());
      auto trickle = ctx.Query("trickle");
      ASSERT_TRUE(trickle.ok());
      EXPECT_EQ(*lazy, *trickle) << "rank " << rank << " round " << round
                                 << ": callers' lazy mode still on after the loop took a request";
    }
  });
}

// A backward pass: gradients submitted one at a time, milliseconds apart,
// none waited for until the step's end. After a few such submits the loop
// stops being woken by each (WakePolicy's trickle) and takes what a cycle
// time brought; every result stays exact, also with each rank submitting in
// its own order, a submit waited for at once still completes promptly, and
// once the loop idles submits wake it again.
TEST(CallerCycles, GradientsSubmittedOneByOneStopWakingTheLoop) {
  for (int n : {2, 3}) {
    RunContexts(n, [n](Context& ctx, int rank) {
      constexpr int kTensors = 16;
      // rotate: each rank its own order (a gradient then waits in the
      // negotiation for the others' submits, and the loop, busy with those
      // rounds, may find several queued: the trickle is reached with the
      // ranks in step, as a backward pass's are, and checked both ways).
      auto step = [&](int s, bool rotate) {
        std::vector<int64_t> v(kTensors);
        std::vector<HandleRef> hs(kTensors);
        for (int k = 0; k < kTensors; ++k) {
          const int i = rotate ? (k + 5 * rank) % kTensors : k;
          v[i] = 1000 * (rank + 1) + 10 * i + s;
          auto h = Allreduce(ctx, "grad." + std::to_string(i), &v[i], 1);
          ASSERT_TRUE(h.ok()) << h.status().message();
          hs[i] = *h;
          // The backward's work: long enough for the loop to take each
          // gradient alone on a loaded host.
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        for (int i = 0; i < kTensors; ++i) {
          ASSERT_TRUE(hs[i]->Wait(30).ok()) << "rank " << rank << " grad." << i;
          EXPECT_EQ(v[i], 1000 * n * (n + 1) / 2 + n * (10 * i + s)) << "grad." << i;
        }
      };
      // The loop's takes must find one unwaited request 8 times in a row;
      // on a loaded host (other tests' ranks on the same CPUs) the loop may
      // not run before the next submit and find two, so step until every
      // rank trickles, for up to 20 s (both agreed by a MIN allreduce).
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      int64_t all[2] = {0, 1};  // every rank trickles; no rank gave up
      for (int s = 0; all[0] == 0 && all[1] == 1; ++s) {
        step(s, false);
        auto t = ctx.Query("trickle");
        ASSERT_TRUE(t.ok());
        all[0] = *t;
        all[1] = std::chrono::steady_clock::now() < give_up ? 1 : 0;
        auto h = Allreduce(ctx, "all_trickle", all, 2, HVD_MIN);
        ASSERT_TRUE(h.ok());
        ASSERT_TRUE((*h)->Wait(30).ok());
      }
      EXPECT_EQ(all[0], 1) << "rank " << rank << ": 20 s of backward-like steps left submits waking";
      step(100, false);  // taken by the loop's looks, in batches
      step(101, true);
      // A submit waited for at once runs at once (the wait runs the cycle).
      int64_t w = rank + 1;
      const auto t0 = std::chrono::steady_clock::now();
      auto h = Allreduce(ctx, "waited", &w, 1);
      ASSERT_TRUE(h.ok());
      ASSERT_TRUE((*h)->Wait(30).ok());
      EXPECT_EQ(w, n * (n + 1) / 2);
      EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
      // Idle: after 64 looks that found nothing, submits wake the loop again.
      const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      int64_t trickle = 1;
      while (trickle == 1 && std::chrono::steady_clock::now() < limit) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        auto t = ctx.Query("trickle");
        ASSERT_TRUE(t.ok());
        trickle = *t;
      }
      EXPECT_EQ(trickle, 0) << "rank " << rank << ": still trickling after 10 s idle";
    });
  }
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

// Process sets: callers drive the negotiation that serves the context and
// its sets. A set of every rank and a set of half of them (4 ranks: [0, 1]
// and [2, 3] by split), operations on the context and on both sets from
// three user threads per rank in rotated orders; every result is exact. And
// the callers, not only the loop, run the cycles of one thread's set steps
// (process sets share their parent's cycle and its count). Before, callers left every
// cycle to the loop while sets existed, and a caller that drove while any
// set was busy could spin on a set request its own thread had yet to submit.
TEST(CallerCycles, CallersDriveProcessSetOperations) {
  constexpr int kSteps = 80;
  for (int n : {2, 4}) {
    RunContexts(n, [n](Context& ctx, int rank) {
      auto all = ctx.Split(0, rank);
      ASSERT_TRUE(all.ok()) << all.status().message();
      auto half = ctx.Split(rank < n / 2 ? 0 : 1, rank);
      ASSERT_TRUE(half.ok()) << half.status().message();
      ASSERT_TRUE(*all && *half);
      // One thread: a set's submit-and-wait steps, each after a pause (the
      // round every rank negotiates after a set's operation then runs in
      // it), are run by their callers. Before, callers ran none while sets
      // existed; a loaded host may still let the loop take some.
      const int64_t before = *ctx.Query("caller_cycles");
      for (int s = 0; s < 200; ++s) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        int64_t v = rank + s;
        auto h = Allreduce(**all, "single", &v, 1);
        ASSERT_TRUE(h.ok());
        ASSERT_TRUE((*h)->Wait(-1).ok());
        ASSERT_EQ(v, int64_t{n} * (n - 1) / 2 + int64_t{n} * s);
      }
      EXPECT_GE(*ctx.Query("caller_cycles") - before, 20)
          << "rank " << rank << ": callers ran (almost) no cycles while process sets existed";
      Context* scopes[3] = {&ctx, all->get(), half->get()};
      const int64_t sizes[3] = {n, n, n / 2};
      const int64_t rank_sums[3] = {int64_t{n} * (n - 1) / 2, int64_t{n} * (n - 1) / 2,
                                    rank < n / 2 ? int64_t{n / 2} * (n / 2 - 1) / 2
                                                 : int64_t{n / 2} * (n / 2 - 1) / 2 +
                                                       int64_t{n / 2} * (n / 2)};
      std::atomic<int> failures{0};
      std::vector<std::thread> users;
      for (int u = 0; u < 3; ++u) {
        const int which = (u + rank) % 3;  // each rank starts its threads in another order
        users.emplace_back([&, which] {
          Context& c = *scopes[which];
          for (int s = 0; s < kSteps; ++s) {
            int64_t v[2] = {rank, s};
            auto h = Allreduce(c, "x" + std::to_string(s % 7), v, 2);
            Status st = h.ok() ? (*h)->Wait(-1) : h.status();
            if (!st.ok() || v[0] != rank_sums[which] || v[1] != sizes[which] * s) {
              ADD_FAILURE() << "rank " << rank << " scope " << which << " step " << s << ": "
                            << st.message() << " v=" << v[0] << "," << v[1];
              ++failures;
              return;
            }
          }
        });
      }
      for (auto& t : users) t.join();
      EXPECT_EQ(failures.load(), 0);
      EXPECT_TRUE((*half)->Shutdown().ok());
      EXPECT_TRUE((*all)->Shutdown().ok());
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
