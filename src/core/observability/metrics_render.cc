#include "core/observability/metrics_render.h"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "common/json.h"

namespace hvd {
namespace {

using metrics::kOps;
using metrics::kPaths;
using metrics::kSizeClasses;
using metrics::kTimeBuckets;

double Sec(uint64_t nanos) { return static_cast<double>(nanos) * 1e-9; }

std::string Num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char b[40];
  std::snprintf(b, sizeof(b), "%.9g", v);
  return b;
}

std::string Num(uint64_t v) { return std::to_string(v); }

std::string Quote(const std::string& s) { return JsonQuote(s); }

// ---- JSON ----------------------------------------------------------------

void JsonOp(std::ostringstream& o, const OpMetrics& m) {
  o << "{\"count\":" << m.count.Get() << ",\"bytes\":" << m.bytes.Get()
    << ",\"seconds\":" << Num(Sec(m.nanos.Get())) << ",\"seconds_histogram\":[";
  for (size_t b = 0; b < kTimeBuckets; ++b) o << (b ? "," : "") << m.seconds[b].Get();
  o << "],\"algorithms\":{";
  bool first = true;
  for (size_t p = 0; p < kPaths; ++p) {
    const OpMetrics::ByPath& x = m.paths[p];
    if (x.count.Get() == 0 && x.bytes.Get() == 0) continue;
    o << (first ? "" : ",") << Quote(metrics::PathName(p)) << ":{\"count\":" << x.count.Get()
      << ",\"bytes\":" << x.bytes.Get() << ",\"seconds\":" << Num(Sec(x.nanos.Get())) << "}";
    first = false;
  }
  o << "},\"size_classes\":[";
  for (size_t c = 0; c < kSizeClasses; ++c) {
    const OpMetrics::BySize& s = m.sizes[c];
    const double secs = Sec(s.nanos.Get());
    o << (c ? "," : "") << "{\"class\":" << Quote(metrics::SizeClassName(c))
      << ",\"units\":" << s.count.Get() << ",\"bytes\":" << s.bytes.Get()
      << ",\"bus_bytes\":" << s.bus_bytes.Get() << ",\"seconds\":" << Num(secs)
      << ",\"bus_bandwidth\":" << Num(secs > 0 ? static_cast<double>(s.bus_bytes.Get()) / secs : 0)
      << "}";
  }
  o << "]}";
}

// The ranks a scope's stragglers list: a set's members, or every rank.
std::vector<int> StragglerRanks(const Stragglers& s, const std::vector<int>& members) {
  if (!s.configured()) return {};
  if (!members.empty()) return members;
  std::vector<int> all(static_cast<size_t>(s.size()));
  for (int r = 0; r < s.size(); ++r) all[static_cast<size_t>(r)] = r;
  return all;
}

void JsonStragglers(std::ostringstream& o, const Stragglers& s, const std::vector<int>& members) {
  o << "{\"steps\":" << s.steps() << ",\"step_seconds\":" << Num(Sec(s.step_nanos()))
    << ",\"warning_interval_s\":" << Num(s.settings().warning_s)
    << ",\"share\":" << Num(s.settings().share) << ",\"ranks\":[";
  const std::vector<int> ranks = StragglerRanks(s, members);
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int r = ranks[i];
    const Stragglers::PerRank& p = s.rank(r);
    o << (i ? "," : "") << "{\"rank\":" << r << ",\"last\":" << p.last.Get()
      << ",\"late\":" << p.late.Get() << ",\"cost_seconds\":" << Num(Sec(p.cost_nanos.Get()))
      << ",\"waited_seconds\":" << Num(Sec(p.waited_nanos.Get()))
      << ",\"warnings\":" << p.warnings.Get() << ",\"cost_histogram\":[";
    for (size_t b = 0; b < kTimeBuckets; ++b) o << (b ? "," : "") << p.cost[b].Get();
    o << "]}";
  }
  o << "],\"named\":[";
  bool first = true;
  for (const int r : ranks) {
    if (s.rank(r).warnings.Get() == 0) continue;
    o << (first ? "" : ",") << r;
    first = false;
  }
  o << "]}";
}

