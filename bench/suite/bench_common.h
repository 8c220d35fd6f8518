// Shared pieces of the benchmark suite's native programs (hvd-bench,
// gloo-bench, mpi-bench, stream-bench): the size list, the iteration
// schedule, the metrics and the result lines.
//
// Every program prints its results on rank 0 as one JSON object per line,
// prefixed with "BENCH " so that run_all.py can pick them out of whatever
// else the launcher forwards. The fields are the same for every system:
//   {"kind":"coll","system":"hvd-gloo","op":"allreduce","variant":"inplace",
//    "ranks":2,"bytes":4194304,"iters":7,"time_us":..., "min_us":...,
//    "algbw_gbs":..., "busbw_gbs":...}
// Times are the median (and minimum) over the timed iterations of the
// slowest rank's time for that iteration; every iteration starts after a
// barrier of the system under test.
#ifndef HVD_BENCH_SUITE_BENCH_COMMON_H_
#define HVD_BENCH_SUITE_BENCH_COMMON_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace hvdbench {

inline double NowUs() {
  using namespace std::chrono;
  return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

// "4", "16K", "256M", "1G" -> bytes.
inline size_t ParseBytes(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  size_t mul = 1;
  if (end != nullptr && *end != '\0') {
    switch (*end) {
      case 'k': case 'K': mul = size_t{1} << 10; break;
      case 'm': case 'M': mul = size_t{1} << 20; break;
      case 'g': case 'G': mul = size_t{1} << 30; break;
      default: break;
    }
  }
  return static_cast<size_t>(v * static_cast<double>(mul));
}

// "4,64K,1M" or "4:256M" (powers of 4 from..to) or "4:256M:2" (powers of 2).
inline std::vector<size_t> ParseSizes(const std::string& spec) {
  std::vector<size_t> out;
  if (spec.find(':') != std::string::npos) {
    const size_t a = spec.find(':');
    const size_t b = spec.find(':', a + 1);
    const size_t lo = ParseBytes(spec.substr(0, a));
    const size_t hi = ParseBytes(spec.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1));
    const size_t step = b == std::string::npos ? 4 : ParseBytes(spec.substr(b + 1));
    for (size_t s = lo; s <= hi && s > 0; s *= step) out.push_back(s);
    return out;
  }
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    if (comma == std::string::npos) comma = spec.size();
    if (comma > pos) out.push_back(ParseBytes(spec.substr(pos, comma - pos)));
    pos = comma + 1;
  }
  return out;
}

// Iteration schedule: small messages get many iterations, large ones few, so
// the whole suite stays within minutes on two cores. `scale` multiplies the
// timed iterations (run_all.py --iters-scale); quick mode is 0 warm-up... 1.
struct Schedule {
  int warmup;
  int iters;
};

// This rank's time of each timed iteration of run(i) (after sch.warmup
// untimed ones), each started after barrier(): the loop every peer program
// times its collectives with.
template <typename BarrierFn, typename RunFn>
std::vector<double> TimedIterations(const Schedule& sch, BarrierFn barrier, RunFn run) {
  std::vector<double> times;
  for (int i = 0; i < sch.warmup + sch.iters; ++i) {
    barrier();
    const double t0 = NowUs();
    run(i);
    const double t1 = NowUs();
    if (i >= sch.warmup) times.push_back(t1 - t0);
  }
  return times;
}

inline Schedule ScheduleFor(size_t bytes, bool quick, double scale = 1.0) {
  if (quick) return {1, 1};
  Schedule s;
  if (bytes <= (size_t{64} << 10)) {
    s = {5, 50};
  } else if (bytes <= (size_t{1} << 20)) {
    s = {3, 20};
  } else if (bytes <= (size_t{16} << 20)) {
    s = {2, 7};
  } else if (bytes <= (size_t{64} << 20)) {
    s = {1, 5};
  } else {
    s = {1, 3};
  }
  s.iters = std::max(1, static_cast<int>(s.iters * scale + 0.5));
  return s;
}

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

inline double Min(const std::vector<double>& v) {
  return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end());
}

// nccl-tests conventions. `bytes` is the message size as nccl-tests counts it:
// the buffer for allreduce and broadcast, the whole output for allgather.
inline double BusFactor(const std::string& op, int n) {
  if (n <= 1) return 1.0;
  if (op == "allreduce") return 2.0 * (n - 1) / n;
  if (op == "allgather" || op == "reducescatter") return static_cast<double>(n - 1) / n;
  return 1.0;  // broadcast, reduce
}

