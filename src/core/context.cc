// The context: bootstrap (rendezvous, topology, transport) and the background
// loop (negotiate, fuse, run, complete).
#include "core/context.h"

#include <algorithm>
#include <mutex>

#include "core/context_impl.h"
#include "core/elastic/reset.h"
#include "core/observability/start_report.h"

namespace hvd {

Status ContextImpl::Start() {
  HVD_LOG(log_, HVD_LOG_DEBUG, "config: " << cfg_.ToString());
  ReportStartStage(StartStage::kStarted, cfg_.hostname, log_);  // for hvdrun --transport mpi
  boot_ = std::make_unique<Bootstrap>(&cfg_, &log_);
  HVD_ASSIGN_OR_RETURN(transport_, boot_->Run());
  device_transport_ = boot_->TakeDevice();
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
  Scope& root = *root_;
  root.members.resize(static_cast<size_t>(cfg_.size));
  for (int r = 0; r < cfg_.size; ++r) root.members[static_cast<size_t>(r)] = r;
  root.rank = cfg_.rank;
  root.size = cfg_.size;
  root.local_rank = cfg_.local_rank;
  root.local_size = cfg_.local_size;
  root.cross_rank = cfg_.cross_rank;
  root.cross_size = cfg_.cross_size;
  root.comm = transport_.get();
  root.plane = std::make_unique<CommPlane>(root.comm);
  root.controller = std::make_unique<Controller>(
      cfg_.rank, cfg_.size, cfg_.cache_capacity,
      StallConfig{cfg_.stall_warning_s, cfg_.stall_shutdown_s}, &log_);
  root.controller->set_piggyback(cfg_.piggyback != 0);
  root.controller->set_extent_step(Controller::kRootExtentStep);

  if (!cfg_.timeline_path.empty() && cfg_.rank == 0) {
    HVD_CHECK(timeline_.Open(cfg_.timeline_path));
    mark_cycles_ = cfg_.timeline_mark_cycles;  // before the background thread starts
    exact_enqueue_ = true;
  }
  executor_ = std::make_unique<Executor>(transport_.get(), &timeline_,
                                         static_cast<size_t>(cfg_.buffer_pool_bytes));
  executor_->Use(transport_.get(), device_transport_.get());
  executor_->set_local_rank(cfg_.local_rank);
  executor_->set_async_completion(cfg_.cuda_async_completion == 1);
  fusion_threshold_ = cfg_.fusion_threshold;
  StartRecorder();
  tuner_ = std::make_unique<Autotuner>(cfg_, &log_);
  // Hierarchical collectives the transport chose by itself (not forced by
  // HVD_HIERARCHICAL): the tuner tries them off too. Every rank has the same
  // hierarchy (decided from every rank's host), so every rank tunes alike.
  if (cfg_.hierarchical < 0 && transport_->hierarchical()) tuner_->TuneHierarchical();
  const int64_t initial = std::min(cfg_.fusion_threshold, cfg_.fusion_buffer_initial);
  if (initial > 0) {
    // Fault the fusion buffer in now rather than during the first steps.
    if (executor_->fusion().ReserveFaulted(static_cast<size_t>(initial)) == nullptr) {
      return Error(HVD_ERR_NO_MEMORY, "cannot allocate the fusion buffer's initial " +
                                          std::to_string(initial) +
                                          " bytes (HVD_FUSION_BUFFER_INITIAL)");
    }
  }
  // The loop's pacing (see Loop).
  pace_.SetCycleTime(cfg_.cycle_time_ms);
  pace_.SetHeartbeat(cfg_.transport_timeout_s, peer_timeout_);
  pace_.next = pace_.last = Clock::now();
  // Callers may run the cycle where the transport can be called from any
  // thread (one at a time), unless HVD_CALLER_CYCLES=0.
  caller_cycles_ = cfg_.caller_cycles != 0 && transport_->any_thread() &&
                   (!device_transport_ || device_transport_->any_thread());
  HVD_LOG(log_, HVD_LOG_DEBUG,
          "cycles on waiting callers' threads: "
              << (caller_cycles_ ? "on"
                                 : cfg_.caller_cycles == 0
                                       ? "off (HVD_CALLER_CYCLES=0)"
                                       : "off (the transport is bound to the loop thread)"));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (caller_cycles_) signal_->driver = this;
  }
  StartMetrics();
  thread_ = std::thread([this] {
    Loop();
    std::lock_guard<std::mutex> lock(mu_);
    loop_exited_ = true;
    exit_cv_.notify_all();
  });
  return Status::Ok();
}

size_t ContextImpl::pending() const {
  size_t n = root_->controller->pending();
  for (const auto& s : sets_) {
    if (s) n += s->controller->pending();
  }
  return n;
}

