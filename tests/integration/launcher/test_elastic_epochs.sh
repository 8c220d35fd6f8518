# Elastic jobs (docs/elastic.md), with stand-in workers (elastic_worker.sh):
# epoch 0, epochs after failures with the ranks reassigned as specified, the
# workers' environment, failures nothing recovered from, and SIGINT.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/elastic_lib.sh"

# --- epoch 0: -np 3 of 4 slots, ranks in host list order and slot ------------
FAKE_PLAN='*@0=done' run_hvdrun --min-np 2 -np 3 -H 127.0.0.1,127.0.0.2:2,127.0.0.3 \
  bash "$WORKER" "$MARK"
expect_rc 0 "epoch 0, every worker done"
expect_joins 'W 127.0.0.1:0:0 join 0: ok 0 0 3 0' \
             'W 127.0.0.2:0:1 join 0: ok 0 1 3 0' \
             'W 127.0.0.2:1:2 join 0: ok 0 2 3 0'
[ "$(grep -c ' done$' "$TMP/out")" = 3 ] || fail "not every worker finished"
[ ! -s "$TMP/err" ] || fail "unexpected messages on stderr"
expect_no_survivors

# --- failures: epochs 1 and 2 with the survivors, in their previous order ------
FAKE_PLAN='127.0.0.2:0@0=exit3 127.0.0.1:0@1=exit4 *@2=done' run_hvdrun -v --min-np 2 \
  -np 4 -H 127.0.0.1,127.0.0.2,127.0.0.3,127.0.0.4 bash "$WORKER" "$MARK"
expect_rc 0 "failures the job recovered from"
expect_joins 'W 127.0.0.1:0:0 join 0: ok 0 0 4 0' \
             'W 127.0.0.2:0:1 join 0: ok 0 1 4 0' \
             'W 127.0.0.3:0:2 join 0: ok 0 2 4 0' \
             'W 127.0.0.4:0:3 join 0: ok 0 3 4 0' \
             'W 127.0.0.1:0:0 join 1: ok 1 0 3 0' \
             'W 127.0.0.3:0:2 join 1: ok 1 1 3 0' \
             'W 127.0.0.4:0:3 join 1: ok 1 2 3 0' \
             'W 127.0.0.3:0:2 join 2: ok 2 0 2 0' \
             'W 127.0.0.4:0:3 join 2: ok 2 1 2 0'
expect_in "$TMP/err" '^hvdrun: worker 127\.0\.0\.2:0:1 exited with code 3; host 127\.0\.0\.2 is left out for good$'
expect_in "$TMP/err" '^hvdrun: worker 127\.0\.0\.1:0:0 exited with code 4; host 127\.0\.0\.1 is left out for good$'
expect_in "$TMP/err" '^hvdrun: epoch 0 formed: size 4, hosts_version 0: 0=127\.0\.0\.1:0:0 1=127\.0\.0\.2:0:1 2=127\.0\.0\.3:0:2 3=127\.0\.0\.4:0:3$'
expect_in "$TMP/err" '^hvdrun: epoch 2 formed: size 2, hosts_version 0: 0=127\.0\.0\.3:0:2 1=127\.0\.0\.4:0:3$'
expect_not_in "$TMP/err" 'error'
expect_no_survivors

# --- one host: a failed worker's neighbours go on (the host gets no new ones) --
FAKE_PLAN='127.0.0.1:1@0=exit3 *@1=done' run_hvdrun -v --min-np 2 -np 3 -H 127.0.0.1:3 \
  bash "$WORKER" "$MARK"
expect_rc 0 "a failure on a host with other workers"
expect_joins 'W 127.0.0.1:0:0 join 0: ok 0 0 3 0' \
             'W 127.0.0.1:1:1 join 0: ok 0 1 3 0' \
             'W 127.0.0.1:2:2 join 0: ok 0 2 3 0' \
             'W 127.0.0.1:0:0 join 1: ok 1 0 2 0' \
             'W 127.0.0.1:2:2 join 1: ok 1 1 2 0'
expect_not_in "$TMP/err" 'stopping worker'
expect_no_survivors

# --- a blacklisted host comes back after its cooldown, and gets a new worker --
FAKE_PLAN='127.0.0.2:0@0=exit3 *@2=done' run_hvdrun -v --min-np 2 -np 3 --blacklist-cooldown-range 3 3 \
  -H 127.0.0.1,127.0.0.2,127.0.0.3 bash "$WORKER" "$MARK"
expect_rc 0 "a host back from the blacklist"
expect_joins 'W 127.0.0.1:0:0 join 0: ok 0 0 3 0' \
             'W 127.0.0.2:0:1 join 0: ok 0 1 3 0' \
             'W 127.0.0.3:0:2 join 0: ok 0 2 3 0' \
             'W 127.0.0.1:0:0 join 1: ok 1 0 2 0' \
             'W 127.0.0.3:0:2 join 1: ok 1 1 2 0' \
             'W 127.0.0.1:0:0 join 2: ok 2 0 3 1' \
             'W 127.0.0.3:0:2 join 2: ok 2 1 3 1' \
             'W 127.0.0.2:0:3 join 0: ok 2 2 3 1'
