#!/bin/bash
# The 2-rank allreduce past this machine's cache: STREAM a += b over 2 GiB
# arrays (2 threads) for the ceiling, hvd's default at 64 MiB and 1 GiB a
# rank, and raw Open MPI without mmap (the report's best peer) at 1 GiB.
set -u
cd "$(dirname "$0")/../../.."
B=${BUILD:-build}
"$B/bin/stream-bench" --mib 2048 --threads 2 --reps 5 | grep '"add"'
for i in 1 2; do
  OMP_NUM_THREADS=1 "$B/bin/hvdrun" -np 2 "$B/bin/hvd-bench" coll --ops allreduce --sizes 64M,1G | grep BENCH
done
mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \
  -x GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967296 \
  "$B/bin/mpi-bench" coll --system mpi-nommap --sizes 1G --ops allreduce | grep BENCH
