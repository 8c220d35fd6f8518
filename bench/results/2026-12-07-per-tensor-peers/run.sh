#!/bin/bash
# Issue 43, item 4 against a peer: the fusion step (200 x 16 KiB and
# 1000 x 4 KiB, one allreduce_async_ per tensor, then synchronize each) at 2
# ranks on this host, through Horovod's torch API: Horovod 0.28.1 itself
# (bench/suite/build_horovod.sh; under mpirun, its MPI controller, cycle time
# 1 ms (its default) and 0.1 ms) and hvd's torch frontend (hvdrun, the default
# transport); beside them hvd's C API (hvd-bench fusion). ROUNDS rounds, the
# jobs of a round one after the other, their order rotated each round.
# HOROVOD: Horovod's prefix (default /opt/horovod-0.28.1). BUILD: hvd's build.
set -u
cd "$(dirname "$0")/../../.."
BUILD=${BUILD:-$PWD/build}
HOROVOD=${HOROVOD:-/opt/horovod-0.28.1}
ROUNDS=${ROUNDS:-5}
STEPS=${STEPS:-20}
TB=bench/suite/torch_bench.py
pick() { grep '^BENCH' | grep -o '"system":"[^"]*"\|"tensors":[0-9]*\|"time_us":[0-9.]*' | paste -sd' '; }
jobs=(hvd-c hvd-torch horovod-1 horovod-0.1)
for r in $(seq 1 "$ROUNDS"); do
  for k in 0 1 2 3; do
    j=${jobs[$(( (k + r) % 4 ))]}
    case $j in
      hvd-c)
        for cell in 200:16K 1000:4K; do
          out=$("$BUILD/bin/hvdrun" -np 2 -x HVD_LIBRARY_PATH="$BUILD/lib" "$BUILD/bin/hvd-bench" fusion \
            --tensors "${cell%%:*}" --tensor-bytes "${cell##*:}" --steps 200 2>&1 | pick)
          echo "round $r hvd-c :: $out"
        done ;;
      hvd-torch)
        out=$("$BUILD/bin/hvdrun" -np 2 -x HVD_LIBRARY_PATH="$BUILD/lib" -x OMP_NUM_THREADS=1 python3 "$TB" fusion \
          --system hvd-torch --fusion 200x16K,1000x4K --fusion-steps "$STEPS" 2>&1 | pick)
        echo "round $r hvd-torch :: $out" ;;
      horovod-*)
        cyc=${j#horovod-}
        out=$(PYTHONPATH="$HOROVOD" HOROVOD_CYCLE_TIME=$cyc OMP_NUM_THREADS=1 mpirun --allow-run-as-root -np 2 \
          -x PYTHONPATH -x HOROVOD_CYCLE_TIME -x OMP_NUM_THREADS python3 "$TB" fusion --system horovod \
          --fusion 200x16K,1000x4K --fusion-steps "$STEPS" 2>&1 | pick)
        echo "round $r horovod@${cyc}ms :: $out" ;;
    esac
  done
done
