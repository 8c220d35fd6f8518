#!/usr/bin/env bash
# Runs bench/mpi_allreduce_bench for 2 and 4 ranks on this host in three ways
# and prints, per rank count, a table of GB/s (bytes / time) and one of minor
# page faults per allreduce:
#   raw        MPI_Allreduce as Open MPI is installed
#   raw+tun    the same with glibc's malloc told never to mmap and never to
#              trim (GLIBC_TUNABLES), so Open MPI's temporaries keep their pages
#   hvd        hvd_allreduce over the MPI transport (public C API)
#   plugin     the transport's allreduce called directly (with --plugin)
# Each configuration runs REPEATS times, interleaved; a cell is the best of the
# runs' median iteration times (the machine this was written on is shared,
# and other work only ever makes a run slower).
#
# usage: bench/mpi_allreduce_table.sh BUILD_DIR [--repeats N] [--ranks "2 4"]
#        [--sizes 4K,...] [--plugin] [--nice N]
set -u
build=${1:?usage: $0 BUILD_DIR [--repeats N] [--ranks "2 4"] [--sizes LIST] [--plugin] [--nice N]}
shift
repeats=3
ranks="2 4"
sizes=4K,16K,64K,256K,1M,4M,16M,32M,64M,128M,256M
modes="raw raw+tun hvd"
nice=0
while [ $# -gt 0 ]; do
  case $1 in
    --repeats) repeats=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --plugin) modes="$modes plugin"; shift ;;
    --nice) nice=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
bench=$build/bin/mpi_allreduce_bench
[ -x "$bench" ] || { echo "$bench not built" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "mpirun not found" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tunables=GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967296
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT

for rep in $(seq "$repeats"); do
  for np in $ranks; do
    for mode in $modes; do
      extra=()
      prog=raw
      case $mode in
        raw+tun) extra=(-x "$tunables") ;;
        hvd) prog=hvd ;;
        plugin) prog=plugin ;;
      esac
      nice -n "$nice" mpirun --oversubscribe -np "$np" "${extra[@]}" "$bench" "$prog" --sizes "$sizes" 2>&1 |
        awk -v np="$np" -v mode="$mode" '/^  [0-9]/ { print np, mode, $1, $2, $7 }' >>"$raw"
    done
  done
done

awk -v modes="$modes" '
  { key = $1 SUBSEP $2 SUBSEP $3
    if (!(key in best) || $4 < best[key]) best[key] = $4
    if (!(key in faults) || $5 < faults[key]) faults[key] = $5
    nps[$1] = 1; sizes[$3] = 1; n[key]++ }
  END {
    nm = split(modes, m, " ")
    ns = 0; for (s in sizes) sz[++ns] = s + 0
    for (i = 1; i <= ns; i++) for (j = i + 1; j <= ns; j++) if (sz[j] < sz[i]) { t = sz[i]; sz[i] = sz[j]; sz[j] = t }
    for (np in nps) {
      printf "\n%d ranks, GB/s (best of the runs'"'"' median times)\n", np
      printf "| size |"; for (k = 1; k <= nm; k++) printf " %s |", m[k]; printf "\n"
      printf "|---|"; for (k = 1; k <= nm; k++) printf "---|"; printf "\n"
      for (i = 1; i <= ns; i++) {
        b = sz[i]
        label = b >= 1048576 ? sprintf("%d MiB", b / 1048576) : sprintf("%d KiB", b / 1024)
        printf "| %s |", label
        for (k = 1; k <= nm; k++) {
          key = np SUBSEP m[k] SUBSEP b
          if (!(key in best)) { printf " - |"; continue }
          gbs = b / (best[key] * 1e-3) / 1e9
          printf(gbs < 0.1 ? " %.3f |" : " %.2f |", gbs)
        }
        printf "\n"
      }
      printf "\n%d ranks, minor page faults per allreduce (rank with most, fewest over runs)\n", np
      printf "| size |"; for (k = 1; k <= nm; k++) printf " %s |", m[k]; printf "\n"
      printf "|---|"; for (k = 1; k <= nm; k++) printf "---|"; printf "\n"
      for (i = 1; i <= ns; i++) {
        b = sz[i]
        label = b >= 1048576 ? sprintf("%d MiB", b / 1048576) : sprintf("%d KiB", b / 1024)
        printf "| %s |", label
        for (k = 1; k <= nm; k++) {
          key = np SUBSEP m[k] SUBSEP b
          if (key in faults) printf " %d |", faults[key] + 0.5; else printf " - |"
        }
        printf "\n"
      }
    }
  }' "$raw"
