// The loop's pacing alone: the settle a cycle time bounds, the heartbeats
// the timeouts bound, and when the next negotiation is due.
#include <gtest/gtest.h>

#include <chrono>

#include "core/loop/pacing.h"

namespace hvd {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

TEST(Pacing, TheSettleIsAtMostTheCycleTime) {
  Pacing p;
  p.SetCycleTime(5);
  EXPECT_EQ(p.cycle, milliseconds(5));
  EXPECT_EQ(p.settle, microseconds(HVD_SETTLE_US));
  p.SetCycleTime(0.01);
  EXPECT_EQ(p.settle, p.cycle);
}

TEST(Pacing, HeartbeatsStayWellWithinTheTimeouts) {
  Pacing p;
  p.SetHeartbeat(0, 0);
  EXPECT_EQ(p.heartbeat, milliseconds(100));
  EXPECT_EQ(p.set_heartbeat, milliseconds(10));
  p.SetHeartbeat(0.2, 0);
  EXPECT_EQ(p.heartbeat, milliseconds(50));
  p.SetHeartbeat(30, 0.02);
  EXPECT_EQ(p.heartbeat, milliseconds(5));
  EXPECT_EQ(p.set_heartbeat, milliseconds(5));
}

TEST(Pacing, AChangeMakesTheNextNegotiationDueAtOnce) {
  Pacing p;
  p.SetCycleTime(5);
  p.Negotiated(/*made_progress=*/false, /*busy_sets=*/false);
  EXPECT_FALSE(p.changed);
  EXPECT_EQ(p.next, p.last + p.cycle);
  p.Negotiated(false, true);
  EXPECT_TRUE(p.changed);
  EXPECT_FALSE(p.progress);
  EXPECT_EQ(p.next, p.last);
  p.Negotiated(true, false);
  EXPECT_TRUE(p.progress);
  EXPECT_EQ(p.next, p.last);
}

// Submits wake the loop until kTrickleAfter of its takes in a row were one
// request nobody waited for; then the loop looks every cycle time, taking
// whatever came, until kTrickleIdle looks in a row find nothing.
TEST(WakePolicy, LoneUnwaitedRequestsMakeSubmitsLazyUntilTheLoopIdles) {
  WakePolicy w;
  for (int i = 0; i + 1 < WakePolicy::kTrickleAfter; ++i) {
    w.LoopTakes(1, /*waited=*/false);
    EXPECT_FALSE(w.lazy()) << i;
  }
  w.LoopTakes(1, false);
  EXPECT_TRUE(w.lazy());
  EXPECT_TRUE(w.trickle());
  // Its looks take batches, waited for or not: still lazy.
  w.LoopTakes(5, false);
  w.LoopTakes(1, true);
  EXPECT_TRUE(w.trickle());
  // Idle looks, interrupted by a take, do not add up.
  for (int i = 0; i + 1 < WakePolicy::kTrickleIdle; ++i) w.Idle();
  w.LoopTakes(1, false);
  for (int i = 0; i + 1 < WakePolicy::kTrickleIdle; ++i) w.Idle();
  EXPECT_TRUE(w.trickle());
  w.Idle();
  EXPECT_FALSE(w.trickle());
  EXPECT_FALSE(w.lazy());
}

TEST(WakePolicy, AWaitedTakeOrABurstStartsTheCountAgain) {
  for (const bool waited : {true, false}) {
    WakePolicy w;
    for (int i = 0; i + 1 < WakePolicy::kTrickleAfter; ++i) w.LoopTakes(1, false);
    if (waited) {
      w.LoopTakes(1, /*waited=*/true);  // a caller waited: the wake was worth it
    } else {
      w.LoopTakes(3, false);  // a burst: one wake for three
    }
    for (int i = 0; i + 1 < WakePolicy::kTrickleAfter; ++i) w.LoopTakes(1, false);
    EXPECT_FALSE(w.lazy()) << waited;
    w.LoopTakes(1, false);
    EXPECT_TRUE(w.trickle()) << waited;
  }
}

// Callers that run their own cycles make submits lazy as before; the loop's
// first take ends that (nobody waited for that request at once).
TEST(WakePolicy, CallersWhoDriveMakeSubmitsLazyUntilTheLoopTakes) {
  WakePolicy w;
  for (int i = 0; i + 1 < WakePolicy::kLazyAfter; ++i) w.CallerTook();
  EXPECT_FALSE(w.lazy());
  w.CallerTook();
  EXPECT_TRUE(w.lazy());
  EXPECT_FALSE(w.trickle());
  w.Idle();  // looks that find nothing do not end it: the callers take the work
  EXPECT_TRUE(w.lazy());
  w.LoopTakes(1, false);
  EXPECT_FALSE(w.lazy());
  for (int i = 0; i + 1 < WakePolicy::kLazyAfter; ++i) w.CallerTook();
  EXPECT_FALSE(w.lazy());  // counted afresh
}

// A cycle time too short to look at (0: negotiate at once) leaves every
// submit waking the loop, whatever the pattern: looks that often would spin.
TEST(WakePolicy, ACycleTooShortToLookAtKeepsSubmitsWaking) {
  WakePolicy w;
  w.SetCycle(std::chrono::microseconds(0));
  for (int i = 0; i < WakePolicy::kTrickleAfter; ++i) w.LoopTakes(1, false);
  for (int i = 0; i < WakePolicy::kLazyAfter; ++i) w.CallerTook();
  EXPECT_FALSE(w.lazy());
  w.SetCycle(std::chrono::milliseconds(1));
  EXPECT_TRUE(w.lazy());
}

}  // namespace
}  // namespace hvd
