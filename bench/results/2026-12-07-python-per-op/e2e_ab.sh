#!/bin/bash
# ResNet-50 (64 x 64 images, batch 8) training step: hvd before (package and library of 5722c72)
# and after (this session), DDP in the same rounds; 1 and 2 processes; alternating order.
set -u
OUT=${1:-/tmp/e2e_ab.txt}
: > "$OUT"
run() {  # label tree lib nprocs mode
  local label=$1 tree=$2 lib=$3 n=$4 mode=$5 extra=()
  local store
  if [ "$mode" = ddp ]; then store=$(mktemp -d); extra=(--store "$store"); fi
  local so="--start-timeout 0"; [ "$mode" = hvd ] && so=""
  line=$(cd "$tree" && env HVD_LIBRARY_PATH=$lib LD_LIBRARY_PATH=$lib "$lib/../bin/hvdrun" $so -np "$n" \
    -x HVD_LIBRARY_PATH -x LD_LIBRARY_PATH python3 "$tree/bench/suite/e2e_bench.py" --model resnet50 \
    --image-size 64 --mode "$mode" "${extra[@]}" 2>&1 | grep '^BENCH' | tail -1)
  [ "$mode" = ddp ] && rm -rf "$store"
  echo "$label $n $line" | tee -a "$OUT"
}
for round in 1 2 3; do
  for n in 1 2; do
    if [ $((round % 2)) = 1 ]; then
      run before /work/base /work/ab/pre7/lib $n hvd
      run after /work/main /work/main/build/lib $n hvd
      run ddp /work/main /work/main/build/lib $n ddp
    else
      run ddp /work/main /work/main/build/lib $n ddp
      run after /work/main /work/main/build/lib $n hvd
      run before /work/base /work/ab/pre7/lib $n hvd
    fi
  done
done
