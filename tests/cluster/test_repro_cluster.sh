#!/usr/bin/env bash
# Reproducible reductions across the hosts of the simulated cluster
# (cluster.sh in this folder; docs/reproducibility.md): with
# HVD_REPRODUCIBLE=1, the hierarchical layouts 2 x 2, 2 x 3 and 3 x 2 (hosts x
# ranks per host, hvdrun on hvd-h1, the hierarchical collectives on) must give
# every bit of the rank-ordered fold, as one host does.
# bindings/python/tests/workers/reproducible.py draws the operations
# (allreduce SUM/AVERAGE/scaled, grouped allreduce, reducescatter; float16 to
# float64; 1 element to 4 MiB) and checks them against numpy's fold.
#   test_repro_cluster.sh repro_layouts
# with HVDRUN and HVD_LIBRARY_PATH (the library every worker loads) in the
# environment; PYTHON (default python3) needs numpy. Exit 77 (ctest: skipped)
# with the reason where this machine cannot make the cluster. The cluster is
# torn down on every path (trap).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cluster="$here/cluster.sh"
worker="$repo/bindings/python/tests/workers/reproducible.py"
case_=${1:?usage: test_repro_cluster.sh CASE}
PYTHON=${PYTHON:-python3}
export HVDC_ID="t$$"
export HVDC_DIR="/tmp/hvd-cluster-$HVDC_ID"
work=$(mktemp -d /tmp/hvd-repro-cluster.XXXXXX)
T0=$(date +%s.%N)

. "$here/cluster_test_lib.sh"

teardown() {
  local rc=$?
  cluster_down_checked || rc=1
  rm -rf "$work"
  echo "($(elapsed) s in all)"
  exit $rc
}
trap teardown EXIT
trap 'exit 130' INT TERM

fail() { echo "FAIL: $*"; exit 1; }

[ "$case_" = repro_layouts ] || fail "unknown case $case_"
require_job_env
command -v "$PYTHON" >/dev/null || skip "no $PYTHON"
"$PYTHON" -c "import numpy" 2>/dev/null || skip "$PYTHON lacks numpy"

reap_stale_clusters

export PYTHONPATH="$repo/bindings/python${PYTHONPATH:+:$PYTHONPATH}"
export HVD_LIBRARY_PATH OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 HVD_REPRODUCIBLE=1

# check LAYOUT HOSTS SEED: one job over HOSTS (hvdrun -H), its ranks' checks.
check() {
  local name=$1 hosts=$2 seed=$3 n rc=0
  n=$(echo "$hosts" | tr ',' '\n' | awk -F: '{ s += $2 } END { print s }')
  mkdir -p "$work/$name"
  timeout -k 5 400 "$cluster" exec h1 "$HVDRUN" -H "$hosts" --start-timeout 150 \
    -x PYTHONPATH -x OMP_NUM_THREADS -x PYTHONUNBUFFERED -x HVD_TEST_OUT="$work/$name" \
    -x HVD_LOG_LEVEL=info "$PYTHON" "$worker" "$seed" >"$work/$name.out" 2>&1 || rc=$?
  grep -v "^\[" "$work/$name.out" | tail -5 || true
  [ "$rc" -eq 0 ] || { tail -40 "$work/$name.out"; fail "$name: hvdrun exited $rc"; }
  grep -q "INFO: hierarchical collectives:" "$work/$name.out" || fail "$name: the hierarchy was not on"
  "$PYTHON" - "$work/$name" "$n" "$name" <<'EOF' || fail "$name: reductions differ from the rank-ordered fold"
import json, os, sys
out, n, name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
bad = []
for r in range(n):
    path = os.path.join(out, f"rank{r}.json")
    if not os.path.exists(path):
        bad.append(f"rank {r} wrote no results")
        continue
    checks = json.load(open(path))["checks"]
    bad += [f"rank {r} {k}: {v.strip().splitlines()[-1]}" for k, v in checks.items() if v]
    print(f"{name} rank {r}: {len(checks)} reductions checked") if r == 0 else None
print("\n".join(bad[:12]))
sys.exit(1 if bad else 0)
EOF
  echo "$name: every bit of every rank as the rank-ordered fold ($(elapsed) s)"
}

up 3
check 2x2 hvd-h1:2,hvd-h2:2 11
check 2x3 hvd-h1:3,hvd-h2:3 12
check 3x2 hvd-h1:2,hvd-h2:2,hvd-h3:2 13
no_leftovers 10
