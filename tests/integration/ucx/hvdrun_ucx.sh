#!/usr/bin/env bash
# hvdrun with --transport ucx, for test scripts that take an hvdrun program
# (the core's fault scripts). TEST_HVDRUN_REAL names the real hvdrun.
exec "${TEST_HVDRUN_REAL:?TEST_HVDRUN_REAL must name hvdrun}" --transport ucx "$@"
