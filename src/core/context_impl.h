// ContextImpl: the state of a context and of its process sets, and the
// background loop that drives them. Its parts, in the data's path:
//   loop/queue.cc             submit (Enqueue) and completion (Finish)
//   loop/loop.cc              the background thread, its pacing, a waiter driving the cycle
//   loop/cycle.cc             one cycle: take the queues, negotiate, run each scope
//   negotiation/negotiate.cc  the packed negotiation of the context and its sets
//   negotiation/departures.cc a rank's shutdown: who has shut down, what can no longer complete
//   loop/dispatch.cc          a scope's responses, planned (fusion/planner.h), to the executor
//   sets/process_sets.cc      process-set creation and destruction (sets/spec.h: the checks)
//   elastic/reset.cc          the elastic reset and membership
//   observability/wiring.cc   timeline commands and autotune decisions applied by the loop
//   observability/metrics_wiring.cc  metrics and stragglers: what the loop records, the report
//   observability/recorder_wiring.cc  the flight recorder: set-up, snapshot, dumps
//   context.cc                start-up, shutdown, and the Context facade
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "core/bootstrap/bootstrap.h"
#include "core/config/config.h"
#include "core/context.h"
#include "core/exec/executor.h"
#include "core/fusion/planner.h"
#include "core/loop/pacing.h"
#include "core/loop/scope.h"
#include "core/negotiation/controller.h"
#include "core/negotiation/piggyback.h"
#include "core/observability/autotune.h"
#include "core/observability/flight_recorder.h"
#include "core/observability/logging.h"
#include "core/observability/metrics.h"
#include "core/observability/metrics_publish.h"
#include "core/observability/set_stragglers.h"
#include "core/observability/stragglers.h"
#include "core/observability/timeline.h"
#include "transport/transport.h"

namespace hvd {

class ContextImpl final : public CycleDriver {
 public:
  explicit ContextImpl(Config cfg)
      : cfg_(std::move(cfg)),
        log_(cfg_.log_level, cfg_.log_fn, cfg_.log_user) {
    log_.set_rank(cfg_.rank);
  }

  ~ContextImpl() override {
    Shutdown();
    ReleaseSets();
    device_transport_.reset();
    transport_.reset();
    boot_.reset();
  }

  Status Start();
  // `one`: the request's single tensor, given apart (see Context::EnqueueOne).
  // The caller keeps its own reference to req.handle.
  Status Enqueue(Scope* scope, OpRequest&& req, const TensorSpec* one = nullptr,
                 std::string_view one_name = {});
  // Stops the loop; pending operations complete with `why`.
  void Shutdown(const Status& why = Error(HVD_ERR_ABORTED, "the context has been shut down"));
  // After Shutdown: closes the transport and the store connection now
  // rather than with the last reference (process sets may keep one).
  void ReleaseTransport();
  // CycleDriver: runs cycles on a waiting caller's thread while the loop
  // thread is idle (see Loop).
  bool Drive(std::unique_lock<std::mutex>& lock, const Handle& h,
             std::chrono::steady_clock::time_point deadline) override;

  // Process sets: the collective request behind Context::Split and
  // CreateProcessSet (its spec: sets/spec.h), and a set's destruction.
  Result<std::shared_ptr<Scope>> MakeSet(std::vector<int32_t> spec);
  Status CloseSet(Scope* set);

