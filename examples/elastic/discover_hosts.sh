#!/bin/sh
# Host discovery for hvdrun --host-discovery-script: prints the job's hosts,
# one "host:slots" line each. Here they are the lines of a file, so that hosts
# can be added or removed while the job runs: $HVD_HOSTS_FILE, or hosts.txt
# next to this script.
exec cat "${HVD_HOSTS_FILE:-$(dirname "$0")/hosts.txt}"
