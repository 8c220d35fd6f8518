// The packed negotiation: one allreduce for the context and all its
// process sets, and the small allreduce that may ride in it.
#include "core/context_impl.h"

#include <algorithm>
#include <cstring>

#include "common/kernels.h"
#include "core/negotiation/control_wire.h"

namespace hvd {


// One allreduce (MIN over bytes) of the context's control bytes followed by
// each slot's (see kSlotHeader), then each busy set's full rounds, if any,
// over the set's own communicator. Every rank contributes to every cycle of
// every set it belongs to, busy or not, so the sets' caches age alike. The
// context's cache is the same on every rank, so its extent is known to all;
// a set's is known to its members, and to the others one negotiation later.
Status ContextImpl::Negotiate(bool shutting_down, Clock::time_point now, bool* shutdown) {
  Controller& rc = *root_->controller;
  const size_t root_slots = rc.slot_extent();
  const size_t head = Controller::control_bytes(root_slots);
  slot_at_.resize(slot_live_.size());
  size_t total = head;
  for (size_t k = 0; k < slot_live_.size(); ++k) {
    slot_at_[k] = total;
    total += kSlotHeader + Controller::control_bytes(slot_extent_[k]);
  }
  ctrl_.assign(total, 0xFF);
  const bool piggy = PiggybackUsable(root_slots);
  rc.Contribute(shutting_down, now, ctrl_.data(), root_slots);
  for (size_t k = 0; k < sets_.size(); ++k) {
    Scope* set = sets_[k].get();
    if (set == nullptr) continue;
    uint8_t* p = ctrl_.data() + slot_at_[k];
    const size_t steps = std::min<size_t>(
        (set->controller->slot_extent() + Controller::kExtentStep - 1) / Controller::kExtentStep,
        0xFFFE);
    p[0] = 0;
    p[1] = static_cast<uint8_t>(
        0xFF - std::min<size_t>(set->controller->pending(), kMaxPendingCount));
    p[2] = static_cast<uint8_t>(steps >> 8);
    p[3] = static_cast<uint8_t>(steps & 0xFF);
    set->controller->Contribute(false, now, p + kSlotHeader, slot_extent_[k]);
  }
  piggy_.served = -1;
  if (piggy) {
    HVD_CHECK(PiggybackAllreduce(head).Wrap("negotiation"));
  } else {
    HVD_CHECK(transport_->Allreduce(ctrl_.data(), ctrl_.size(), HVD_UINT8, HVD_MIN)
                  .Wrap("negotiation"));
  }
  HVD_CHECK(rc.Conclude(root_->plane.get(), ctrl_.data(), root_slots, now, &root_->responses,
                        shutdown));
  if (*shutdown) return Status::Ok();
  if (piggy && ctrl_[Controller::kHeaderBytes + static_cast<size_t>(piggy_.slot)] != 0) {
    piggy_.served = piggy_.slot;
  }
  PlanPiggyback();
  sets_busy_ = false;
  for (size_t k = 0; k < slot_live_.size(); ++k) {
    const uint8_t* p = ctrl_.data() + slot_at_[k];
    const size_t slots = slot_extent_[k];
    if (p[0] != 0) {
      // No member holds the set any more: the slot is free on every rank.
      slot_live_[k] = false;
      slot_extent_[k] = 0;
    } else {
      // Every set's cache has the context's capacity.
      slot_extent_[k] = std::min<size_t>(
          (static_cast<size_t>(p[2]) << 8 | p[3]) * Controller::kExtentStep,
          static_cast<size_t>(rc.cache().capacity()));
    }
    Scope* set = k < sets_.size() ? sets_[k].get() : nullptr;
    if (set != nullptr) set->responses.clear();
    const size_t most_pending = 0xFF - p[1];
    if (most_pending == 0) continue;
    // Busy: this rank negotiates again at once (see Loop), for the ranks
    // outside the set and the members still waiting. A set of every rank
    // has no ranks outside it: its members (all ranks) skip that round
    // after one that served every request any member had pending (each
    // counts the set's responses, the same on all). A rank that judged
    // differently (it left the set on its own) only negotiates sooner; which
    // rounds match does not change.
    bool busy = true;
    if (set != nullptr) {
      bool unused = false;
      HVD_CHECK(set->controller->Conclude(set->plane.get(), p + kSlotHeader, slots, now,
                                          &set->responses, &unused)
                    .Wrap("process set negotiation"));
      busy = set->size < root_->size || most_pending >= kMaxPendingCount ||
             most_pending > set->responses.size();
    }
    sets_busy_ = sets_busy_ || busy;
  }
  while (!slot_live_.empty() && !slot_live_.back()) slot_live_.pop_back();
  slot_extent_.resize(slot_live_.size());
  if (sets_.size() > slot_live_.size()) sets_.resize(slot_live_.size());
  return Status::Ok();
}

bool ContextImpl::PiggybackUsable(size_t root_slots) const {
  const Controller& rc = *root_->controller;
  return piggy_.slot >= 0 && static_cast<size_t>(piggy_.slot) < root_slots &&
         slot_live_.empty() && rc.piggyback_agreed() && rc.cache().Get(piggy_.slot) == piggy_.all;
}

// The negotiation's allreduce with the planned tensor after the control
// bytes (head of them: no process set exists), in the tensor's dtype and op.
Status ContextImpl::PiggybackAllreduce(size_t head) {
  const size_t es = DtypeSize(piggy_.dtype);
  const hvd_reduce_op_t op = piggy_.op == HVD_AVERAGE ? HVD_SUM : piggy_.op;
  const size_t n = head + piggy_.count;
  piggy_.buf.resize(n * es);
  uint8_t* b = piggy_.buf.data();
  EncodeControl(b, ctrl_.data(), head, piggy_.dtype, op, root_->rank == 0);
  piggy_.result_at = head * es;
  uint8_t* mine = b + piggy_.result_at;
  const OpRequest* req = root_->controller->Marked(piggy_.slot);
  // A marked request matches the cached descriptor: one host tensor of the
  // plan's dtype and element count.
  if (req != nullptr && req->tensors.size() == 1 &&
      static_cast<size_t>(req->tensors[0].NumElements()) == piggy_.count &&
      req->tensors[0].dtype == piggy_.dtype && req->tensors[0].device == HVD_DEVICE_CPU) {
    ScaleCopy(mine, req->tensors[0].input, piggy_.count, piggy_.dtype, piggy_.prescale);
  } else {
    // Not ready here (the slot's byte is 0, the result unused), or joined
    // (zeros, as a joined rank's stand-in tensor).
    std::memset(mine, 0, piggy_.count * es);
  }
  HVD_CHECK(transport_->Allreduce(b, n, piggy_.dtype, op));
  DecodeControl(ctrl_.data(), b, head, piggy_.dtype, op, root_->size);
  return Status::Ok();
}

// The plan for the next negotiations, from this one's responses (the same on
// every rank): a cycle that served one request alone, a small allreduce of
// one host tensor in the cache, makes it the plan; any other cycle keeps it.
void ContextImpl::PlanPiggyback() {
  const std::vector<Response>& rs = root_->responses;
  if (rs.size() != 1) return;
  const Response& r = rs.front();
  if (!r.error.ok() || !r.all || r.all->empty() || !r.joined.empty()) return;
  const RequestDesc& d = r.desc(0);
  if (d.type != OpType::kAllreduce || d.names.size() != 1 || d.shapes.size() != 1 ||
      d.reduce_op == HVD_ADASUM) {
    return;
  }
  const double exact = ExactIntegers(d.dtype);
  const bool sum = d.reduce_op == HVD_SUM || d.reduce_op == HVD_AVERAGE;
  if (exact < 255 || (sum && exact < root_->size)) return;
  for (int q = 0; q < root_->size; ++q) {
    if (r.desc(q).device != HVD_DEVICE_CPU) return;
  }
  size_t count = 1;
  for (int64_t x : d.shapes[0]) count *= static_cast<size_t>(x);
  if (count * DtypeSize(d.dtype) > kPiggybackMaxBytes) return;
  const int slot = root_->controller->cache().SlotOf(r.key);
  if (slot < 0 || root_->controller->cache().Get(slot) != r.all) return;
  piggy_.slot = slot;
  piggy_.all = r.all;
  piggy_.dtype = d.dtype;
  piggy_.op = d.reduce_op;
  piggy_.count = count;
  piggy_.prescale = d.prescale;
  piggy_.postscale = d.postscale;
}

}  // namespace hvd
