#!/usr/bin/env bash
# The Kubernetes manifests of docs/kubernetes.md, each run on the simulated
# cluster (cluster.sh in this folder) with the environment its operator gives
# a pod: each host renamed as the operator names the pod (its host name, and
# the Service's DNS names in /etc/hosts), the operator's files mounted where
# it mounts them, its variables set, and the pod's command run as the
# manifest gives it: the main example (examples/python/train_torch.py) to
# the usual accuracy.
#   test_k8s_cluster.sh CASE
# with HVDRUN and HVD_LIBRARY_PATH (the library every rank loads) in the
# environment; PYTHON (default python3) needs torch and scikit-learn.
# CASE:
#   mpijob      MPI Operator v2beta1 MPIJob "digits", 2 workers, slotsPerWorker 1:
#               the launcher pod (hvd-h1 as digits-launcher) runs `hvdrun python3
#               train_torch.py` with no host option: hvdrun reads the hostfile
#               the operator mounts at /etc/mpi/hostfile and names in
#               OMPI_MCA_orte_default_hostfile, and starts the ranks on
#               digits-worker-0/1.digits.default.svc over ssh.
#   mpijob_elastic  the same launcher pod with --min-np 2 --max-np 3 and no
#               host option: hvdrun runs the operator's /etc/mpi/discover_hosts.sh
#               (beside the hostfile); the operator rewrites it with a third
#               worker when the job asks for one at step 10; epoch 1 has 3 ranks.
#   pytorchjob  Kubeflow PyTorchJob "digits" (Master 1, Worker 1): each pod runs
#               `python3 train_torch.py` (no launcher) with MASTER_ADDR,
#               MASTER_PORT, WORLD_SIZE, RANK and the PET_* variables.
#   jobset      a JobSet "digits" (one replicated Job, 2 indexed pods, DNS
#               hostnames): JOB_COMPLETION_INDEX, and WORLD_SIZE/MASTER_ADDR/
#               MASTER_PORT from the manifest.
#   trainer     Kubeflow Trainer v2 TrainJob "digits" (JobSet underneath):
#               PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE, PET_MASTER_ADDR,
#               PET_MASTER_PORT and JOB_COMPLETION_INDEX only.
# Exit 77 (ctest: skipped) with the reason where this machine cannot make
# the cluster or the example cannot run. The cluster is torn down on every
# path (trap); /etc/mpi, made for the mount point if this machine lacks it,
# is removed again.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cluster="$here/cluster.sh"
example="$repo/examples/python/train_torch.py"
case_=${1:?usage: test_k8s_cluster.sh CASE}
PYTHON=${PYTHON:-python3}
export HVDC_ID="k$$"
export HVDC_DIR="/tmp/hvd-cluster-$HVDC_ID"
work=$(mktemp -d /tmp/hvd-k8s-cluster.XXXXXX)
T0=$(date +%s.%N)
made_etc_mpi=0
pids=()

. "$here/cluster_test_lib.sh"

teardown() {
  local rc=$?
  local p
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  cluster_down_checked || rc=1
  [ "$made_etc_mpi" -eq 0 ] || rmdir /etc/mpi 2>/dev/null || true
  rm -rf "$work"
  echo "($(elapsed) s in all)"
  exit $rc
}
trap teardown EXIT
trap 'exit 130' INT TERM

fail() { echo "FAIL: $*"; exit 1; }

require_job_env
command -v "$PYTHON" >/dev/null || skip "no $PYTHON"
"$PYTHON" -c "import torch, sklearn, tqdm" 2>/dev/null || skip "$PYTHON lacks torch, scikit-learn or tqdm (the example's needs)"

reap_stale_clusters
export PYTHONPATH="$repo/bindings/python${PYTHONPATH:+:$PYTHONPATH}"
export HVD_LIBRARY_PATH OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
TRAIN=("$PYTHON" "$example" --epochs 6 --no-cuda)
cd "$work"

# pod HOST NAME DNS...: host HOST becomes pod NAME (its host name), and the
# DNS names (Services, subdomains) resolve to its address in every host.
pod() {
  local h=$1 name=$2 addr
  shift 2
  addr=$(awk -v h="hvd-$h" '$2 == h { print $1 }' "$HVDC_DIR/hosts")
  [ -n "$addr" ] || fail "no address for hvd-$h in $HVDC_DIR/hosts"
  "$cluster" exec "$h" hostname "$name"
  echo "$addr $name $*" >>"$HVDC_DIR/hosts"  # the file every host's /etc/hosts is
}

