#!/usr/bin/env bash
# test_hvdrun.sh HVDRUN MP_CHECK NP: hvdrun --transport mpi -np NP mp_check,
# with no OMPI_ALLOW_RUN_AS_ROOT* in the environment: hvdrun's mpirun command
# line must carry what root and oversubscription need. Passes when every rank
# reports no failed check and every rank's hvd connected over MPI.
set -u
hvdrun=$1; prog=$2; np=$3
command -v "${HVD_LAUNCHER_MPIRUN:-mpirun}" >/dev/null 2>&1 || { echo "SKIP: mpirun not found"; exit 77; }
unset OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM HVD_TRANSPORT HVD_RANK HVD_SIZE RANK WORLD_SIZE
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
start=$(date +%s)
HVD_LOG_LEVEL=debug timeout -k 10 240 "$hvdrun" --transport mpi -np "$np" -v "$prog" "$np" >"$out" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
grep -v "DEBUG: \(negotiat\|cycle\)" "$out"
[ "$rc" -eq 0 ] || fail "hvdrun exited with $rc"
grep -q "^hvdrun: transport mpi: running " "$out" || fail "hvdrun -v did not show the mpirun command"
n=$(grep -cE "^mp_check rank [0-9]+ of $np: [0-9]+ checks, 0 failed$" "$out")
[ "$n" -eq "$np" ] || fail "$n of $np ranks passed"
n=$(grep -c "transport 'mpi' connected" "$out")
[ "$n" -eq "$np" ] || fail "$n of $np ranks used the mpi transport"
echo "PASS (${took}s)"
