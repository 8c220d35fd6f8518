// One rank leaves a running job; the others must see an error or be ended
// by mpirun within a bounded time, never hang. Run under mpirun:
//   rank_abort exit   rank 1 exits with code 3 without shutting anything down
//   rank_abort stop   rank 1 stops (SIGSTOP) and never answers again; with a
//                     short HVD_TRANSPORT_TIMEOUT the others' operations fail
// Every other rank submits an allreduce rank 1 never joins and reports what
// its handle said. (Further arguments are ignored: tests use one to mark the
// processes they start.)
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "hvd.h"

int main(int argc, char** argv) {
  const bool stop = argc > 1 && std::strcmp(argv[1], "stop") == 0;
  if (hvd_init(nullptr) != HVD_OK) {
    std::fprintf(stderr, "init failed: %s\n", hvd_last_error());
    return 2;
  }
  int rank = -1;
  hvd_rank(&rank);
  const char* transport = "";
  hvd_context_transport(nullptr, &transport);
  std::vector<float> v(1024, 1.0f);
  int64_t shape[1] = {1024};
  hvd_tensor_t t = {v.data(), HVD_FLOAT32, 1, shape, HVD_DEVICE_CPU, nullptr};
  if (hvd_allreduce(nullptr, "warmup", &t, v.data(), HVD_SUM) != HVD_OK) return 4;
  std::printf("rank %d: up over %s\n", rank, transport);
  std::fflush(stdout);
  if (rank == 1) {
    usleep(300 * 1000);
    if (stop) {
      raise(SIGSTOP);
      pause();
    }
    std::_Exit(3);  // mid-job: no hvd_shutdown, no MPI_Finalize
  }
  hvd_handle_t h = nullptr;
  if (hvd_allreduce_async(nullptr, "never", &t, v.data(), HVD_SUM, 1, 1, &h) != HVD_OK) return 5;
  const auto start = std::chrono::steady_clock::now();
  hvd_status_t s = hvd_handle_wait(h, 120);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("rank %d: pending handle finished after %.1f s with %s: %s\n", rank, took,
              hvd_status_string(s), hvd_last_error());
  std::fflush(stdout);
  hvd_handle_release(h);
  hvd_status_t s2 = hvd_allreduce(nullptr, "after", &t, v.data(), HVD_SUM);
  std::printf("rank %d: next allreduce: %s\n", rank, hvd_status_string(s2));
  std::fflush(stdout);
  hvd_shutdown();
  return (s != HVD_OK && s2 != HVD_OK) ? 0 : 1;
}
