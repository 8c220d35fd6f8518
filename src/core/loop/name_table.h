// Tensor names interned per communicator: a submit hashes its name once, to
// find the name's id; everything after (the in-flight check, its release when
// the operation completes, the controller's cache-slot hint) indexes by id.
// A training step submits the same names every time, so a steady state
// allocates nothing here.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace hvd {

constexpr uint32_t kNoNameId = UINT32_MAX;

class NameTable {
 public:
  // Names kept while not in flight, before a sweep drops those (their ids
  // are then given to new names).
  explicit NameTable(size_t max_idle = 1u << 16) : max_idle_(max_idle) {}

  // Marks name in flight and returns its id; kNoNameId if it already is.
  uint32_t Acquire(const std::string& name);
  // Ends id's flight (ids from Acquire only; kNoNameId is ignored).
  void Release(uint32_t id) {
    if (id < in_flight_.size()) in_flight_[id] = 0;
  }
  bool in_flight(uint32_t id) const { return id < in_flight_.size() && in_flight_[id] != 0; }
  size_t size() const { return ids_.size(); }

 private:
  void Sweep();

  size_t max_idle_;
  size_t sweep_at_ = max_idle_;  // the table's size that triggers the next sweep
  std::unordered_map<std::string, uint32_t> ids_;
  std::vector<uint8_t> in_flight_;  // by id
  std::vector<uint32_t> free_ids_;  // ids of swept names
};

}  // namespace hvd
