// The loop's pacing: when the background loop negotiates (see "When the
// loop negotiates" in loop.cc). Background thread only (set in Start, then
// by the cycle and autotuning).
#pragma once

#include <algorithm>
#include <chrono>

#ifndef HVD_SETTLE_US
#define HVD_SETTLE_US 50
#endif

namespace hvd {

struct Pacing {
  using Clock = std::chrono::steady_clock;

  Clock::duration cycle{};          // the cycle time (autotune may change it)
  Clock::duration settle{};         // see Loop
  Clock::duration heartbeat{};      // an idle rank negotiates this often
  Clock::duration set_heartbeat{};  // ... while process sets exist
  Clock::time_point next;           // the next negotiation, while requests wait
  bool changed = false;             // the last cycle changed something
  bool progress = false;            // ... other than a set being busy
  Clock::time_point last;           // the end of the last negotiation

  // The cycle time (HVD_CYCLE_TIME, or the autotuner's choice), and the
  // settle it bounds: how long a burst may pause between two submits and
  // still be one batch (C callers submit every 0.3-2 us, Python frontends
  // every 5-15 us here).
  void SetCycleTime(double ms) {
    using std::chrono::duration;
    cycle = std::chrono::duration_cast<Clock::duration>(duration<double, std::milli>(ms));
    settle = std::min<Clock::duration>(cycle, std::chrono::microseconds(HVD_SETTLE_US));
  }

  // An idle rank still negotiates this often: peers with work wait for it
  // inside the negotiation collective, which must end well within the
  // transport timeout (and the peer timeout). Seconds; 0: none.
  void SetHeartbeat(double transport_timeout_s, double peer_timeout_s) {
    double heartbeat_s = 0.1;
    if (transport_timeout_s > 0) heartbeat_s = std::min(heartbeat_s, transport_timeout_s / 4);
    if (peer_timeout_s > 0) heartbeat_s = std::min(heartbeat_s, peer_timeout_s / 4);
    using std::chrono::duration;
    heartbeat = std::chrono::duration_cast<Clock::duration>(duration<double>(heartbeat_s));
    set_heartbeat = std::min<Clock::duration>(heartbeat, std::chrono::milliseconds(10));
  }

  // A negotiation ended: with a change, the next one is due at once (the
  // ranks are mid-burst), else a cycle time later.
  void Negotiated(bool made_progress, bool busy_sets) {
    progress = made_progress;
    changed = made_progress || busy_sets;
    last = Clock::now();
    next = changed ? last : last + cycle;
  }
};

}  // namespace hvd
