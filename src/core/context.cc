// The context: bootstrap (rendezvous, topology, transport) and the background
// loop (negotiate, fuse, run, complete).
#include "core/context.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_set>

#if defined(__linux__)
#include <sys/prctl.h>
#endif

#ifndef HVD_SETTLE_US
#define HVD_SETTLE_US 50
#endif

#include "common/kernels.h"
#include "common/netif.h"
#include "core/autotune.h"
#include "core/bootstrap.h"
#include "core/config.h"
#include "core/controller.h"
#include "core/executor.h"
#include "core/fusion_buffer.h"
#include "core/logging.h"
#include "core/start_report.h"
#include "core/timeline.h"
#include "core/transport_loader.h"
#include "rendezvous/store.h"

namespace hvd {

// ---- ContextImpl ---------------------------------------------------------

class ContextImpl : public ControlPlane {
 public:
  explicit ContextImpl(Config cfg)
      : cfg_(std::move(cfg)),
        log_(cfg_.log_level, cfg_.log_fn, cfg_.log_user) {
    log_.set_rank(cfg_.rank);
  }

  ~ContextImpl() override {
    Shutdown();
    transport_.reset();
    boot_.reset();
  }

  Status Start();
  Result<std::shared_ptr<Handle>> Enqueue(OpRequest req);
  void Shutdown();

  const Config& cfg() const { return cfg_; }
  Result<int64_t> Query(const std::string& key) const {
    if (!transport_) return Error(HVD_ERR_NOT_INITIALIZED, "no transport");
    return transport_->Query(key);
  }
  const char* transport_name() const { return transport_ ? transport_->name() : "none"; }
  Context::BufferStats buffer_stats() const {
    Context::BufferStats b;
    if (!executor_) return b;
    b.fusion_capacity = executor_->fusion().capacity();
    b.pool_spare_bytes = executor_->results().spare_bytes();
    return b;
  }

  // ControlPlane
  Status AllreduceMinU8(uint8_t* buf, size_t n) override {
    return transport_->Allreduce(buf, n, HVD_UINT8, HVD_MIN);
  }
  Status AllgatherBytes(const std::vector<uint8_t>& mine,
                        std::vector<std::vector<uint8_t>>* all) override;

 private:
  void Loop();
  void Cycle();
  uint64_t Execute(std::vector<Response>& responses);  // returns the bytes moved
  void Finish(OpRequest& req, Status status);
  void FinishAll(OpRequest* const* reqs, size_t n, const Status& status);
  void FailEverything(const Status& why);

  Config cfg_;
  Logger log_;
  std::unique_ptr<Controller> controller_;  // made once the topology is final
  std::unique_ptr<Bootstrap> boot_;  // the store (and its client) the transport may use
  std::unique_ptr<Transport> transport_;
  Timeline timeline_;
  std::unique_ptr<Autotuner> tuner_;  // made in Start()
  std::unique_ptr<Executor> executor_;  // made in Start(), once the transport is up
  int64_t fusion_threshold_ = 0;      // cfg_'s, or the autotuner's current choice
  // The peer timeout in force around each negotiation (seconds); 0 = none:
  // off, not below the transport timeout, or a transport without set_timeout.
  double peer_timeout_ = 0;

  // Shared with user threads (guarded by mu_), and with handles (the signal).
  std::shared_ptr<LoopSignal> signal_ = std::make_shared<LoopSignal>();
  std::mutex& mu_ = signal_->mu;
  std::condition_variable& cv_ = signal_->cv;
  std::deque<OpRequest> queue_;
  Clock::time_point last_enqueue_;  // of the newest request in queue_
  std::unordered_set<std::string> inflight_;
  uint64_t barrier_count_ = 0;
  bool shutdown_requested_ = false;
  bool stopped_ = false;  // the loop has exited; enqueue fails with stop_reason_
  Status stop_reason_;
  std::thread thread_;
  bool loop_exited_ = false;  // under mu_
  std::condition_variable exit_cv_;
  static constexpr int kShutdownGraceS = 2;
  std::once_flag shutdown_once_;

