#!/usr/bin/env bash
# bench/mixed.sh [SECONDS] -- HTTP latency while a CPU-bound job runs in the same
# process (issue 12, "mixed run"): weft-httpd with simulated I/O (--delay-ms) under
# C keep-alive connections from weft-load, three times in one sitting:
#   cpu=none     no CPU job
#   cpu=shared   --cpu-job shared: the job (weft_parallel_reduce) in the default carrier group,
#                beside the connections' vthreads
#   cpu=group    --cpu-job group: the job in a carrier group of its own (1 carrier,
#                the compute option)
# One line per run (`weft-bench parallel` runs this script and reads them):
#   experiment=parallel workload=mixed peer=weft cpu=none|shared|group carriers=K
#   delay_ms=D job_rounds=R concurrency=C ... rps=... p50_ms=... p99_ms=... ...
# (after job_rounds: weft-load's machine-readable line, without its experiment= and
# peer=); job_rounds is the CPU job's progress (rounds of 2^22 sqrt) as the server
# printed it on exit, 0 for cpu=none.
# The acceptance figure: the group run's p99_ms at most half the shared run's.
#
#   SECONDS     each run's length (default 20)
# Environment:
#   C=300            connections
#   DELAY_MS=10      the server's simulated I/O per request
#   CARRIERS=2       the server's default carriers (the group adds one carrier)
#   JOB_VTHREADS=    vthreads driving the job's loops (default 1)
#   LOAD_CARRIERS=1  weft-load's carriers
#   WEFT_HTTPD, WEFT_LOAD   the binaries (default build-release/apps/...)
# The monitor's hog lines (the shared job holds its carriers between yields that find
# nothing else queued) are switched off (WEFT_MONITOR=off): they would only fill stderr.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
T=${1:-20}
C=${C:-300}
DELAY_MS=${DELAY_MS:-10}
CARRIERS=${CARRIERS:-2}
LOAD_CARRIERS=${LOAD_CARRIERS:-1}
httpd=${WEFT_HTTPD:-$repo/build-release/apps/httpd/weft-httpd}
load=${WEFT_LOAD:-$repo/build-release/apps/load/weft-load}
tmp=$(mktemp -d /tmp/weft-mixed.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
ulimit -n "$(ulimit -Hn)"

for mode in none shared group; do
  args=(--port 0 --root "$repo/www" --carriers "$CARRIERS" --delay-ms "$DELAY_MS" --quiet)
  if [ "$mode" != none ]; then
    args+=(--cpu-job "$mode")
    [ -n "${JOB_VTHREADS:-}" ] && args+=(--cpu-job-vthreads "$JOB_VTHREADS")
  fi
  WEFT_MONITOR=off "$httpd" "${args[@]}" >"$tmp/out" 2>"$tmp/err" &
  pid=$!
  for _ in $(seq 100); do grep -q listening "$tmp/out" && break; sleep 0.05; done
  port=$(sed -n 's/.*:\([0-9]*\)$/\1/p' "$tmp/out")
  [ -n "$port" ] || { echo "weft-httpd did not start:" >&2; cat "$tmp/err" >&2; exit 1; }
  line=$("$load" -c "$C" -k -t "$T" --carriers "$LOAD_CARRIERS" -q "http://127.0.0.1:$port/index.html" || true)
  kill -TERM "$pid"
  st=0
  wait "$pid" || st=$?
  case $line in
    experiment=load*) ;;
    *) echo "mixed.sh: weft-load gave no result line (cpu=$mode)" >&2; cat "$tmp/err" >&2; exit 1 ;;
  esac
  [ "$st" = 0 ] || { echo "mixed.sh: weft-httpd (cpu=$mode) ended with status $st" >&2; cat "$tmp/err" >&2; exit 1; }
  rounds=$(sed -n 's/.*cpu job ([a-z]*): \([0-9]*\) rounds.*/\1/p' "$tmp/err")
  line=${line#experiment=load }
  line=${line#peer=weft-load }
  echo "experiment=parallel workload=mixed peer=weft cpu=$mode carriers=$CARRIERS delay_ms=$DELAY_MS job_rounds=${rounds:-0} $line"
done
