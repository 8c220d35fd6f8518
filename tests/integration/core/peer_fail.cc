// One rank of a running job fails; every other rank's error must name it.
//   peer_fail exit VICTIM   VICTIM exits (code 3) 300 ms into a stream of
//                           allreduces, mid-transfer or mid-negotiation
//   peer_fail stop VICTIM   VICTIM stops (SIGSTOP) and never answers again;
//                           the others fail at the transport timeout
// Every other rank runs allreduces until one fails, then prints
//   rank R: failed after S s with <status>: <error>
//   rank R: next allreduce: <status>
// and exits 0 when the failure came and the broken context refuses new work
// (1 otherwise). In stop mode it exits 4 instead of 0, so that hvdrun ends the
// job (the stopped rank never exits by itself). Further arguments are
// ignored (tests use one to mark the processes they start).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "hvd.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: peer_fail exit|stop VICTIM [MARK]\n");
    return 2;
  }
  const bool stop = std::strcmp(argv[1], "stop") == 0;
  const int victim = std::atoi(argv[2]);
  signal(SIGTERM, SIG_IGN);  // report before the launcher's grace period ends
  if (hvd_init(nullptr) != HVD_OK) {
    std::fprintf(stderr, "init failed: %s\n", hvd_last_error());
    return 2;
  }
  int rank = -1;
  hvd_rank(&rank);
  // 4 MiB: the TCP path's ring, in 1 MiB segments.
  std::vector<float> v(1 << 20, 1.0f);
  int64_t shape[1] = {1 << 20};
  hvd_tensor_t t = {v.data(), HVD_FLOAT32, 1, shape, HVD_DEVICE_CPU, nullptr};
  if (hvd_allreduce(nullptr, "warmup", &t, v.data(), HVD_SUM) != HVD_OK) return 4;
  std::printf("rank %d: up\n", rank);
  std::fflush(stdout);
  if (rank == victim) {
    if (stop) {
      usleep(300 * 1000);
      raise(SIGSTOP);
      pause();
      return 0;
    }
    std::thread([] {
      usleep(300 * 1000);
      std::_Exit(3);  // no shutdown: the process just goes, whatever it was doing
    }).detach();
  }
  const auto start = std::chrono::steady_clock::now();
  hvd_status_t s = HVD_OK;
  for (long step = 0; s == HVD_OK; ++step) {
    const std::string name = "grad." + std::to_string(step % 8);
    s = hvd_allreduce(nullptr, name.c_str(), &t, v.data(), HVD_SUM);
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(60)) break;
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("rank %d: failed after %.1f s with %s: %s\n", rank, took, hvd_status_string(s),
              s == HVD_OK ? "" : hvd_last_error());
  std::fflush(stdout);
  const hvd_status_t s2 = hvd_allreduce(nullptr, "after", &t, v.data(), HVD_SUM);
  std::printf("rank %d: next allreduce: %s\n", rank, hvd_status_string(s2));
  std::fflush(stdout);
  hvd_shutdown();
  if (s == HVD_OK || s2 == HVD_OK) return 1;
  return stop ? 4 : 0;
}
