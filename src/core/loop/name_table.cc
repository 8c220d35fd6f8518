#include "core/loop/name_table.h"

#include <algorithm>

namespace hvd {

uint32_t NameTable::Acquire(const std::string& name) {
  auto it = ids_.find(name);
  if (it != ids_.end()) {
    uint8_t& f = in_flight_[it->second];
    if (f != 0) return kNoNameId;
    f = 1;
    return it->second;
  }
  // Unique names (a step counter in the name, say) would grow the table
  // without end: past max_idle_ names, those not in flight go.
  if (ids_.size() >= sweep_at_) Sweep();
  uint32_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = static_cast<uint32_t>(in_flight_.size());
    in_flight_.push_back(0);
  }
  ids_.emplace(name, id);
  in_flight_[id] = 1;
  return id;
}

void NameTable::Sweep() {
  for (auto it = ids_.begin(); it != ids_.end();) {
    if (in_flight_[it->second] == 0) {
      free_ids_.push_back(it->second);
      it = ids_.erase(it);
    } else {
      ++it;
    }
  }
  // Names still in flight stay: with that many, sweep again only once the
  // table has doubled (a sweep per new name would cost quadratic time).
  sweep_at_ = std::max(max_idle_, 2 * ids_.size());
}

}  // namespace hvd
