// A rank that goes silent (stopped) must be named within the peer timeout;
// a rank that is merely slow between submits must not.
//   peer_silent stop VICTIM   VICTIM stops itself (SIGSTOP) 300 ms into a
//                             stream of allreduces; every other rank runs
//                             allreduces until one fails, then prints
//                               rank R: failed after S s with <status>: <error>
//                             and exits 4 (hvdrun then ends the job), or 1
//                             if no failure came within 60 s.
//   peer_silent slow VICTIM   VICTIM sleeps 8 s in its main thread before its
//                             second allreduce (no submits meanwhile); every
//                             rank checks both results exactly, prints
//                               rank R: ok after S s
//                             and exits 0 (1 on any failure).
// Further arguments are ignored (tests use one to mark the processes).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "hvd.h"

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Sum over ranks of (rank + 1) in every element; 1 when it matches exactly.
int Allreduce(const char* name, int size, int rank, hvd_status_t* status) {
  std::vector<float> v(1024, static_cast<float>(rank + 1));
  int64_t shape[1] = {1024};
  hvd_tensor_t t = {v.data(), HVD_FLOAT32, 1, shape, HVD_DEVICE_CPU, nullptr};
  *status = hvd_allreduce(nullptr, name, &t, v.data(), HVD_SUM);
  if (*status != HVD_OK) return 0;
  const float want = static_cast<float>(size * (size + 1) / 2);
  for (float x : v) {
    if (x != want) return 0;
  }
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: peer_silent stop|slow VICTIM [MARK]\n");
    return 2;
  }
  const bool stop = std::strcmp(argv[1], "stop") == 0;
  const int victim = std::atoi(argv[2]);
  if (hvd_init(nullptr) != HVD_OK) {
    std::fprintf(stderr, "init failed: %s\n", hvd_last_error());
    return 2;
  }
  int rank = -1, size = 0;
  hvd_rank(&rank);
  hvd_size(&size);
  hvd_status_t s = HVD_OK;
  if (!Allreduce("warmup", size, rank, &s)) {
    std::fprintf(stderr, "rank %d: warmup: %s %s\n", rank, hvd_status_string(s), hvd_last_error());
    return 1;
  }
  std::printf("rank %d: up\n", rank);
  std::fflush(stdout);
  const auto start = Clock::now();

  if (!stop) {
    if (rank == victim) sleep(8);  // computing: no submits, the loop thread runs on
    const int ok = Allreduce("after-sleep", size, rank, &s);
    std::printf("rank %d: %s after %.1f s%s%s\n", rank, ok ? "ok" : "FAILED", Since(start),
                ok ? "" : ": ", ok ? "" : hvd_last_error());
    std::fflush(stdout);
    hvd_shutdown();
    return ok ? 0 : 1;
  }

  if (rank == victim) {
    usleep(300 * 1000);
    raise(SIGSTOP);
    pause();
    return 0;
  }
  // Report before hvdrun's grace period ends: the first survivor to exit
  // makes hvdrun SIGTERM the others, which may still be failing.
  signal(SIGTERM, SIG_IGN);
  for (long step = 0; s == HVD_OK; ++step) {
    const std::string name = "grad." + std::to_string(step % 8);
    Allreduce(name.c_str(), size, rank, &s);
    if (Since(start) > 60) break;
  }
  std::printf("rank %d: failed after %.1f s with %s: %s\n", rank, Since(start),
              hvd_status_string(s), s == HVD_OK ? "" : hvd_last_error());
  std::fflush(stdout);
  hvd_shutdown();
  return s == HVD_OK ? 1 : 4;
}
