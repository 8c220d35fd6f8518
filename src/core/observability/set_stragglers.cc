#include "core/observability/set_stragglers.h"

#include <algorithm>

namespace hvd {

void SetStragglers::Configure(int rank, int size, Stragglers::Settings s, Logger* log,
                              std::function<std::string(int)> host) {
  rank_ = rank;
  size_ = std::max(size, 1);
  period_ = std::max<size_t>(
      1, (2 * static_cast<size_t>(size_) + Stragglers::kMaxBlockBytes - 1) / Stragglers::kMaxBlockBytes);
  settings_ = s;
  log_ = log;
  host_ = std::move(host);
}

// A set's Stragglers count by the context's ranks; its first member logs.
void SetStragglers::Prepare(Scope& set) const {
  if (log_ == nullptr) return;  // before the loop: never
  set.stragglers.Configure(rank_, size_, settings_, log_, host_, set.label,
                           set.members.empty() ? 0 : set.members.front());
}

void SetStragglers::Contribute(uint8_t* blocks, const std::vector<std::shared_ptr<Scope>>& sets) {
  uint8_t* at = blocks;
  for (size_t k = 0; k < slots_.size(); ++k) {
    if (!slots_[k].carry) continue;
    if (k < sets.size() && sets[k] != nullptr && sets[k]->stragglers.configured()) {
      sets[k]->stragglers.Contribute(at);
    }
    at += 2 * static_cast<size_t>(size_);
  }
}

void SetStragglers::Pending(size_t slot, size_t most_pending) {
  if (slot >= slots_.size()) slots_.resize(slot + 1);
  slots_[slot].pending_now = most_pending > 0;
}

void SetStragglers::Concluded(const uint8_t* blocks, const std::vector<std::shared_ptr<Scope>>& sets,
                              size_t slots, Clock::time_point now) {
  if (size_ < 2) return;
  const uint8_t* at = blocks;
  for (size_t k = 0; k < slots_.size(); ++k) {
    Slot& s = slots_[k];
    if (s.carry) {
      if (k < sets.size() && sets[k] != nullptr && sets[k]->stragglers.configured()) {
        sets[k]->stragglers.Consume(at, now);
      }
      at += 2 * static_cast<size_t>(size_);
      s.pending = false;
      s.since = 0;
    }
    s.pending = s.pending || s.pending_now;
    s.pending_now = false;
    ++s.since;
  }
  slots_.resize(slots);
  carried_ = 0;
  for (Slot& s : slots_) {
    s.carry = s.pending && s.since >= period_;
    carried_ += s.carry ? 1 : 0;
  }
}

}  // namespace hvd
