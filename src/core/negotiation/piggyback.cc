#include "core/negotiation/piggyback.h"

#include <cstring>

#include "common/kernels.h"
#include "core/negotiation/control_wire.h"

namespace hvd {

bool Piggyback::Usable(const Controller& rc, size_t root_slots, bool sets_live) const {
  if (slot_ < 0 || static_cast<size_t>(slot_) >= root_slots || sets_live ||
      !rc.piggyback_agreed() || rc.cache().Get(slot_) != all_) {
    return false;
  }
  if (type_ != OpType::kAllreduce) {
    // A joined rank has no bytes to give: the broadcast or allgather then
    // runs as it would without the plan.
    for (int q = 0; q < size_; ++q) {
      if (rc.joined(q)) return false;
    }
  }
  return true;
}

Status Piggyback::Allreduce(Comm& comm, const Controller& rc, uint8_t* ctrl, size_t head,
                            size_t owned, int rank, int size) {
  const size_t es = DtypeSize(dtype_);
  const hvd_reduce_op_t op = op_ == HVD_AVERAGE ? HVD_SUM : op_;
  const size_t n = head + owned + count_;
  buf_.resize(n * es);
  uint8_t* b = buf_.data();
  EncodeControl(b, ctrl, head, dtype_, op, rank == 0);
  const size_t part = owned / static_cast<size_t>(size);
  EncodeOwned(b + head * es, ctrl + head, owned, dtype_, op, part * static_cast<size_t>(rank), part);
  result_at_ = (head + owned) * es;
  uint8_t* mine = b + result_at_;
  const OpRequest* req = rc.Marked(slot_);
  // A marked request matches the cached descriptor: one host tensor of the
  // plan's dtype and size (an allgather's: this rank's part).
  const size_t want = type_ == OpType::kAllgather ? OwnBytes(rank) : count_ * es;
  const bool ready =
      req != nullptr && req->tensors.size() == 1 && req->tensors[0].dtype == tensor_dtype_ &&
      req->tensors[0].device == HVD_DEVICE_CPU &&
      static_cast<size_t>(req->tensors[0].NumElements()) * DtypeSize(tensor_dtype_) == want;
  if (type_ == OpType::kBroadcast) {
    // The root's bytes; MIN's identity from everyone else.
    if (ready && rank == root_) {
      std::memcpy(mine, req->tensors[0].input, count_);
    } else {
      std::memset(mine, 0xFF, count_);
    }
  } else if (type_ == OpType::kAllgather) {
    // This rank's bytes at its place; MIN's identity everywhere else.
    std::memset(mine, 0xFF, count_);
    if (ready && want > 0) std::memcpy(mine + offsets_[rank], req->tensors[0].input, want);
  } else if (ready) {
    ScaleCopy(mine, req->tensors[0].input, count_, dtype_, prescale_);
  } else {
    // Not ready here (the slot's byte is 0, the result unused), or joined
    // (zeros, as a joined rank's stand-in tensor).
    std::memset(mine, 0, count_ * es);
  }
  HVD_CHECK(comm.Allreduce(b, n, dtype_, op));
  DecodeControl(ctrl, b, head, dtype_, op, size);
  DecodeOwned(ctrl + head, b + head * es, owned, dtype_);
  return Status::Ok();
}

void Piggyback::NoteReady(const uint8_t* ctrl) {
  if (ctrl[Controller::kHeaderBytes + static_cast<size_t>(slot_)] != 0) served_ = slot_;
}

// The bytes of a one-tensor request.
size_t Piggyback::PartBytes(const RequestDesc& d) {
  size_t e = DtypeSize(d.dtype);
  for (int64_t x : d.shapes[0]) e *= static_cast<size_t>(x);
  return e;
}

bool Piggyback::Fits(const Response& r, int size, size_t* count) {
  if (!r.error.ok() || !r.all || r.all->empty() || !r.joined.empty()) return false;
  const RequestDesc& d = r.desc(0);
  if ((d.type != OpType::kAllreduce && d.type != OpType::kBroadcast &&
       d.type != OpType::kAllgather) ||
      d.names.size() != 1 || d.shapes.size() != 1) {
    return false;
  }
  if (d.type == OpType::kAllreduce) {
    if (d.reduce_op == HVD_ADASUM) return false;
    const double exact = ExactIntegers(d.dtype);
    const bool sum = d.reduce_op == HVD_SUM || d.reduce_op == HVD_AVERAGE;
    if (exact < 255 || (sum && exact < size)) return false;
  }
  for (int q = 0; q < size; ++q) {
    if (r.desc(q).device != HVD_DEVICE_CPU) return false;
  }
  if (d.type == OpType::kAllgather) {
    // Every rank's part (their first dimensions may differ), in bytes.
    size_t total = 0;
    for (int q = 0; q < size; ++q) {
      const RequestDesc& dq = r.desc(q);
      if (dq.shapes.size() != 1 || dq.shapes[0].empty()) return false;
      total += PartBytes(dq);
      if (total > kPiggybackMaxBytes) return false;
    }
    *count = total;
    return true;
  }
  const size_t bytes = PartBytes(d);
  if (bytes > kPiggybackMaxBytes) return false;
  *count = d.type == OpType::kBroadcast ? bytes : bytes / DtypeSize(d.dtype);
  return true;
}

// A broadcast does not take the place of an allreduce plan the cache still
// holds: where a step has one of each, the allreduce keeps riding (two plans
// taking turns would leave both to their own collectives).
bool Piggyback::Replaces(const RequestDesc& d, const Controller& rc) const {
  return d.type == OpType::kAllreduce || slot_ < 0 || type_ != OpType::kAllreduce ||
         rc.cache().Get(slot_) != all_;
}

void Piggyback::Plan(const std::vector<Response>& rs, const Controller& rc, int size) {
  if (rs.size() != 1) return;
  const Response& r = rs.front();
  size_t count = 0;
  if (!Fits(r, size, &count) || !Replaces(r.desc(0), rc)) return;
  const RequestDesc& d = r.desc(0);
  const int slot = rc.cache().SlotOf(r.key());
  if (slot < 0 || rc.cache().Get(slot) != r.all) return;
  slot_ = slot;
  all_ = r.all;
  type_ = d.type;
  size_ = size;
  tensor_dtype_ = d.dtype;
  count_ = count;
  if (d.type != OpType::kAllreduce) {
    // Bytes under MIN: the negotiation's own form.
    dtype_ = HVD_UINT8;
    op_ = HVD_MIN;
    prescale_ = 1;
    root_ = d.root;
    offsets_.assign(1, 0);
    rows_ = 0;
    if (d.type == OpType::kAllgather) {
      for (int q = 0; q < size; ++q) {
        const RequestDesc& dq = r.desc(q);
        offsets_.push_back(offsets_.back() + PartBytes(dq));
        rows_ += dq.shapes[0][0];
      }
    }
  } else {
    dtype_ = d.dtype;
    op_ = d.reduce_op;
    prescale_ = d.prescale;
  }
}

size_t Piggyback::result_bytes() const { return count_ * DtypeSize(dtype_); }

}  // namespace hvd
