# Every rank sees the right HVD_* variables and aliases for 1, 2 and 4 ranks,
# on one host and spread over several (all local: localhost and 127.0.0.1).
. "$(dirname "$0")/lib.sh"

check_env() {  # check_env "EXPECTED LINES" HVDRUN-ARGS...
  local expected="$1"
  shift
  run_hvdrun "$@" "$RANK_HELPER" env --connect
  expect_rc 0 "hvdrun $*"
  grep '^ENV ' "$TMP/out" | sort >"$TMP/got"
  printf '%s\n' "$expected" | sort >"$TMP/want"
  if ! diff -u "$TMP/want" "$TMP/got" >&2; then fail "wrong variables for hvdrun $*"; fi
  local n
  n=$(printf '%s\n' "$expected" | wc -l)
  [ "$(grep -c '^SECRET rank=[0-9]* ok=1$' "$TMP/out")" = "$n" ] || fail "HVD_SECRET missing or malformed"
  [ "$(grep -c '^ADDR rank=[0-9]* ok=1$' "$TMP/out")" = "$n" ] || fail "HVD_RENDEZVOUS_ADDR missing or malformed"
}

line() {  # line RANK SIZE LOCAL LOCALSIZE CROSS CROSSSIZE HOST
  echo "ENV HVD_RANK=$1 HVD_SIZE=$2 HVD_LOCAL_RANK=$3 HVD_LOCAL_SIZE=$4 HVD_CROSS_RANK=$5 HVD_CROSS_SIZE=$6 RANK=$1 WORLD_SIZE=$2 LOCAL_RANK=$3 LOCAL_WORLD_SIZE=$4 HVD_HOSTNAME=$7"
}

check_env "$(line 0 1 0 1 0 1 localhost)" -np 1

check_env "$(line 0 2 0 2 0 1 localhost; line 1 2 1 2 0 1 localhost)" -np 2

check_env "$(for r in 0 1 2 3; do line $r 4 $r 4 0 1 localhost; done)" -np 4

# Two hosts of two slots: cross ranks pair up local ranks across hosts.
check_env "$(line 0 4 0 2 0 2 localhost; line 1 4 1 2 0 2 localhost
             line 2 4 0 2 1 2 127.0.0.1; line 3 4 1 2 1 2 127.0.0.1)" \
  -np 4 -H localhost:2,127.0.0.1:2

# Uneven hosts; -np below the slots; the rest unused.
check_env "$(line 0 4 0 3 0 2 localhost; line 1 4 1 3 0 1 localhost; line 2 4 2 3 0 1 localhost
             line 3 4 0 1 1 2 127.0.0.1)" \
  -np 4 -H localhost:3,127.0.0.1:1,127.0.0.3:8

# -np taken from a hostfile's slots.
printf '# a comment\nlocalhost slots=1\n\n127.0.0.1:2  # trailing comment\n' >"$TMP/hosts"
check_env "$(line 0 3 0 1 0 2 localhost; line 1 3 0 2 1 2 127.0.0.1; line 2 3 1 2 0 1 127.0.0.1)" \
  --hostfile "$TMP/hosts"

# Optional settings reach every rank.
run_hvdrun -np 2 --transport gloo --network-interface lo --timeline-filename tl.json \
  --fusion-threshold-mb 2 --cycle-time-ms 3.5 --start-timeout 30 -x HVD_EXTRA=x1 \
  "$RANK_HELPER" env --connect
expect_rc 0 "settings"
for r in 0 1; do
  for kv in HVD_TRANSPORT=gloo HVD_NETWORK_INTERFACE=lo HVD_TIMELINE=tl.json \
            HVD_FUSION_THRESHOLD=2097152 HVD_CYCLE_TIME=3.5 HVD_START_TIMEOUT=30 HVD_EXTRA=x1; do
    expect_in "$TMP/out" "^OPT rank=$r $kv\$"
  done
done

# torchrun-style, one node.
check_env "$(line 0 2 0 2 0 1 "$(hostname)"; line 1 2 1 2 0 1 "$(hostname)")" --nproc-per-node 2

# torchrun-style, two nodes (two hvdruns on this machine); node 0 hosts the
# store on the master port and node 1's ranks find it there.
# Below the ephemeral range (32768 and up), so no outgoing connection holds it.
port=$(( 20000 + (RANDOM % 12000) ))
export HVD_SECRET
HVD_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
"$HVDRUN" --nnodes 2 --node-rank 1 --nproc-per-node 2 --master-addr 127.0.0.1 --master-port "$port" \
  "$RANK_HELPER" env --connect --wait-all >"$TMP/out1" 2>"$TMP/err1" </dev/null &
node1=$!
run_hvdrun --nnodes 2 --node-rank 0 --nproc-per-node 2 --master-addr 127.0.0.1 --master-port "$port" \
  "$RANK_HELPER" env --connect --wait-all
wait "$node1"
rc1=$?
unset HVD_SECRET
expect_rc 0 "torchrun node 0"
[ "$rc1" = 0 ] || { cat "$TMP/err1" >&2; fail "torchrun node 1 exited $rc1"; }
h=$(hostname)
printf '%s\n' "$(line 0 4 0 2 0 2 "$h"; line 1 4 1 2 0 2 "$h")" | sort >"$TMP/want"
grep '^ENV ' "$TMP/out" | sort >"$TMP/got"
diff -u "$TMP/want" "$TMP/got" >&2 || fail "torchrun node 0 variables"
printf '%s\n' "$(line 2 4 0 2 1 2 "$h"; line 3 4 1 2 1 2 "$h")" | sort >"$TMP/want"
grep '^ENV ' "$TMP/out1" | sort >"$TMP/got"
diff -u "$TMP/want" "$TMP/got" >&2 || fail "torchrun node 1 variables"

echo PASS
