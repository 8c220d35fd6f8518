#!/bin/bash
cd /work/main
B=/work/main/build
for op in allgather broadcast allreduce; do
tests/cluster/cluster.sh exec h1 env OMPI_MCA_plm_rsh_args="-F $HVDC_DIR/ssh_config" OMPI_MCA_mpi_yield_when_idle=1 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4 -H hvd-h1:2,hvd-h2:2 --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 -x OMPI_MCA_mpi_yield_when_idle $B/bin/mpi-bench latency --op $op --steps 400 2>&1 | grep -o '"variant":"[^"]*"\|"time_us":[0-9.]*' | tr '\n' ' ' | sed "s/^/mpi /"; echo
done
