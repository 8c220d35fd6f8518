// The packed negotiation: one allreduce for the context and all its
// process sets (the small allreduce that may ride in it: piggyback.h).
#include "core/context_impl.h"

#include <algorithm>

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
  const size_t straggler_block = total;  // each rank's wait in a recent step (stragglers.h)
  total += stragglers_.BlockBytes();
  const size_t set_blocks = total;  // the process sets' (set_stragglers.h)
  total += set_stragglers_.BlockBytes();
  ctrl_.assign(total, 0xFF);
  if (set_blocks > straggler_block) stragglers_.Contribute(ctrl_.data() + straggler_block);
  set_stragglers_.Contribute(ctrl_.data() + set_blocks, sets_);
  const bool piggy = piggy_.Usable(rc, root_slots, !slot_live_.empty());
  rc.Contribute(shutting_down, now, ctrl_.data(), root_slots);
  for (size_t k = 0; k < sets_.size(); ++k) {
    Scope* set = sets_[k].get();
    if (set == nullptr) continue;
    uint8_t* p = ctrl_.data() + slot_at_[k];
    EncodeSlotHeader(p, set->controller->slot_extent(), Controller::kExtentStep,
                     set->controller->pending());
    set->controller->Contribute(false, now, p + kSlotHeader, slot_extent_[k]);
  }
  piggy_.clear_served();
  if (piggy) {
    HVD_CHECK(piggy_.Allreduce(*transport_, rc, ctrl_.data(), head, total - head, root_->rank,
                               root_->size)
                  .Wrap("negotiation"));
  } else {
    HVD_CHECK(transport_->Allreduce(ctrl_.data(), ctrl_.size(), HVD_UINT8, HVD_MIN)
                  .Wrap("negotiation"));
  }
  HVD_CHECK(rc.Conclude(root_->plane.get(), ctrl_.data(), root_slots, now, &root_->responses,
                        shutdown));
  if (*shutdown) return Status::Ok();
  if (piggy) piggy_.NoteReady(ctrl_.data());
  piggy_.Plan(root_->responses, rc, root_->size);
  sets_busy_ = false;
  for (size_t k = 0; k < slot_live_.size(); ++k) {
    const uint8_t* p = ctrl_.data() + slot_at_[k];
    const size_t slots = slot_extent_[k];
    const SlotHeader header = DecodeSlotHeader(p, Controller::kExtentStep);
    if (!header.held) {
      // No member holds the set any more: the slot is free on every rank.
      slot_live_[k] = false;
      slot_extent_[k] = 0;
    } else {
      // Every set's cache has the context's capacity.
      slot_extent_[k] =
          std::min<size_t>(header.extent, static_cast<size_t>(rc.cache().capacity()));
    }
    Scope* set = k < sets_.size() ? sets_[k].get() : nullptr;
    if (set != nullptr) set->responses.clear();
    const size_t most_pending = header.most_pending;
    set_stragglers_.Pending(k, most_pending);
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
  set_stragglers_.Concluded(ctrl_.data() + set_blocks, sets_, slot_live_.size(), now);
  NoteNegotiation(now, straggler_block);
  return Status::Ok();
}

}  // namespace hvd
