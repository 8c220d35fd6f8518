// An application that initialises MPI itself, then reaches hvd_init late on
// one rank, under mpirun:
//   late_hvd_init RANK SECONDS [MARK]
// World rank RANK sleeps SECONDS between MPI_Init_thread and hvd_init. With a
// start timeout shorter than that, the other ranks' hvd_init must fail within
// it (HVD_ERR_TIMEOUT, printed as "rank R: init failed: ..."), not wait in
// MPI's start-up collectives; otherwise every rank runs one allreduce and
// prints "rank R of N: sum S". A rank whose init failed exits 3 without
// MPI_Finalize (the late rank would never join it); mpirun then ends the job.
// (MARK is ignored: tests use it to find the processes they start.)
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "hvd.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: late_hvd_init RANK SECONDS [MARK]\n");
    return 2;
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int world = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world);
  if (world == std::atoi(argv[1])) sleep(static_cast<unsigned>(std::atoi(argv[2])));
  if (hvd_init(nullptr) != HVD_OK) {
    std::printf("rank %d: init failed: %s\n", world, hvd_last_error());
    std::fflush(stdout);
    return 3;
  }
  int rank = -1, size = 0;
  hvd_rank(&rank);
  hvd_size(&size);
  std::vector<int32_t> v(4, rank + 1);
  int64_t shape[1] = {4};
  hvd_tensor_t t = {v.data(), HVD_INT32, 1, shape, HVD_DEVICE_CPU, nullptr};
  if (hvd_allreduce(nullptr, "late", &t, v.data(), HVD_SUM) != HVD_OK) {
    std::printf("rank %d: allreduce failed: %s\n", rank, hvd_last_error());
    return 4;
  }
  std::printf("rank %d of %d: sum %d\n", rank, size, v[0]);
  std::fflush(stdout);
  hvd_shutdown();
  MPI_Finalize();
  return 0;
}
