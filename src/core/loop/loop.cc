// The background thread and its pacing, and the waiter that runs cycles on
// a caller's thread (Drive).
#include "core/context_impl.h"

#include <algorithm>

#if defined(__linux__)
#include <sys/prctl.h>
#endif

namespace hvd {


// When the loop negotiates:
//  * Work arrives: a submit wakes it at once. It then waits until no further
//    submit has come for a settle time (a burst of submits is one batch, and
//    so one fusion bucket), at most one cycle time after the first. Where
//    submits come one at a time (the last 8 settle windows caught nothing,
//    and only one request is queued) it skips the settle, probing every
//    16th wake-up.
//  * Requests wait on other ranks: if the last negotiation changed anything
//    (something completed, or some rank announced new requests), it goes
//    straight into the next one: the ranks are mid-burst, and the others'
//    remaining submits are on their way. Otherwise it negotiates again every
//    cycle time, counted from the end of the last negotiation (all ranks
//    leave that collective together, so their cycles stay in phase).
//  * Nothing is pending here: it sleeps until a submit, shutdown, or a
//    heartbeat. No operation can complete without this rank's submit, so
//    ranks that do have work simply wait inside the negotiation collective;
//    the heartbeat keeps that wait well below the transport timeout and lets
//    an idle rank notice shutdown, stalls and dead peers.
//  * Silent peers: the loop thread runs whatever the user's threads do, so
//    a live rank enters the negotiation at least once per heartbeat (or as
//    soon as its current transfers end). Where the transport can change its
//    limit per call, the negotiation runs under the peer timeout
//    (HVD_PEER_TIMEOUT): a rank that has not entered it by then is stopped
//    or cut off, and every rank's pending handles fail naming it.
//  * Process sets: one negotiation serves the context and all its sets, so
//    every rank takes part in the rounds that run a set's requests, member
//    or not. While the last negotiation showed a set with pending requests,
//    every rank negotiates again at once (ranks outside it wait inside the
//    collective while its members run their data; a set of every rank not
//    after a round that served every request pending in it), and the
//    heartbeat is 10 ms while sets exist, so a set's first request after a
//    quiet spell waits at most that for the ranks outside it. A rank outside
//    a busy set can wait in the negotiation for as long as the set's
//    transfers take, so with sets the negotiation keeps the transport
//    timeout: no peer timeout.
void ContextImpl::Loop() {
#if defined(__linux__)
  // The default 50 us of timer slack would be added to every wake-up.
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  // Named for top -H, perf and debuggers.
  prctl(PR_SET_NAME, "hvd-loop", 0UL, 0UL, 0UL);
#endif
  SettleState settle;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopped_) {
    if (recorder_.pending()) {
      // A dump asked for (SIGUSR1, an error) is written here, between cycles.
      lock.unlock();
      ServeDumps();
      lock.lock();
      if (stopped_) break;
    }
    // Lazy wake-ups (see WakePolicy): submits do not wake this thread; it
    // looks for work every cycle time instead (autotuning may change it).
    wake_.SetCycle(pace_.cycle);
    const Clock::duration poll =
        wake_.lazy() ? std::min(pace_.cycle, pace_.heartbeat) : pace_.heartbeat;
    if (cycle_held_) {
      // A caller runs the cycle: it wakes this thread when it ends with
      // work left for the loop (LoopHasWork), else the heartbeat (or the
      // lazy poll) does.
      cv_.wait_until(lock, Clock::now() + poll, [this] { return !cycle_held_; });
      continue;
    }
    // A rank that shut down negotiates on at the others' pace (see
    // negotiation/departures.cc): its shutdown is news once.
    auto ready = [this] {
      return cycle_held_ || (shutdown_requested_ && (!shutdown_announced_ || shutdown_expired_)) ||
             queued_ > 0 || tl_pending_;
    };
    if (pending() == 0 && !sets_busy_) {
      // Negotiate at least once per heartbeat (a caller's cycle counts).
      const auto due = pace_.last + (slot_live_.empty() ? pace_.heartbeat : pace_.set_heartbeat);
      cv_.wait_until(lock, std::min(due, Clock::now() + poll), ready);
      if (!ready() && Clock::now() < due) {  // a lazy poll that found nothing
        wake_.Idle();
        continue;
      }
    } else {
      cv_.wait_until(lock, pace_.next, ready);
    }
    if (cycle_held_) continue;
    if (queued_ > 0 && !shutdown_requested_) {
      SettleBurst(lock, &settle);
      if (cycle_held_) continue;
    }
    // A caller's cycle may have stopped the context while this thread
    // waited (the settle releases the lock): no cycle after that.
    if (stopped_) break;
    // This thread takes submitted requests: nobody waited for them (or
    // not at once); see WakePolicy.
    if (queued_ > 0) wake_.LoopTakes(queued_, signal_->caller_waits);
    if (drive_waiters_ > 0) {
      // A caller waits to run the cycle (see Drive): it takes this one.
      cv_.wait_until(lock, Clock::now() + poll,
                     [this] { return drive_waiters_ == 0 || stopped_ || shutdown_requested_; });
      continue;
    }
    cycle_held_ = true;
    const bool go_on = RunCycle(lock);
    cycle_held_ = false;
    if (drive_waiters_ > 0) cv_.notify_all();  // a caller waits to take the next cycle
    if (!go_on) break;
  }
}

