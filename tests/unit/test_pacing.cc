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

}  // namespace
}  // namespace hvd
