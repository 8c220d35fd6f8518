#!/bin/bash
# A/B of the small allreduce riding in the negotiation: HVD_PIGGYBACK=0
# (the negotiation's allreduce, then the tensor's own) against the default
# (one allreduce carries both); same build, alternating rounds, raw Open MPI
# in every round as the yardstick. One host (2 and 4 ranks, shared memory)
# and simulated clusters of 2 hosts x 2 ranks and 4 hosts x 1 rank
# (hierarchical where the transport chooses it). Prints one line per run:
# where, system, setting, then size:median_us pairs.
set -u
cd "$(dirname "$0")/../../.."
B=${BUILD:-build}
ROUNDS=${ROUNDS:-3}
SIZES=${SIZES:-4,1K,64K}
TRANSPORTS=${TRANSPORTS:-gloo mpi ucx}
pick() { grep BENCH | sed 's/.*"bytes":\([0-9]*\).*"time_us":\([0-9.]*\),.*/\1:\2/' | tr '\n' ' '; }
hvd() {  # hvd TRANSPORT PIGGYBACK HVDRUN-ARGS...
  local t=$1 p=$2; shift 2
  "$B/bin/hvdrun" "$@" --transport "$t" -x HVD_PIGGYBACK="$p" -x OMPI_MCA_mpi_yield_when_idle=1 \
    -x HVD_LIBRARY_PATH="$PWD/$B/lib" -x OMP_NUM_THREADS=1 \
    "$PWD/$B/bin/hvd-bench" coll --system "hvd-$t" --sizes "$SIZES" --ops allreduce 2>&1 | pick
}
raw_mpi() {  # raw_mpi NP MPIRUN-ARGS...
  local np=$1; shift
  OMPI_MCA_mpi_yield_when_idle=1 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" "$@" \
    "$PWD/$B/bin/mpi-bench" coll --system mpi --sizes "$SIZES" --ops allreduce 2>&1 | pick
}
for np in 2 4; do
  for r in $(seq 1 "$ROUNDS"); do
    for t in $TRANSPORTS; do
      for p in 0 1; do echo "one-host ${np}  hvd-$t piggyback=$p :: $(hvd "$t" "$p" -np "$np")"; done
    done
    echo "one-host ${np}  raw-mpi :: $(raw_mpi "$np")"
  done
done
trap 'for n in 2 4; do HVDC_ID=piggy$n bash tests/cluster/cluster.sh down >/dev/null 2>&1; done' EXIT
for layout in 2x2 4x1; do
  n=${layout%x*}
  export HVDC_ID=piggy$n
  bash tests/cluster/cluster.sh up "$n" >/dev/null || { echo "cluster: cannot be made"; exit 0; }
  eval "$(bash tests/cluster/cluster.sh env | sed 's/^/export /')"
  hosts=$(for i in $(seq 1 "$n"); do printf 'hvd-h%d:%s,' "$i" "${layout#*x}"; done); hosts=${hosts%,}
  for r in $(seq 1 "$ROUNDS"); do
    for t in $TRANSPORTS; do
      for p in 0 1; do
        echo "cluster $layout hvd-$t piggyback=$p :: $(bash tests/cluster/cluster.sh exec 1 bash -c "$(declare -f hvd pick); B=$B; SIZES=$SIZES; hvd $t $p -H $hosts --network-interface eth0")"
      done
    done
    echo "cluster $layout raw-mpi :: $(bash tests/cluster/cluster.sh exec 1 bash -c "$(declare -f raw_mpi pick); B=$B; SIZES=$SIZES; raw_mpi $((n * ${layout#*x})) -H $hosts --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0")"
  done
  bash tests/cluster/cluster.sh down >/dev/null 2>&1
done