void ContextImpl::FailEverything(const Status& given) {
  const Status why = Membership(given);
  std::vector<std::shared_ptr<Scope>> scopes{root_};
  for (const auto& w : all_sets_) {
    if (auto s = w.lock()) scopes.push_back(std::move(s));
  }
  std::vector<std::vector<OpRequest>> queued(scopes.size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopped_) {
      stop_reason_ = why;  // keep the first reason
      if (!shutdown_requested_) recorder_.Stopped(why, Clock::now());
    }
    stopped_ = true;
    for (size_t i = 0; i < scopes.size(); ++i) {
      queued[i].swap(scopes[i]->queue);
      if (i > 0 && !scopes[i]->closed) {
        scopes[i]->closed = true;
        scopes[i]->closed_reason =
            Error(why.code(), "the process set's parent context stopped: " + why.message());
      }
    }
    queued_ = 0;
  }
  for (size_t i = 0; i < scopes.size(); ++i) {
    Scope& sc = *scopes[i];
    const Status st = i == 0 ? why : sc.closed_reason;
    if (sc.controller) {
      for (OpRequest& r : sc.controller->TakeAll()) Finish(sc, r, st);
    }
    for (OpRequest& r : queued[i]) Finish(sc, r, st);
    for (OpRequest& r : sc.batch) Finish(sc, r, st);
    sc.batch.clear();
  }
  if (recorder_.pending()) ServeDumps();  // once, with every record failed
}

void ContextImpl::Shutdown(const Status& why) {
  std::call_once(shutdown_once_, [this, &why] {
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutdown_reason_ = why;
      shutdown_requested_ = true;
      signal_->driver = nullptr;  // no caller starts a cycle from here on
    }
    cv_.notify_all();
    if (thread_.joinable()) AwaitPeersAtShutdown();
    if (thread_.joinable()) thread_.join();
    {
      // A caller's cycle ends with the loop's (the transport was aborted if
      // it was stuck), and none starts after it.
      std::unique_lock<std::mutex> lock(mu_);
      exit_cv_.wait(lock, [this] { return !cycle_held_; });
    }
    FailEverything(why);
    ReleaseSets();
    timeline_.Close();
    StopMetrics();  // the last report, with the aborted operations
  });
}

// The shutdown's waits, each bounded. First the negotiation that tells every
// rank of it: a live peer enters every negotiation within a heartbeat (0.1 s,
// or after a process set's transfer it waits for), so a loop still inside a
// transport call after the grace is stuck on a peer that stopped answering or
// on a long transfer this rank is leaving anyway: abort it (the transport
// makes the call return at once) rather than wait for the transport timeout.
// Then the others' shutdowns, as MPI_Finalize waits for its peers: the loop
// negotiates on with them (so collectives without this rank finish) until
// every rank has shut down, for at most the stall shutdown time.
void ContextImpl::AwaitPeersAtShutdown() {
  std::unique_lock<std::mutex> lock(mu_);
  // (A caller's cycle in progress counts as the loop's.)
  auto left = [this] { return loop_exited_ && !cycle_held_; };
  const double grace = any_set_live_ ? std::max<double>(kShutdownGraceS, cfg_.transport_timeout_s)
                                     : kShutdownGraceS;
  bool stuck = !exit_cv_.wait_for(lock, std::chrono::duration<double>(grace),
                                  [&] { return left() || shutdown_announced_; });
  if (!stuck && !left() && cfg_.stall_shutdown_s > 0) {
    const auto limit = std::chrono::duration<double>(cfg_.stall_shutdown_s);
    if (!exit_cv_.wait_for(lock, limit, left)) {
      HVD_LOG(log_, HVD_LOG_WARNING,
              "shutdown: rank " << cfg_.rank << " waited " << cfg_.stall_shutdown_s
                                << " s (HVD_STALL_SHUTDOWN_TIME) for the other ranks to shut "
                                   "down their contexts; leaving: their collectives with it fail");
      shutdown_expired_ = true;
      cv_.notify_all();
      stuck = !exit_cv_.wait_for(lock, std::chrono::seconds(kShutdownGraceS), left);
    }
  } else if (!stuck) {
    exit_cv_.wait(lock, left);  // bounded by the peers' liveness (the peer timeout)
  }
  if (!stuck || !transport_) return;
  lock.unlock();
  // A timeout's status: the peer it waits for may be gone for good.
  const std::string why = "rank " + std::to_string(cfg_.rank) +
                          " is shutting down its context while a collective is blocked";
  bool aborted = transport_->Abort(HVD_ERR_TIMEOUT, why);
  if (device_transport_) aborted = device_transport_->Abort(HVD_ERR_TIMEOUT, why) && aborted;
  {
    std::lock_guard<std::mutex> sets_lock(mu_);
    for (const auto& w : all_sets_) {
      auto set = w.lock();
      if (set && set->device) aborted = set->device->Abort(HVD_ERR_TIMEOUT, why) && aborted;
    }
  }
  HVD_LOG(log_, HVD_LOG_WARNING,
          "shutdown: the background thread is still inside a collective after "
              << grace << " s; "
              << (aborted ? "aborted it" : "the transport cannot abort: waiting for its timeout"));
}

void ContextImpl::ReleaseTransport() {
  Shutdown();
  executor_.reset();
  root_->plane.reset();
  root_->comm = nullptr;
  device_transport_.reset();
  transport_.reset();
  boot_.reset();
}

