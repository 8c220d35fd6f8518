#include "core/observability/stragglers.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace hvd {
namespace {

constexpr uint16_t kNone = 0xFFFF;
constexpr double kStepsPerDoubling = 2048;

double Seconds(Stragglers::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

uint64_t Nanos(double seconds) { return seconds <= 0 ? 0 : static_cast<uint64_t>(seconds * 1e9); }

std::string Ms(double seconds) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.1f ms", seconds * 1e3);
  return b;
}

}  // namespace

uint16_t Stragglers::Encode(double seconds) {
  const double us = std::max(0.0, seconds * 1e6);
  const double v = std::round(std::log2(1 + us) * kStepsPerDoubling);
  return static_cast<uint16_t>(std::min(v, static_cast<double>(kNone - 1)));
}

double Stragglers::Decode(uint16_t code) {
  return (std::exp2(code / kStepsPerDoubling) - 1) * 1e-6;
}

void Stragglers::Configure(int rank, int size, Settings s, Logger* log,
                           std::function<std::string(int)> host, std::string scope, int speaker) {
  rank_ = rank;
  scope_ = std::move(scope);
  speaker_ = rank == speaker;
  size_ = std::max(size, 1);
  settings_ = s;
  log_ = log;
  host_ = std::move(host);
  const size_t n = static_cast<size_t>(size_);
  period_ = std::max<size_t>(1, (2 * n + kMaxBlockBytes - 1) / kMaxBlockBytes);
  ranks_.reset(new PerRank[n]);
  interval_late_.assign(n, 0);
  interval_cost_nanos_.assign(n, 0);
  waits_.assign(n, 0);
}

void Stragglers::Contribute(uint8_t* block) const {
  uint16_t code = kNone;
  if (settings_.record && earliest_ != Clock::time_point::max()) code = Encode(Seconds(ready_at_ - earliest_));
  uint8_t* mine = block + 2 * static_cast<size_t>(rank_);
  mine[0] = static_cast<uint8_t>(code >> 8);
  mine[1] = static_cast<uint8_t>(code & 0xFF);
}

void Stragglers::Negotiated(const uint8_t* block, bool ready, Clock::time_point now) {
  if (size_ < 2) return;
  if (carry_) {
    Step(block, now);
    ready_since_ = false;
    since_ = 0;
  }
  ready_since_ = ready_since_ || ready;
  ++since_;
  carry_ = ready_since_ && since_ >= period_;
}

// One step's waits, every rank's: who was last, what it cost.
void Stragglers::Step(const uint8_t* block, Clock::time_point now) {
  if (!settings_.record) return;
  int last = -1, valid = 0;
  double least = HUGE_VAL, second = HUGE_VAL;
  for (int r = 0; r < size_; ++r) {
    const uint8_t* p = block + 2 * static_cast<size_t>(r);
    const uint16_t code = static_cast<uint16_t>((p[0] << 8) | p[1]);
    const double w = code == kNone ? -1 : Decode(code);
    waits_[static_cast<size_t>(r)] = w;
    if (code == kNone) continue;
    ++valid;
    if (w < least) {
      second = least;
      least = w;
      last = r;
    } else if (w < second) {
      second = w;
    }
  }
  if (valid < 2) return;
  const double step_s = last_step_ == Clock::time_point{} ? 0 : Seconds(now - last_step_);
  last_step_ = now;
  if (interval_start_ == Clock::time_point{}) interval_start_ = now;
  const double cost = second - least;
  steps_.Add(1);
  step_nanos_.Add(Nanos(step_s));
  PerRank& pr = ranks_[static_cast<size_t>(last)];
  pr.last.Add(1);
  pr.cost_nanos.Add(Nanos(cost));
  pr.cost[metrics::TimeBucketOf(Nanos(cost))].Add(1);
  const double mine = waits_[static_cast<size_t>(rank_)];
  if (last != rank_ && mine > least) pr.waited_nanos.Add(Nanos(mine - least));
  ++interval_steps_;
  if (cost > kFloorS && step_s > 0 && cost > settings_.share * step_s) {
    pr.late.Add(1);
    ++interval_late_[static_cast<size_t>(last)];
    interval_cost_nanos_[static_cast<size_t>(last)] += Nanos(cost);
  }
  if (settings_.warning_s > 0 && Seconds(now - interval_start_) >= settings_.warning_s) Warn(now);
}

// The interval's end: a rank late in most of its steps is named (rank 0
// logs it; every rank counts it in its metrics).
void Stragglers::Warn(Clock::time_point now) {
  const double interval = Seconds(now - interval_start_);
  int worst = -1;
  for (int r = 0; r < size_; ++r) {
    const uint64_t late = interval_late_[static_cast<size_t>(r)];
    if (2 * late > interval_steps_ && (worst < 0 || late > interval_late_[static_cast<size_t>(worst)])) {
      worst = r;
    }
  }
  if (worst >= 0) {
    const size_t w = static_cast<size_t>(worst);
    ranks_[w].warnings.Add(1);
    const double cost = static_cast<double>(interval_cost_nanos_[w]) * 1e-9;
    const std::string host = host_ ? host_(worst) : std::string();
    if (speaker_) {
      HVD_LOG(*log_, HVD_LOG_WARNING,
              "straggler" << (scope_.empty() ? "" : " in process " + scope_) << ": rank " << worst << (host.empty() ? "" : " (host " + host + ")")
                                 << " submitted last, late by more than "
                                 << static_cast<int>(settings_.share * 100 + 0.5) << "% of the step, in "
                                 << interval_late_[w] << " of " << interval_steps_
                                 << " steps in the last " << Ms(interval)
                                 << "; it cost the job " << Ms(cost) << " ("
                                 << Ms(cost / static_cast<double>(interval_late_[w]))
                                 << " per late step; HVD_STRAGGLER_WARNING)");
    }
  }
  interval_start_ = now;
  interval_steps_ = 0;
  std::fill(interval_late_.begin(), interval_late_.end(), 0);
  std::fill(interval_cost_nanos_.begin(), interval_cost_nanos_.end(), 0);
}

}  // namespace hvd
