#!/usr/bin/env bash
# bench/compare.sh EXPERIMENT [weft-bench args...]
#
# Runs the peer programs that match a weft-bench experiment, then weft-bench
# itself, in the same sitting, and hands the peers' result lines to weft-bench
# (--peer-file) so that its table shows weft, the article and the peers side by
# side.  Every line (peers' and weft's) goes to stdout, ready to be copied
# into notes; "# ..." lines say what was run.
#
#   EXPERIMENT   peers run (with /work/shared/peers/runtime/run.sh)
#   threads      park-many go N, park-many java25-virtual N, park-many c-pthread N 60 64
#                (N = weft-bench's -n, default 1000000)
#   sleep-tasks  sleep-tasks go N, sleep-tasks java25-virtual N (N = -n, default 100000)
#   micro        switch boost-context, switch go-gosched, switch go-chan,
#                spawn-join go N, spawn-join java25-virtual N (N = -n, default 1000000),
#                and for pingpong-cross also switch c-pthread-futex 200000 nopin (two
#                pthreads waking each other across cores: the same kind of hand-off);
#                with --only, just the peers of the chosen benchmarks
#
# Environment:
#   PEERS="go java25-virtual"  run only these peers (names as in run.sh)
#   WEFT_PEERS                 the peers directory (default: ../../shared/peers
#                              from this script, i.e. /work/shared/peers)
#   WEFT_BENCH                 the weft-bench binary (default: build/apps/bench/weft-bench)
#   QUIET_WAIT_S               wait at most this long for a quiet machine (< 25% CPU
#                              busy) before each run (default 10; 0 = do not wait)
# Example:
#   WEFT_BENCH=build-helper/apps/bench/weft-bench bench/compare.sh micro --rounds 1000000
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
peers_dir=${WEFT_PEERS:-$here/../../shared/peers}
peers_dir=$(cd "$peers_dir" 2>/dev/null && pwd) || { echo "compare.sh: no peers directory ${WEFT_PEERS:-$here/../../shared/peers}" >&2; exit 2; }
run=$peers_dir/runtime/run.sh
bench=${WEFT_BENCH:-$repo/build/apps/bench/weft-bench}
quiet_wait=${QUIET_WAIT_S:-10}

usage() { sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[[ $# -ge 1 && $1 != -h && $1 != --help ]] || usage
exp=$1
shift

[[ -x $run ]] || { echo "compare.sh: no peer runner at $run (set WEFT_PEERS)" >&2; exit 2; }
[[ -x $bench ]] || { echo "compare.sh: no weft-bench at $bench (build it, or set WEFT_BENCH)" >&2; exit 2; }

# The weft-bench options that decide which peers run and with which size.
n="" only="" sleep_ms=""
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  a=${args[i]}
  case $a in
    -n) n=${args[i+1]:-} ;;
    -n*) n=${a#-n} ;;
    --only) only=${args[i+1]:-} ;;
    --only=*) only=${a#--only=} ;;
    --sleep-ms) sleep_ms=${args[i+1]:-} ;;
    --sleep-ms=*) sleep_ms=${a#--sleep-ms=} ;;
  esac
done

# Each job: "PEER_EXPERIMENT PEER [ARGS...]".
jobs=()
wants() { [[ -z $only || ,$only, == *,$1,* ]]; }
case $exp in
  threads)
    N=${n:-1000000}
    jobs=("park-many go $N" "park-many java25-virtual $N" "park-many c-pthread $N 60 64") ;;
  sleep-tasks)
    N=${n:-100000}
    if [[ -n $sleep_ms && $sleep_ms != 1000 ]]; then
      echo "compare.sh: note: the peers sleep 1000 ms per task, weft $sleep_ms ms; wall times will not compare" >&2
    fi
    jobs=("sleep-tasks go $N" "sleep-tasks java25-virtual $N") ;;
  micro)
    N=${n:-1000000}
    if wants switch; then jobs+=("switch boost-context" "switch go-gosched"); fi
    if wants switch || wants pingpong || wants pingpong-cross; then jobs+=("switch go-chan"); fi
    if wants pingpong-cross; then jobs+=("switch c-pthread-futex 200000 nopin"); fi
    if wants spawn-join; then jobs+=("spawn-join go $N" "spawn-join java25-virtual $N"); fi ;;
  *)
    echo "compare.sh: unknown experiment '$exp' (threads, sleep-tasks, micro)" >&2
    exit 2 ;;
esac

if [[ -n ${PEERS:-} ]]; then
  kept=()
  for j in "${jobs[@]}"; do
    read -r _ peer _ <<<"$j"
    if [[ " $PEERS " == *" $peer "* ]]; then kept+=("$j"); fi
  done
  jobs=("${kept[@]+"${kept[@]}"}")
fi

# % of the machine's CPU busy over 0.5 s
busy() {
  local b0 i0 b1 i1
  read -r b0 i0 < <(awk '/^cpu /{print $2+$3+$4+$7+$8, $5+$6}' /proc/stat); sleep 0.5
  read -r b1 i1 < <(awk '/^cpu /{print $2+$3+$4+$7+$8, $5+$6}' /proc/stat)
  echo $(( 100 * (b1 - b0) / (b1 - b0 + i1 - i0 + 1) ))
}
wait_quiet() {
  local t
  for ((t = 0; t < quiet_wait * 2; t++)); do
    (( $(busy) < 25 )) && return 0
  done
  echo "# note: the machine was still busy after ${quiet_wait}s" 
}

lines=$(mktemp)
trap 'rm -f "$lines"' EXIT

echo "# compare.sh $exp $* ($(date -u +%Y-%m-%dT%H:%M:%SZ)); peers from $peers_dir/runtime"
for j in "${jobs[@]+"${jobs[@]}"}"; do
  read -r -a job <<<"$j"
  wait_quiet
  echo "# run.sh ${job[*]}"
  line=$("$run" "${job[@]}" 2>&1 | grep 'experiment=' | tail -1) || true
  [[ -n $line ]] || line="experiment=${job[0]} peer=${job[1]} status=error msg=no_result_line"
  echo "$line"
  echo "$line" >>"$lines"
done

wait_quiet
echo "# $bench $exp${*:+ $*}"
rc=0
"$bench" "$exp" --peer-file "$lines" "$@" || rc=$?
exit $rc
