// stream-bench: the machine's memory bandwidth, the physical reference line
// for the collectives (a STREAM-like measurement, written for this suite).
//
//   build/bin/stream-bench [--mib 128] [--reps 10] [--threads 1,2] [--quick]
//
// Kernels over double arrays of --mib MiB each (default 128, 4x a 32 MiB L3):
//   copy   c[i] = a[i]               counted 16 bytes per element
//   triad  a[i] = b[i] + s * c[i]    counted 24 bytes per element
//   add    a[i] += b[i]              counted 24 bytes per element (the
//                                    reduction step of an allreduce)
// Each thread owns a contiguous slice and touches it first. The best of
// --reps repetitions is reported (STREAM's convention), with the median.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"

namespace {

struct Arrays {
  double* a;
  double* b;
  double* c;
  size_t n;
};

template <typename Kernel>
double RunThreads(int threads, const Arrays& x, Kernel k) {
  std::vector<std::thread> ts;
  const double t0 = hvdbench::NowUs();
  for (int t = 0; t < threads; ++t) {
    const size_t lo = x.n * static_cast<size_t>(t) / static_cast<size_t>(threads);
    const size_t hi = x.n * static_cast<size_t>(t + 1) / static_cast<size_t>(threads);
    ts.emplace_back([=] { k(lo, hi); });
  }
  for (auto& th : ts) th.join();
  return hvdbench::NowUs() - t0;
}

}  // namespace

int main(int argc, char** argv) {
  hvdbench::Args a(argc, argv);
  const bool quick = a.Has("--quick");
  const size_t mib = static_cast<size_t>(std::atoi(a.Get("--mib", quick ? "32" : "128").c_str()));
  const int reps = quick ? 2 : std::atoi(a.Get("--reps", "10").c_str());
  const auto thread_list = hvdbench::SplitList(a.Get("--threads", "1,2"));
  const size_t n = (mib << 20) / sizeof(double);
  Arrays x{static_cast<double*>(std::aligned_alloc(64, n * 8)),
           static_cast<double*>(std::aligned_alloc(64, n * 8)),
           static_cast<double*>(std::aligned_alloc(64, n * 8)), n};
  if (!x.a || !x.b || !x.c) {
    std::fprintf(stderr, "stream-bench: out of memory\n");
    return 3;
  }
  for (const std::string& ts : thread_list) {
    const int threads = std::atoi(ts.c_str());
    // First touch by the threads that use the slices.
    RunThreads(threads, x, [&](size_t lo, size_t hi) {
      for (size_t i = lo; i < hi; ++i) {
        x.a[i] = 1.0;
        x.b[i] = 2.0;
        x.c[i] = 0.0;
      }
    });
    struct K {
      const char* name;
      double bytes_per_elem;
      std::vector<double> us;
    };
    std::vector<K> ks = {{"copy", 16, {}}, {"triad", 24, {}}, {"add", 24, {}}};
    const double s = 0.5;
    for (int r = 0; r < reps; ++r) {
      ks[0].us.push_back(RunThreads(threads, x, [&](size_t lo, size_t hi) {
        double* __restrict c = x.c;
        const double* __restrict aa = x.a;
        for (size_t i = lo; i < hi; ++i) c[i] = aa[i];
      }));
      ks[1].us.push_back(RunThreads(threads, x, [&](size_t lo, size_t hi) {
        double* __restrict aa = x.a;
        const double* __restrict b = x.b;
        const double* __restrict c = x.c;
        for (size_t i = lo; i < hi; ++i) aa[i] = b[i] + s * c[i];
      }));
      ks[2].us.push_back(RunThreads(threads, x, [&](size_t lo, size_t hi) {
        double* __restrict aa = x.a;
        const double* __restrict b = x.b;
        for (size_t i = lo; i < hi; ++i) aa[i] += b[i];
      }));
    }
    for (const K& k : ks) {
      const double bytes = k.bytes_per_elem * static_cast<double>(n);
      const double best = hvdbench::Min(k.us);
      const double med = hvdbench::Median(k.us);
      std::printf(
          "BENCH {\"kind\":\"stream\",\"system\":\"stream\",\"variant\":\"%s\",\"threads\":%d,"
          "\"array_mib\":%zu,\"reps\":%d,\"best_gbs\":%.3f,\"median_gbs\":%.3f}\n",
          k.name, threads, mib, reps, bytes / (best * 1e3), bytes / (med * 1e3));
    }
  }
  // Keep the stores observable.
  double sum = 0;
  for (size_t i = 0; i < n; i += 4096) sum += x.a[i] + x.c[i];
  if (sum == 42.4242) std::printf("#\n");
  std::free(x.a);
  std::free(x.b);
  std::free(x.c);
  return 0;
}