// Emits one result line (rank 0 only; callers check).
inline void EmitColl(const std::string& system, const std::string& op, const std::string& variant,
                     int ranks, size_t bytes, const std::vector<double>& times_us,
                     const std::string& extra = "") {
  const double med = Median(times_us);
  const double algbw = med > 0 ? static_cast<double>(bytes) / (med * 1e3) : 0.0;  // GB/s
  std::printf(
      "BENCH {\"kind\":\"coll\",\"system\":\"%s\",\"op\":\"%s\",\"variant\":\"%s\","
      "\"ranks\":%d,\"bytes\":%zu,\"iters\":%zu,\"time_us\":%.3f,\"min_us\":%.3f,"
      "\"algbw_gbs\":%.6g,\"busbw_gbs\":%.6g%s%s}\n",
      system.c_str(), op.c_str(), variant.c_str(), ranks, bytes, times_us.size(), med,
      Min(times_us), algbw, algbw * BusFactor(op, ranks), extra.empty() ? "" : ",",
      extra.c_str());
  std::fflush(stdout);
}

// A fusion or latency result: the median step time of `what`.
inline void EmitStep(const std::string& kind, const std::string& system, const std::string& variant,
                     int ranks, int tensors, size_t tensor_bytes,
                     const std::vector<double>& times_us, const std::string& extra = "") {
  std::printf(
      "BENCH {\"kind\":\"%s\",\"system\":\"%s\",\"variant\":\"%s\",\"ranks\":%d,"
      "\"tensors\":%d,\"tensor_bytes\":%zu,\"iters\":%zu,\"time_us\":%.3f,\"min_us\":%.3f%s%s}\n",
      kind.c_str(), system.c_str(), variant.c_str(), ranks, tensors, tensor_bytes,
      times_us.size(), Median(times_us), Min(times_us), extra.empty() ? "" : ",", extra.c_str());
  std::fflush(stdout);
}

// Minimal "--key value" / "--flag" command line.
class Args {
 public:
  Args(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) args_.emplace_back(argv[i]);
  }
  std::string Get(const std::string& key, const std::string& def = "") const {
    for (size_t i = 0; i + 1 < args_.size(); ++i) {
      if (args_[i] == key) return args_[i + 1];
    }
    return def;
  }
  bool Has(const std::string& key) const {
    return std::find(args_.begin(), args_.end(), key) != args_.end();
  }
 private:
  std::vector<std::string> args_;
};

inline std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    if (comma > pos) out.push_back(s.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return out;
}

// Rank and size from hvdrun (HVD_RANK/HVD_SIZE) or Open MPI's mpirun.
inline bool LauncherRank(int* rank, int* size) {
  const char* r = std::getenv("HVD_RANK");
  const char* n = std::getenv("HVD_SIZE");
  if (r == nullptr || n == nullptr) {
    r = std::getenv("OMPI_COMM_WORLD_RANK");
    n = std::getenv("OMPI_COMM_WORLD_SIZE");
  }
  if (r == nullptr || n == nullptr) {
    r = std::getenv("RANK");
    n = std::getenv("WORLD_SIZE");
  }
  if (r == nullptr || n == nullptr) {
    *rank = 0;
    *size = 1;
    return false;
  }
  *rank = std::atoi(r);
  *size = std::atoi(n);
  return true;
}

// Fills a float buffer with a rank-dependent pattern whose sum over ranks is
// exactly representable: value(i, rank) = (rank + 1) + (i % 7).
inline void FillPattern(float* p, size_t n, int rank) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<float>(rank + 1 + static_cast<int>(i % 7));
}

// The allreduce-SUM result of FillPattern over `size` ranks.
inline float ExpectedSum(size_t i, int size) {
  return static_cast<float>(size * (size + 1) / 2 + size * static_cast<int>(i % 7));
}

inline bool CheckSum(const float* p, size_t n, int size, std::string* why) {
  const size_t stride = std::max<size_t>(1, n / 4099);
  for (size_t i = 0; i < n; i += stride) {
    if (p[i] != ExpectedSum(i, size)) {
      char buf[160];
      std::snprintf(buf, sizeof(buf), "element %zu is %g, expected %g", i,
                    static_cast<double>(p[i]), static_cast<double>(ExpectedSum(i, size)));
      *why = buf;
      return false;
    }
  }
  if (n > 0 && p[n - 1] != ExpectedSum(n - 1, size)) {
    *why = "last element wrong";
    return false;
  }
  return true;
}

// 64-byte aligned buffer, touched once.
struct Buffer {
  float* p = nullptr;
  size_t bytes = 0;
  Buffer() = default;
  explicit Buffer(size_t b) { Reset(b); }
  ~Buffer() { std::free(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void Reset(size_t b) {
    std::free(p);
    bytes = b;
    const size_t rounded = (std::max<size_t>(b, 64) + 63) / 64 * 64;
    p = static_cast<float*>(std::aligned_alloc(64, rounded));
    if (p == nullptr) {
      std::fprintf(stderr, "out of memory (%zu bytes)\n", b);
      std::exit(3);
    }
    std::memset(p, 0, rounded);
  }
  size_t count() const { return bytes / sizeof(float); }
};

}  // namespace hvdbench

#endif  // HVD_BENCH_SUITE_BENCH_COMMON_H_