  // Background thread only.
  std::vector<uint64_t> lens_;
  std::vector<size_t> len_bytes_;
  std::vector<uint8_t> gather_buf_;
  std::vector<Response> responses_;
};

Status ContextImpl::AllgatherBytes(const std::vector<uint8_t>& mine,
                                   std::vector<std::vector<uint8_t>>* all) {
  const int n = cfg_.size;
  lens_.assign(static_cast<size_t>(n), 0);
  len_bytes_.assign(static_cast<size_t>(n), sizeof(uint64_t));
  uint64_t my_len = mine.size();
  HVD_CHECK(transport_->Allgatherv(&my_len, lens_.data(), len_bytes_.data()));
  size_t total = 0;
  for (int r = 0; r < n; ++r) {
    len_bytes_[r] = static_cast<size_t>(lens_[r]);
    total += len_bytes_[r];
  }
  gather_buf_.resize(std::max<size_t>(total, 1));
  HVD_CHECK(transport_->Allgatherv(mine.data(), gather_buf_.data(), len_bytes_.data()));
  all->resize(static_cast<size_t>(n));
  size_t off = 0;
  for (int r = 0; r < n; ++r) {
    (*all)[r].assign(gather_buf_.begin() + static_cast<std::ptrdiff_t>(off),
                     gather_buf_.begin() + static_cast<std::ptrdiff_t>(off + len_bytes_[r]));
    off += len_bytes_[r];
  }
  return Status::Ok();
}

Status ContextImpl::Start() {
  HVD_LOG(log_, HVD_LOG_DEBUG, "config: " << cfg_.ToString());
  ReportStartStage(StartStage::kStarted, cfg_.hostname, log_);  // for hvdrun --transport mpi
  boot_ = std::make_unique<Bootstrap>(&cfg_, &log_);
  HVD_ASSIGN_OR_RETURN(transport_, boot_->Run());
  log_.set_rank(cfg_.rank);
  // The peer timeout bounds the negotiation only: every live rank enters it
  // at least once per heartbeat, whatever its user threads do, so a peer
  // that has not entered it for that long is stopped or cut off. Data
  // transfers keep the transport timeout (they may legitimately take long).
  if (cfg_.size > 1 && cfg_.peer_timeout_s > 0 &&
      (cfg_.transport_timeout_s <= 0 || cfg_.peer_timeout_s < cfg_.transport_timeout_s)) {
    if (transport_->has_set_timeout()) {
      peer_timeout_ = cfg_.peer_timeout_s;
    } else {
      HVD_LOG(log_, HVD_LOG_DEBUG,
              "the " << transport_->name()
                     << " transport cannot change its limit per call: no peer timeout (a silent "
                        "peer is noticed at the transport timeout)");
    }
  }
  controller_ = std::make_unique<Controller>(
      cfg_.rank, cfg_.size, cfg_.cache_capacity,
      StallConfig{cfg_.stall_warning_s, cfg_.stall_shutdown_s}, &log_);

  if (!cfg_.timeline_path.empty() && cfg_.rank == 0) HVD_CHECK(timeline_.Open(cfg_.timeline_path));
  executor_ = std::make_unique<Executor>(transport_.get(), &timeline_, cfg_.rank, cfg_.size,
                                         static_cast<size_t>(cfg_.buffer_pool_bytes));
  fusion_threshold_ = cfg_.fusion_threshold;
  tuner_ = std::make_unique<Autotuner>(cfg_, &log_);
  const int64_t initial = std::min(cfg_.fusion_threshold, cfg_.fusion_buffer_initial);
  if (initial > 0) {
    // Fault the fusion buffer in now rather than during the first steps.
    if (executor_->fusion().ReserveFaulted(static_cast<size_t>(initial)) == nullptr) {
      return Error(HVD_ERR_NO_MEMORY, "cannot allocate the fusion buffer's initial " +
                                          std::to_string(initial) +
                                          " bytes (HVD_FUSION_BUFFER_INITIAL)");
    }
  }
  thread_ = std::thread([this] {
    Loop();
    std::lock_guard<std::mutex> lock(mu_);
    loop_exited_ = true;
    exit_cv_.notify_all();
  });
  return Status::Ok();
}

Result<std::shared_ptr<Handle>> ContextImpl::Enqueue(OpRequest req) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopped_ || shutdown_requested_) {
    return stopped_ && !stop_reason_.ok()
               ? stop_reason_
               : Error(HVD_ERR_ABORTED, "the context has been shut down");
  }
  if (req.type == OpType::kBarrier) {
    req.tensors.front().name = "barrier#" + std::to_string(barrier_count_++);
  } else if (req.type == OpType::kJoin) {
    req.tensors.front().name = "join";
  }
  for (size_t i = 0; i < req.tensors.size(); ++i) {
    if (inflight_.count(req.tensors[i].name) != 0) {
      for (size_t j = 0; j < i; ++j) inflight_.erase(req.tensors[j].name);
      return Error(HVD_ERR_DUPLICATE_NAME,
                   "an operation on '" + req.tensors[i].name +
                       "' is already in flight; wait for it before reusing the name");
    }
    inflight_.insert(req.tensors[i].name);
  }
  std::shared_ptr<Handle> h = req.handle;
  req.enqueued = Clock::now();
  last_enqueue_ = req.enqueued;
  signal_->caller_waits = false;
  req.handle->set_signal(signal_);
  const bool was_empty = queue_.empty();
  queue_.push_back(std::move(req));
  // The loop waits for the queue to become non-empty; later submits of a
  // burst need no wake-up (it reads last_enqueue_ when it settles).
  if (was_empty) cv_.notify_one();
  return h;
}

