// Stragglers: which rank submitted last in each step, and what its lateness
// cost the others. A step is a negotiation of the context that made some of
// its operations ready. Each rank measures its own wait for that step (from
// the earliest submit among the operations it ran, to the negotiation that
// made them ready) and sends it in a later negotiation of the context, two
// bytes per rank in the allreduce it runs anyway: no extra round (the wire:
// docs/metrics.md). Every rank then knows every rank's wait for the same
// step: the rank that waited least submitted last; the second-least wait
// less the least is what it cost the job (the step would have waited for the
// second-to-last rank anyway); each other rank waited its own wait less the
// least on it. The loop's cycle holder writes; any thread reads (Counter).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/observability/logging.h"
#include "core/observability/metrics.h"

namespace hvd {

class Stragglers {
 public:
  using Clock = std::chrono::steady_clock;
  struct Settings {
    double warning_s = 60;  // the warning's interval (HVD_STRAGGLER_WARNING; <= 0: no warning)
    double share = 0.1;     // late: by more than this share of the step (HVD_STRAGGLER_SHARE)
    // HVD_METRICS=0: no waits sent, no steps analysed; the block still goes
    // (its size must not depend on a setting that ranks may not share).
    bool record = true;
  };
  // Lateness below this is noise, never late (a scheduling hiccup).
  static constexpr double kFloorS = 0.0002;
  // The block rides in every eligible negotiation up to this many ranks'
  // bytes; larger jobs send it every ceil(2 * size / kMaxBlockBytes)-th.
  static constexpr size_t kMaxBlockBytes = 128;

  // Before the loop starts. host(r): rank r's host, for the warning.
  // `scope`: "" for the context, else the process set's label ("set [0, 2]",
  // in its warning); `speaker`: the rank that logs the warning.
  void Configure(int rank, int size, Settings s, Logger* log,
                 std::function<std::string(int)> host, std::string scope = "", int speaker = 0);
  bool configured() const { return ranks_ != nullptr; }

  // The negotiation's block: its bytes this time (0: none), the same on
  // every rank (it depends only on what earlier negotiations showed all).
  size_t BlockBytes() const { return carry_ ? 2 * static_cast<size_t>(size_) : 0; }
  // Writes this rank's two bytes at rank * 2 of a block filled with 0xFF.
  void Contribute(uint8_t* block) const;
  // After the negotiation: reads the block (when it carried one) and notes
  // whether this negotiation made operations ready (`ready`, the same on
  // every rank).
  void Negotiated(const uint8_t* block, bool ready, Clock::time_point now);

  // A process set's steps (set_stragglers.h): whether a block goes is
  // decided by the caller; this rank writes a wait only for a step since
  // the last block (Contribute), and Consume reads the block and forgets it.
  void Consume(const uint8_t* block, Clock::time_point now) {
    Step(block, now);
    earliest_ = Clock::time_point::max();
  }

  // The context's ready operations, as the loop runs them: Begin at the
  // negotiation's end, Saw for each of this rank's requests.
  void Begin(Clock::time_point negotiated) {
    ready_at_ = negotiated;
    earliest_ = Clock::time_point::max();
  }
  void Saw(Clock::time_point enqueued) {
    if (enqueued < earliest_) earliest_ = enqueued;
  }

  // Read by any thread.
  int size() const { return size_; }
  uint64_t steps() const { return steps_.Get(); }
  uint64_t step_nanos() const { return step_nanos_.Get(); }
  struct PerRank {
    Counter last;       // steps in which it submitted last
    Counter late;       // of those, late by more than the share of the step
    Counter cost_nanos;  // the job time it cost (second-least wait - least)
    Counter waited_nanos;  // this rank's time waiting on it
    Counter warnings;   // warnings that named it
    std::array<Counter, metrics::kTimeBuckets> cost;  // per step it was last
  };
  const PerRank& rank(int r) const { return ranks_[static_cast<size_t>(r)]; }
  const Settings& settings() const { return settings_; }

  // The 16-bit code of a wait (log-linear in nanoseconds, within 2^-11 of
  // it; codes order as waits do; 0xFFFF: none), and back.
  static uint16_t EncodeNanos(uint64_t ns);
  static uint64_t DecodeNanos(uint16_t code);
  static uint16_t Encode(double seconds);
  static double Decode(uint16_t code);

 private:
  void Step(const uint8_t* block, Clock::time_point now);
  void Warn(Clock::time_point now);

  int rank_ = 0, size_ = 1;
  std::string scope_;
  bool speaker_ = false;
  Settings settings_;
  Logger* log_ = nullptr;
  std::function<std::string(int)> host_;
  size_t period_ = 1;  // negotiations between blocks, at least
  // Cycle holder only.
  bool carry_ = false;   // the next negotiation carries a block
  bool ready_since_ = false;  // a step since the last block
  size_t since_ = 0;     // negotiations since the last block
  Clock::time_point ready_at_{}, earliest_ = Clock::time_point::max();
  Clock::time_point last_step_{}, interval_start_{};
  uint64_t interval_steps_ = 0;
  std::vector<uint64_t> interval_late_;
  std::vector<uint64_t> interval_cost_nanos_;
  Counter steps_, step_nanos_;
  std::unique_ptr<PerRank[]> ranks_;
};

}  // namespace hvd
