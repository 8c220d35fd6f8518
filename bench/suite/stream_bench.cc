// stream-bench: the machine's memory bandwidth, the physical reference line
// for the collectives (a STREAM-like measurement, written for this suite).
//
//   build/bin/stream-bench [--mib 128] [--reps 10] [--threads 1,2] [--passes] [--quick]
//
// Kernels over double arrays of --mib MiB each (default 128, 4x a 32 MiB L3):
//   copy   c[i] = a[i]               counted 16 bytes per element
//   triad  a[i] = b[i] + s * c[i]    counted 24 bytes per element
//   add    a[i] += b[i]              counted 24 bytes per element (the
//                                    reduction step of an allreduce)
// Each thread owns a contiguous slice and touches it first. The best of
// --reps repetitions is reported (STREAM's convention), with the median.
//
// --passes also times the passes one rank of the shared-memory allreduce at
// 2 ranks makes over its buffer (src/algorithms/shm/collectives.cc,
// Pipelined), with no peer and no waiting: each thread is a rank whose
// buffer is its slice of a, cut into chunks of one 1 MiB slot; per chunk it
// copies the half the other rank reduces into its own slot, folds its own
// half (as float32) with a "peer's" slot (a private one, filled once, so it stays in this
// core's cache) in 8 KiB blocks, copying each folded block into its slot,
// then copies the other half back from the peer's slot. Reported as the
// allreduce's bus bandwidth at 2 ranks (buffer bytes / time): the ceiling of
// the algorithm's own work on this machine, where the STREAM line is the
// memory's.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

// d[i] += s[i] over float32, with the block structure of the library's
// kernel (src/common/kernels.cc, Combine), which the compiler vectorises.
void Fold(float* __restrict d, const float* __restrict s, size_t n) {
  constexpr size_t kBlock = 16;
  size_t i = 0;
  for (const size_t nb = n - n % kBlock; i < nb; i += kBlock) {
    for (size_t j = 0; j < kBlock; ++j) d[i + j] += s[i + j];
  }
  for (; i < n; ++i) d[i] += s[i];
}

// One rank's passes over buf[lo, hi) (see the header): chunks of `slot`
// doubles, its own half first in each chunk.
void Passes(double* buf, size_t lo, size_t hi, size_t slot, double* mine, const double* peer) {
  const size_t blk = (size_t{8} << 10) / sizeof(double);
  for (size_t c = lo; c < hi; c += slot) {
    const size_t m = std::min(slot, hi - c);
    const size_t half = m / 2;
    double* own = buf + c;
    // publish the other half
    std::memcpy(mine + half, buf + c + half, (m - half) * sizeof(double));
    // fold the own half block by block, publishing each block
    for (size_t b = 0; b < half; b += blk) {
      const size_t k = std::min(blk, half - b);
      Fold(reinterpret_cast<float*>(own + b), reinterpret_cast<const float*>(peer + b), 2 * k);
      std::memcpy(mine + b, own + b, k * sizeof(double));
    }
    // copy the other half out of the peer's slot
    std::memcpy(buf + c + half, peer + half, (m - half) * sizeof(double));
  }
}

void RunPasses(int threads, const Arrays& x, size_t mib, int reps) {
  const size_t slot = (size_t{1} << 20) / sizeof(double);
  std::vector<double*> slots;
  for (int t = 0; t < 2 * threads; ++t) {
    slots.push_back(static_cast<double*>(std::aligned_alloc(64, slot * sizeof(double))));
    float* f = reinterpret_cast<float*>(slots.back());
    for (size_t i = 0; i < 2 * slot; ++i) f[i] = 1e-3f;  // folded as float32: no denormals
  }
  std::vector<double> us;
  for (int r = 0; r < reps; ++r) {
    us.push_back(RunThreads(threads, x, [&](size_t lo, size_t hi) {
      const int t = static_cast<int>(lo * static_cast<size_t>(threads) / x.n);
      Passes(x.a, lo, hi, slot, slots[2 * t], slots[2 * t + 1]);
    }));
  }
  // A rank's buffer is one thread's slice.
  const double bytes = 8.0 * static_cast<double>(x.n) / threads;
  std::printf(
      "BENCH {\"kind\":\"stream\",\"system\":\"stream\",\"variant\":\"shm-passes\","
      "\"threads\":%d,\"array_mib\":%zu,\"reps\":%d,\"best_gbs\":%.3f,\"median_gbs\":%.3f}\n",
      threads, mib, reps, bytes / (hvdbench::Min(us) * 1e3), bytes / (hvdbench::Median(us) * 1e3));
  for (double* p : slots) std::free(p);
}

}  // namespace

int main(int argc, char** argv) {
  hvdbench::Args a(argc, argv);
  const bool quick = a.Has("--quick");
  const size_t mib = static_cast<size_t>(std::atoi(a.Get("--mib", quick ? "32" : "128").c_str()));
  const int reps = quick ? 2 : std::atoi(a.Get("--reps", "10").c_str());
  const auto thread_list = hvdbench::SplitList(a.Get("--threads", "1,2"));
  const bool passes = a.Has("--passes");
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
    if (passes) RunPasses(threads, x, mib, reps);
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
