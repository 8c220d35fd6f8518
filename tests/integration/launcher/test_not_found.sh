# A command that cannot be executed fails its rank with 127 and a clear
# message, quickly, and stops the job.
. "$(dirname "$0")/lib.sh"

# Not found anywhere: hvdrun itself cannot execute it.
run_hvdrun -np 2 ./no-such-program-"$MARK" arg
expect_rc 127 "a program that does not exist"
expect_faster 5 "failing to execute"
expect_in "$TMP/err" "^hvdrun: rank 0 \(host localhost\): cannot execute './no-such-program-$MARK': No such file or directory$"
expect_in "$TMP/err" '^hvdrun: rank 0 \(host localhost\) exited with code 127'

# Not executable.
printf 'echo hi\n' >"$TMP/script"
chmod 644 "$TMP/script"
run_hvdrun -np 1 "$TMP/script"
expect_rc 127 "a file that is not executable"
expect_in "$TMP/err" "cannot execute '$TMP/script': Permission denied"

# Not found on one rank only (its shell cannot find it); the others sleep.
run_hvdrun -np 3 sh -c '
  if [ "$HVD_RANK" = 1 ]; then exec no-such-command-"$0"; fi
  exec "$1" sleep 60 "$0"' "$MARK" "$RANK_HELPER"
expect_rc 127 "a command missing on rank 1"
expect_faster 8 "failing on rank 1"
expect_in "$TMP/err" '^hvdrun: rank 1 \(host localhost\) exited with code 127 \(command not found\?\)$'
expect_in "$TMP/err" 'not found'
expect_no_survivors

echo PASS
