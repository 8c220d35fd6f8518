// A rank that starts late, under mpirun:
//   late_start RANK SECONDS [MARK]
// World rank RANK (OMPI_COMM_WORLD_RANK) sleeps SECONDS before hvd_init;
// every rank then runs one allreduce and prints "rank R of N: sum S". (MARK is
// ignored: tests use it to find the processes they start.)
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "hvd.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: late_start RANK SECONDS [MARK]\n");
    return 2;
  }
  const char* world = std::getenv("OMPI_COMM_WORLD_RANK");
  if (world != nullptr && std::atoi(world) == std::atoi(argv[1])) {
    sleep(static_cast<unsigned>(std::atoi(argv[2])));
  }
  if (hvd_init(nullptr) != HVD_OK) {
    std::fprintf(stderr, "init failed: %s\n", hvd_last_error());
    return 3;
  }
  int rank = -1, size = 0;
  hvd_rank(&rank);
  hvd_size(&size);
  std::vector<float> v(8, 1.0f);
  int64_t shape[1] = {8};
  hvd_tensor_t t = {v.data(), HVD_FLOAT32, 1, shape, HVD_DEVICE_CPU, nullptr};
  if (hvd_allreduce(nullptr, "late", &t, v.data(), HVD_SUM) != HVD_OK) {
    std::fprintf(stderr, "allreduce failed: %s\n", hvd_last_error());
    return 4;
  }
  std::printf("rank %d of %d: sum %g\n", rank, size, v[0]);
  std::fflush(stdout);
  hvd_shutdown();
  return 0;
}
