// Metrics in the loop: what the cycle records (negotiations, each executed
// unit, stragglers), the set-up before the loop, the last report at
// shutdown, and the report itself (metrics_render.h) for any thread.
#include <algorithm>

#include "algorithms/selection.h"
#include "core/context_impl.h"
#include "core/observability/metrics_render.h"
#include "core/observability/start_report.h"

namespace hvd {

void ContextImpl::StartMetrics() {
  Stragglers::Settings s;
  s.warning_s = cfg_.straggler_warning_s;
  s.share = cfg_.straggler_share;
  s.record = metrics_on_ = cfg_.metrics != 0;
  const Transport* t = transport_.get();
  auto host = [t](int r) { return t != nullptr ? t->host_of(r) : std::string(); };
  stragglers_.Configure(root_->rank, root_->size, s, &log_, host);
  set_stragglers_.Configure(root_->rank, root_->size, s, &log_, host);
  if (cfg_.metrics_publish_s <= 0) return;
  auto render = [this] { return MetricsText(HVD_METRICS_PROMETHEUS); };
  const std::string key = MetricsPublisher::Key(root_->rank, cfg_.elastic ? cfg_.epoch : -1);
  rdv::StoreClient* store = boot_ ? boot_->store() : nullptr;
  if (store != nullptr) {
    publisher_ = std::make_unique<MetricsPublisher>(store, key, cfg_.metrics_publish_s,
                                                    render, &log_);
    return;
  }
  // Under mpirun (hvdrun --transport mpi) the job has no store: hvdrun's
  // start-report store takes the reports.
  auto own = ConnectStartReportStore();
  if (own.ok() && *own) {
    publisher_ = std::make_unique<MetricsPublisher>(std::move(own).value(), key,
                                                    cfg_.metrics_publish_s, render, &log_);
  } else {
    HVD_LOG(log_, HVD_LOG_WARNING,
            "HVD_METRICS_PUBLISH is set but rank "
                << root_->rank << " has no store to publish to (no rendezvous store, "
                << (own.ok() ? "no HVD_START_REPORT_ADDR" : own.status().message())
                << "): the launcher will not see its metrics");
  }
}

void ContextImpl::StopMetrics() {
  if (publisher_) publisher_->Stop();
}

namespace {
uint64_t Nanos(std::chrono::steady_clock::duration d) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}
}  // namespace

// After a negotiation (the context's and its sets'): the straggler block it
// carried (at straggler_block of ctrl_, when it carried one). Its time ends
// where the first scope's execution starts (that reads the clock anyway);
// a negotiation that made nothing ready reads it here.
void ContextImpl::NoteNegotiation(Clock::time_point begin, size_t straggler_block) {
  const uint8_t* block = straggler_block < ctrl_.size() ? ctrl_.data() + straggler_block : nullptr;
  stragglers_.Negotiated(block, !root_->responses.empty(), begin);  // off: the block's schedule
  if (!metrics_on_) return;
  loop_metrics_.negotiations.Add(1);
  negotiation_begin_ = begin;
  negotiation_open_ = true;
  bool ready = !root_->responses.empty();
  for (const auto& set : sets_) ready = ready || (set && (!set->responses.empty() || set->close_agreed));
  if (!ready) NoteExecution(Clock::now());
}

void ContextImpl::NoteExecution(Clock::time_point now) {
  if (!negotiation_open_) return;
  negotiation_open_ = false;
  loop_metrics_.negotiation_nanos.Add(Nanos(now - negotiation_begin_));
}

namespace {

metrics::Path FromAlgorithm(algo::Algorithm a) {
  const int v = static_cast<int>(a);
  return v >= 0 && v <= static_cast<int>(metrics::kPathDissemination) ? static_cast<metrics::Path>(v)
                                                                      : metrics::kPathAuto;
}

bool OnDevice(const OpRequest& r) {
  return !r.tensors.empty() && r.tensors.front().device != HVD_DEVICE_CPU;
}

}  // namespace

// A unit the executor ran: how it ran (the transport's choice for the
// context's host tensors; a set's own communicator; a device transport).
void ContextImpl::NoteUnit(Scope& scope, const FusionUnit& u, Clock::duration took) {
  if (!metrics_on_) return;
  const OpRequest& first = u.single != nullptr ? *u.single : *u.batch.front();
  size_t tensors = u.single != nullptr ? u.single->tensors.size() : 0;
  for (const OpRequest* r : u.batch) tensors += r->tensors.size();
  const uint64_t bytes = u.single != nullptr ? RequestBytes(*u.single) : u.bytes;
  const int c = static_cast<int>(first.type);
  metrics::Path path = metrics::kPathAuto;
  if (first.type == OpType::kAllreduce && first.reduce_op == HVD_ADASUM) {
    path = metrics::kPathAdasum;
  } else if (OnDevice(first) && device_transport_) {
    path = metrics::kPathDevice;
  } else if (&scope != root_.get()) {
    path = metrics::kPathSet;
  } else if (c < HVD_TRANSPORT_COLLECTIVES) {
    const bool hier = transport_->hierarchical_on() &&
                      (c == HVD_TRANSPORT_ALLREDUCE || c == HVD_TRANSPORT_ALLGATHERV);
    path = hier ? metrics::kPathHierarchical : FromAlgorithm(transport_->Choose(c, bytes));
  }
  scope.metrics.Unit(first.type, tensors, bytes, Nanos(took), path, scope.size);
}

std::string ContextImpl::MetricsText(int format) const {
  MetricsReport r;
  r.rank = root_->rank;
  r.size = root_->size;
  r.transport = transport_name();
  r.host = transport_ ? transport_->host_of(root_->rank) : cfg_.hostname;
  r.loop = &loop_metrics_;
  r.enabled = metrics_on_;
  r.stragglers = &stragglers_;
  std::vector<std::shared_ptr<Scope>> scopes{root_};
  {
    std::lock_guard<std::mutex> lock(mu_);
    r.piggybacked = piggybacked_.load(std::memory_order_relaxed);
    for (const auto& w : all_sets_) {
      if (auto s = w.lock()) scopes.push_back(std::move(s));
    }
  }
  for (const auto& s : scopes) {
    MetricsReport::Scope v;
    if (s == root_) {
      v.process_set = "all";
      v.stragglers = &stragglers_;
    } else {
      for (size_t i = 0; i < s->members.size(); ++i) {
        v.process_set += (i ? "," : "") + std::to_string(s->members[i]);
      }
      v.stragglers = &s->stragglers;
      v.members = s->members;
    }
    v.rank = s->rank;
    v.size = s->size;
    v.m = &s->metrics;
    v.keep = s;
    r.scopes.push_back(std::move(v));
  }
  return format == HVD_METRICS_PROMETHEUS ? RenderMetricsPrometheus(r) : RenderMetricsJson(r);
}

}  // namespace hvd
