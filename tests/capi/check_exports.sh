#!/bin/sh
# Usage: check_exports.sh NM LIBHVD_SO HVD_H
# Fails if libhvd.so exports any symbol that is not hvd_*, or if a function
# declared in hvd.h is not exported.
set -u
nm_tool=$1
lib=$2
header=$3

exports=$("$nm_tool" -D --defined-only "$lib") || { echo "FAIL: $nm_tool -D failed on $lib"; exit 1; }
# Third column is the name; strip symbol versions (name@VER, name@@VER).
names=$(printf '%s\n' "$exports" | awk 'NF >= 3 { sub(/@.*/, "", $3); print $3 }' | sort -u)
if [ -z "$names" ]; then
  echo "FAIL: $lib exports no symbols at all"
  exit 1
fi

status=0
foreign=$(printf '%s\n' "$names" | grep -v '^hvd_' || true)
if [ -n "$foreign" ]; then
  echo "FAIL: $lib exports symbols outside the hvd_ namespace:"
  printf '  %s\n' $foreign
  status=1
fi

declared=$(sed -n 's/^HVD_API[^(]*[ *]\(hvd_[a-z0-9_]*\)(.*/\1/p' "$header" | sort -u)
ndeclared=$(printf '%s\n' "$declared" | grep -c . || true)
if [ "$ndeclared" -lt 30 ]; then
  echo "FAIL: found only $ndeclared HVD_API declarations in $header (parser out of date?)"
  status=1
fi
for f in $declared; do
  if ! printf '%s\n' "$names" | grep -qx "$f"; then
    echo "FAIL: $f is declared in hvd.h but not exported by $lib"
    status=1
  fi
done
extra=$(printf '%s\n' "$names" | grep '^hvd_' | while read -r s; do
  printf '%s\n' "$declared" | grep -qx "$s" || echo "$s"; done)
if [ -n "$extra" ]; then
  echo "note: hvd_* symbols exported but not declared in hvd.h:"
  printf '  %s\n' $extra
fi

nexported=$(printf '%s\n' "$names" | grep -c '^hvd_' || true)
if [ "$status" -eq 0 ]; then
  echo "OK: $nexported exported symbols, all hvd_*; all $ndeclared functions of hvd.h exported"
fi
exit $status
