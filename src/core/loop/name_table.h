// Tensor names interned per communicator: a submit hashes its name once, to
// find the name's id; everything after (the in-flight check, its release when
// the operation completes, the controller's cache-slot hint) indexes by id.
// A training step submits the same names every time, so a steady state
// allocates nothing here.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hvd {

constexpr uint32_t kNoNameId = UINT32_MAX;

class NameTable {
 public:
  // Names kept while not in flight, before a sweep drops those (their ids
  // are then given to new names).
  explicit NameTable(size_t max_idle = 1u << 16) : max_idle_(max_idle) {}

  // Marks name in flight and returns its id; kNoNameId if it already is.
  uint32_t Acquire(std::string_view name);
  // Ends id's flight (ids from Acquire only; kNoNameId is ignored).
  void Release(uint32_t id) {
    if (id < in_flight_.size()) in_flight_[id] = 0;
  }
  bool in_flight(uint32_t id) const { return id < in_flight_.size() && in_flight_[id] != 0; }
  size_t size() const { return count_; }

 private:
  // Open addressing with linear probing over slots_ (id + 1; 0 empty), at
  // most half full; each id's name and hash by id. A submit's lookup is one
  // hash of the name (8 bytes a step) and, where the slot's hash matches,
  // one comparison: std::unordered_map's was the library's string hash,
  // a division for the bucket, and a node per name.
  static uint64_t Hash(std::string_view s);
  uint32_t Find(std::string_view name, uint64_t h, size_t* slot) const;
  void Rebuild(size_t capacity);
  void Sweep();

  size_t max_idle_;
  size_t sweep_at_ = max_idle_;  // the table's size that triggers the next sweep
  size_t count_ = 0;             // names held
  std::vector<uint32_t> slots_;
  std::vector<std::string> names_;  // by id
  std::vector<uint64_t> hashes_;    // by id
  std::vector<uint8_t> held_;       // by id: 1 while the id names a name
  std::vector<uint8_t> in_flight_;  // by id
  std::vector<uint32_t> free_ids_;  // ids of swept names
};

}  // namespace hvd