void JsonScope(std::ostringstream& o, const MetricsReport::Scope& sc) {
  const ScopeMetrics& m = *sc.m;
  o << "{\"process_set\":" << Quote(sc.process_set) << ",\"rank\":" << sc.rank
    << ",\"size\":" << sc.size << ",\"ops\":{";
  for (size_t op = 0; op < kOps; ++op) {
    o << (op ? "," : "") << Quote(metrics::OpName(op)) << ":";
    JsonOp(o, m.ops[op]);
  }
  o << "},\"fusion\":{\"batches\":" << m.fused_batches.Get()
    << ",\"tensors\":" << m.fused_tensors.Get() << ",\"tensors_per_batch\":[";
  for (size_t b = 0; b < metrics::kBatchBuckets; ++b) {
    o << (b ? "," : "") << m.batch_tensors[b].Get();
  }
  o << "]},\"cache\":{\"hits\":" << m.cache_hits.Get() << ",\"misses\":" << m.cache_misses.Get()
    << "},\"data_seconds\":" << Num(Sec(m.data_nanos.Get())) << ",\"errors\":{";
  bool first = true;
  for (size_t e = 0; e < metrics::kStatuses; ++e) {
    if (m.errors[e].Get() == 0) continue;
    o << (first ? "" : ",") << Quote(metrics::StatusName(e)) << ":" << m.errors[e].Get();
    first = false;
  }
  o << "}";
  if (sc.stragglers != nullptr) {
    o << ",\"stragglers\":";
    JsonStragglers(o, *sc.stragglers, sc.members);
  }
  o << "}";
}

// ---- Prometheus ----------------------------------------------------------

class Prom {
 public:
  void Family(const std::string& name, const char* type, const char* help) {
    o_ << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
  }
  void Sample(const std::string& name, const std::string& labels, const std::string& value) {
    o_ << name << "{" << labels << "} " << value << "\n";
  }
  template <typename Buckets, typename Bound>
  void Histogram(const std::string& name, const std::string& labels, const Buckets& b, size_t n,
                 Bound bound, double sum) {
    uint64_t cum = 0;
    for (size_t i = 0; i < n; ++i) {
      cum += b[i].Get();
      Sample(name + "_bucket", labels + ",le=\"" + Num(bound(i)) + "\"", Num(cum));
    }
    Sample(name + "_sum", labels, Num(sum));
    Sample(name + "_count", labels, Num(cum));
  }
  std::string str() const { return o_.str(); }

 private:
  std::ostringstream o_;
};

std::string Label(const char* k, const std::string& v) { return std::string(k) + "=\"" + v + "\""; }

std::string ScopeLabels(const MetricsReport& r, const MetricsReport::Scope& sc) {
  return Label("rank", std::to_string(r.rank)) + "," + Label("process_set", sc.process_set);
}

void PromOps(Prom& p, const MetricsReport& r) {
  for (size_t op = 0; op < kOps; ++op) {
    const std::string base = std::string("hvd_") + metrics::OpName(op);
    const char* what[3] = {"_operations_total", "_bytes_total", "_seconds_total"};
    const char* help[3] = {"operations completed, by algorithm", "bytes of data, by algorithm",
                           "seconds in the executor, by algorithm"};
    for (int k = 0; k < 3; ++k) {
      p.Family(base + what[k], "counter", help[k]);
      for (const auto& sc : r.scopes) {
        for (size_t a = 0; a < kPaths; ++a) {
          const OpMetrics::ByPath& x = sc.m->ops[op].paths[a];
          if (x.count.Get() == 0 && x.bytes.Get() == 0) continue;
          const std::string v = k == 0 ? Num(x.count.Get())
                                : k == 1 ? Num(x.bytes.Get())
                                         : Num(Sec(x.nanos.Get()));
          p.Sample(base + what[k], ScopeLabels(r, sc) + "," + Label("algorithm", metrics::PathName(a)), v);
        }
      }
    }
    p.Family(base + "_seconds", "histogram", "seconds per executed unit (a fused batch is one)");
    for (const auto& sc : r.scopes) {
      const OpMetrics& m = sc.m->ops[op];
      if (m.count.Get() == 0) continue;
      p.Histogram(base + "_seconds", ScopeLabels(r, sc), m.seconds, kTimeBuckets,
                  metrics::TimeBucketBound, Sec(m.nanos.Get()));
    }
  }
}

