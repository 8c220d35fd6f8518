# Elastic jobs: a worker that does not join again is stopped after the start
# timeout (sleeping, or SIGSTOPped); too few workers end the job after the
# elastic timeout; --reset-limit. No process is left behind.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/elastic_lib.sh"

# --- a worker that never asks to join again: stopped after the start timeout --
for how in hang stop; do
  FAKE_PLAN="127.0.0.1:0@0=exit3 127.0.0.2:0@0=$how *@1=done" run_hvdrun --min-np 2 -np 4 \
    --start-timeout 3 --grace-period 1 -H 127.0.0.1,127.0.0.2,127.0.0.3,127.0.0.4 \
    bash "$WORKER" "$MARK"
  expect_rc 0 "a worker that does not join again ($how)"
  expect_joins 'W 127.0.0.1:0:0 join 0: ok 0 0 4 0' \
               'W 127.0.0.2:0:1 join 0: ok 0 1 4 0' \
               'W 127.0.0.3:0:2 join 0: ok 0 2 4 0' \
               'W 127.0.0.4:0:3 join 0: ok 0 3 4 0' \
               'W 127.0.0.3:0:2 join 1: ok 1 0 2 0' \
               'W 127.0.0.4:0:3 join 1: ok 1 1 2 0'
  expect_in "$TMP/out" "^W 127\.0\.0\.2:0:1 ${how}s$"
  expect_in "$TMP/err" '^hvdrun: worker 127\.0\.0\.2:0:1 did not ask to join epoch 1 within the start timeout \(3 s\): stopping it$'
  less_than 3 "$ELAPSED" || fail "the worker was dropped after ${ELAPSED}s, before the 3 s start timeout"
  expect_faster 12 "dropping a worker after a 3 s start timeout"
  expect_no_survivors
done

# Epoch 0 too: a worker that never joins is stopped, the others go on.
FAKE_PLAN='*@0=done' run_hvdrun --min-np 1 -np 2 --start-timeout 2 -H 127.0.0.1,127.0.0.2 sh -c '
  case $HVD_ELASTIC_WORKER in 127.0.0.2:*) exec "$RANK_HELPER" sleep 30 "$0" ;; esac
  exec bash "$1" "$0"' "$MARK" "$WORKER"
expect_rc 0 "a worker that never joins"
expect_joins 'W 127.0.0.1:0:0 join 0: ok 0 0 1 0'
expect_in "$TMP/err" '^hvdrun: worker 127\.0\.0\.2:0:1 did not ask to join epoch 0 within the start timeout \(2 s\): stopping it$'
expect_no_survivors

# A worker on a remote host whose ssh login never completes (a stand-in ssh
# client that hangs for 127.0.0.2 instead of running the remote script, as
# ssh does when authentication hangs; for the other host it runs the script
# here, in a session of its own like a remote host's): the login is named,
# not the worker.
hanging_ssh "$TMP/fake_ssh" "'HVD_ELASTIC_WORKER=127.0.0.2:"
FAKE_PLAN='*@0=done' HVD_LAUNCHER_FORCE_SSH=1 HVD_LAUNCHER_SSH="$TMP/fake_ssh" run_hvdrun --min-np 1 -np 2 \
  --start-timeout 2 -H 127.0.0.1,127.0.0.2 bash "$WORKER" "$MARK"
expect_rc 0 "a remote worker whose login hangs"
expect_joins 'W 127.0.0.1:0:0 join 0: ok 0 0 1 0'
expect_in "$TMP/err" "^hvdrun: worker 127\.0\.0\.2:0:1: ssh to host 127\.0\.0\.2 did not complete the login \(authentication\) within 2 s: .*try 'ssh -v 127\.0\.0\.2 true': stopping it$"
expect_not_in "$TMP/err" 'did not ask to join'
expect_no_survivors

# ... and when no epoch follows, the job fails, naming it.
run_hvdrun --min-np 1 --start-timeout 1 --grace-period 0.5 "$RANK_HELPER" sleep 30 "$MARK"
expect_rc 1 "the only worker never joins"
expect_in "$TMP/err" '^hvdrun: error: the job failed: worker localhost:0:0 did not ask to join epoch 0 within the start timeout \(1 s\)$'
expect_faster 5 "start timeout 1 s"
expect_no_survivors

