// One cycle's body: completes dropped sets, applies a timeline command,
// hands the queued requests to the controllers, negotiates, applies
// autotuning, and runs each scope's responses.
#include "core/context_impl.h"

#include <algorithm>

namespace hvd {

bool ContextImpl::CycleBody(const ShutdownState& sd, uint64_t tl_seq, const TimelineCmd& tl_take) {
  DropClosedSets();
  if (sd.expired) {
    // This rank waited for the others to shut down long enough: it leaves.
    FailEverything(shutdown_reason_);
    return false;
  }
  auto now = Clock::now();
  if (tl_seq != 0) ApplyTimelineCommand(tl_seq, tl_take);
  if (mark_cycles_) timeline_.Instant("CYCLE_START", now);
  const uint64_t full_rounds = FeedControllers(now);
  // A rank that shut down negotiates with nothing of its own.
  if (sd.requested && !cfg_.elastic) FailOwn();
  bool shutdown = false;
  const Status s = NegotiateCycle(sd.announce, now, full_rounds, &shutdown);
  if (!s.ok()) {
    HVD_LOG(log_, HVD_LOG_ERROR, s.message());
    recorder_.Want("error");  // the context breaks: a dump even with nothing pending
    FailEverything(Error(s.code(), "the context can no longer communicate: " + s.message() +
                                       DepartureNote()));
    return false;
  }
  if (shutdown && !cfg_.elastic) return LearnDepartures(sd.announce);
  if (shutdown) {
    // An elastic job: a rank that leaves ends the epoch for every rank.
    FailEverything(sd.requested ? shutdown_reason_
                                : Error(HVD_ERR_MEMBERSHIP_CHANGED,
                                        "another rank left the elastic job's epoch " +
                                            std::to_string(cfg_.epoch) +
                                            "; reset the context (hvd.elastic.run does)"));
    return false;
  }
  ApplyTuning();
  return RunScopes(now);
}

// Sets closed on this rank alone (their destruction failed here): what they
// still hold fails with the reason.
void ContextImpl::DropClosedSets() {
  for (auto& set : dropped_) {
    for (OpRequest& r : set->batch) Finish(*set, r, set->closed_reason);
    set->batch.clear();
    for (OpRequest& r : set->controller->TakeAll()) Finish(*set, r, set->closed_reason);
    set->own_comm.reset();
  }
  dropped_.clear();
}

// Hands each scope's taken requests to its controller (the context, then
// the member sets in slot order); returns the controllers' full rounds so
// far.
uint64_t ContextImpl::FeedControllers(Clock::time_point now) {
  uint64_t full_rounds = 0;
  for (Scope* sc = root_.get(); sc != nullptr;) {
    for (OpRequest& r : sc->batch) sc->controller->Add(std::move(r), now);
    sc->batch.clear();
    full_rounds += sc->controller->full_rounds();
    // Next scope: the member sets in slot order.
    Scope* following = nullptr;
    for (size_t k = sc->slot < 0 ? 0 : static_cast<size_t>(sc->slot) + 1; k < sets_.size(); ++k) {
      if (sets_[k]) {
        following = sets_[k].get();
        break;
      }
    }
    sc = following;
  }
  return full_rounds;
}

// The negotiation under its limits, and the pacing it sets: whether the
// cycle made progress (responses, or a full round), and when the next one
// is due.
Status ContextImpl::NegotiateCycle(bool shutting_down, Clock::time_point now,
                                   uint64_t full_rounds, bool* shutdown) {
  root_->controller->set_proposal(tuner_->Proposal());
  // The negotiation runs under the peer timeout, the transfers under the
  // transport timeout (with process sets, both under the transport's).
  const bool peer_limit = peer_timeout_ > 0 && slot_live_.empty();
  Status s = peer_limit ? transport_->SetTimeout(peer_timeout_, HVD_TRANSPORT_LIMIT_PEER)
                        : Status::Ok();
  if (s.ok()) s = Negotiate(shutting_down, now, shutdown);
  if (s.ok() && peer_limit) {
    s = transport_->SetTimeout(cfg_.transport_timeout_s, HVD_TRANSPORT_LIMIT_TRANSFER);
  }
  bool progress = !root_->responses.empty();
  uint64_t full_rounds_after = root_->controller->full_rounds();
  for (const auto& set : sets_) {
    if (!set) continue;
    progress = progress || !set->responses.empty();
    full_rounds_after += set->controller->full_rounds();
  }
  progress = progress || full_rounds_after != full_rounds;
  pace_.Negotiated(progress, sets_busy_);
  return s;
}

// The context's responses first (they may make sets: those take part from
// the next cycle), then each set's, in slot order: the same order on every
// rank, so sets sharing ranks never wait on each other. False: the context
// stopped.
bool ContextImpl::RunScopes(Clock::time_point now) {
  uint64_t bytes = 0;
  bool ran = false;
  for (size_t k = 0; k <= sets_.size(); ++k) {
    Scope* sc = k == 0 ? root_.get() : sets_[k - 1].get();
    if (sc == nullptr || (sc->responses.empty() && !sc->close_agreed)) continue;
    ran = true;
    if (k == 0) {
      executor_->Use(sc->comm, device_transport_.get());
    } else {
      Comm* dev = device_transport_ ? SetDevice(*sc) : nullptr;
      executor_->Use(sc->comm, dev, sc->device_error);
    }
    timeline_.set_scope(&sc->label);
    bytes += Execute(*sc);
    timeline_.set_scope(nullptr);
    if (stopped_.load(std::memory_order_acquire)) return false;
    if (sc->close_agreed) CloseAgreed(*sc);
  }
  if (ran) tuner_->Observe(bytes, now, Clock::now());
  return true;
}

}  // namespace hvd
