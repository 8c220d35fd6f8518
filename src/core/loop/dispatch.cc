// A negotiated cycle's responses to the executor: fusion batches, joined
// ranks' zero tensors, and completion.
#include "core/context_impl.h"

#include <algorithm>
#include <deque>

#include "common/kernels.h"

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
  std::vector<OpRequest>& reqs = exec_.reqs;
  std::vector<uint8_t>& have = exec_.have;
  std::vector<ExecUnit>& units = exec_.units;
  std::vector<ExecOpenBatch>& open = exec_.open;
  reqs.clear();
  reqs.resize(responses.size());
  have.assign(responses.size(), 0);
  open.clear();
  size_t nunits = 0;
  // A fresh unit (reusing a kept one's batch capacity).
  auto add_unit = [&]() -> ExecUnit& {
    if (nunits == units.size()) units.emplace_back();
    ExecUnit& u = units[nunits++];
    u.batch.clear();
    u.single = nullptr;
    u.resp = nullptr;
    u.bytes = 0;
    return u;
  };
  // The requests (and their handles) go once the cycle has run them.
  struct ClearRequests {
    std::vector<OpRequest>& r;
    ~ClearRequests() { r.clear(); }
  } clear_requests{reqs};
  std::deque<std::vector<uint8_t>> zeros;  // buffers of a joined rank's stand-in tensors
  const size_t threshold = static_cast<size_t>(fusion_threshold_);
  auto now = Clock::now();

  uint64_t piggybacked = 0;  // bytes served by the negotiation
  for (size_t i = 0; i < responses.size(); ++i) {
    Response& resp = responses[i];
    if (&scope == root_.get() && resp.slot >= 0 && resp.slot == piggy_.served &&
        resp.error.ok()) {
      // Reduced in the negotiation: finish it from there (a joined rank,
      // which has no request, has nothing more to do).
      piggy_.served = -1;
      if (scope.controller->Take(resp, &reqs[i])) {
        OpRequest& req = reqs[i];
        if (timeline_.enabled()) timeline_.Span(resp.key, "NEGOTIATE", req.enqueued, now);
        executor_->FinishPiggybacked(req, piggy_.buf.data() + piggy_.result_at, now);
        piggybacked += piggy_.count * DtypeSize(piggy_.dtype);
        {
          std::lock_guard<std::mutex> lock(mu_);
          ++piggybacked_;  // before the handle completes: its waiter may ask
        }
        Finish(scope, req, Status::Ok());
      }
      continue;
    }
    have[i] = scope.controller->Take(resp, &reqs[i]);
    if (!have[i] && resp.error.ok() && resp.all && !resp.all->empty() &&
        resp.desc(0).type == OpType::kAllreduce &&
        std::find(resp.joined.begin(), resp.joined.end(), scope.rank) != resp.joined.end()) {
      // This rank has joined: it contributes zeros of the same shape and
      // throws the result away.
      const RequestDesc& d = resp.desc(scope.rank);
      OpRequest& ph = reqs[i];
      ph.type = OpType::kAllreduce;
      ph.reduce_op = d.reduce_op;
      ph.prescale = d.prescale;
      ph.postscale = d.postscale;
      ph.zeros_device = d.device;
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
      ExecUnit& u = add_unit();
      u.single = &req;
      u.resp = &resp;
      continue;
    }
    size_t bytes = 0;
    for (const TensorSpec& t : req.tensors) {
      bytes += static_cast<size_t>(t.NumElements()) * DtypeSize(t.dtype);
    }
    const TensorSpec& t0 = req.tensors.front();
    // Batches never mix devices: keyed on every rank's device ordinal (the
    // negotiated descriptors, the same on every rank, so that all ranks
    // build the same batches even where their ordinals differ).
    const Response* devices = resp.desc(0).device == HVD_DEVICE_CPU ? nullptr : &resp;
    auto same_devices = [&](const Response* a) {
      if ((a == nullptr) != (devices == nullptr)) return false;
      if (a == nullptr) return true;
      for (int r = 0; r < scope.size; ++r) {
        if (a->desc(r).device != devices->desc(r).device) return false;
      }
      return true;
    };
    ExecOpenBatch* match = nullptr;
    for (ExecOpenBatch& b : open) {
      if (b.dtype == t0.dtype && b.op == req.reduce_op && b.pre == req.prescale &&
          b.post == req.postscale && same_devices(b.devices)) {
        match = &b;
        break;
      }
    }
    if (match != nullptr && threshold > 0 && units[match->unit].bytes + bytes <= threshold) {
      units[match->unit].batch.push_back(&req);
      units[match->unit].bytes += bytes;
      continue;
    }
    ExecUnit& u = add_unit();
    u.batch.push_back(&req);
    u.bytes = bytes;
    ExecOpenBatch ob{nunits - 1, t0.dtype, req.reduce_op, req.prescale, req.postscale, devices};
    if (match != nullptr) {
      *match = ob;
    } else {
      open.push_back(ob);
    }
  }

  uint64_t moved = piggybacked;
  for (size_t k = 0; k < nunits; ++k) {
    ExecUnit& u = units[k];
    if (u.single != nullptr) {
      for (const TensorSpec& t : u.single->tensors) {
        moved += static_cast<uint64_t>(t.NumElements()) * DtypeSize(t.dtype);
      }
    } else {
      moved += u.bytes;
    }
    Status s = u.single != nullptr ? executor_->RunOne(*u.single, *u.resp)
                                       : executor_->RunAllreduceBatch(u.batch);
    if (s.ok() && u.single != nullptr && u.single->type == OpType::kProcessSet) {
      s = FinishProcessSet(*u.single, *u.resp);
    }
    if (u.single != nullptr) {
      Finish(scope, *u.single, s);
    } else {
      FinishAll(scope, u.batch.data(), u.batch.size(), s);
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
      for (size_t j = k + 1; j < nunits; ++j) {
        if (units[j].single != nullptr) Finish(scope, *units[j].single, broken);
        for (OpRequest* r : units[j].batch) Finish(scope, *r, broken);
      }
      FailEverything(broken);
      return moved;
    }
  }
  timeline_.Flush();
  return moved;
}

}  // namespace hvd