// Waits out a burst of submits before the cycle (under mu_, released while
// waiting). Adaptive: after kQuietAfter wake-ups in a row whose settle
// window caught nothing, lone submits are negotiated at once.
void ContextImpl::SettleBurst(std::unique_lock<std::mutex>& lock, SettleState* st) {
  constexpr int kQuietAfter = 8;
  constexpr uint64_t kProbeEvery = 16;
  // Settle only where submits come in bursts: several already queued
  // by the time this thread runs, or a recent settle window caught
  // more; a probe every kProbeEvery-th wake-up notices a change. Where
  // callers run cycles, always: a lone submit that is waited for is
  // run by its caller (the wait ends the settle), and this thread,
  // woken by the submit (on a rank bound to one core, ahead of the
  // caller), must not take the cycle from it.
  ++st->wakeups;
  const size_t queued = queued_;
  if (caller_cycles_ || queued > 1 || st->quiet_wakeups < kQuietAfter ||
      st->wakeups % kProbeEvery == 0) {
    const auto limit = first_enqueue_ + pace_.cycle;
    // A caller blocking on a handle ends the burst at once (and may
    // run the cycle itself).
    auto done = [this] { return shutdown_requested_ || signal_->caller_waits || cycle_held_; };
    // Where callers run the cycle (lazy: their waits took the last bursts),
    // the burst's own caller is expected to wait and run it: this thread
    // takes the requests only once they have waited a cycle time, the
    // bound on batching. A pause of a settle time there is a caller
    // preempted mid-burst (ranks share CPUs), not the burst's end: taken
    // then, the step ran as two batches, each a negotiation and a
    // transfer, and the loop competed with its caller for a CPU.
    const bool callers = wake_.callers();
    // Submits after the first do not read the clock: where some came
    // since the last look, the burst is taken to go on from now.
    uint64_t seen = submits_;
    Clock::time_point mark = last_enqueue_;
    for (;;) {
      const auto until = callers ? limit : std::min(mark + pace_.settle, limit);
      if (Clock::now() >= until) break;
      if (cv_.wait_until(lock, until, done)) break;
      if (submits_ != seen) {
        seen = submits_;
        mark = Clock::now();
      }
    }
    st->quiet_wakeups = queued > 1 || queued_ > queued ? 0 : st->quiet_wakeups + 1;
  }
}

bool ContextImpl::LoopHasWork() const {
  return shutdown_requested_ || queued_ > 0 || tl_pending_ || pending() > 0 || sets_busy_;
}