void PromSizes(Prom& p, const MetricsReport& r) {
  const char* names[3] = {"hvd_bus_bytes_total", "hvd_size_class_seconds_total",
                          "hvd_bus_bandwidth_bytes_per_second"};
  const char* types[3] = {"counter", "counter", "gauge"};
  const char* help[3] = {"bus bytes (data bytes x the collective's bus factor), by size class",
                         "seconds in the executor, by size class",
                         "bus bandwidth achieved so far, by size class"};
  for (int k = 0; k < 3; ++k) {
    p.Family(names[k], types[k], help[k]);
    for (const auto& sc : r.scopes) {
      for (size_t op = 0; op < kOps; ++op) {
        for (size_t c = 0; c < kSizeClasses; ++c) {
          const OpMetrics::BySize& s = sc.m->ops[op].sizes[c];
          if (s.count.Get() == 0) continue;
          const double secs = Sec(s.nanos.Get());
          const std::string v =
              k == 0 ? Num(s.bus_bytes.Get())
              : k == 1 ? Num(secs)
                       : Num(secs > 0 ? static_cast<double>(s.bus_bytes.Get()) / secs : 0.0);
          p.Sample(names[k],
                   ScopeLabels(r, sc) + "," + Label("op", metrics::OpName(op)) + "," +
                       Label("size_class", metrics::SizeClassName(c)),
                   v);
        }
      }
    }
  }
}

void PromScopeCounters(Prom& p, const MetricsReport& r) {
  struct Row {
    const char* name;
    const char* help;
    const Counter ScopeMetrics::*c;
    bool seconds;
  };
  static const Row kRows[] = {
      {"hvd_fused_batches_total", "allreduce batches of more than one tensor",
       &ScopeMetrics::fused_batches, false},
      {"hvd_fused_tensors_total", "tensors in those batches", &ScopeMetrics::fused_tensors, false},
      {"hvd_response_cache_hits_total", "responses served from the response cache",
       &ScopeMetrics::cache_hits, false},
      {"hvd_response_cache_misses_total", "responses that needed a full negotiation round",
       &ScopeMetrics::cache_misses, false},
      {"hvd_data_seconds_total", "seconds in the executor (moving data)",
       &ScopeMetrics::data_nanos, true},
  };
  for (const Row& row : kRows) {
    p.Family(row.name, "counter", row.help);
    for (const auto& sc : r.scopes) {
      const uint64_t v = (sc.m->*row.c).Get();
      p.Sample(row.name, ScopeLabels(r, sc), row.seconds ? Num(Sec(v)) : Num(v));
    }
  }
  p.Family("hvd_batch_tensors", "histogram", "tensors per allreduce batch");
  for (const auto& sc : r.scopes) {
    p.Histogram("hvd_batch_tensors", ScopeLabels(r, sc), sc.m->batch_tensors,
                metrics::kBatchBuckets,
                [](size_t b) {
                  const uint64_t x = metrics::BatchBucketBound(b);
                  return x == 0 ? HUGE_VAL : static_cast<double>(x);
                },
                static_cast<double>(sc.m->ops[0].count.Get()));
  }
  p.Family("hvd_errors_total", "counter", "operations completed with an error, by status");
  for (const auto& sc : r.scopes) {
    for (size_t e = 0; e < metrics::kStatuses; ++e) {
      if (sc.m->errors[e].Get() == 0) continue;
      p.Sample("hvd_errors_total", ScopeLabels(r, sc) + "," + Label("status", metrics::StatusName(e)),
               Num(sc.m->errors[e].Get()));
    }
  }
}

void PromLoop(Prom& p, const MetricsReport& r) {
  const std::string me = Label("rank", std::to_string(r.rank));
  p.Family("hvd_negotiations_total", "counter", "negotiations of the context and its sets");
  p.Sample("hvd_negotiations_total", me, Num(r.loop->negotiations.Get()));
  p.Family("hvd_negotiation_seconds_total", "counter", "seconds negotiating");
  p.Sample("hvd_negotiation_seconds_total", me, Num(Sec(r.loop->negotiation_nanos.Get())));
  p.Family("hvd_piggybacked_total", "counter", "allreduces reduced inside the negotiation");
  p.Sample("hvd_piggybacked_total", me, Num(r.piggybacked));
}

