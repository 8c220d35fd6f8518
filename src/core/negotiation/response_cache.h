// The response cache: negotiated requests by key, in slots that are the
// same on every rank, so a cached request is named by its slot's byte.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/loop/request.h"
#include "core/negotiation/message.h"

namespace hvd {

// Every rank's descriptor of one negotiated request, shared between the
// response cache and the responses it serves (never copied per cycle).
using RequestDescs = std::shared_ptr<const std::vector<RequestDesc>>;

// A deterministic LRU of negotiated requests (same content on every rank).
class ResponseCache {
 public:
  explicit ResponseCache(int capacity) : slots_(static_cast<size_t>(capacity)) {}
  int capacity() const { return static_cast<int>(slots_.size()); }
  // Slot holding key (req's first tensor's name) whose descriptor for
  // `rank` describes req exactly, or -1.
  int Lookup(const std::string& key, const OpRequest& req, int rank) const;
  // Slot holding key, or -1.
  int SlotOf(const std::string& key) const {
    auto it = by_key_.find(key);
    return it == by_key_.end() ? -1 : it->second;
  }
  bool Holds(int slot, const std::string& key) const;
  const RequestDescs& Get(int slot) const { return slots_[slot].all; }
  void Touch(int slot, uint64_t tick) { slots_[slot].last_used = tick; }
  int Insert(const std::string& key, RequestDescs all, uint64_t tick);
  void Invalidate(const std::string& key);
  size_t used() const { return by_key_.size(); }
  // One past the highest slot ever filled (slots fill lowest first).
  int high_water() const { return high_water_; }
  uint64_t evictions() const { return evictions_; }

 private:
  struct Slot {
    bool valid = false;
    std::string key;
    RequestDescs all;
    uint64_t last_used = 0;
  };
  std::vector<Slot> slots_;
  std::unordered_map<std::string, int> by_key_;
  uint64_t evictions_ = 0;
  int high_water_ = 0;
};

}  // namespace hvd
