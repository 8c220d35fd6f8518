// Chrome trace (chrome://tracing, Perfetto) of what the background thread
// did: one row per tensor name, spans for negotiation and for each phase of
// the operation. Written by the background thread only; rank 0 writes it.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>
#include <unordered_map>

#include "common/status.h"

namespace hvd {

class Timeline {
 public:
  Timeline() = default;
  ~Timeline() { Close(); }
  Status Open(const std::string& path);
  bool enabled() const { return file_ != nullptr; }

  using TimePoint = std::chrono::steady_clock::time_point;
  // A complete span on the row of `tensor`.
  void Span(const std::string& tensor, const char* phase, TimePoint begin, TimePoint end,
            const std::string& args_json = "");
  // Rows from here on belong to this scope: "" for the context's own
  // operations, a process set's label otherwise ("set [0, 2]"), so the same
  // name in two sets shows as two rows ("set [0, 2]: grad").
  void set_scope(const std::string* label) { scope_ = label; }
  // An instant event across every row (e.g. "CYCLE_START").
  void Instant(const char* name, TimePoint at);
  void Flush();
  void Close();

 private:
  int Row(const std::string& tensor);
  double Micros(TimePoint t) const;

  std::FILE* file_ = nullptr;
  TimePoint origin_;
  std::unordered_map<std::string, int> rows_;
  bool first_ = true;
  const std::string* scope_ = nullptr;  // null or empty: the context's own
};

}  // namespace hvd
