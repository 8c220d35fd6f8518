# Bad command lines give a usage error on stderr and exit 2; --help documents
# every flag.
. "$(dirname "$0")/lib.sh"

usage_error() {  # usage_error ARGS...: expects exit 2 and a message
  run_hvdrun "$@"
  expect_rc 2 "hvdrun $*"
  expect_in "$TMP/err" '^hvdrun: error: '
  [ ! -s "$TMP/out" ] || fail "hvdrun $* wrote to stdout"
}

usage_error
usage_error -np 2
usage_error --no-such-flag -np 1 true
usage_error -np 1 --no-such-flag true
usage_error -np
usage_error -np 0 true
usage_error -np -1 true
usage_error -np two true
usage_error -np 3 -H localhost:2 true
usage_error -np 2 -H localhost:0 true
usage_error -np 2 -H localhost:x true
usage_error -np 2 -H 'localhost,,h2' true
usage_error -np 2 -H localhost:2 --hostfile /dev/null true
usage_error -np 2 --hostfile "$TMP/no-such-file" true
usage_error -np 2 --start-timeout abc true
usage_error -np 2 --start-timeout -5 true
usage_error -np 2 --fusion-threshold-mb x true
usage_error -np 2 --cycle-time-ms 0 true
usage_error -np 2 -p 70000 true
usage_error -np 2 --ssh-port 0 true
usage_error -np 2 --transport 'a b' true
usage_error -np 2 --tag-output=yes true
usage_error -np 2 -x '1BAD=x' true
usage_error -np 2 --network-interface no-such-if0 true
usage_error --nproc-per-node 2 --nnodes 2 --node-rank 1 true
usage_error --nproc-per-node 2 --nnodes 2 --node-rank 2 --master-addr 127.0.0.1 true
usage_error -np 3 --nproc-per-node 2 true
usage_error --nproc-per-node 2 -H localhost:2 true
HVD_START_TIMEOUT=soon usage_error -np 1 true
# Several nodes need a shared secret.
(unset HVD_SECRET; usage_error --nproc-per-node 1 --nnodes 2 --master-addr 127.0.0.1 true) || exit 1

# --help: exit 0, on stdout, every flag present.
run_hvdrun --help
expect_rc 0 "--help"
for flag in -np -H --hostfile --transport --network-interface --start-timeout --verbose \
            --tag-output --timeline-filename --fusion-threshold-mb --cycle-time-ms --ssh-port \
            --ssh-identity-file --nproc-per-node --nnodes --node-rank --master-addr --master-port \
            --grace-period --env --help --version; do
  grep -q -- "$flag" "$TMP/out" || fail "--help does not mention $flag"
done
run_hvdrun --version
expect_rc 0 "--version"
expect_in "$TMP/out" '^hvdrun [0-9]+\.[0-9]+\.[0-9]+$'

# Flags in both spellings; "--" ends the options.
run_hvdrun --num-proc=2 --start-timeout=0 -- sh -c 'echo "r$HVD_RANK"'
expect_rc 0 "--flag=value"
[ "$(sort "$TMP/out" | tr '\n' ' ')" = "r0 r1 " ] || fail "wrong output: $(cat "$TMP/out")"

echo PASS
