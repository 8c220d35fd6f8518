// The submit queue and completion: Enqueue names a request, interns its
// tensors' names and queues it for the loop; Finish releases the names and
// completes the handle.
#include "core/context_impl.h"

namespace hvd {

namespace {
// Spare tensor lists kept for single-tensor submits: a step's worth.
constexpr size_t kMaxSpareTensorLists = 4096;
}  // namespace

Status ContextImpl::Enqueue(Scope* scope, OpRequest&& req, const TensorSpec* one,
                            std::string_view one_name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopped_ || shutdown_requested_) {
    return stopped_ && !stop_reason_.ok()
               ? stop_reason_
               : Error(HVD_ERR_ABORTED, "the context has been shut down");
  }
  if (scope->closed) return scope->closed_reason;
  if (one != nullptr) {
    if (!spare_tensors_.empty()) {
      req.tensors = std::move(spare_tensors_.back());
      spare_tensors_.pop_back();
    }
    if (req.tensors.empty()) req.tensors.emplace_back();
    TensorSpec& t = req.tensors.front();
    t.name.assign(one_name.data(), one_name.size());  // into the string's own capacity
    t.name_id = kNoNameId;
    t.dtype = one->dtype;
    t.shape = one->shape;
    t.device = one->device;
    t.stream = one->stream;
    t.input = one->input;
    t.output = one->output;
  }
  if (req.type == OpType::kBarrier) {
    req.tensors.front().name = "barrier#" + std::to_string(scope->barrier_count++);
  } else if (req.type == OpType::kJoin) {
    req.tensors.front().name = "join";
  } else if (req.type == OpType::kProcessSet) {
    req.tensors.front().name = "process_set#" + std::to_string(scope->set_count++);
  } else if (req.type == OpType::kCloseSet) {
    req.tensors.front().name = "process_set.destroy";
  }
  // Barriers and process-set calls are named uniquely above: no name to
  // check or intern.
  const bool unique = req.type == OpType::kBarrier || req.type == OpType::kProcessSet;
  for (size_t i = 0; i < req.tensors.size() && !unique; ++i) {
    const uint32_t id = scope->names.Acquire(req.tensors[i].name);
    if (id == kNoNameId) {
      for (size_t j = 0; j < i; ++j) {
        scope->names.Release(req.tensors[j].name_id);
        req.tensors[j].name_id = kNoNameId;
      }
      return Error(HVD_ERR_DUPLICATE_NAME,
                   "an operation on '" + req.tensors[i].name +
                       "' is already in flight; wait for it before reusing the name");
    }
    req.tensors[i].name_id = id;
  }
  const bool was_empty = queued_ == 0;
  // The clock is read for a burst's first submit only (a clock read costs
  // about a tenth of a submit here); the loop's settle counts the later
  // ones (submits_). The timeline's negotiation spans need every submit's.
  if (was_empty || exact_enqueue_) last_enqueue_ = Clock::now();
  if (was_empty) first_enqueue_ = last_enqueue_;
  req.enqueued = last_enqueue_;
  if (recorder_.on()) req.record = recorder_.Submitted(req, scope->slot, scope->recorded++);
  ++submits_;
  signal_->caller_waits = false;
  req.handle->set_signal(signal_);
  scope->queue.push_back(std::move(req));
  ++queued_;
  // The loop waits for the queues to become non-empty; later submits of a
  // burst need no wake-up (it sees submits_ move when it settles).
  if (was_empty && !wake_.lazy()) cv_.notify_all();
  return Status::Ok();
}

// After a cycle ran `reqs`: their one-tensor lists are kept for the next
// submits (see Context::EnqueueOne); the rest is cleared. They are handed
// over where the next cycle takes the queues (SpareRecycled), under the lock
// it takes anyway.
void ContextImpl::Recycle(std::vector<OpRequest>& reqs) {
  for (OpRequest& r : reqs) {
    if (r.tensors.size() == 1 && r.tensors.capacity() == 1 &&
        recycled_.size() < kMaxSpareTensorLists) {
      recycled_.push_back(std::move(r.tensors));
    }
  }
  reqs.clear();
}

// Under mu_: the lists the last cycles gave back, for the submits.
void ContextImpl::SpareRecycled() {
  for (auto& v : recycled_) {
    if (spare_tensors_.size() >= kMaxSpareTensorLists) break;
    spare_tensors_.push_back(std::move(v));
  }
  recycled_.clear();
}

void ContextImpl::Finish(Scope& scope, OpRequest& req, Status status, Clock::time_point done) {
  OpRequest* one = &req;
  FinishAll(scope, &one, 1, status, done);
}

// One lock for the whole batch: a fused step completes hundreds of requests.
void ContextImpl::FinishAll(Scope& scope, OpRequest* const* reqs, size_t n, const Status& given,
                            Clock::time_point done) {
  // Successes (the hot path) pass through untouched; only failures of an
  // elastic job are reworded.
  Status mapped;
  const Status& status = given.ok() || !cfg_.elastic ? given : (mapped = Membership(given));
  if (!status.ok() && metrics_on_) scope.metrics.Failed(status.code(), n);
  {
    if (recorder_.on() && done == Clock::time_point()) done = Clock::now();
    std::lock_guard<std::mutex> lock(mu_);
    if (recorder_.on()) RecordFinished(reqs, n, status, done);
    for (size_t i = 0; i < n; ++i) {
      for (TensorSpec& t : reqs[i]->tensors) {
        scope.names.Release(t.name_id);
        t.name_id = kNoNameId;  // a second Finish must not end a later submit's flight
      }
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

// Under mu_: the records of a completion; an error (not the context's own
// shutdown) asks for a dump.
void ContextImpl::RecordFinished(OpRequest* const* reqs, size_t n, const Status& status,
                                 Clock::time_point done) {
  for (size_t i = 0; i < n; ++i) recorder_.Finished(reqs[i]->record, done, status);
  if (!status.ok() && !shutdown_requested_) recorder_.Want("error");
}

}  // namespace hvd
