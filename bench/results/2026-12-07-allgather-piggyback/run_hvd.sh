#!/bin/bash
# one round: hvd default (piggyback on, off) and raw MPI, 4 ranks on 2 x 2 hosts, 4-byte allgather and allreduce steps
cd /work/main
B=/work/main/build
for op in allgather broadcast allreduce; do
for pb in 1 0; do
  tests/cluster/cluster.sh exec h1 env HVD_PIGGYBACK=$pb HVD_LAUNCHER_SSH_ARGS="-F $HVDC_DIR/ssh_config" LD_LIBRARY_PATH=$B/lib HVD_LIBRARY_PATH=$B/lib \
    $B/bin/hvdrun -np 4 -H hvd-h1:2,hvd-h2:2 -x LD_LIBRARY_PATH -x HVD_LIBRARY_PATH -x HVD_PIGGYBACK $B/bin/hvd-bench latency --op $op --steps 400 2>&1 | grep -o '"variant":"[^"]*"\|"time_us":[0-9.]*\|"transport":"[^"]*"' | tr '\n' ' ' | sed "s/^/hvd piggyback=$pb /"; echo
done
done
