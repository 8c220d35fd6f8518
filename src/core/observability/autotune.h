// Autotuning of the fusion threshold, the cycle time and, where the
// transport runs hierarchical collectives on its own choice (HVD_HIERARCHICAL
// unset), whether it does (HVD_AUTOTUNE=1).
//
// Rank 0 scores candidate settings by the bytes its collectives moved per
// second of wall time (compute between steps included, so overlap counts),
// over windows of busy cycles, and decides. Its decision travels in byte 3
// of the negotiation's MIN-allreduce (every other rank contributes kKeep),
// so every rank switches in the same cycle, before that cycle's responses
// are bucketed: fusion buckets stay identical on every rank.
//
// Search: coordinate descent over a fixed grid (thresholds with the
// configured cycle time, then cycle times with the best threshold, then,
// where tuned, hierarchical on and off with both), a discarded transition
// window after every switch, the median of `samples` windows per
// candidate, then the best setting for good.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/observability/logging.h"

namespace hvd {

struct TuneParams {
  int64_t fusion_threshold;
  double cycle_time_ms;
  int hierarchical = -1;  // 1 on, 0 off; -1: not tuned (leave as it is)
};

class Autotuner {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr uint8_t kKeep = 255;

  Autotuner(const Config& cfg, Logger* log);
  ~Autotuner();
  Autotuner(const Autotuner&) = delete;
  Autotuner& operator=(const Autotuner&) = delete;

  bool enabled() const { return enabled_; }
  // The transport runs hierarchical collectives by its own choice: a third
  // stage tries them off (every rank calls it alike, before the first cycle).
  void TuneHierarchical();
  bool tunes_hierarchical() const { return tune_hier_; }
  bool done() const { return phase_ == Phase::kDone; }

  // This rank's byte for the negotiation (the MIN picks rank 0's).
  uint8_t Proposal() const { return proposal_; }

  // Every rank, after each negotiation, with the byte that survived the MIN.
  // True (and *p set) when the settings change now.
  bool Apply(uint8_t decided, TuneParams* p);

  // Rank 0, after a cycle that ran operations: bytes moved by them, from the
  // start of the negotiation to the end of the last operation.
  void Observe(uint64_t bytes, Clock::time_point start, Clock::time_point end);

  // The candidate grid (the same on every rank).
  const std::vector<int64_t>& thresholds() const { return thresholds_; }
  const std::vector<double>& cycles() const { return cycles_; }
  TuneParams Candidate(uint8_t index) const;

 private:
  enum class Phase { kWarmup, kThresholds, kCycles, kHierarchical, kDone };

  // hi: 0 hierarchical as configured (on), 1 off; always 0 unless tuned.
  uint8_t Index(size_t ti, size_t ci, size_t hi) const {
    return static_cast<uint8_t>((hi * thresholds_.size() + ti) * cycles_.size() + ci);
  }
  void Decode(uint8_t index, size_t* ti, size_t* ci, size_t* hi) const;  // Index's inverse
  size_t GridSize() const { return thresholds_.size() * cycles_.size() * (tune_hier_ ? 2 : 1); }
  std::string Row(const char* kind, size_t ti, size_t ci, size_t hi, const std::string& score) const;
  void StartCandidate();   // proposes the current stage's next candidate
  void FinishCandidate();  // records its median score, moves on
  void Log(const std::string& line);

  bool enabled_ = false;
  bool root_ = false;
  Logger* log_;
  int warmup_samples_, steps_per_sample_, samples_;
  std::vector<int64_t> thresholds_;
  std::vector<double> cycles_;
  std::FILE* csv_ = nullptr;

  Phase phase_ = Phase::kWarmup;
  uint8_t proposal_ = kKeep;
  bool tune_hier_ = false;
  size_t current_ti_ = 0, current_ci_ = 0, current_hi_ = 0;  // the settings in force
  size_t stage_pos_ = 0;                    // candidate of the stage being measured
  bool measuring_ = false;                  // the candidate is in force
  int window_index_ = 0;                    // windows seen for this candidate
  std::vector<double> scores_;              // this candidate's scored windows
  std::vector<double> stage_scores_;        // median per candidate of the stage
  size_t best_ti_ = 0, best_ci_ = 0;
  size_t stage1_ci_ = 0;  // the configured cycle time, used while thresholds are tried

  // The open window.
  int window_cycles_ = 0;
  uint64_t window_bytes_ = 0;
  Clock::time_point window_start_;
};

}  // namespace hvd