// ---- Context -------------------------------------------------------------

Context::Context(std::shared_ptr<ContextImpl> impl, std::shared_ptr<Scope> scope)
    : impl_(std::move(impl)), scope_(std::move(scope)) {}
Context::~Context() { (void)Shutdown(); }

std::string Context::Metrics(int format) const { return impl_->MetricsText(format); }

Result<std::unique_ptr<Context>> Context::Create(const hvd_params_t* params) {
  return Create(params, ProcessEnv());
}

Result<std::unique_ptr<Context>> Context::Create(const hvd_params_t* params,
                                                 const EnvLookup& env) {
  HVD_ASSIGN_OR_RETURN(Config cfg, ResolveConfig(params, env));
  std::shared_ptr<ElasticMember> elastic;
  if (cfg.elastic) {
    HVD_ASSIGN_OR_RETURN(std::unique_ptr<ElasticMember> member, ElasticMember::Connect(cfg));
    HVD_ASSIGN_OR_RETURN(ElasticMember::Assignment a, member->Join());
    ApplyAssignment(a, &cfg);
    elastic = std::move(member);
  }
  auto impl = std::make_shared<ContextImpl>(std::move(cfg));
  HVD_CHECK(impl->Start());
  std::shared_ptr<Scope> root = impl->root();
  auto ctx = std::unique_ptr<Context>(new Context(std::move(impl), std::move(root)));
  ctx->elastic_ = std::move(elastic);
  return ctx;
}

int Context::rank() const { return scope_->rank; }
int Context::size() const { return scope_->size; }
int Context::local_rank() const { return scope_->local_rank; }
int Context::local_size() const { return scope_->local_size; }
int Context::cross_rank() const { return scope_->cross_rank; }
int Context::cross_size() const { return scope_->cross_size; }
bool Context::is_process_set() const { return scope_->slot >= 0; }
const std::vector<int>& Context::parent_ranks() const { return scope_->members; }
const char* Context::transport_name() const { return impl_->transport_name(); }
Status Context::StartTimeline(const std::string& path, bool mark_cycles) {
  return impl_->TimelineCommand(true, path, mark_cycles);
}
Status Context::StopTimeline() { return impl_->TimelineCommand(false, "", false); }
Status Context::DumpFlightRecorder(const std::string& path) {
  return impl_->DumpFlightRecorder(path, "api");
}
Result<int64_t> Context::Query(const std::string& key) const { return impl_->Query(key); }
Context::BufferStats Context::buffer_stats() const { return impl_->buffer_stats(); }
Status Context::CheckDevice(int device, const std::string& name, const void* data) {
  return impl_->CheckDevice(device, name, data);
}

Result<HandleRef> Context::Enqueue(OpRequest&& request) {
  if (!request.handle) return Error(HVD_ERR_INTERNAL, "request without a handle");
  if (request.tensors.empty()) return Error(HVD_ERR_INTERNAL, "request without tensors");
  HandleRef h = request.handle;
  HVD_CHECK(impl_->Enqueue(scope_.get(), std::move(request)));
  return h;
}

Status Context::EnqueueOne(OpRequest&& request, const TensorSpec& tensor, std::string_view name) {
  if (!request.handle) return Error(HVD_ERR_INTERNAL, "request without a handle");
  if (!request.tensors.empty()) return Error(HVD_ERR_INTERNAL, "a single tensor given twice");
  return impl_->Enqueue(scope_.get(), std::move(request), &tensor, name);
}

Result<std::unique_ptr<Context>> Context::Split(int color, int key) {
  if (is_process_set()) {
    return Error(HVD_ERR_UNSUPPORTED,
                 "process sets of process sets are not supported: split the parent context");
  }
  HVD_ASSIGN_OR_RETURN(std::shared_ptr<Scope> set, impl_->MakeSet({1, color, key}));
  if (!set) return std::unique_ptr<Context>();
  auto child = std::unique_ptr<Context>(new Context(impl_, std::move(set)));
  child->elastic_ = elastic_;  // answers membership for its parent's job
  return child;
}

Result<std::unique_ptr<Context>> Context::CreateProcessSet(const std::vector<int32_t>& ranks) {
  if (is_process_set()) {
    return Error(HVD_ERR_UNSUPPORTED,
                 "process sets of process sets are not supported: create the set from the "
                 "parent context");
  }
  std::vector<int32_t> spec{0, static_cast<int32_t>(ranks.size())};
  spec.insert(spec.end(), ranks.begin(), ranks.end());
  HVD_ASSIGN_OR_RETURN(std::shared_ptr<Scope> set, impl_->MakeSet(std::move(spec)));
  if (!set) return std::unique_ptr<Context>();
  auto child = std::unique_ptr<Context>(new Context(impl_, std::move(set)));
  child->elastic_ = elastic_;  // answers membership for its parent's job
  return child;
}

Status Context::Shutdown() {
  if (shut_ || !impl_) return Status::Ok();
  shut_ = true;
  if (is_process_set()) return impl_->CloseSet(scope_.get());
  impl_->Shutdown();
  return Status::Ok();
}

}  // namespace hvd
