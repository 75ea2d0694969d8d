#!/usr/bin/env bash
# Runs tests many times on every carrier count and backend, and counts the
# failures: the shaking that a concurrency test needs beyond the suite's
# single run.
#
#   scripts/stress.sh [-n RUNS] [-j JOBS] [-v VARIANT] [-c "1 2 4"] [-b "uring epoll"] PROG [TEST...]
#
#   PROG      a test program of build-VARIANT/tests (races, io, park, ...)
#   TEST      its tests (default: all of them, from PROG --list)
#   -n RUNS   runs of each test in each configuration (default 100)
#   -j JOBS   runs at once (default 1)
#   -v        release (default), asan or tsan
# Environment passed on: WEFT_TEST_HOG_MS (the longest a races test's
# computing vthread waits for its victim), WEFT_TEST_TRIALS (a test's own
# repetitions), WEFT_TEST_TIMEOUT.  A failed run's output is kept under
# /tmp/weft-stress.*; one line per test and configuration:
#   stress prog=races test=T variant=V carriers=C io=B runs=N failed=F seconds=S
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
runs=100 jobs=1 variant=release carriers="1 2 4" backends="uring epoll"
while getopts n:j:v:c:b: o; do
  case $o in
    n) runs=$OPTARG ;; j) jobs=$OPTARG ;; v) variant=$OPTARG ;;
    c) carriers=$OPTARG ;; b) backends=$OPTARG ;;
    *) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ $# -ge 1 ]] || { echo "stress.sh: which test program?" >&2; exit 2; }
prog=build-$variant/tests/test_$1
shift
[[ -x $prog ]] || { echo "stress.sh: no $prog (build the $variant variant first: scripts/test.sh $variant)" >&2; exit 2; }
tests=("$@")
[[ ${#tests[@]} -gt 0 ]] || mapfile -t tests < <("$prog" --list)
wrap=()
[[ $variant == tsan ]] && wrap=(setarch "$(uname -m)" -R)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
keep=$(mktemp -d /tmp/weft-stress.XXXXXX)
total_failed=0
for t in "${tests[@]}"; do
  for c in $carriers; do
    for b in $backends; do
      start=$(date +%s)
      # each run prints "ok" or keeps its output and prints "FAIL"
      failed=$(seq "$runs" | xargs -P "$jobs" -I{} sh -c \
        'out=$(WEFT_CARRIERS='"$c"' WEFT_IO='"$b"' "$@" 2>&1) && echo ok || { printf "%s\n" "$out" > '"$keep"'/'"$t"'.c'"$c"'.'"$b"'.{}; echo FAIL; }' \
        _ "${wrap[@]}" "$prog" "$t" | grep -c FAIL)
      total_failed=$((total_failed + failed))
      echo "stress prog=$(basename "$prog") test=$t variant=$variant carriers=$c io=$b runs=$runs failed=$failed seconds=$(($(date +%s) - start))"
    done
  done
done
[[ $total_failed -eq 0 ]] && rmdir "$keep" 2>/dev/null || echo "failed runs' output: $keep"
[[ $total_failed -eq 0 ]]
