// Stragglers per process set: a rank slow in one set's collectives is named
// in that set's report, not the context's. A set's step is a negotiation
// that made some of the set's operations ready; its members know it, the
// other ranks do not, yet every rank must size the negotiation alike. So a
// set's block (two bytes per rank of the context, each member's wait at its
// rank of the context, as in stragglers.h) rides in the negotiation after
// one whose slot header said a member had operations pending in the set
// (every rank decodes the header): a step implies pending operations in its
// negotiation. A member writes a wait only for a step since the set's last
// block, so a block after no step reads as none. No extra round; with more
// than 64 ranks, a set's block goes at most every ceil(2 size / 128)-th
// negotiation, as the context's. Cycle holder only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/loop/scope.h"
#include "core/observability/stragglers.h"

namespace hvd {

class SetStragglers {
 public:
  using Clock = std::chrono::steady_clock;
  void Configure(int rank, int size, Stragglers::Settings s, Logger* log,
                 std::function<std::string(int)> host);
  // A new set's, before any thread can read its report (its first member
  // logs its warnings).
  void Prepare(Scope& set) const;
  // This negotiation's bytes for the sets' blocks (0: none), the same on
  // every rank.
  size_t BlockBytes() const { return 2 * static_cast<size_t>(size_) * carried_; }
  // Writes this rank's waits for the sets it is in (blocks filled with 0xFF).
  void Contribute(uint8_t* blocks, const std::vector<std::shared_ptr<Scope>>& sets);
  // After the negotiation, per live slot: its header's most pending count.
  void Pending(size_t slot, size_t most_pending);
  // Then: reads the blocks carried (the members' steps) and decides the next
  // negotiation's; `slots` live slots remain.
  void Concluded(const uint8_t* blocks, const std::vector<std::shared_ptr<Scope>>& sets,
                 size_t slots, Clock::time_point now);

 private:
  int rank_ = 0, size_ = 1;
  size_t period_ = 1;
  Stragglers::Settings settings_;
  Logger* log_ = nullptr;
  std::function<std::string(int)> host_;
  struct Slot {
    bool carry = false;    // its block rides in this negotiation
    bool pending = false;  // a member had operations pending since its last block
    bool pending_now = false;  // in this negotiation
    size_t since = 0;      // negotiations since its last block
  };
  std::vector<Slot> slots_;
  size_t carried_ = 0;  // slots with carry
};

}  // namespace hvd
