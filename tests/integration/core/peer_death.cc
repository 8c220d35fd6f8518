// One rank dies in the middle of a job; the survivors' pending handles must
// fail with an error (not hang). Rank 1 exits with code 3 while rank 0 waits
// on an allreduce that rank 1 never submits. Rank 0 ignores SIGTERM so it can
// report what its handle said before the launcher's grace period ends.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "hvd.h"

int main() {
  signal(SIGTERM, SIG_IGN);
  if (hvd_init(nullptr) != HVD_OK) {
    std::fprintf(stderr, "init failed: %s\n", hvd_last_error());
    return 2;
  }
  int rank = -1;
  hvd_rank(&rank);
  std::vector<float> v(1024, 1.0f);
  int64_t shape[1] = {1024};
  hvd_tensor_t t = {v.data(), HVD_FLOAT32, 1, shape, HVD_DEVICE_CPU, nullptr};
  if (hvd_allreduce(nullptr, "warmup", &t, v.data(), HVD_SUM) != HVD_OK) return 4;
  if (rank != 0) {
    usleep(300 * 1000);
    std::_Exit(3);  // dies without shutting down, mid-job
  }
  hvd_handle_t h;
  if (hvd_allreduce_async(nullptr, "never", &t, v.data(), HVD_SUM, 1, 1, &h) != HVD_OK) return 5;
  auto start = std::chrono::steady_clock::now();
  hvd_status_t s = hvd_handle_wait(h, 60);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("rank 0: pending handle finished after %.1f s with %s: %s\n", took,
              hvd_status_string(s), hvd_last_error());
  std::fflush(stdout);
  hvd_handle_release(h);
  // The context is broken now: new operations fail at once.
  hvd_status_t s2 = hvd_allreduce(nullptr, "after", &t, v.data(), HVD_SUM);
  std::printf("rank 0: next allreduce: %s\n", hvd_status_string(s2));
  hvd_shutdown();
  return (s != HVD_OK && s != HVD_ERR_TIMEOUT && took < 30 && s2 != HVD_OK) ? 0 : 1;
}
