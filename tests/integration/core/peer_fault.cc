// One rank of a running job dies (SIGKILL) or stops (SIGSTOP) while the
// others run a collective; every survivor must fail that collective soon,
// with an error naming the rank.
//   peer_fault kill|stop transfer|negotiation COLLECTIVE VICTIM [MARK]
// COLLECTIVE: allreduce, allgather, broadcast, alltoall, reducescatter; the
// tensor is PEER_FAULT_MIB MiB of float32 (default 8) per rank.
// transfer: every rank runs one step and times it; in the next step the
// victim's own thread kills (or stops) the process half a step in, so the
// fault lands in the middle of the data's transfer. negotiation: the victim
// never submits the next step; it dies 0.3 s after the others submitted.
// The victim prints "rank V: fault at T" (T: CLOCK_REALTIME seconds) right
// before the signal; every survivor prints
//   rank R: failed at T after S steps with <status>: <error>
// (T taken as the failed call returns), stays 10 s and exits 4, so that the
// launcher ends the job. The stay is for launchers that end the whole job at
// the first non-zero exit (Open MPI's mpirun kills the others at once): a
// survivor that reported first must not take a slower one with it before
// that one reports (the test ends the job as soon as every survivor has).
// Survivors ignore SIGTERM: what they report is the library's own error, not
// the launcher's. MARK is ignored (tests find their processes by it).
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "hvd.h"

namespace {

double Now() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

[[noreturn]] void Fault(int rank, bool stop) {
  std::printf("rank %d: fault at %.6f\n", rank, Now());
  std::fflush(stdout);
  raise(stop ? SIGSTOP : SIGKILL);
  for (;;) pause();
}

struct Job {
  std::string coll;
  int rank = 0, size = 1;
  std::vector<float> in, out;
  std::vector<int64_t> splits;
};

// One blocking collective named `name` on the job's tensor.
hvd_status_t Step(Job& j, const std::string& name) {
  int64_t shape[1] = {static_cast<int64_t>(j.in.size())};
  hvd_tensor_t t = {j.in.data(), HVD_FLOAT32, 1, shape, HVD_DEVICE_CPU, nullptr};
  if (j.coll == "allreduce") return hvd_allreduce(nullptr, name.c_str(), &t, j.out.data(), HVD_SUM);
  if (j.coll == "broadcast") return hvd_broadcast(nullptr, name.c_str(), &t, j.out.data(), 0);
  hvd_handle_t h = nullptr;
  hvd_status_t s = HVD_ERR_INVALID_ARGUMENT;
  if (j.coll == "allgather") {
    s = hvd_allgather_async(nullptr, name.c_str(), &t, &h);
  } else if (j.coll == "alltoall") {
    s = hvd_alltoall_async(nullptr, name.c_str(), &t, j.splits.data(), &h);
  } else if (j.coll == "reducescatter") {
    s = hvd_reducescatter_async(nullptr, name.c_str(), &t, HVD_SUM, 1, 1, &h);
  }
  if (s != HVD_OK) return s;
  s = hvd_handle_wait(h, -1);
  hvd_handle_release(h);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: peer_fault kill|stop transfer|negotiation COLLECTIVE VICTIM [MARK]\n");
    return 2;
  }
  const bool stop = std::strcmp(argv[1], "stop") == 0;
  const bool in_transfer = std::strcmp(argv[2], "transfer") == 0;
  Job j;
  j.coll = argv[3];
  const int victim = std::atoi(argv[4]);
  signal(SIGTERM, SIG_IGN);
  if (hvd_init(nullptr) != HVD_OK) {
    std::fprintf(stderr, "init failed: %s\n", hvd_last_error());
    return 2;
  }
  hvd_rank(&j.rank);
  hvd_size(&j.size);
  const char* mib = std::getenv("PEER_FAULT_MIB");
  const size_t n = (mib != nullptr ? std::strtoul(mib, nullptr, 10) : 8) * (1u << 18);
  const size_t rows = n / static_cast<size_t>(j.size) * static_cast<size_t>(j.size);
  j.in.assign(rows, 1.0f);
  j.out.assign(j.coll == "allgather" ? rows * static_cast<size_t>(j.size) : rows, 0.0f);
  j.splits.assign(static_cast<size_t>(j.size), static_cast<int64_t>(rows) / j.size);
  const auto t0 = std::chrono::steady_clock::now();
  if (Step(j, "step.0") != HVD_OK) {
    std::fprintf(stderr, "rank %d: first step failed: %s\n", j.rank, hvd_last_error());
    return 2;
  }
  const double step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("rank %d: up (a step took %.3f s)\n", j.rank, step_s);
  std::fflush(stdout);
  if (j.rank == victim) {
    if (!in_transfer) {
      usleep(300 * 1000);
      Fault(j.rank, stop);
    }
    std::thread([&j, stop, step_s] {
      usleep(static_cast<useconds_t>(step_s * 0.5e6));
      Fault(j.rank, stop);
    }).detach();
  }
  hvd_status_t s = HVD_OK;
  long steps = 1;
  for (; s == HVD_OK && steps < 100000; ++steps) s = Step(j, "step." + std::to_string(steps % 4));
  const double at = Now();
  std::printf("rank %d: failed at %.6f after %ld steps with %s: %s\n", j.rank, at, steps,
              hvd_status_string(s), s == HVD_OK ? "" : hvd_last_error());
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::seconds(10));
  return 4;
}
