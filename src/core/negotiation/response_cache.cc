#include "core/negotiation/response_cache.h"

#include <algorithm>

namespace hvd {

int ResponseCache::Lookup(const std::string& key, const OpRequest& req, int rank) const {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return -1;
  const Slot& s = slots_[it->second];
  // The slot's key is every rank's descriptor's key, and req's first name
  // is `key` (the caller's).
  return DescribesRequest((*s.all)[static_cast<size_t>(rank)], req, true) ? it->second : -1;
}

bool ResponseCache::Holds(int slot, const std::string& key) const {
  return slot >= 0 && slot < capacity() && slots_[slot].valid && slots_[slot].key == key;
}

int ResponseCache::Insert(const std::string& key, RequestDescs all, uint64_t tick) {
  if (slots_.empty()) return -1;
  Invalidate(key);
  int chosen = -1;
  for (int i = 0; i < capacity(); ++i) {
    if (!slots_[i].valid) {
      chosen = i;
      break;
    }
  }
  if (chosen < 0) {  // evict the least recently used; ties go to the lowest slot
    chosen = 0;
    for (int i = 1; i < capacity(); ++i) {
      if (slots_[i].last_used < slots_[chosen].last_used) chosen = i;
    }
    by_key_.erase(slots_[chosen].key);
    ++evictions_;
  }
  high_water_ = std::max(high_water_, chosen + 1);
  Slot& s = slots_[chosen];
  s.valid = true;
  s.key = key;
  s.all = std::move(all);
  s.last_used = tick;
  by_key_[key] = chosen;
  return chosen;
}

void ResponseCache::Invalidate(const std::string& key) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return;
  Slot& s = slots_[it->second];
  s.valid = false;
  s.key.clear();
  s.all.reset();
  by_key_.erase(it);
}

}  // namespace hvd
