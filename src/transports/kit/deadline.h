// Deadlines and the text of a duration, for every plugin: a limit in seconds
// (<= 0 or beyond ~a year: none) becomes a time point, and back.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

namespace hvd::kit {

using Clock = std::chrono::steady_clock;

// Seconds that stand for "no limit" where a number must be passed on.
constexpr double kNoLimitS = 3.0e7;

// The time point `s` seconds from now; Clock::time_point::max() for no limit.
inline Clock::time_point After(double s) {
  if (!(s > 0) || s > kNoLimitS) return Clock::time_point::max();
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// The seconds left until `deadline` (0 once passed; kNoLimitS for none).
inline double SecondsLeft(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return kNoLimitS;
  return std::max(0.0, std::chrono::duration<double>(deadline - Clock::now()).count());
}

// "2.5": seconds as messages print them.
inline std::string Secs(double s) {
  char b[32];
  std::snprintf(b, sizeof(b), "%g", s);
  return b;
}

}  // namespace hvd::kit