void ContextImpl::Finish(OpRequest& req, Status status) {
  OpRequest* one = &req;
  FinishAll(&one, 1, status);
}

// One lock for the whole batch: a fused step completes hundreds of requests.
void ContextImpl::FinishAll(OpRequest* const* reqs, size_t n, const Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < n; ++i) {
      for (const TensorSpec& t : reqs[i]->tensors) inflight_.erase(t.name);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    OpRequest& req = *reqs[i];
    if (!status.ok() && status.code() != HVD_ERR_ABORTED) {
      HVD_LOG(log_, HVD_LOG_DEBUG, req.handle->description() << " failed: " << status.message());
    }
    req.handle->Complete(status);
  }
}

void ContextImpl::FailEverything(const Status& why) {
  std::deque<OpRequest> queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopped_) stop_reason_ = why;  // keep the first reason
    stopped_ = true;
    queued.swap(queue_);
  }
  for (OpRequest& r : (controller_ ? controller_->TakeAll() : std::vector<OpRequest>())) Finish(r, why);
  for (OpRequest& r : queued) Finish(r, why);
}

void ContextImpl::Shutdown() {
  std::call_once(shutdown_once_, [this] {
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutdown_requested_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) {
      // A live peer enters every negotiation within a heartbeat (0.1 s), so
      // a loop still inside a transport call after the grace is stuck on a
      // peer that stopped answering or on a long transfer this rank is
      // leaving anyway: abort it (the transport makes the call return at
      // once) rather than wait for the transport timeout.
      std::unique_lock<std::mutex> lock(mu_);
      if (!exit_cv_.wait_for(lock, std::chrono::seconds(kShutdownGraceS), [this] { return loop_exited_; }) &&
          transport_) {
        lock.unlock();
        // A timeout's status: the peer it waits for may be gone for good.
        const bool aborted = transport_->Abort(
            HVD_ERR_TIMEOUT, "rank " + std::to_string(cfg_.rank) +
                                 " is shutting down its context while a collective is blocked");
        HVD_LOG(log_, HVD_LOG_WARNING,
                "shutdown: the background thread is still inside a collective after "
                    << kShutdownGraceS << " s; "
                    << (aborted ? "aborted it" : "the transport cannot abort: waiting for its timeout"));
      }
    }
    if (thread_.joinable()) thread_.join();
    FailEverything(Error(HVD_ERR_ABORTED, "the context has been shut down"));
    timeline_.Close();
  });
}

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
void ContextImpl::Loop() {
#if defined(__linux__)
  // The default 50 us of timer slack would be added to every wake-up.
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  // Named for top -H, perf and debuggers.
  prctl(PR_SET_NAME, "hvd-loop", 0UL, 0UL, 0UL);
#endif
  using std::chrono::duration;
  using std::chrono::duration_cast;
  auto cycle = duration_cast<Clock::duration>(duration<double, std::milli>(cfg_.cycle_time_ms));
  // How long a burst may pause between two submits and still be one batch:
  // C callers submit every 0.3-2 us, Python frontends every 5-15 us here.
  constexpr auto kSettle = std::chrono::microseconds(HVD_SETTLE_US);
  auto settle = std::min<Clock::duration>(cycle, kSettle);
  // An idle rank still negotiates this often: peers with work wait for it
  // inside the negotiation collective, which must end well within the
  // transport timeout.
  double heartbeat_s = 0.1;
  if (cfg_.transport_timeout_s > 0) {
    heartbeat_s = std::min(heartbeat_s, cfg_.transport_timeout_s / 4);
  }
  if (peer_timeout_ > 0) heartbeat_s = std::min(heartbeat_s, peer_timeout_ / 4);
  const auto heartbeat = duration_cast<Clock::duration>(duration<double>(heartbeat_s));
  // Adaptive settle (see below): after kQuietAfter wake-ups in a row whose
  // settle window caught nothing, lone submits are negotiated at once.
  constexpr int kQuietAfter = 8;
  constexpr uint64_t kProbeEvery = 16;
  int quiet_wakeups = 0;
  uint64_t wakeups = 0;
  auto next = Clock::now();
  std::deque<OpRequest> batch;
  while (true) {
    bool shutting_down;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto ready = [this] { return shutdown_requested_ || !queue_.empty(); };
      if (controller_->pending() == 0) {
        cv_.wait_until(lock, Clock::now() + heartbeat, ready);
      } else {
        cv_.wait_until(lock, next, ready);
      }
      if (!queue_.empty() && !shutdown_requested_) {
        // Settle only where submits come in bursts: several already queued
        // by the time this thread runs, or a recent settle window caught
        // more; a probe every kProbeEvery-th wake-up notices a change.
        ++wakeups;
        const size_t queued = queue_.size();
        if (queued > 1 || quiet_wakeups < kQuietAfter || wakeups % kProbeEvery == 0) {
          const auto limit = queue_.front().enqueued + cycle;
          // A caller blocking on a handle ends the burst at once.
          auto done = [this] { return shutdown_requested_ || signal_->caller_waits; };
          for (;;) {
            const auto until = std::min(last_enqueue_ + settle, limit);
            if (Clock::now() >= until) break;
            if (cv_.wait_until(lock, until, done)) break;
          }
          quiet_wakeups = queued > 1 || queue_.size() > queued ? 0 : quiet_wakeups + 1;
        }
      }
      shutting_down = shutdown_requested_;
      batch.swap(queue_);
    }
    auto now = Clock::now();
    for (OpRequest& r : batch) controller_->Add(std::move(r), now);
    batch.clear();

    bool shutdown = false;
    const uint64_t full_rounds = controller_->full_rounds();
    controller_->set_proposal(tuner_->Proposal());
    // The negotiation runs under the peer timeout, the transfers under the
    // transport timeout.
    Status s = peer_timeout_ > 0
                   ? transport_->SetTimeout(peer_timeout_, HVD_TRANSPORT_LIMIT_PEER)
                   : Status::Ok();
    if (s.ok()) s = controller_->Cycle(this, shutting_down, now, &responses_, &shutdown);
    if (s.ok() && peer_timeout_ > 0) {
      s = transport_->SetTimeout(cfg_.transport_timeout_s, HVD_TRANSPORT_LIMIT_TRANSFER);
    }
    const bool changed = !responses_.empty() || controller_->full_rounds() != full_rounds;
    next = changed ? Clock::now() : Clock::now() + cycle;
    if (!s.ok()) {
      HVD_LOG(log_, HVD_LOG_ERROR, s.message());
      FailEverything(Error(s.code(), "the context can no longer communicate: " + s.message()));
      return;
    }
    if (shutdown) {
      FailEverything(Error(HVD_ERR_ABORTED,
                           shutting_down ? "the context has been shut down"
                                         : "another rank shut down its context"));
      return;
    }
    TuneParams tuned;
    if (tuner_->Apply(controller_->decided(), &tuned)) {
      // Every rank switches in this same cycle, before bucketing its responses.
      fusion_threshold_ = tuned.fusion_threshold;
      cycle = duration_cast<Clock::duration>(duration<double, std::milli>(tuned.cycle_time_ms));
      settle = std::min<Clock::duration>(cycle, kSettle);
      HVD_LOG(log_, HVD_LOG_DEBUG,
              "autotune: fusion threshold " << tuned.fusion_threshold << " bytes, cycle time "
                                            << tuned.cycle_time_ms << " ms");
    }
    if (!responses_.empty()) {
      const uint64_t bytes = Execute(responses_);
      tuner_->Observe(bytes, now, Clock::now());
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;
    }
  }
}