expect_in "$TMP/err" '^hvdrun: worker 127\.0\.0\.2:0:1 exited with code 3; host 127\.0\.0\.2 is left out for 3\.0 s$'
expect_in "$TMP/err" '^hvdrun: host 127\.0\.0\.2: its blacklist cooldown is over$'
expect_no_survivors

# --- the environment: no rank variables, even inherited ones ------------------
# HVD_ELASTIC_TIMEOUT: the elastic timeout (7.5) + the start timeout (60) + 5,
# so that hvdrun's answer always comes before a worker gives up.
HVD_RANK=7 HVD_SIZE=9 RANK=7 HOROVOD_RANK=7 run_hvdrun --min-np 2 --elastic-timeout 7.5 \
  -H 127.0.0.1,127.0.0.2 sh -c 'echo "E $HVD_ELASTIC_WORKER ${HVD_RANK-unset} ${HVD_SIZE-unset} ${RANK-unset} ${HOROVOD_RANK-unset} $HVD_ELASTIC $HVD_ELASTIC_TIMEOUT $HVD_HOSTNAME ${#HVD_SECRET} ${HVD_RENDEZVOUS_ADDR%:*}"' "$MARK"
expect_rc 0 "workers that never join and exit 0"
[ "$(grep '^E ' "$TMP/out" | sort)" = "E 127.0.0.1:0:0 unset unset unset unset 1 72.5 127.0.0.1 64 127.0.0.1
E 127.0.0.2:0:1 unset unset unset unset 1 72.5 127.0.0.2 64 127.0.0.1" ] || fail "worker environment: $(cat "$TMP/out")"

# Without -H: localhost, --max-np slots; -np workers start.
run_hvdrun --min-np 1 -np 2 --max-np 3 sh -c 'echo "E $HVD_ELASTIC_WORKER"' "$MARK"
expect_rc 0 "localhost"
[ "$(grep '^E ' "$TMP/out" | sort | tr '\n' ' ')" = "E localhost:0:0 E localhost:1:1 " ] || fail "localhost workers: $(cat "$TMP/out")"

# --- a failure nothing recovered from fails the job, naming it ----------------
run_hvdrun --min-np 1 -np 2 -H 127.0.0.1,127.0.0.2 sh -c '
  case $HVD_ELASTIC_WORKER in 127.0.0.2:*) sleep 0.3; exit 3 ;; esac
  sleep 1' "$MARK"
expect_rc 3 "an unrecovered failure"
expect_in "$TMP/err" '^hvdrun: worker 127\.0\.0\.2:0:1 exited with code 3; host 127\.0\.0\.2 is left out for good$'
expect_in "$TMP/err" '^hvdrun: error: the job failed: worker 127\.0\.0\.2:0:1 exited with code 3$'

# Every worker failing: the job ends at once with the first failure's code.
run_hvdrun --min-np 1 -np 2 -H 127.0.0.1,127.0.0.2 --elastic-timeout 30 sh -c '
  case $HVD_ELASTIC_WORKER in 127.0.0.2:*) sleep 0.5; exit 5 ;; esac
  exit 4' "$MARK"
expect_rc 4 "every worker failing"
expect_faster 5 "ending once no worker is left"
expect_in "$TMP/err" '^hvdrun: error: the job failed: worker 127\.0\.0\.1:0:0 exited with code 4; worker 127\.0\.0\.2:0:1 exited with code 5$'

# --- SIGINT stops every worker --------------------------------------------------
start_hvdrun --min-np 2 -H 127.0.0.1,127.0.0.2 --grace-period 2 bash "$WORKER" "$MARK"
wait_for "$TMP/out" 'join 0: ok 0 1 2 0' 10
kill -INT "$HVDRUN_PID"
finish_hvdrun 10
expect_rc 130 "SIGINT"
expect_in "$TMP/err" '^hvdrun: received SIGINT, stopping the job$'
expect_no_survivors

# --- usage errors ------------------------------------------------------------------
for args in "--min-np 3 -np 2|-np 2 is below --min-np 3" \
            "--min-np 2 --max-np 1|--max-np 1 is below --min-np 2" \
            "--min-np 1 -np 3 --max-np 2|-np 3 is above --max-np 2" \
            "--min-np 1 -np 3 -H a:2|-np 3 is larger than the 2 slots" \
            "--max-np 2|an elastic job needs -np or --min-np" \
            "--host-discovery-script x -H a -np 1|cannot be used together" \
            "--min-np 1 --mpi|cannot use the mpi transport" \
            "--min-np 1 --blacklist-cooldown-range 5 1|bad --blacklist-cooldown-range '5 1'" \
            "--min-np 1 --blacklist-cooldown-range=5|needs two values" \
            "--min-np 1 --blacklist-cooldown-range 5 true|bad --blacklist-cooldown-range '5 true'" \
            "--min-np 1 --elastic-timeout 0|bad --elastic-timeout '0'" \
            "-np 1 --blacklist-cooldown-range 1 2|--blacklist-cooldown-range is for elastic jobs" \
            "-np 1 --slots 2|--slots is for elastic jobs"; do
  # shellcheck disable=SC2086
  run_hvdrun ${args%%|*} true
  expect_rc 2 "hvdrun ${args%%|*}"
  grep -qF -- "${args#*|}" "$TMP/err" || fail "hvdrun ${args%%|*}: no '${args#*|}' in: $(cat "$TMP/err")"
done

echo PASS