  const Config& cfg() const { return cfg_; }
  const std::shared_ptr<Scope>& root() const { return root_; }
  Result<int64_t> Query(const std::string& key) const {
    if (key == "caller_cycles" || key == "lazy_wake" || key == "trickle" ||
        key == "piggybacked") {
      std::lock_guard<std::mutex> lock(mu_);
      if (key == "piggybacked") return static_cast<int64_t>(piggybacked_.load());
      if (key == "lazy_wake") return static_cast<int64_t>(wake_.lazy());
      if (key == "trickle") return static_cast<int64_t>(wake_.trickle());
      return static_cast<int64_t>(caller_cycles_run_);
    }
    if (!transport_) return Error(HVD_ERR_NOT_INITIALIZED, "no transport");
    return transport_->Query(key);
  }
  const char* transport_name() const { return transport_ ? transport_->name() : "none"; }
  Status TimelineCommand(bool start, const std::string& path, bool mark_cycles);
  Context::BufferStats buffer_stats() const {
    Context::BufferStats b;
    if (!executor_) return b;
    b.fusion_capacity = executor_->fusion().capacity();
    b.pool_spare_bytes = executor_->results().spare_bytes();
    b.staging_capacity = executor_->staging_capacity();
    return b;
  }
  // The metrics of the context and its live sets (HVD_METRICS_JSON or
  // HVD_METRICS_PROMETHEUS); any thread.
  std::string MetricsText(int format) const;
  // Writes this rank's flight record to path ("": the configured folder's
  // rank-<r>.json); any thread.
  Status DumpFlightRecorder(const std::string& path, const char* reason);
  Status CheckDevice(int device, const std::string& name, const void* data) {
    if (!executor_) return Error(HVD_ERR_NOT_INITIALIZED, "the context has not started");
    return executor_->cuda().Check(device, name, data);
  }

 private:
  struct ShutdownState {
    bool requested = false;  // this rank shuts down: its own operations fail
    bool announce = false;   // ... and has yet to tell the others (byte 1)
    bool expired = false;    // ... and has waited for the others long enough
  };
  struct TimelineCmd {
    bool start = false;
    std::string path;
    bool mark_cycles = false;
  };
  void Loop();
  struct SettleState {  // the loop thread's record of recent settle windows
    int quiet_wakeups = 0;
    uint64_t wakeups = 0;
  };
  void SettleBurst(std::unique_lock<std::mutex>& lock, SettleState* st);
  bool RunCycle(std::unique_lock<std::mutex>& lock);
  bool CycleBody(const ShutdownState& sd, uint64_t tl_seq, const TimelineCmd& tl_take);
  // CycleBody's steps, in order.
  void DropClosedSets();
  void ApplyTimelineCommand(uint64_t tl_seq, const TimelineCmd& tl_take);
  uint64_t FeedControllers(Clock::time_point now);
  Status NegotiateCycle(bool shutting_down, Clock::time_point now, uint64_t full_rounds,
                        bool* shutdown);
  void ApplyTuning();
  bool RunScopes(Clock::time_point now);
  bool LoopHasWork() const;  // under mu_, the cycle not held
  // One negotiation for the context and all its sets (one allreduce).
  Status Negotiate(bool shutting_down, Clock::time_point now, bool* shutdown);
  uint64_t Execute(Scope& scope);  // returns the bytes moved
  uint64_t ServePiggybacked(Scope& scope, Response& resp, OpRequest* req, Clock::time_point now);
  uint64_t RunPlan(Scope& scope, uint64_t moved, Clock::time_point negotiated);
  void RecordStarted(const FusionUnit& u, Clock::time_point t);
  // Metrics (observability/metrics_wiring.cc): set-up before the loop, the
  // last report at shutdown, and what the cycle records.
  void StartMetrics();
  void StopMetrics();
  void NoteNegotiation(Clock::time_point begin, size_t straggler_block);
  void NoteExecution(Clock::time_point now);  // a scope's execution starts
  void NoteUnit(Scope& scope, const FusionUnit& u, Clock::duration took);
  Status FinishProcessSet(OpRequest& req, const Response& resp);
  Result<std::vector<size_t>> SlotsFor(const std::vector<std::vector<int>>& groups);
  Result<std::shared_ptr<Scope>> MakeSetScope(const std::vector<int>& g, size_t k, int me,
                                              const std::vector<int32_t>& hosts,
                                              uint64_t generation);
  void CloseAgreed(Scope& set);
  // done: when it completed, for the flight recorder (unset: now).
  void Finish(Scope& scope, OpRequest& req, Status status,
              Clock::time_point done = Clock::time_point());
  void FinishAll(Scope& scope, OpRequest* const* reqs, size_t n, const Status& status,
                 Clock::time_point done = Clock::time_point());
  void FailEverything(const Status& why);
  void RecordFinished(OpRequest* const* reqs, size_t n, const Status& status,
                      Clock::time_point done);
  // Writes the flight record where a dump is wanted (an error, SIGUSR1) or
  // `forced` names a reason; without mu_ held.
  void ServeDumps(const char* forced = nullptr);
  void StartRecorder();  // Start(): the flight recorder's size, folder and SIGUSR1
  // Shutdown is not a failure (negotiation/departures.cc): a rank that shut
  // down negotiates on until every rank has.
  void FailOwn();
  void CloseScope(Scope& sc, const Status& why);
  bool LearnDepartures(bool announce);
  std::string DepartureNote() const;
  void AwaitPeersAtShutdown();
  // In an elastic job, a lost peer (transport failure, timeout, a peer that
  // left) is a membership change: HVD_ERR_MEMBERSHIP_CHANGED, naming it.
  Status Membership(const Status& s) const;
  void ReleaseSets();
  Comm* SetDevice(Scope& sc);
  uint64_t set_generation_ = 0;  // groups made so far (loop thread): OpenDeviceSet's keys
  size_t pending() const;