// Groups allreduces into fusion batches (same dtype, op, scaling and device,
// at most the fusion threshold of bytes), keeping every other operation in
// response order. All ranks hold the same responses, so all build the same
// batches in the same order.
uint64_t ContextImpl::Execute(std::vector<Response>& responses) {
  struct Unit {
    std::vector<OpRequest*> batch;  // allreduce batch
    OpRequest* single = nullptr;
    const Response* resp = nullptr;
    size_t bytes = 0;
  };
  std::vector<OpRequest> reqs(responses.size());
  std::vector<bool> have(responses.size(), false);
  std::vector<Unit> units;
  struct OpenBatch {
    size_t unit;
    hvd_dtype_t dtype;
    hvd_reduce_op_t op;
    double pre, post;
    bool cpu;
  };
  std::vector<OpenBatch> open;
  std::deque<std::vector<uint8_t>> zeros;  // buffers of a joined rank's stand-in tensors
  const size_t threshold = static_cast<size_t>(fusion_threshold_);
  auto now = Clock::now();

  for (size_t i = 0; i < responses.size(); ++i) {
    Response& resp = responses[i];
    have[i] = controller_->Take(resp.key, &reqs[i]);
    if (!have[i] && resp.error.ok() && resp.all && !resp.all->empty() &&
        resp.desc(0).type == OpType::kAllreduce &&
        std::find(resp.joined.begin(), resp.joined.end(), cfg_.rank) != resp.joined.end()) {
      // This rank has joined: it contributes zeros of the same shape and
      // throws the result away.
      const RequestDesc& d = resp.desc(cfg_.rank);
      OpRequest& ph = reqs[i];
      ph.type = OpType::kAllreduce;
      ph.reduce_op = d.reduce_op;
      ph.prescale = d.prescale;
      ph.postscale = d.postscale;
      for (size_t k = 0; k < d.names.size(); ++k) {
        TensorSpec t;
        t.name = d.names[k];
        t.dtype = d.dtype;
        t.shape = d.shapes[k];
        zeros.emplace_back(static_cast<size_t>(t.NumElements()) * DtypeSize(d.dtype), 0);
        t.input = t.output = zeros.back().data();
        ph.tensors.push_back(std::move(t));
      }
      ph.handle = std::make_shared<Handle>("zeros for allreduce '" + resp.key + "' (joined)");
      ph.enqueued = now;
      have[i] = true;
    }
    if (!have[i]) continue;  // e.g. a stall error for a request this rank never made
    OpRequest& req = reqs[i];
    if (timeline_.enabled()) {
      timeline_.Span(resp.key, "NEGOTIATE", req.enqueued, now);
    }
    if (!resp.error.ok()) {
      Finish(req, resp.error);
      continue;
    }
    if (req.type != OpType::kAllreduce) {
      Unit u;
      u.single = &req;
      u.resp = &resp;
      units.push_back(u);
      continue;
    }
    size_t bytes = 0;
    for (const TensorSpec& t : req.tensors) {
      bytes += static_cast<size_t>(t.NumElements()) * DtypeSize(t.dtype);
    }
    const TensorSpec& t0 = req.tensors.front();
    OpenBatch* match = nullptr;
    for (OpenBatch& b : open) {
      if (b.dtype == t0.dtype && b.op == req.reduce_op && b.pre == req.prescale &&
          b.post == req.postscale && b.cpu == (t0.device == HVD_DEVICE_CPU)) {
        match = &b;
        break;
      }
    }
    if (match != nullptr && threshold > 0 && units[match->unit].bytes + bytes <= threshold) {
      units[match->unit].batch.push_back(&req);
      units[match->unit].bytes += bytes;
      continue;
    }
    Unit u;
    u.batch.push_back(&req);
    u.bytes = bytes;
    units.push_back(u);
    OpenBatch ob{units.size() - 1, t0.dtype, req.reduce_op, req.prescale, req.postscale,
                 t0.device == HVD_DEVICE_CPU};
    if (match != nullptr) {
      *match = ob;
    } else {
      open.push_back(ob);
    }
  }

  uint64_t moved = 0;
  for (size_t k = 0; k < units.size(); ++k) {
    Unit& u = units[k];
    if (u.single != nullptr) {
      for (const TensorSpec& t : u.single->tensors) {
        moved += static_cast<uint64_t>(t.NumElements()) * DtypeSize(t.dtype);
      }
    } else {
      moved += u.bytes;
    }
    Status s = u.single != nullptr ? executor_->RunOne(*u.single, *u.resp)
                                       : executor_->RunAllreduceBatch(u.batch);
    if (u.single != nullptr) {
      Finish(*u.single, s);
    } else {
      FinishAll(u.batch.data(), u.batch.size(), s);
    }
    if (!s.ok() && s.code() != HVD_ERR_MISMATCH && s.code() != HVD_ERR_INVALID_ARGUMENT) {
      // The transport failed: peers are gone or out of step.
      Status broken(s.code(), "the context can no longer communicate: " + s.message());
      HVD_LOG(log_, HVD_LOG_ERROR, broken.message());
      for (size_t j = k + 1; j < units.size(); ++j) {
        if (units[j].single != nullptr) Finish(*units[j].single, broken);
        for (OpRequest* r : units[j].batch) Finish(*r, broken);
      }
      FailEverything(broken);
      return moved;
    }
  }
  timeline_.Flush();
  return moved;
}


