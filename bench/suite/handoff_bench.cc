// handoff-bench: what a thread hand-off costs on this machine. An hvd step
// hands work from the caller to the context's loop thread and the result
// back (a condition variable each way); this times that round trip alone,
// so that the per-operation overhead in the latency table can be split into
// hand-offs and everything else.
//
//   build/bin/handoff-bench [--pairs 1,2] [--iters 20000]
//
// For each count P in --pairs, P caller/loop thread pairs run at once (P = 2
// on two cores is two ranks of hvd, each with its caller and its loop). Each
// caller wakes its loop thread and waits to be woken back, --iters times.
// Prints the median, 10th and 90th percentile round trip of the pairs, one
// line per P.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// One caller/loop pair; returns the caller's round trips in microseconds.
std::vector<double> RunPair(int iters) {
  std::mutex mu;
  std::condition_variable to_loop, to_caller;
  bool work = false, stop = false;
  std::thread loop([&] {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      to_loop.wait(lock, [&] { return work || stop; });
      if (stop) return;
      work = false;
      to_caller.notify_one();
    }
  });
  std::vector<double> us(iters);
  for (int i = 0; i < iters; ++i) {
    auto t0 = Clock::now();
    std::unique_lock<std::mutex> lock(mu);
    work = true;
    to_loop.notify_one();
    to_caller.wait(lock, [&] { return !work; });
    us[i] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    stop = true;
  }
  to_loop.notify_one();
  loop.join();
  return us;
}

std::vector<int> ParseList(const char* s) {
  std::vector<int> out;
  for (const char* p = s; *p != '\0';) {
    out.push_back(std::atoi(p));
    const char* comma = std::strchr(p, ',');
    if (comma == nullptr) break;
    p = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> pairs = {1, 2};
  int iters = 20000;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--pairs" && i + 1 < argc) {
      pairs = ParseList(argv[++i]);
    } else if (a == "--iters" && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: handoff-bench [--pairs 1,2] [--iters 20000]\n");
      return 2;
    }
  }
  if (iters < 10) iters = 10;
  for (int p : pairs) {
    if (p < 1) continue;
    std::vector<std::vector<double>> per(p);
    std::vector<std::thread> callers;
    for (int k = 0; k < p; ++k) callers.emplace_back([&, k] { per[k] = RunPair(iters); });
    for (auto& t : callers) t.join();
    std::vector<double> all;
    for (auto& v : per) all.insert(all.end(), v.begin(), v.end());
    std::sort(all.begin(), all.end());
    const size_t n = all.size();
    std::printf("pairs %d: hand-off round trip median %.2f us (p10 %.2f, p90 %.2f), %zu samples\n", p,
                all[n / 2], all[n / 10], all[n * 9 / 10], n);
  }
  return 0;
}