# run_pod HOST OUT VAR=VALUE... -- CMD...: the pod's command in HOST with the
# operator's variables, in the background; output in OUT, exit code in OUT.rc.
run_pod() {
  local h=$1 out=$2
  shift 2
  local vars=()
  while [ "$1" != "--" ]; do vars+=("$1"); shift; done
  shift
  ( set +e
    timeout -k 5 "${POD_LIMIT:-900}" "$cluster" exec "$h" env "${vars[@]}" "$@" >"$out" 2>&1
    echo $? >"$out.rc" ) &
  pids+=($!)
}

# check_job OUT...: every pod exited 0; rank 0's output has the accuracy.
check_job() {
  local p out acc=""
  for p in "${pids[@]}"; do wait "$p" || true; done
  pids=()
  for out in "$@"; do
    echo "--- $out (exit $(cat "$out.rc" 2>/dev/null || echo '?'))"
    tail -5 "$out"
    [ "$(cat "$out.rc" 2>/dev/null)" = 0 ] || fail "$out: the pod's command failed"
    acc=${acc:-$(sed -nE 's/.*test accuracy: ([0-9.]+) .*/\1/p' "$out")}
  done
  [ -n "$acc" ] || fail "no rank printed the test accuracy"
  awk -v a="$acc" 'BEGIN { exit !(a > 0.7) }' || fail "test accuracy $acc, not above 0.7"
  grep -q "2 rank(s)" "$@" || fail "the job did not have 2 ranks"
  echo "test accuracy $acc at 2 ranks after $(elapsed) s"
}

case "$case_" in
  mpijob)
    up 3
    pod h1 digits-launcher digits-launcher.digits.default.svc
    pod h2 digits-worker-0 digits-worker-0.digits.default.svc
    pod h3 digits-worker-1 digits-worker-1.digits.default.svc
    # The operator's ConfigMap, mounted at /etc/mpi in the launcher pod.
    if [ ! -d /etc/mpi ]; then mkdir /etc/mpi; made_etc_mpi=1; fi
    "$cluster" exec h1 mount -t tmpfs -o mode=755 hvd-mpi /etc/mpi
    "$cluster" exec h1 sh -c 'printf "%s\n" \
      "digits-worker-0.digits.default.svc slots=1" \
      "digits-worker-1.digits.default.svc slots=1" >/etc/mpi/hostfile
      printf "%s\n" "#!/bin/sh" "echo digits-worker-0.digits.default.svc:1" \
      "echo digits-worker-1.digits.default.svc:1" >/etc/mpi/discover_hosts.sh
      chmod 755 /etc/mpi/discover_hosts.sh'
    run_pod h1 "$work/launcher" OMPI_MCA_orte_default_hostfile=/etc/mpi/hostfile \
      K_MPI_JOB_ROLE=launcher -- "$HVDRUN" -x PYTHONPATH -x HVD_LIBRARY_PATH \
      -x OMP_NUM_THREADS "${TRAIN[@]}" --checkpoint-dir "$work/ckpt"
    check_job "$work/launcher"
    ;;
  mpijob_elastic)
    # The elastic MPIJob: the launcher runs hvdrun with --min-np/--max-np and
    # no host option; hvdrun takes the operator's discover_hosts.sh beside
    # the hostfile. At step 10 the job asks for a third worker (the example
    # appends it to a file and waits for it); the "operator" below then
    # rewrites discover_hosts.sh with the new pod, as it does on a scale-up.
    up 4
    pod h1 digits-launcher digits-launcher.digits.default.svc
    for i in 0 1 2; do pod "h$((i + 2))" "digits-worker-$i" "digits-worker-$i.digits.default.svc"; done
    if [ ! -d /etc/mpi ]; then mkdir /etc/mpi; made_etc_mpi=1; fi
    "$cluster" exec h1 mount -t tmpfs -o mode=755 hvd-mpi /etc/mpi
    # operator_writes N: the operator's files for workers 0..N-1 (the script
    # by rename, as a ConfigMap update lands).
    operator_writes() {
      "$cluster" exec h1 sh -c 'n=$1; : >/etc/mpi/hostfile.new; printf "#!/bin/sh\n" >/etc/mpi/d.new
        i=0; while [ $i -lt $n ]; do
          echo "digits-worker-$i.digits.default.svc slots=1" >>/etc/mpi/hostfile.new
          echo "echo digits-worker-$i.digits.default.svc:1" >>/etc/mpi/d.new; i=$((i+1)); done
        chmod 755 /etc/mpi/d.new; mv /etc/mpi/hostfile.new /etc/mpi/hostfile
        mv /etc/mpi/d.new /etc/mpi/discover_hosts.sh' sh "$1"
    }
    operator_writes 2
    mkdir -p "$work/out"
    : >"$work/wanted"
    run_pod h1 "$work/launcher" OMPI_MCA_orte_default_hostfile=/etc/mpi/hostfile \
      K_MPI_JOB_ROLE=launcher -- "$HVDRUN" -v --min-np 2 --max-np 3 --start-timeout 30 \
      --elastic-timeout 30 -x PYTHONPATH -x HVD_LIBRARY_PATH -x OMP_NUM_THREADS \
      "$PYTHON" "$repo/examples/elastic/train_torch_elastic.py" --epochs 2 --result-dir "$work/out" \
      --add-host-at-step 10 --add-host digits-worker-2.digits.default.svc:1 --hosts-file "$work/wanted"
    for _ in $(seq 600); do  # the operator: scales up once the job asks (60 s at most)
      [ -s "$work/wanted" ] && { operator_writes 3; break; }
      [ -e "$work/launcher.rc" ] && break
      sleep 0.1
    done
    for p in "${pids[@]}"; do wait "$p" || true; done
    pids=()
    tail -25 "$work/launcher"
    [ "$(cat "$work/launcher.rc")" = 0 ] || fail "the elastic job failed"
    w0=digits-worker-0.digits.default.svc w1=digits-worker-1.digits.default.svc
    w2=digits-worker-2.digits.default.svc
    grep -qF "hvdrun: host discovery script: /etc/mpi/discover_hosts.sh (beside OMPI_MCA_orte_default_hostfile's hostfile)" \
      "$work/launcher" || fail "hvdrun did not take the operator's discover_hosts.sh"
    grep -qF "epoch 0 formed: size 2, hosts_version 0: 0=$w0:0:0 1=$w1:0:1" "$work/launcher" ||
      fail "the first epoch"
    grep -qF "epoch 1 formed: size 3, hosts_version 1: 0=$w0:0:0 1=$w1:0:1 2=$w2:0:2" "$work/launcher" ||
      fail "the epoch after the scale-up"
    "$PYTHON" - "$work/out" <<'PY' || fail "the workers' results"