// ---- Context -------------------------------------------------------------

Context::Context(std::unique_ptr<ContextImpl> impl) : impl_(std::move(impl)) {}
Context::~Context() { Shutdown(); }

Result<std::unique_ptr<Context>> Context::Create(const hvd_params_t* params) {
  HVD_ASSIGN_OR_RETURN(Config cfg, ResolveConfig(params, ProcessEnv()));
  auto impl = std::make_unique<ContextImpl>(std::move(cfg));
  HVD_CHECK(impl->Start());
  return std::unique_ptr<Context>(new Context(std::move(impl)));
}

int Context::rank() const { return impl_->cfg().rank; }
int Context::size() const { return impl_->cfg().size; }
int Context::local_rank() const { return impl_->cfg().local_rank; }
int Context::local_size() const { return impl_->cfg().local_size; }
int Context::cross_rank() const { return impl_->cfg().cross_rank; }
int Context::cross_size() const { return impl_->cfg().cross_size; }
const char* Context::transport_name() const { return impl_->transport_name(); }
Result<int64_t> Context::Query(const std::string& key) const { return impl_->Query(key); }
Context::BufferStats Context::buffer_stats() const { return impl_->buffer_stats(); }

Result<std::shared_ptr<Handle>> Context::Enqueue(OpRequest request) {
  if (!request.handle) return Error(HVD_ERR_INTERNAL, "request without a handle");
  if (request.tensors.empty()) return Error(HVD_ERR_INTERNAL, "request without tensors");
  return impl_->Enqueue(std::move(request));
}

void Context::Shutdown() {
  if (impl_) impl_->Shutdown();
}

}  // namespace hvd