// Each scope's stragglers (the context's, and each set's over its members).
void PromStragglers(Prom& p, const MetricsReport& r) {
  p.Family("hvd_straggler_steps_total", "counter", "steps whose last rank is known");
  for (const auto& sc : r.scopes) {
    if (sc.stragglers == nullptr) continue;
    p.Sample("hvd_straggler_steps_total", ScopeLabels(r, sc), Num(sc.stragglers->steps()));
  }
  p.Family("hvd_straggler_step_seconds_total", "counter", "seconds in those steps");
  for (const auto& sc : r.scopes) {
    if (sc.stragglers == nullptr) continue;
    p.Sample("hvd_straggler_step_seconds_total", ScopeLabels(r, sc),
             Num(Sec(sc.stragglers->step_nanos())));
  }
  struct Row {
    const char* name;
    const char* help;
    const Counter Stragglers::PerRank::*c;
    bool seconds;
  };
  static const Row kRows[] = {
      {"hvd_straggler_last_total", "steps in which the rank submitted last",
       &Stragglers::PerRank::last, false},
      {"hvd_straggler_late_total", "of those, late by more than the share of the step",
       &Stragglers::PerRank::late, false},
      {"hvd_straggler_cost_seconds_total", "job time the rank's lateness cost",
       &Stragglers::PerRank::cost_nanos, true},
      {"hvd_straggler_warnings_total", "warnings that named the rank",
       &Stragglers::PerRank::warnings, false},
      {"hvd_peer_wait_seconds_total", "seconds this rank waited on the peer's submits",
       &Stragglers::PerRank::waited_nanos, true},
  };
  for (const Row& row : kRows) {
    p.Family(row.name, "counter", row.help);
    const bool peer = row.c == &Stragglers::PerRank::waited_nanos;
    for (const auto& sc : r.scopes) {
      if (sc.stragglers == nullptr) continue;
      for (const int q : StragglerRanks(*sc.stragglers, sc.members)) {
        const uint64_t v = (sc.stragglers->rank(q).*row.c).Get();
        if (v == 0) continue;
        p.Sample(row.name, ScopeLabels(r, sc) + "," + Label(peer ? "peer" : "straggler", std::to_string(q)),
                 row.seconds ? Num(Sec(v)) : Num(v));
      }
    }
  }
  p.Family("hvd_straggler_cost_seconds", "histogram", "cost per step in which the rank was last");
  for (const auto& sc : r.scopes) {
    if (sc.stragglers == nullptr) continue;
    for (const int q : StragglerRanks(*sc.stragglers, sc.members)) {
      const Stragglers::PerRank& pr = sc.stragglers->rank(q);
      if (pr.last.Get() == 0) continue;
      p.Histogram("hvd_straggler_cost_seconds",
                  ScopeLabels(r, sc) + "," + Label("straggler", std::to_string(q)), pr.cost,
                  kTimeBuckets, metrics::TimeBucketBound, Sec(pr.cost_nanos.Get()));
    }
  }
}

}  // namespace

std::string RenderMetricsJson(const MetricsReport& r) {
  std::ostringstream o;
  o << "{\"version\":" << kMetricsVersion << ",\"enabled\":" << (r.enabled ? "true" : "false")
    << ",\"rank\":" << r.rank << ",\"size\":" << r.size
    << ",\"host\":" << Quote(r.host) << ",\"transport\":" << Quote(r.transport)
    << ",\"negotiation\":{\"count\":" << r.loop->negotiations.Get()
    << ",\"seconds\":" << Num(Sec(r.loop->negotiation_nanos.Get()))
    << "},\"piggybacked\":" << r.piggybacked << ",\"bounds\":{\"seconds\":[";
  for (size_t b = 0; b < kTimeBuckets; ++b) {
    o << (b ? "," : "") << (b + 1 < kTimeBuckets ? Num(metrics::TimeBucketBound(b)) : "null");
  }
  o << "],\"tensors_per_batch\":[";
  for (size_t b = 0; b < metrics::kBatchBuckets; ++b) {
    const uint64_t x = metrics::BatchBucketBound(b);
    o << (b ? "," : "") << (x == 0 ? "null" : Num(x));
  }
  o << "],\"size_classes\":[";
  for (size_t c = 0; c < kSizeClasses; ++c) {
    const uint64_t x = metrics::SizeClassBound(c);
    o << (c ? "," : "") << (x == 0 ? "null" : Num(x));
  }
  o << "]},\"scopes\":[";
  for (size_t i = 0; i < r.scopes.size(); ++i) {
    o << (i ? "," : "");
    JsonScope(o, r.scopes[i]);
  }
  o << "],\"stragglers\":";
  JsonStragglers(o, *r.stragglers, {});
  o << "}";
  return o.str();
}

std::string RenderMetricsPrometheus(const MetricsReport& r) {
  Prom p;
  PromOps(p, r);
  PromSizes(p, r);
  PromScopeCounters(p, r);
  PromLoop(p, r);
  PromStragglers(p, r);
  return p.str();
}

}  // namespace hvd
