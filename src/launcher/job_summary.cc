#include "launcher/job_summary.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
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

std::string LabelOf(const PromSample* s, const char* k, const char* dflt = "") {
  auto it = s->labels.find(k);
  return it != s->labels.end() ? it->second : dflt;
}

// The top stragglers of each scope: the context's ("all") and each process
// set's. Every member sees a scope's same steps: its lowest rank speaks.
void Stragglers(const PromMerge& m, std::vector<std::string>* out) {
  std::map<std::string, std::pair<long, double>> scope;  // set -> (speaker, steps)
  for (const PromSample* s : m.Samples("hvd_straggler_steps_total")) {
    const long r = std::strtol(LabelOf(s, "rank", "-1").c_str(), nullptr, 10);
    auto [it, fresh] = scope.emplace(LabelOf(s, "process_set", "all"), std::make_pair(r, s->value));
    if (!fresh && r < it->second.first) it->second = {r, s->value};
  }
  auto speaks = [&](const PromSample* s) {
    auto it = scope.find(LabelOf(s, "process_set", "all"));
    return it != scope.end() && LabelOf(s, "rank") == std::to_string(it->second.first);
  };
  struct Who {
    double last = 0, late = 0, cost = 0;
  };
  std::map<std::string, std::map<std::string, Who>> who;  // set -> straggler -> counts
  const std::pair<const char*, double Who::*> rows[] = {
      {"hvd_straggler_last_total", &Who::last},
      {"hvd_straggler_late_total", &Who::late},
      {"hvd_straggler_cost_seconds_total", &Who::cost}};
  for (const auto& [name, field] : rows) {
    for (const PromSample* s : m.Samples(name)) {
      if (speaks(s)) who[LabelOf(s, "process_set", "all")][LabelOf(s, "straggler")].*field = s->value;
    }
  }
  int shown = 0;
  for (const auto& [set, ranks] : who) {
    std::vector<std::pair<std::string, Who>> top(ranks.begin(), ranks.end());
    std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) { return a.second.cost > b.second.cost; });
    const std::string where = set == "all" ? "" : " in process set [" + set + "]";
    const double steps = scope[set].second;
    for (size_t i = 0; i < top.size() && i < 3 && top[i].second.late > 0; ++i, ++shown) {
      const Who& w = top[i].second;
      out->push_back("  rank " + top[i].first + where + ": last in " +
                     Fmt("%.0f of %.0f steps", w.last, steps) +
                     Fmt(", late in %.0f; cost the job %.3f s (%.1f ms per step it was last)",
                         w.late, w.cost, w.last > 0 ? w.cost / w.last * 1e3 : 0));
    }
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
