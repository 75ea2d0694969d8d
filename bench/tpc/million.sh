#!/usr/bin/env bash
# bench/tpc/million.sh [N] -- the article's million threads, unmodified, in one sitting.
#
# Each round runs, one after the other on the same machine:
#   weft-bench sleep-tasks -n N        N weft vthreads that each sleep 1 s (the reference)
#   weft-run pthread_sleep -n N        the plain pthreads program, every thread a vthread
#   pthread_sleep -n N                 the same program natively (stops where the kernel does)
# and prints their lines, then the ratio weft-run / sleep-tasks of that round; at the end
# the median ratio over the rounds.  Lines, key=value:
#   experiment=million round=R sleep_tasks_wall_s=A weft_run_wall_s=B ratio=B/A
#     weft_run_created=C weft_run_rss_per_thread_b=P native_created=K native_stopped_by=E
#     native_rss_per_thread_b=Q
#   experiment=million summary rounds=R median_ratio=M
#
#   N        threads (default 1000000)
# Environment:
#   ROUNDS=3           rounds
#   NATIVE=1           0: leave the native run out (it costs a minute where pid_max is high)
#   BUILD              the build directory (default build-release beside bench/)
# The VM this was written on charges a fresh page 2.6-3.3 us at its first use (the host
# takes back memory the guest freed a few seconds earlier); rounds run back to back, so
# each program pays for the memory it uses as the other does.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
N=${1:-1000000}
ROUNDS=${ROUNDS:-3}
NATIVE=${NATIVE:-1}
build=${BUILD:-$repo/build-release}
bench=$build/apps/bench/weft-bench
run=$build/apps/run/weft-run
prog=$build/pthread_sleep
for f in "$bench" "$run" "$prog"; do
  [ -x "$f" ] || { echo "million.sh: $f is missing (build the weft-bench, weft-run and pthread_sleep targets)" >&2; exit 2; }
done

key() { # key NAME LINE -> the value of NAME= in LINE
  sed -n "s/.*[[:space:]]$1=\([^[:space:]]*\).*/\1/p; s/^$1=\([^[:space:]]*\).*/\1/p" <<<"$2" | head -1
}

ratios=()
for r in $(seq 1 "$ROUNDS"); do
  st=$("$bench" sleep-tasks -n "$N" 2>/dev/null | grep '^experiment=sleep-tasks')
  wr=$(timeout 600 "$run" "$prog" -n "$N")
  a=$(key wall_s "$st")
  b=$(key wall_s "$wr")
  ratio=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", b / a }')
  ratios+=("$ratio")
  nat="native_created=- native_stopped_by=- native_rss_per_thread_b=-"
  if [ "$NATIVE" = 1 ]; then
    nl=$(timeout 600 "$prog" -n "$N" || true)
    nat="native_created=$(key created "$nl") native_stopped_by=$(key stopped_by "$nl") native_rss_per_thread_b=$(key rss_per_thread_b "$nl")"
  fi
  echo "experiment=million round=$r n=$N sleep_tasks_wall_s=$a weft_run_wall_s=$b ratio=$ratio" \
       "weft_run_created=$(key created "$wr") weft_run_joined=$(key joined "$wr")" \
       "weft_run_peak_rss_kib=$(key peak_rss_kib "$wr") weft_run_rss_per_thread_b=$(key rss_per_thread_b "$wr") $nat"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
echo "experiment=million summary n=$N rounds=$ROUNDS median_ratio=$median"
