#!/bin/bash
# The 2-rank allreduce against the ceiling of its own passes: stream-bench's
# STREAM lines and its shm-passes line (one rank's copies and fold of the
# shared-memory allreduce, with no peer and no waiting) at 64 MiB and 1 GiB
# a thread, hvd's default allreduce at 64 MiB and 1 GiB a rank, twice, and raw
# Open MPI at both sizes.
set -u
cd "$(dirname "$0")/../../.."
B=${BUILD:-build}
for mib in 128 2048; do
  "$B/bin/stream-bench" --mib "$mib" --threads 2 --reps 5 --passes | grep -E '"(add|shm-passes)"'
done
for i in 1 2; do
  OMP_NUM_THREADS=1 "$B/bin/hvdrun" -np 2 "$B/bin/hvd-bench" coll --ops allreduce --sizes 64M,1G | grep BENCH
done
# The best peer of the physical line (raw Open MPI, its shared memory with
# CMA single copies, glibc kept from returning the buffers to the kernel).
mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \
  -x GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967296 \
  "$B/bin/mpi-bench" coll --system mpi-nommap --sizes 64M,1G --ops allreduce | grep BENCH
