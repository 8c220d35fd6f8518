// A negotiated cycle's responses to the executor: the fusion planner's
// units in order (allreduce batches, joined ranks' zero tensors, every
// other operation alone), their completion, and a stop where the transport
// failed.
#include "core/context_impl.h"

#include <deque>

#include "common/kernels.h"
#include "core/fusion/planner.h"

namespace hvd {

// Groups allreduces into fusion batches (same dtype, op, scaling and device,
// at most the fusion threshold of bytes), keeping every other operation in
// response order. All ranks hold the same responses, so all build the same
// batches in the same order.
uint64_t ContextImpl::Execute(Scope& scope) {
  std::vector<Response>& responses = scope.responses;
  // The cycle's scratch, kept with its capacity: a fused step of 1,000
  // tensors would otherwise allocate and free ~100 KiB of requests every
  // cycle, which also makes malloc consolidate its free lists.
  std::vector<OpRequest>& reqs = exec_reqs_;
  reqs.clear();
  reqs.resize(responses.size());
  // The requests (and their handles) go once the cycle has run them; their
  // tensor lists are kept for the next submits.
  std::deque<std::vector<uint8_t>>& zeros = exec_zeros_;  // a joined rank's stand-ins
  struct ClearRequests {
    ContextImpl* ctx;
    std::vector<OpRequest>& r;
    ~ClearRequests() {
      ctx->Recycle(r);
      ctx->exec_zeros_.clear();
    }
  } clear_requests{this, reqs};
  planner_.Begin(static_cast<size_t>(fusion_threshold_), scope.size);
  auto now = Clock::now();
  const bool root = &scope == root_.get();
  Stragglers& stragglers = root ? stragglers_ : scope.stragglers;
  stragglers.Begin(now);
  NoteExecution(now);

  uint64_t piggybacked = 0;  // bytes served by the negotiation
  for (size_t i = 0; i < responses.size(); ++i) {
    Response& resp = responses[i];
    OpRequest& req = reqs[i];
    if (&scope == root_.get() && resp.slot >= 0 && resp.slot == piggy_.served() &&
        resp.error.ok()) {
      piggybacked += ServePiggybacked(scope, resp, &req, now);
      continue;
    }
    // This rank's request, or, where it has joined, zeros of the same shape
    // (the result thrown away).
    const bool have = scope.controller->Take(resp, &req) ||
                      MakeJoinedZeros(resp, scope.rank, now, &zeros, &req);
    if (!have) continue;  // e.g. a stall error for a request this rank never made
    if (metrics_on_) scope.metrics.Cache(resp.slot >= 0);
    stragglers.Saw(req.enqueued);
    recorder_.Negotiated(req.record, now);
    if (timeline_.enabled()) {
      timeline_.Span(resp.key(), "NEGOTIATE", req.enqueued, now);
    }
    if (!resp.error.ok()) {
      Finish(scope, req, resp.error);
      continue;
    }
    if (req.type == OpType::kCloseSet) {
      // Every member agreed: the set goes once this cycle's other
      // responses have run (CloseAgreed).
      scope.close_agreed = true;
      Finish(scope, req, Status::Ok());
      continue;
    }
    if (req.type != OpType::kAllreduce) {
      planner_.AddSingle(&req, &resp);
    } else {
      planner_.AddAllreduce(&req, resp);
    }
  }
  return RunPlan(scope, piggybacked, now);
}

// A response reduced in the negotiation: finished from there (a joined
// rank, which has no request, has nothing more to do). Returns its bytes.
uint64_t ContextImpl::ServePiggybacked(Scope& scope, Response& resp, OpRequest* req,
                                       Clock::time_point now) {
  piggy_.clear_served();
  if (!scope.controller->Take(resp, req)) return 0;
  stragglers_.Saw(req->enqueued);
  if (metrics_on_) {
    scope.metrics.Cache(true);
    scope.metrics.Unit(piggy_.type(), 1, piggy_.result_bytes(), 0, metrics::kPathPiggyback,
                       scope.size);
  }
  if (req->record != 0) {
    recorder_.Negotiated(req->record, now);
    recorder_.Started(req->record, now, RequestBytes(*req));
  }
  if (timeline_.enabled()) timeline_.Span(resp.key(), "NEGOTIATE", req->enqueued, now);
  const Status s = executor_->FinishPiggybacked(*req, piggy_.result(), piggy_.result_bytes(),
                                                piggy_.gathered_rows(), now);
  // Before the handle completes (its waiter may ask; the completion orders it).
  if (s.ok()) piggybacked_.fetch_add(1, std::memory_order_relaxed);
  Finish(scope, *req, s, now);  // done with the negotiation
  return piggy_.result_bytes();
}

// Runs the planned units in order and completes their requests; returns the
// bytes moved (`moved` already counts the piggybacked ones).
uint64_t ContextImpl::RunPlan(Scope& scope, uint64_t moved, Clock::time_point negotiated) {
  const size_t nunits = planner_.size();
  // The flight recorder: a unit starts when the one before it completed
  // (one clock read a unit while it records). Metrics: small units share
  // the time up to the next one timed (a clock read costs more than their
  // bookkeeping): every large one, and the last.
  Clock::time_point mark = negotiated, start = negotiated;
  size_t timed = 0;  // units before it have their time
  for (size_t k = 0; k < nunits; ++k) {
    FusionUnit& u = planner_[k];
    const size_t unit_bytes = u.single != nullptr ? RequestBytes(*u.single) : u.bytes;
    moved += unit_bytes;
    if (recorder_.on()) RecordStarted(u, mark);
    Status s = u.single != nullptr ? executor_->RunOne(*u.single, *u.resp)
                                   : executor_->RunAllreduceBatch(u.batch);
    if (s.ok() && u.single != nullptr && u.single->type == OpType::kProcessSet) {
      s = FinishProcessSet(*u.single, *u.resp);
    }
    if (recorder_.on() || (metrics_on_ && (unit_bytes >= kTimedUnitBytes || k + 1 == nunits))) {
      mark = Clock::now();
      for (size_t j = timed; j <= k; ++j) NoteUnit(scope, planner_[j], (mark - start) / (k + 1 - timed));
      start = mark;
      timed = k + 1;
    }
    if (u.single != nullptr) {
      Finish(scope, *u.single, s, mark);
    } else {
      FinishAll(scope, u.batch.data(), u.batch.size(), s, mark);
    }
    // Errors every rank reached alike leave the communicator working (a
    // process set's bad list or tag range: HVD_ERR_UNSUPPORTED too).
    const bool agreed =
        s.code() == HVD_ERR_MISMATCH || s.code() == HVD_ERR_INVALID_ARGUMENT ||
        (s.code() == HVD_ERR_UNSUPPORTED && u.single != nullptr &&
         u.single->type == OpType::kProcessSet);
    if (!s.ok() && !agreed) {
      // The transport failed: peers are gone or out of step.
      Status broken(s.code(), "the context can no longer communicate: " + s.message());
      HVD_LOG(log_, HVD_LOG_ERROR, broken.message());
      recorder_.Want("error");
      for (size_t j = k + 1; j < nunits; ++j) {
        if (planner_[j].single != nullptr) Finish(scope, *planner_[j].single, broken);
        for (OpRequest* r : planner_[j].batch) Finish(scope, *r, broken);
      }
      FailEverything(broken);
      return moved;
    }
  }
  timeline_.Flush();
  return moved;
}

// The flight recorder: a unit starts now (its requests' records).
void ContextImpl::RecordStarted(const FusionUnit& u, Clock::time_point t) {
  if (u.single != nullptr) {
    recorder_.Started(u.single->record, t, RequestBytes(*u.single));
    return;
  }
  for (const OpRequest* r : u.batch) recorder_.Started(r->record, t, u.bytes);
}

}  // namespace hvd