import glob, json, sys
res = [json.load(open(p)) for p in glob.glob(sys.argv[1] + "/result-*.json")]
print("results:", sorted((r["rank"], r["size"], r["host"]) for r in res))
assert sorted(r["rank"] for r in res) == [0, 1, 2] and {r["size"] for r in res} == {3}, res
assert len({r["checksum"] for r in res}) == 1, [r["checksum"] for r in res]
PY
    echo "elastic MPIJob grew from 2 to 3 workers after $(elapsed) s"
    ;;
  pytorchjob)
    up 2
    pod h1 digits-master-0 digits-master-0.default.svc
    pod h2 digits-worker-0 digits-worker-0.default.svc
    for i in 0 1; do
      run_pod "h$((i + 1))" "$work/pod$i" MASTER_ADDR=digits-master-0 MASTER_PORT=23456 \
        WORLD_SIZE=2 RANK=$i PET_MASTER_ADDR=digits-master-0 PET_MASTER_PORT=23456 \
        PET_NNODES=2 PET_NODE_RANK=$i PET_NPROC_PER_NODE=1 \
        -- "${TRAIN[@]}" --checkpoint-dir "$work/ckpt$i"
    done
    check_job "$work/pod0" "$work/pod1"
    ;;
  jobset)
    up 2
    pod h1 digits-workers-0-0 digits-workers-0-0.digits
    pod h2 digits-workers-0-1 digits-workers-0-1.digits
    for i in 0 1; do
      run_pod "h$((i + 1))" "$work/pod$i" JOB_COMPLETION_INDEX=$i WORLD_SIZE=2 \
        MASTER_ADDR=digits-workers-0-0.digits MASTER_PORT=29500 \
        -- "${TRAIN[@]}" --checkpoint-dir "$work/ckpt$i"
    done
    check_job "$work/pod0" "$work/pod1"
    ;;
  trainer)
    up 2
    pod h1 digits-node-0-0 digits-node-0-0.digits
    pod h2 digits-node-0-1 digits-node-0-1.digits
    for i in 0 1; do
      run_pod "h$((i + 1))" "$work/pod$i" JOB_COMPLETION_INDEX=$i PET_NNODES=2 \
        PET_NODE_RANK=$i PET_NPROC_PER_NODE=1 PET_MASTER_ADDR=digits-node-0-0.digits \
        PET_MASTER_PORT=29400 -- "${TRAIN[@]}" --checkpoint-dir "$work/ckpt$i"
    done
    check_job "$work/pod0" "$work/pod1"
    ;;
  *) fail "unknown case '$case_'" ;;
esac
no_leftovers 10
echo "PASS: $case_"
