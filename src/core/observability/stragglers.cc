#include "core/observability/stragglers.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace hvd {
namespace {

constexpr uint16_t kNone = 0xFFFF;

double Seconds(Stragglers::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string Ms(double seconds) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.1f ms", seconds * 1e3);
  return b;
}

}  // namespace

// Log-linear in nanoseconds: below 1024 ns the count itself; above, the
// highest bit's position (10 bits of code) and the 10 bits after it, so a
// code is within 2^-11 of the wait it stands for and codes order as waits
// do. Integer arithmetic only: this runs every step, and log2/exp2 cost
// about 150 instructions a step of some 9,000 (bench/tensor_cost.py).
uint16_t Stragglers::EncodeNanos(uint64_t ns) {
  if (ns < 1024) return static_cast<uint16_t>(ns);
  const int e = 63 - __builtin_clzll(ns);  // 10 .. 63
  return static_cast<uint16_t>((static_cast<unsigned>(e - 9) << 10) | ((ns >> (e - 10)) & 0x3FF));
}

uint64_t Stragglers::DecodeNanos(uint16_t code) {
  if (code < 1024) return code;
  const int shift = (code >> 10) - 1;  // 0 .. 53
  const uint64_t base = (uint64_t{1024} | (code & 0x3FFu)) << shift;
  return base + (shift > 0 ? uint64_t{1} << (shift - 1) : 0);  // the middle of its range
}

uint16_t Stragglers::Encode(double seconds) {
  const double ns = seconds * 1e9;
  if (!(ns > 0)) return 0;
  return EncodeNanos(ns >= 9.2e18 ? uint64_t{9200000000000000000u} : static_cast<uint64_t>(ns));
}

double Stragglers::Decode(uint16_t code) { return static_cast<double>(DecodeNanos(code)) * 1e-9; }

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
}

void Stragglers::Contribute(uint8_t* block) const {
  uint16_t code = kNone;
  if (settings_.record && earliest_ != Clock::time_point::max()) {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(ready_at_ - earliest_).count();
    code = EncodeNanos(ns > 0 ? static_cast<uint64_t>(ns) : 0);
  }
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
  // Codes order as waits do: the least two by code, then decoded.
  int last = -1, valid = 0;
  uint16_t least_code = kNone, second_code = kNone, mine_code = kNone;
  for (int r = 0; r < size_; ++r) {
    const uint8_t* p = block + 2 * static_cast<size_t>(r);
    const uint16_t code = static_cast<uint16_t>((p[0] << 8) | p[1]);
    if (r == rank_) mine_code = code;
    if (code == kNone) continue;
    ++valid;
    if (last < 0 || code < least_code) {
      second_code = least_code;
      least_code = code;
      last = r;
    } else if (code < second_code) {
      second_code = code;
    }
  }
  if (valid < 2) return;
  const uint64_t least_ns = DecodeNanos(least_code);
  const uint64_t cost_ns = DecodeNanos(second_code) - least_ns;  // codes order as waits
  const auto step = last_step_ == Clock::time_point{} ? Clock::duration::zero() : now - last_step_;
  const uint64_t step_ns = static_cast<uint64_t>(
      std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(step).count()));
  last_step_ = now;
  if (interval_start_ == Clock::time_point{}) interval_start_ = now;
  steps_.Add(1);
  step_nanos_.Add(step_ns);
  PerRank& pr = ranks_[static_cast<size_t>(last)];
  pr.last.Add(1);
  pr.cost_nanos.Add(cost_ns);
  pr.cost[metrics::TimeBucketOf(cost_ns)].Add(1);
  if (last != rank_ && mine_code != kNone && mine_code > least_code) {
    pr.waited_nanos.Add(DecodeNanos(mine_code) - least_ns);
  }
  ++interval_steps_;
  const double cost = static_cast<double>(cost_ns) * 1e-9;
  if (cost > kFloorS && step_ns > 0 && cost > settings_.share * static_cast<double>(step_ns) * 1e-9) {
    pr.late.Add(1);
    ++interval_late_[static_cast<size_t>(last)];
    interval_cost_nanos_[static_cast<size_t>(last)] += cost_ns;
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
