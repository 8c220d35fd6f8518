# hvdrun's elastic driver with real workers: the library's side of the
# protocol (tests/unit/elastic_worker.c, on libhvd's C API). Skipped (77)
# where that worker is not built.
. "$(dirname "$0")/lib.sh"

[ -n "${ELASTIC_WORKER:-}" ] && [ -x "$ELASTIC_WORKER" ] || { echo "SKIP: elastic_worker not built"; exit 77; }
# The worker takes no extra argument: the marker goes in its name.
W="$TMP/elastic_worker_$MARK"
ln -s "$ELASTIC_WORKER" "$W"

# A worker fails after the first allreduce; the two others reset into epoch 1
# (ranks 0 and 1 of 2), sum again, and reset once more into epoch 2.
run_hvdrun --min-np 2 -np 3 --elastic-timeout 20 --grace-period 2 -H 127.0.0.1,127.0.0.2,127.0.0.3 --tag-output sh -c '
  case $HVD_ELASTIC_WORKER in 127.0.0.3:*) "$0" 7 leave; exit 3 ;; esac
  exec "$0" 1 stay' "$W"
expect_rc 0 "a failure the job recovered from"
for w in 0:0:0 1:0:1 2:0:2; do
  r=${w%%:*} id=127.0.0.$(( ${w%%:*} + 1 )):${w#*:}
  expect_in "$TMP/out" "^\[$id\]<stdout>: joined epoch=0 rank=$r size=3 elastic=1 hosts_updated=0$"
  expect_in "$TMP/out" "^\[$id\]<stdout>: sum=9$"
done
for r in 0 1; do
  id=127.0.0.$((r + 1)):0:$r
  expect_in "$TMP/out" "^\[$id\]<stdout>: joined epoch=1 rank=$r size=2 elastic=1 hosts_updated=0$"
  expect_in "$TMP/out" "^\[$id\]<stdout>: sum=2$"
  expect_in "$TMP/out" "^\[$id\]<stdout>: last reset: status 0: $"
done
expect_in "$TMP/err" '^hvdrun: worker 127\.0\.0\.3:0:2 exited with code 3; host 127\.0\.0\.3 is left out for good$'
expect_no_survivors

# Repeated failures on one host: 6 workers; 4 kill themselves one epoch after
# another, the fifth leaves while its own reset is under way (a failure
# during a reset). The last worker, rank 0 throughout, checks every sum
# against the size and finishes alone.
run_hvdrun --min-np 1 -np 6 --elastic-timeout 20 --grace-period 2 -H 127.0.0.1:6 --tag-output \
  "$W" 8 churn
expect_rc 0 "five failures the job recovered from"
expect_in "$TMP/out" '^\[127\.0\.0\.1:0:0\]<stdout>: done epoch=[56] size=1 resets=[5-9]$'
[ "$(grep -c '<stdout>: done ' "$TMP/out")" = 1 ] || fail "only slot 0 finishes: $(grep 'done ' "$TMP/out")"
for s in 1 2 3 4; do
  expect_in "$TMP/err" "^hvdrun: worker 127\.0\.0\.1:$s:$s killed by signal 9 \(SIGKILL\)"
done
expect_in "$TMP/err" '^hvdrun: worker 127\.0\.0\.1:5:5 exited with code 5'
expect_faster 45 "five failures"
expect_no_survivors

# Too few workers left: after the elastic timeout hvdrun answers the
# survivor's join with `exit`, which its reset reports.
run_hvdrun --min-np 2 --elastic-timeout 2 --grace-period 2 -H 127.0.0.1,127.0.0.2 --tag-output sh -c '
  case $HVD_ELASTIC_WORKER in 127.0.0.2:*) "$0" 7 leave; exit 3 ;; esac
  exec "$0" 1 stay' "$W"
expect_rc 1 "fewer workers than --min-np"
expect_in "$TMP/out" '^\[127\.0\.0\.1:0:0\]<stdout>: reset: status -14: .*the launcher ends this worker \(127\.0\.0\.1:0:0\): the job ends: 1 worker\(s\) remain, fewer than --min-np 2, and no more came within the elastic timeout \(2 s\)'
expect_in "$TMP/err" '^hvdrun: error: 1 worker\(s\) remain, fewer than --min-np 2'
expect_faster 15 "ending below --min-np"
expect_no_survivors

echo PASS
