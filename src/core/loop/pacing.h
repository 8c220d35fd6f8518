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

// Whether a submit wakes the loop thread (under mu_). Waking a sleeping
// thread costs the submitter a system call and, where the loop sleeps on an
// idle CPU, the time to wake that CPU (12-40 us a submit on a virtual
// machine here); it buys the loop's taking the request at once. Submits stop
// waking it ("lazy": the loop looks for work every cycle time instead,
// HVD_CYCLE_TIME, the longest a request waits to be batched) where the wake
// buys nothing:
//  * callers: kLazyAfter waits in a row ran the cycle themselves and took
//    their own requests (see ContextImpl::Drive). Ends the first time the
//    loop takes a request instead: nobody waited for it at once.
//  * trickle: kTrickleAfter wake-ups in a row found one lone request that
//    nobody waits for (a backward pass: one gradient's submit every few
//    hundred microseconds, waited for at the end). The loop then takes what
//    a cycle time brought, as one batch; a wait still runs or wakes the
//    cycle at once. Ends after kTrickleIdle looks in a row found nothing to
//    do (the loop sleeps until a submit again).
// Neither where the cycle time is too short to look that often (the loop
// would spin): there every submit wakes the loop.
class WakePolicy {
 public:
  static constexpr int kLazyAfter = 8;
  static constexpr int kTrickleAfter = 8;
  static constexpr int kTrickleIdle = 64;

  bool lazy() const { return can_poll_ && (callers_ || trickle_); }

  // Whether the loop may look for work every cycle time: `cycle` at least
  // kMinPoll.
  template <typename Duration>
  void SetCycle(Duration cycle) {
    can_poll_ = cycle >= std::chrono::microseconds(kMinPollUs);
  }
  static constexpr int kMinPollUs = 50;
  bool trickle() const { return trickle_; }
  // Lazy because callers run the cycle: a burst's caller is expected to
  // wait and run it (see ContextImpl::SettleBurst).
  bool callers() const { return can_poll_ && callers_; }

  // A caller's cycle took requests from the queue.
  void CallerTook() {
    if (++callers_took_ >= kLazyAfter) callers_ = true;
  }

  // The loop is about to take `queued` requests; `waited`: a caller waits
  // on a handle.
  void LoopTakes(size_t queued, bool waited) {
    idle_ = 0;
    if (callers_) {  // nobody waited for these at once
      callers_ = false;
      callers_took_ = 0;
    }
    if (trickle_) return;
    lone_ = queued == 1 && !waited ? lone_ + 1 : 0;
    if (lone_ >= kTrickleAfter) {
      trickle_ = true;
      lone_ = 0;
    }
  }

  // A lazy look found nothing to do.
  void Idle() {
    if (trickle_ && ++idle_ >= kTrickleIdle) {
      trickle_ = false;
      idle_ = 0;
    }
  }

 private:
  int callers_took_ = 0;  // drives in a row that took submitted requests
  bool callers_ = false;
  int lone_ = 0;  // the loop's takes in a row of one unwaited request
  bool trickle_ = false;
  int idle_ = 0;  // lazy looks in a row that found nothing
  bool can_poll_ = true;
};

}  // namespace hvd
