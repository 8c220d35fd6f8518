#include "launcher/job_summary.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace hvd::launcher {
namespace {

const char* const kOps[] = {"allreduce", "allgather", "broadcast", "alltoall", "reducescatter",
                            "barrier", "join"};

double Sum(const PromMerge& m, const std::string& name) {
  double s = 0;
  for (const PromSample* x : m.Samples(name)) s += x->value;
  return s;
}

std::string Fmt(const char* f, double a, double b = 0, double c = 0) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), f, a, b, c);
  return buf;
}

std::string Bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return Fmt("%.1f ", b) + units[u];
}

void Collectives(const PromMerge& m, int n, std::vector<std::string>* out) {
  for (const char* op : kOps) {
    const std::string base = std::string("hvd_") + op;
    const double count = Sum(m, base + "_operations_total");
    if (count == 0) continue;
    out->push_back(std::string("  ") + op + ": " + Fmt("%.0f", count / n) + " operations, " +
                   Bytes(Sum(m, base + "_bytes_total") / n) + ", " +
                   Fmt("%.3f s", Sum(m, base + "_seconds_total") / n) + " per rank");
  }
  out->push_back("  negotiation " + Fmt("%.3f s", Sum(m, "hvd_negotiation_seconds_total") / n) +
                 ", data " + Fmt("%.3f s", Sum(m, "hvd_data_seconds_total") / n) + " per rank");
}

void Bandwidth(const PromMerge& m, std::vector<std::string>* out) {
  // (op, size class) -> bus bytes, seconds: summed over ranks.
  std::map<std::pair<std::string, std::string>, std::pair<double, double>> by;
  for (const PromSample* s : m.Samples("hvd_bus_bytes_total")) {
    by[{s->labels.at("op"), s->labels.at("size_class")}].first += s->value;
  }
  for (const PromSample* s : m.Samples("hvd_size_class_seconds_total")) {
    by[{s->labels.at("op"), s->labels.at("size_class")}].second += s->value;
  }
  for (const auto& [key, v] : by) {
    if (v.first <= 0 || v.second <= 0) continue;
    out->push_back("  " + key.first + " up to " + key.second + ": bus bandwidth " +
                   Bytes(v.first / v.second) + "/s");
  }
}

void Stragglers(const PromMerge& m, std::vector<std::string>* out) {
  // Every rank sees the same steps; rank 0's view speaks for the job.
  auto rank0 = [](const PromSample* s) { return s->labels.count("rank") && s->labels.at("rank") == "0"; };
  double steps = 0;
  for (const PromSample* s : m.Samples("hvd_straggler_steps_total")) {
    if (rank0(s)) steps = s->value;
  }
  struct Who {
    double last = 0, late = 0, cost = 0;
  };
  std::map<std::string, Who> who;
  for (const PromSample* s : m.Samples("hvd_straggler_last_total")) {
    if (rank0(s)) who[s->labels.at("straggler")].last = s->value;
  }
  for (const PromSample* s : m.Samples("hvd_straggler_late_total")) {
    if (rank0(s)) who[s->labels.at("straggler")].late = s->value;
  }
  for (const PromSample* s : m.Samples("hvd_straggler_cost_seconds_total")) {
    if (rank0(s)) who[s->labels.at("straggler")].cost = s->value;
  }
  std::vector<std::pair<std::string, Who>> top(who.begin(), who.end());
  std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) { return a.second.cost > b.second.cost; });
  int shown = 0;
  for (const auto& [r, w] : top) {
    if (shown == 3 || w.late == 0) break;
    out->push_back("  rank " + r + ": last in " + Fmt("%.0f of %.0f steps", w.last, steps) +
                   Fmt(", late in %.0f; cost the job %.3f s (%.1f ms per step it was last)", w.late,
                       w.cost, w.last > 0 ? w.cost / w.last * 1e3 : 0));
    ++shown;
  }
  if (shown == 0) out->push_back("  none: no rank was late in its steps by more than the share");
}

}  // namespace

std::vector<std::string> JobSummary(const PromMerge& m, int reporting, int ranks) {
  std::vector<std::string> out;
  if (reporting == 0) return out;
  out.push_back("summary (" + std::to_string(reporting) + " of " + std::to_string(ranks) +
                " ranks reported):");
  out.push_back(" time in collectives:");
  Collectives(m, reporting, &out);
  out.push_back(" bus bandwidth by size class:");
  Bandwidth(m, &out);
  out.push_back(" stragglers:");
  Stragglers(m, &out);
  const double hits = Sum(m, "hvd_response_cache_hits_total");
  const double misses = Sum(m, "hvd_response_cache_misses_total");
  out.push_back(" response cache hit rate: " +
                (hits + misses > 0 ? Fmt("%.1f%%", 100 * hits / (hits + misses)) : std::string("n/a")));
  return out;
}

}  // namespace hvd::launcher