// Runs cycles on the waiting caller's thread until its handle completes.
// Drives in a row that took submitted requests (their callers waited for
// them at once) make submits lazy: see WakePolicy (pacing.h).
bool ContextImpl::Drive(std::unique_lock<std::mutex>& lock, const Handle& h,
                        std::chrono::steady_clock::time_point deadline) {
  if (!caller_cycles_ || stopped_ || shutdown_requested_) return false;
  if (cycle_held_) {
    // The loop (or another caller) is inside a cycle: wait for its end and
    // take the next one, unless that cycle completed the handle. Without
    // this, a caller whose wait came while the loop finished the cycle of
    // its previous operation found the loop in every later cycle too: the
    // loop took each next request, the caller's wait came during that
    // cycle, and so on (6-8 us against 1.2 us per small operation).
    // Until the caller's deadline at the most.
    auto free_or_done = [&] {
      return !cycle_held_ || h.done() || stopped_ || shutdown_requested_;
    };
    ++drive_waiters_;
    if (deadline == std::chrono::steady_clock::time_point::max()) {
      cv_.wait(lock, free_or_done);
    } else {
      cv_.wait_until(lock, deadline, free_or_done);
    }
    // The loop does not start a cycle while callers wait for one: tell it
    // when none does any more.
    if (--drive_waiters_ == 0) cv_.notify_all();
    if (cycle_held_ || h.done() || stopped_ || shutdown_requested_) return false;
  }
  if (queued_ > 0) wake_.CallerTook();
  cycle_held_ = true;
  bool go_on = true;
  // Until the handle completes, or a cycle made no progress (the request
  // waits for other ranks: the loop paces the next negotiations). A busy
  // process set alone is no progress: its requests may wait for a submit
  // this very thread has yet to make.
  do {
    go_on = RunCycle(lock);
    ++caller_cycles_run_;
  } while (go_on && pace_.progress && !h.done() && !shutdown_requested_);
  cycle_held_ = false;
  if (drive_waiters_ > 0) cv_.notify_all();  // another caller waits for the cycle
  bool round_only = false;
  if (go_on && sets_busy_ && h.done()) {
    // Process sets: the round every rank negotiates after a set's operation
    // (see Loop) is left to the loop thread a settle time later, so that
    // this caller's next wait, if it comes at once, runs that round with
    // its next request in it; run by the loop at once, the round held the
    // cycle when the caller next waited. A lazy loop polls every cycle time
    // and finds the round then: where nothing else waits, it is not woken
    // (a wake-up per operation costs the caller a system call).
    pace_.next = std::max(pace_.next, Clock::now() + pace_.settle);
    round_only = wake_.lazy() && !shutdown_requested_ && queued_ == 0 && !tl_pending_ &&
                 pending() == 0;
  }
  if (!go_on || stopped_) {
    cv_.notify_all();  // the loop exits (it sees stopped_)
  } else if (LoopHasWork() && !round_only) {
    cv_.notify_all();
  }
  if (shutdown_requested_) exit_cv_.notify_all();
  return true;
}

// One cycle: take what the user threads queued, negotiate, run the
// responses. Called with lock held and cycle_held_ set by the caller (the
// loop thread or Drive), which is the only thread touching the cycle's
// state meanwhile; returns with lock held. False: the context stopped.
bool ContextImpl::RunCycle(std::unique_lock<std::mutex>& lock) {
  ShutdownState sd;
  sd.requested = shutdown_requested_;
  sd.announce = shutdown_requested_ && !shutdown_announced_;
  sd.expired = shutdown_expired_;
  TimelineCmd tl_take;
  uint64_t tl_seq = 0;
  if (tl_pending_) {
    tl_take = std::move(tl_cmd_);
    tl_seq = tl_asked_;
    tl_pending_ = false;
  }
  root_->batch.swap(root_->queue);
  if (!recycled_.empty()) SpareRecycled();
  for (auto& set : sets_) {
    if (!set) continue;
    set->batch.swap(set->queue);
    if (set->closed) dropped_.push_back(std::move(set));  // its destruction failed here
  }
  queued_ = 0;
  lock.unlock();
  const bool go_on = CycleBody(sd, tl_seq, tl_take);
  if (recorder_.pending()) ServeDumps();  // an error in this cycle
  lock.lock();
  any_set_live_ = !slot_live_.empty();
  return go_on;
}

}  // namespace hvd
