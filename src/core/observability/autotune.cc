#include "core/observability/autotune.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

namespace hvd {

namespace {

template <typename T>
size_t IndexOf(const std::vector<T>& v, T x) {
  return static_cast<size_t>(std::find(v.begin(), v.end(), x) - v.begin());
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

size_t ArgMax(const std::vector<double>& v) {
  return static_cast<size_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace

Autotuner::Autotuner(const Config& cfg, Logger* log)
    : log_(log),
      warmup_samples_(cfg.autotune_warmup_samples),
      steps_per_sample_(cfg.autotune_steps_per_sample),
      samples_(cfg.autotune_samples) {
  thresholds_ = {1ll << 20, 4ll << 20, 16ll << 20, 64ll << 20, 128ll << 20};
  thresholds_.push_back(cfg.fusion_threshold);
  std::sort(thresholds_.begin(), thresholds_.end());
  thresholds_.erase(std::unique(thresholds_.begin(), thresholds_.end()), thresholds_.end());
  cycles_ = {0.01, 0.05, 0.1, 1.0, 5.0};
  cycles_.push_back(cfg.cycle_time_ms);
  std::sort(cycles_.begin(), cycles_.end());
  cycles_.erase(std::unique(cycles_.begin(), cycles_.end()), cycles_.end());
  current_ti_ = IndexOf(thresholds_, cfg.fusion_threshold);
  current_ci_ = IndexOf(cycles_, cfg.cycle_time_ms);
  best_ti_ = current_ti_;
  stage1_ci_ = current_ci_;

  enabled_ = cfg.autotune && cfg.size > 1;
  root_ = cfg.rank == 0;
  if (!enabled_ || !root_) return;
  if (!cfg.autotune_log.empty()) {
    csv_ = std::fopen(cfg.autotune_log.c_str(), "w");
    if (csv_ == nullptr) {
      HVD_LOG(*log_, HVD_LOG_WARNING,
              "autotune: cannot write " << cfg.autotune_log << ": " << std::strerror(errno));
    } else {
      std::fprintf(csv_, "kind,fusion_threshold_bytes,cycle_time_ms,bytes_per_s,hierarchical\n");
      std::fflush(csv_);
    }
  }
  HVD_LOG(*log_, HVD_LOG_INFO,
          "autotune: " << thresholds_.size() << " fusion thresholds, then " << cycles_.size()
                       << " cycle times; " << steps_per_sample_ << " busy cycles per window, "
                       << samples_ << " windows per candidate, " << warmup_samples_
                       << " warm-up windows");
  if (warmup_samples_ == 0) {
    phase_ = Phase::kThresholds;
    StartCandidate();
  }
}

Autotuner::~Autotuner() {
  if (csv_ != nullptr) std::fclose(csv_);
}

void Autotuner::TuneHierarchical() {
  if (!enabled_ || tune_hier_ || (phase_ != Phase::kWarmup && phase_ != Phase::kThresholds)) return;
  if (GridSize() * 2 > kKeep) return;  // the index must fit below kKeep
  tune_hier_ = true;
  if (root_) HVD_LOG(*log_, HVD_LOG_INFO, "autotune: then hierarchical collectives on and off");
}

void Autotuner::Decode(uint8_t index, size_t* ti, size_t* ci, size_t* hi) const {
  const size_t per_hi = thresholds_.size() * cycles_.size();
  *hi = index / per_hi;
  *ti = index % per_hi / cycles_.size();
  *ci = index % cycles_.size();
}

TuneParams Autotuner::Candidate(uint8_t index) const {
  size_t ti = 0, ci = 0, hi = 0;
  Decode(index, &ti, &ci, &hi);
  TuneParams p{thresholds_[std::min(ti, thresholds_.size() - 1)], cycles_[ci]};
  if (tune_hier_) p.hierarchical = hi == 0 ? 1 : 0;
  return p;
}

std::string Autotuner::Row(const char* kind, size_t ti, size_t ci, size_t hi,
                           const std::string& score) const {
  std::ostringstream os;
  os << kind << "," << thresholds_[ti] << "," << cycles_[ci] << "," << score << ",";
  if (tune_hier_) os << (hi == 0 ? 1 : 0);
  return os.str();
}

bool Autotuner::Apply(uint8_t decided, TuneParams* p) {
  if (!enabled_ || decided == kKeep) return false;
  if (decided >= GridSize()) return false;  // not from this grid
  Decode(decided, &current_ti_, &current_ci_, &current_hi_);
  *p = Candidate(decided);
  if (root_) {
    proposal_ = kKeep;
    measuring_ = phase_ == Phase::kThresholds || phase_ == Phase::kCycles ||
                 phase_ == Phase::kHierarchical;
    window_index_ = 0;
    window_cycles_ = 0;
    window_bytes_ = 0;
    scores_.clear();
  }
  return true;
}

void Autotuner::StartCandidate() {
  const size_t ti = phase_ == Phase::kThresholds ? stage_pos_ : best_ti_;
  const size_t ci = phase_ == Phase::kThresholds ? stage1_ci_
                    : phase_ == Phase::kCycles   ? stage_pos_
                                                 : best_ci_;
  const size_t hi = phase_ == Phase::kHierarchical ? stage_pos_ : 0;
  proposal_ = Index(ti, ci, hi);
  measuring_ = false;
}

void Autotuner::FinishCandidate() {
  stage_scores_.push_back(Median(scores_));
  ++stage_pos_;
  const size_t stage_size = phase_ == Phase::kThresholds ? thresholds_.size()
                            : phase_ == Phase::kCycles   ? cycles_.size()
                                                         : 2;
  if (stage_pos_ < stage_size) {
    StartCandidate();
    return;
  }
  const size_t best = ArgMax(stage_scores_);
  stage_scores_.clear();
  stage_pos_ = 0;
  if (phase_ == Phase::kThresholds) {
    best_ti_ = best;
    phase_ = Phase::kCycles;
    StartCandidate();
    return;
  }
  size_t best_hi = 0;
  if (phase_ == Phase::kCycles) {
    best_ci_ = best;
    if (tune_hier_) {
      phase_ = Phase::kHierarchical;
      StartCandidate();
      return;
    }
  } else {
    best_hi = best;
  }
  phase_ = Phase::kDone;
  measuring_ = false;
  proposal_ = Index(best_ti_, best_ci_, best_hi);
  Log(Row("best", best_ti_, best_ci_, best_hi, ""));
  HVD_LOG(*log_, HVD_LOG_INFO,
          "autotune: done; fusion threshold " << thresholds_[best_ti_] << " bytes, cycle time "
                                              << cycles_[best_ci_] << " ms"
                                              << (tune_hier_ ? best_hi == 0 ? ", hierarchical on"
                                                                            : ", hierarchical off"
                                                             : ""));
}

void Autotuner::Observe(uint64_t bytes, Clock::time_point start, Clock::time_point end) {
  if (!enabled_ || !root_ || phase_ == Phase::kDone) return;
  if (phase_ != Phase::kWarmup && !measuring_) return;  // a switch is on its way
  if (window_cycles_ == 0) window_start_ = start;
  window_bytes_ += bytes;
  if (++window_cycles_ < steps_per_sample_) return;
  const double secs = std::chrono::duration<double>(end - window_start_).count();
  const double score = secs > 0 ? static_cast<double>(window_bytes_) / secs : 0.0;
  window_cycles_ = 0;
  window_bytes_ = 0;

  if (phase_ == Phase::kWarmup) {
    if (++window_index_ >= warmup_samples_) {
      window_index_ = 0;
      phase_ = Phase::kThresholds;
      StartCandidate();
    }
    return;
  }
  if (++window_index_ == 1) return;  // the transition window
  scores_.push_back(score);
  std::ostringstream os;
  os << score;
  Log(Row("sample", current_ti_, current_ci_, current_hi_, os.str()));
  if (static_cast<int>(scores_.size()) >= samples_) FinishCandidate();
}

void Autotuner::Log(const std::string& line) {
  if (csv_ == nullptr) return;
  std::fprintf(csv_, "%s\n", line.c_str());
  std::fflush(csv_);
}

}  // namespace hvd
