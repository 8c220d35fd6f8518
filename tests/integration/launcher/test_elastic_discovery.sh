# Elastic jobs with a host discovery script: hosts added get workers and
# bump elastic/hosts_version (the workers then join again, new ones ranked
# after the others), hosts removed lose theirs; a failing, malformed or
# hanging script keeps the last good host list.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/elastic_lib.sh"

# The script prints $TMP/hosts, or does what $TMP/mode says (hang: once).
cat >"$TMP/discover.sh" <<SCRIPT
case "\$(cat "$TMP/mode" 2>/dev/null)" in
  fail) echo "discovery broke" >&2; exit 3 ;;
  hang) rm -f "$TMP/mode"; exec "$RANK_HELPER" sleep 30 "$MARK" ;;  # once
esac
cat "$TMP/hosts"
SCRIPT
# The list changes by rename, never in place: the script reads it at any
# moment, and a half-written file would be a list of its own.
set_hosts() { printf "$1" >"$TMP/hosts.new" && mv -f "$TMP/hosts.new" "$TMP/hosts"; }
set_hosts '127.0.0.2:1\n127.0.0.3  # a comment\n'
export FAKE_FINISH="$TMP/finish"

FAKE_PLAN='*@3=done' start_hvdrun -v --min-np 2 --start-timeout 20 \
  --host-discovery-script "sh $TMP/discover.sh" bash "$WORKER" "$MARK"
wait_for "$TMP/err" '^hvdrun: epoch 0 formed: size 2, hosts_version 0: 0=127\.0\.0\.2:0:0 1=127\.0\.0\.3:0:1$' 15

# A host added, first in the list: hosts_version 1, a worker on it, ranked last.
set_hosts '127.0.0.1:1\n127.0.0.2:1\n127.0.0.3:1\n'
wait_for "$TMP/err" '^hvdrun: epoch 1 formed: size 3, hosts_version 1: 0=127\.0\.0\.2:0:0 1=127\.0\.0\.3:0:1 2=127\.0\.0\.1:0:2$' 15
expect_in "$TMP/out" '^W 127\.0\.0\.2:0:0 hosts updated \(1\)$'

# Bad output, a failure, a hang: warnings; the list stands (nobody is stopped).
set_hosts '127.0.0.1:1\nnot a host line\n'
wait_for "$TMP/err" "^hvdrun: warning: host discovery script: bad output: line 2 'not a host line': one host:slots a line expected; keeping the last host list \(127\.0\.0\.1:1, 127\.0\.0\.2:1, 127\.0\.0\.3:1\)$" 5
set_hosts '127.0.0.1:1\n127.0.0.1:2\n'
wait_for "$TMP/err" "bad output: line 2 '127\.0\.0\.1:2': host 127\.0\.0\.1 is listed twice" 5
echo fail >"$TMP/mode"
wait_for "$TMP/err" '^hvdrun: warning: host discovery script: exited with code 3; keeping the last host list' 5
expect_in "$TMP/err" '^hvdrun: host discovery script: discovery broke$'
echo hang >"$TMP/mode"
wait_for "$TMP/err" '^hvdrun: warning: host discovery script: did not finish within 10 s: killed; keeping the last host list' 15
# A host removed: its worker is stopped; the others form epoch 2 without it.
set_hosts '127.0.0.1:1\n127.0.0.2:1\n'
wait_for "$TMP/err" '^hvdrun: host discovery script: works again$' 5
wait_for "$TMP/err" '^hvdrun: stopping worker 127\.0\.0\.3:0:1: its host 127\.0\.0\.3 was removed$' 5
wait_for "$TMP/err" '^hvdrun: epoch 2 formed: size 2, hosts_version 2: 0=127\.0\.0\.2:0:0 1=127\.0\.0\.1:0:2$' 15
expect_not_in "$TMP/err" 'epoch [3-9]|left out'

# Two slots more on a host: two workers, epoch 3, and then every worker done.
set_hosts '127.0.0.1:1\n127.0.0.2:3\n'
finish_hvdrun 20
expect_rc 0 "a job through host changes"
expect_in "$TMP/err" '^hvdrun: epoch 3 formed: size 4, hosts_version 3: 0=127\.0\.0\.2:0:0 1=127\.0\.0\.1:0:2 2=127\.0\.0\.2:1:3 3=127\.0\.0\.2:2:4$'
expect_joins 'W 127.0.0.2:0:0 join 0: ok 0 0 2 0' \
             'W 127.0.0.3:0:1 join 0: ok 0 1 2 0' \
             'W 127.0.0.2:0:0 join 1: ok 1 0 3 1' \
             'W 127.0.0.3:0:1 join 1: ok 1 1 3 1' \
             'W 127.0.0.1:0:2 join 0: ok 1 2 3 1' \
             'W 127.0.0.2:0:0 join 2: ok 2 0 2 2' \
             'W 127.0.0.1:0:2 join 1: ok 2 1 2 2' \
             'W 127.0.0.2:0:0 join 3: ok 3 0 4 3' \
             'W 127.0.0.1:0:2 join 2: ok 3 1 4 3' \
             'W 127.0.0.2:1:3 join 0: ok 3 2 4 3' \
             'W 127.0.0.2:2:4 join 0: ok 3 3 4 3'
[ "$(grep -c ' done$' "$TMP/out")" = 4 ] || fail "not every worker of epoch 3 finished"
expect_no_survivors

# --max-np caps the workers; --slots for lines without a count; the first
# list may come late (the script fails at first).
echo fail >"$TMP/mode"
set_hosts '127.0.0.1\n127.0.0.2\n'
( sleep 1.5; rm -f "$TMP/mode" ) &
FAKE_PLAN='*@0=done' run_hvdrun --min-np 3 --max-np 3 --slots 2 \
  --host-discovery-script "sh $TMP/discover.sh" bash "$WORKER" "$MARK"
expect_rc 0 "--max-np, --slots"
expect_joins 'W 127.0.0.1:0:0 join 0: ok 0 0 3 0' \
             'W 127.0.0.1:1:1 join 0: ok 0 1 3 0' \
             'W 127.0.0.2:0:2 join 0: ok 0 2 3 0'
expect_in "$TMP/err" 'warning: host discovery script: exited with code 3; keeping the last host list \(none yet\)'
expect_no_survivors

# No usable list within the elastic timeout: a clear error.
echo fail >"$TMP/mode"
run_hvdrun --min-np 1 --elastic-timeout 2 --host-discovery-script "sh $TMP/discover.sh" true
expect_rc 1 "no host list"
expect_in "$TMP/err" '^hvdrun: error: the host discovery script gave no host list within the elastic timeout \(2 s\)$'
expect_faster 6 "elastic timeout 2 s"
# A list with too few slots: the same after the elastic timeout.
rm "$TMP/mode"
set_hosts '127.0.0.1:1\n'
run_hvdrun --min-np 2 --elastic-timeout 2 --host-discovery-script "sh $TMP/discover.sh" bash "$WORKER" "$MARK"
expect_rc 1 "too few slots"
expect_in "$TMP/err" '^hvdrun: error: 1 worker\(s\) remain, fewer than --min-np 2, and no more came within the elastic timeout \(2 s\): ending the job$'
expect_in "$TMP/out" '^W 127\.0\.0\.1:0:0 told: the job ends: 1 worker'
expect_no_survivors

echo PASS
