// A context's metrics as text: JSON (versioned; hvd_metrics with
// HVD_METRICS_JSON) and the Prometheus text format (HVD_METRICS_PROMETHEUS).
// The names, labels and fields: docs/metrics.md.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/observability/metrics.h"
#include "core/observability/stragglers.h"

namespace hvd {

constexpr int kMetricsVersion = 1;

// What one rank reports: its context and each of its live process sets.
struct MetricsReport {
  int rank = 0, size = 1;
  std::string host, transport;
  const LoopMetrics* loop = nullptr;
  const Stragglers* stragglers = nullptr;
  uint64_t piggybacked = 0;
  bool enabled = true;  // HVD_METRICS=0: false, every count stays 0
  struct Scope {
    std::string process_set;  // "all" for the context, else its members: "0,2"
    int rank = 0, size = 1;
    std::shared_ptr<const void> keep;  // holds the scope (and so `m`) alive
    const ScopeMetrics* m = nullptr;
    // Its steps' stragglers, by ranks of the context; a set's lists only
    // `members` (empty for the context: every rank).
    const Stragglers* stragglers = nullptr;
    std::vector<int> members;
  };
  std::vector<Scope> scopes;
};

std::string RenderMetricsJson(const MetricsReport& r);
std::string RenderMetricsPrometheus(const MetricsReport& r);

}  // namespace hvd
