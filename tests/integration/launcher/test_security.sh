# hvdrun's rendezvous store keeps out clients without the job's secret and
# survives garbage and huge length prefixes; the job still completes.
. "$(dirname "$0")/lib.sh"

run_hvdrun -np 2 --start-timeout 30 sh -c '
  if [ "$HVD_RANK" = 0 ]; then exec "$1" security "$0"; fi
  exec "$1" connect --sleep 1 "$0"' "$MARK" "$RANK_HELPER"
expect_rc 0 "the job after the attacks"
for what in "wrong secret: refused" "bad MAC: dropped" "huge length: dropped" \
            "length over kMaxFrame: dropped" "garbage: dropped" "store still serves: yes" "ok"; do
  grep -qxF "security: $what" "$TMP/out" || fail "missing 'security: $what'"
done
[ "$(grep -cxF 'security: wrong secret: refused' "$TMP/out")" = 2 ] || fail "a wrong secret was not refused"

# The secret is fresh for every job.
run_hvdrun -np 1 sh -c 'echo "$HVD_SECRET"'
s1=$(cat "$TMP/out")
run_hvdrun -np 1 sh -c 'echo "$HVD_SECRET"'
s2=$(cat "$TMP/out")
[ "${#s1}" = 64 ] && [ "$s1" != "$s2" ] || fail "secrets are not fresh 64-hex-digit values: $s1 / $s2"

echo PASS
