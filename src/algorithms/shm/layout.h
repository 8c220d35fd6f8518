// The shared-memory segment's layout, shared by the segment, its set-up
// and nothing else (internal to algorithms/shm/).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "algorithms/shm/shm.h"

namespace hvd {
namespace shm {

constexpr size_t kMinSlotBytes = 256 * 1024;
constexpr size_t kSegmentBudget = 32u << 20;
constexpr uint64_t kMagic = 0x32306d6873647668ull;  // "hvdshm02"
// Slot sets, used round-robin by consecutive rounds (Segment::NextRound
// says why three are enough without a flag for "done reading").
constexpr uint32_t kSets = Segment::kSetCount;
static_assert(kSets >= 3, "the pipelined allreduce's safety argument needs three sets");
constexpr int64_t kSliceNs = 20 * 1000 * 1000;      // longest single futex sleep
constexpr int64_t kPidCheckNs = 100 * 1000 * 1000;
constexpr uint32_t kAbortClaimed = 0xFFFFFFFFu;

static_assert(std::atomic<uint32_t>::is_always_lock_free, "shm sync needs lock-free atomics");

struct alignas(128) Header {
  uint64_t magic;
  uint64_t slot_bytes;
  uint32_t size;
  // 0; kAbortClaimed while the first failing rank writes its reason; then
  // 1 + that rank.
  std::atomic<uint32_t> abort_by;
  int32_t abort_code;
  char abort_msg[1024];
};

// One line per rank, apart from its neighbours' (no false sharing).
struct alignas(128) RankLine {
  std::atomic<uint32_t> seq;       // barriers entered (written by the owner only)
  std::atomic<uint32_t> waiters;   // peers asleep on any word of this line (futex)
  // The pipelined allreduce's flags (written by the owner only), each 1 +
  // the last round for which the owner has published its inputs (written),
  // reduced its own part and published the result (reduced).
  std::atomic<uint32_t> written;
  std::atomic<uint32_t> reduced;
  std::atomic<uint32_t> departed;  // the owner finalized
  std::atomic<int32_t> pid;
  // 1 + the peer (the owner's transport rank) of the point-to-point wait
  // the owner is blocked in (or gave up in: it stays), 0 if none; since when (CLOCK_MONOTONIC ns,
  // one clock for the host's processes). Segment::NoteWait.
  std::atomic<int32_t> waiting_on;
  std::atomic<int64_t> waiting_since_ns;
  std::atomic<int64_t> waiting_until_ns;  // when that wait failed; 0 while it lasts
};
static_assert(sizeof(RankLine) == 128, "a rank's line is one 128-byte block");

}  // namespace shm
}  // namespace hvd
