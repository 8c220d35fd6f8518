#include "core/fusion/planner.h"

#include <algorithm>
#include <memory>
#include <string>

#include "common/kernels.h"

namespace hvd {

void FusionPlanner::Begin(size_t threshold, int size) {
  open_.clear();
  nunits_ = 0;
  threshold_ = threshold;
  size_ = size;
}

FusionUnit& FusionPlanner::AddUnit() {
  if (nunits_ == units_.size()) units_.emplace_back();
  FusionUnit& u = units_[nunits_++];
  u.batch.clear();
  u.single = nullptr;
  u.resp = nullptr;
  u.bytes = 0;
  return u;
}

void FusionPlanner::AddSingle(OpRequest* req, const Response* resp) {
  FusionUnit& u = AddUnit();
  u.single = req;
  u.resp = resp;
}

// Batches never mix devices: keyed on every rank's device ordinal (the
// negotiated descriptors, the same on every rank, so that all ranks build
// the same batches even where their ordinals differ).
bool FusionPlanner::SameDevices(const Response* a, const Response* b) const {
  if ((a == nullptr) != (b == nullptr)) return false;
  if (a == nullptr) return true;
  for (int r = 0; r < size_; ++r) {
    if (a->desc(r).device != b->desc(r).device) return false;
  }
  return true;
}

void FusionPlanner::AddAllreduce(OpRequest* req, const Response& resp) {
  const size_t bytes = RequestBytes(*req);
  const TensorSpec& t0 = req->tensors.front();
  const Response* devices = resp.desc(0).device == HVD_DEVICE_CPU ? nullptr : &resp;
  OpenBatch* match = nullptr;
  for (OpenBatch& b : open_) {
    if (b.dtype == t0.dtype && b.op == req->reduce_op && b.pre == req->prescale &&
        b.post == req->postscale && SameDevices(b.devices, devices)) {
      match = &b;
      break;
    }
  }
  if (match != nullptr && threshold_ > 0 && units_[match->unit].bytes + bytes <= threshold_) {
    units_[match->unit].batch.push_back(req);
    units_[match->unit].bytes += bytes;
    return;
  }
  FusionUnit& u = AddUnit();
  u.batch.push_back(req);
  u.bytes = bytes;
  OpenBatch ob{nunits_ - 1, t0.dtype, req->reduce_op, req->prescale, req->postscale, devices};
  if (match != nullptr) {
    *match = ob;
  } else {
    open_.push_back(ob);
  }
}

size_t RequestBytes(const OpRequest& req) {
  size_t bytes = 0;
  for (const TensorSpec& t : req.tensors) {
    bytes += static_cast<size_t>(t.NumElements()) * DtypeSize(t.dtype);
  }
  return bytes;
}

bool MakeJoinedZeros(const Response& resp, int rank, Clock::time_point now,
                     std::deque<std::vector<uint8_t>>* zeros, OpRequest* out) {
  if (!resp.error.ok() || !resp.all || resp.all->empty() ||
      resp.desc(0).type != OpType::kAllreduce ||
      std::find(resp.joined.begin(), resp.joined.end(), rank) == resp.joined.end()) {
    return false;
  }
  const RequestDesc& d = resp.desc(rank);
  OpRequest& ph = *out;
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
    zeros->emplace_back(static_cast<size_t>(t.NumElements()) * DtypeSize(d.dtype), 0);
    t.input = t.output = zeros->back().data();
    ph.tensors.push_back(std::move(t));
  }
  ph.handle = MakeHandle("zeros for allreduce '" + resp.key() + "' (joined)");
  ph.enqueued = now;
  return true;
}

}  // namespace hvd