# --- below --min-np: the job ends after the elastic timeout ---------------------
FAKE_PLAN='127.0.0.1:0@0=exit3' run_hvdrun --min-np 2 --elastic-timeout 3 --grace-period 2 \
  -H 127.0.0.1,127.0.0.2 bash "$WORKER" "$MARK"
expect_rc 1 "fewer workers than --min-np"
MSG='1 worker\(s\) remain, fewer than --min-np 2, and no more came within the elastic timeout \(3 s\)'
expect_in "$TMP/err" "^hvdrun: 1 worker\(s\), fewer than --min-np 2: waiting up to 3 s \(the elastic timeout\) for more$"
expect_in "$TMP/err" "^hvdrun: error: $MSG: ending the job$"
# The waiting worker is told why.
expect_in "$TMP/out" "^W 127\.0\.0\.2:0:1 join 1: exit the job ends: $MSG$"
expect_in "$TMP/out" "^W 127\.0\.0\.2:0:1 told: the job ends: $MSG$"
less_than 3 "$ELAPSED" || fail "ended after ${ELAPSED}s, before the 3 s elastic timeout"
expect_faster 9 "the elastic timeout of 3 s"
expect_no_survivors

# A worker still busy (not asking to join) is stopped with SIGTERM.
FAKE_PLAN='127.0.0.1:0@0=exit3 127.0.0.2:0@0=hang' run_hvdrun --min-np 3 -np 3 --elastic-timeout 2 \
  --start-timeout 30 --grace-period 1 -H 127.0.0.1,127.0.0.2,127.0.0.3 bash "$WORKER" "$MARK"
expect_rc 1 "below --min-np, one worker busy"
expect_in "$TMP/err" '^hvdrun: error: 2 worker\(s\) remain, fewer than --min-np 3, and no more came within the elastic timeout \(2 s\): ending the job$'
expect_in "$TMP/out" '^W 127\.0\.0\.3:0:2 told: the job ends: 2 worker'
expect_not_in "$TMP/out" '^W 127\.0\.0\.2:0:1 told'
expect_faster 8 "the elastic timeout of 2 s"
expect_no_survivors

# --- --reset-limit: the job ends at the reset past the limit ---------------------
FAKE_PLAN='127.0.0.1:0@0=exit3 127.0.0.2:0@1=exit4 *@2=done' run_hvdrun --min-np 1 -np 4 \
  --reset-limit 1 -H 127.0.0.1,127.0.0.2,127.0.0.3,127.0.0.4 bash "$WORKER" "$MARK"
expect_rc 1 "--reset-limit 1"
expect_joins 'W 127.0.0.1:0:0 join 0: ok 0 0 4 0' \
             'W 127.0.0.2:0:1 join 0: ok 0 1 4 0' \
             'W 127.0.0.3:0:2 join 0: ok 0 2 4 0' \
             'W 127.0.0.4:0:3 join 0: ok 0 3 4 0' \
             'W 127.0.0.2:0:1 join 1: ok 1 0 3 0' \
             'W 127.0.0.3:0:2 join 1: ok 1 1 3 0' \
             'W 127.0.0.4:0:3 join 1: ok 1 2 3 0' \
             'W 127.0.0.3:0:2 join 2: exit the job ends: the job was reset 1 time(s), the --reset-limit' \
             'W 127.0.0.4:0:3 join 2: exit the job ends: the job was reset 1 time(s), the --reset-limit'
expect_in "$TMP/err" '^hvdrun: error: the job was reset 1 time\(s\), the --reset-limit: ending the job$'
expect_no_survivors

# --reset-limit 2 lets the same job finish.
FAKE_PLAN='127.0.0.1:0@0=exit3 127.0.0.2:0@1=exit4 *@2=done' run_hvdrun --min-np 1 -np 4 \
  --reset-limit 2 -H 127.0.0.1,127.0.0.2,127.0.0.3,127.0.0.4 bash "$WORKER" "$MARK"
expect_rc 0 "--reset-limit 2"
expect_in "$TMP/out" '^W 127\.0\.0\.4:0:3 join 2: ok 2 1 2 0$'
expect_no_survivors

echo PASS