  Config cfg_;
  Logger log_;
  std::unique_ptr<Bootstrap> boot_;  // the store (and its client) the transport may use
  std::unique_ptr<Transport> transport_;
  // A device-only transport beside it (HVD_TRANSPORT=nccl): the root
  // context's CUDA allreduces and broadcasts; null: none.
  std::unique_ptr<Transport> device_transport_;
  Timeline timeline_;
  FlightRecorder recorder_;  // configured in Start(); see its header for who writes what
  std::unique_ptr<Autotuner> tuner_;  // made in Start()
  std::unique_ptr<Executor> executor_;  // made in Start(), once the transport is up
  int64_t fusion_threshold_ = 0;      // cfg_'s, or the autotuner's current choice
  // The peer timeout in force around each negotiation (seconds); 0 = none:
  // off, not below the transport timeout, or a transport without set_timeout.
  double peer_timeout_ = 0;
  std::shared_ptr<Scope> root_ = std::make_shared<Scope>();

  // Shared with user threads (guarded by mu_), and with handles (the signal).
  std::shared_ptr<LoopSignal> signal_ = std::make_shared<LoopSignal>();
  std::mutex& mu_ = signal_->mu;
  std::condition_variable& cv_ = signal_->cv;
  size_t queued_ = 0;                // requests in every scope's queue
  Clock::time_point first_enqueue_;  // of the oldest queued request
  Clock::time_point last_enqueue_;   // of the newest whose time was read (see Enqueue)
  uint64_t submits_ = 0;             // requests ever queued
  bool exact_enqueue_ = false;       // read the clock for every submit (timeline open)
  bool shutdown_requested_ = false;
  Status shutdown_reason_;  // what pending operations complete with (set with the flag)
  // The loop has exited; enqueue fails with stop_reason_. Set under mu_;
  // atomic so that the cycle can check it without the lock.
  std::atomic<bool> stopped_{false};
  Status stop_reason_;
  std::thread thread_;
  bool loop_exited_ = false;  // under mu_
  // Under mu_: this rank's shutdown was negotiated (every rank knows it; the
  // loop negotiates on, with nothing of its own, until every rank has shut
  // down), and the wait for the others ran out (the loop leaves).
  bool shutdown_announced_ = false;
  bool shutdown_expired_ = false;
  bool any_set_live_ = false;  // a copy of !slot_live_.empty() for the shutdown
  std::vector<uint8_t> departed_;  // background thread only: 1 = that rank shut down
  std::condition_variable exit_cv_;
  // A timeline start/stop handed to the loop (under mu_): the latest asked
  // wins; tl_done_ is the last request number the loop applied, tl_result_
  // its outcome (exit_cv_ wakes the askers).
  bool tl_pending_ = false;
  TimelineCmd tl_cmd_;
  uint64_t tl_asked_ = 0, tl_done_ = 0;
  Status tl_result_;
  // The cycle is run by one thread at a time (under mu_: whether one does):
  // the loop thread, or a caller in Drive. Everything marked "background
  // thread only" belongs to that thread while it holds the cycle.
  bool cycle_held_ = false;
  bool caller_cycles_ = false;     // callers may run it (HVD_CALLER_CYCLES, the transport)
  uint64_t caller_cycles_run_ = 0;  // cycles run by callers (Query "caller_cycles")
  // Allreduces and broadcasts served by the negotiation (Query "piggybacked").
  // Atomic: counted by the cycle without the lock, before the handle
  // completes (its waiter may ask).
  std::atomic<uint64_t> piggybacked_{0};
  int drive_waiters_ = 0;           // callers waiting in Drive for the cycle's end
  bool mark_cycles_ = false;  // background thread only
  Pacing pace_;  // when the loop negotiates (background thread only; set in Start)
  WakePolicy wake_;  // whether submits wake the loop (under mu_)
  std::vector<std::shared_ptr<Scope>> dropped_;  // sets closed on this rank alone
  static constexpr int kShutdownGraceS = 2;
  std::once_flag shutdown_once_;
  // What a process-set request made (null: this rank is not a member), for
  // its caller to collect, by handle.
  std::unordered_map<const Handle*, std::shared_ptr<Scope>> made_;
  std::vector<std::weak_ptr<Scope>> all_sets_;  // every set made here, for the shutdown

