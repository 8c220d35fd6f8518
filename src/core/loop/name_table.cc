#include "core/loop/name_table.h"

#include <algorithm>
#include <cstring>

namespace hvd {

uint64_t NameTable::Hash(std::string_view s) {
  const char* p = s.data();
  size_t n = s.size();
  uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  uint64_t w = 0;
  std::memcpy(&w, p, n);
  h = (h ^ w) * 0x94D049BB133111EBull;
  return h ^ (h >> 29);
}

// The id holding name (kNoNameId: none); *slot: where it is, or the empty
// slot where it would go.
uint32_t NameTable::Find(std::string_view name, uint64_t h, size_t* slot) const {
  const size_t mask = slots_.size() - 1;
  for (size_t i = static_cast<size_t>(h) & mask;; i = (i + 1) & mask) {
    const uint32_t s = slots_[i];
    if (s == 0) {
      *slot = i;
      return kNoNameId;
    }
    const uint32_t id = s - 1;
    if (hashes_[id] == h && names_[id] == name) {
      *slot = i;
      return id;
    }
  }
}

uint32_t NameTable::Acquire(std::string_view name) {
  if (slots_.empty()) Rebuild(64);
  const uint64_t h = Hash(name);
  size_t slot = 0;
  uint32_t id = Find(name, h, &slot);
  if (id != kNoNameId) {
    uint8_t& f = in_flight_[id];
    if (f != 0) return kNoNameId;
    f = 1;
    return id;
  }
  // Unique names (a step counter in the name, say) would grow the table
  // without end: past max_idle_ names, those not in flight go.
  bool moved = false;  // slots moved: find the free one again
  if (count_ >= sweep_at_) {
    Sweep();
    moved = true;
  }
  if (2 * (count_ + 1) > slots_.size()) {
    Rebuild(2 * slots_.size());
    moved = true;
  }
  if (moved) Find(name, h, &slot);
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = static_cast<uint32_t>(names_.size());
    names_.emplace_back();
    hashes_.push_back(0);
    held_.push_back(0);
    in_flight_.push_back(0);
  }
  names_[id].assign(name.data(), name.size());
  hashes_[id] = h;
  held_[id] = 1;
  in_flight_[id] = 1;
  slots_[slot] = id + 1;
  ++count_;
  return id;
}

// Slots for the names held, in a table of `capacity` (a power of two).
void NameTable::Rebuild(size_t capacity) {
  slots_.assign(capacity, 0);
  const size_t mask = capacity - 1;
  for (uint32_t id = 0; id < held_.size(); ++id) {
    if (held_[id] == 0) continue;
    size_t i = static_cast<size_t>(hashes_[id]) & mask;
    while (slots_[i] != 0) i = (i + 1) & mask;
    slots_[i] = id + 1;
  }
}

void NameTable::Sweep() {
  for (uint32_t id = 0; id < held_.size(); ++id) {
    if (held_[id] != 0 && in_flight_[id] == 0) {
      held_[id] = 0;
      names_[id].clear();
      free_ids_.push_back(id);
      --count_;
    }
  }
  Rebuild(slots_.size());  // open addressing: no holes left by the swept
  // Names still in flight stay: with that many, sweep again only once the
  // table has doubled (a sweep per new name would cost quadratic time).
  sweep_at_ = std::max(max_idle_, 2 * count_);
}

}  // namespace hvd