  // Background thread only.
  // The process-set table by slot: the sets this rank belongs to (null where
  // it does not, or the slot is free), and which slots any rank holds (the
  // same on every rank: slots are taken by the context's own responses and
  // freed by what a negotiation shows).
  std::vector<std::shared_ptr<Scope>> sets_;
  std::vector<bool> slot_live_;
  // Each slot's cache extent as the last negotiation showed it (the same on
  // every rank), and where its bytes start in this negotiation's.
  std::vector<size_t> slot_extent_, slot_at_;
  bool sets_busy_ = false;  // the last negotiation showed a set with pending requests
  std::vector<uint8_t> ctrl_;  // the packed control bytes
  Piggyback piggy_;  // a small allreduce or broadcast riding in the negotiation (HVD_PIGGYBACK)
  // Metrics: written by the cycle's holder, read by any thread.
  LoopMetrics loop_metrics_;
  Clock::time_point negotiation_begin_{};  // of the negotiation not yet timed
  bool negotiation_open_ = false;
  Stragglers stragglers_;
  SetStragglers set_stragglers_;  // the process sets' steps
  bool metrics_on_ = true;  // HVD_METRICS (set before the loop starts)
  std::unique_ptr<MetricsPublisher> publisher_;  // to the store (HVD_METRICS_PUBLISH)
  // Execute's scratch (background thread only), kept between cycles.
  std::vector<OpRequest> exec_reqs_;
  // Buffers of a joined rank's stand-in tensors, emptied after each
  // Execute (a deque made per cycle allocated its map and a block, which a
  // small step's cycle spent a tenth of its instructions on).
  std::deque<std::vector<uint8_t>> exec_zeros_;
  // Tensor lists of one tensor from finished requests, for the next
  // single-tensor submits (see Context::EnqueueOne); under mu_. The cycle
  // gathers them in recycled_ (the thread running the cycle) and hands them
  // over where the next cycle takes the queues.
  std::vector<std::vector<TensorSpec>> spare_tensors_;
  std::vector<std::vector<TensorSpec>> recycled_;
  void Recycle(std::vector<OpRequest>& reqs);
  void SpareRecycled();  // under mu_
  FusionPlanner planner_;
};

}  // namespace hvd
