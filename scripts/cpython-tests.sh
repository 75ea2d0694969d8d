#!/usr/bin/env bash
# CPython's own tests of threads, signals, sockets, subprocesses and
# asyncio, run by Debian's python3 under weft-run: every thread CPython
# makes is a vthread (issue 27).  scripts/test.sh's "foreign" pass runs it.
#
#   scripts/cpython-tests.sh [--native] [BUILD_DIR]
#
# BUILD_DIR: a release build (default build-release; a sanitizer build
# cannot preload its libweft-hook.so into an uninstrumented python).
# --native: the same modules without weft-run, the reference to compare
# with (they all pass natively on the project's machines).  Each module
# runs in its own worker process (python -m test -j2), with a timeout that
# fails a hung test rather than waiting for it; the runner prints each
# module's time.  Run verbose (-v) into a log: what is printed is each
# module's line with its time, the summary, and then every case skipped
# (the issue asks for those on both sides; compare the two runs' lists),
# or the whole log when something failed.  test_socket's VSOCK cases are left out, on both sides:
# in a VM without a vsock device they hang natively too.  Needs /usr/bin/python3 and Debian's
# libpython3.11-testsuite (scripts/deps.sh).  Exit 0 when every module
# passes.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
native=0
if [[ ${1:-} == --native ]]; then
  native=1
  shift
fi
build=${1:-build-release}
py=/usr/bin/python3
modules=(test_threading test_thread test_threading_local test_queue test_socket test_select test_selectors
         test_subprocess test_signal test_time test_concurrent_futures test_asyncio)
if ! "$py" -c 'import test.support, test.test_threading' 2>/dev/null; then
  echo "cpython-tests: $py has no test suite (apt-get install libpython3.11-testsuite; scripts/deps.sh does)" >&2
  exit 2
fi
run=()
if [[ $native -eq 0 ]]; then
  if [[ ! -x $build/apps/run/weft-run ]]; then
    echo "cpython-tests: no $build/apps/run/weft-run: build it first (cmake --build $build)" >&2
    exit 2
  fi
  run=("$PWD/$build/apps/run/weft-run")
fi
dir=$(mktemp -d /tmp/weft-cpython-XXXXXX)
trap 'rm -rf "$dir"' EXIT
echo "=== CPython's tests, $([[ $native -eq 1 ]] && echo natively || echo "under weft-run ($build)"): ${modules[*]} ==="
start=$(date +%s)
# (the whole run's wall limit: the per-test timeout catches a hang inside
# a test, this one a hang anywhere else)
(cd "$dir" && timeout 2400 "${run[@]}" "$py" -m test -j2 -v -o --timeout 900 -i '*VSOCK*' "${modules[@]}") >"$dir/log" 2>&1
rc=$?
if [[ $rc -ne 0 ]]; then
  cat "$dir/log"
else
  # the runner's lines ("0:01:23 load avg: 1.2 [ 3/12] test_queue passed (34.1 sec)":
  # the wall time so far, a module's own where it took 30 s or more), then
  # the summary with the ten slowest modules' times (-o), from whichever of
  # the two comes first (with -j2 the summary's head does) to the end, once
  grep -E '^[0-9]+:[0-9]{2}:[0-9]{2} .*\[ *[0-9]+/[0-9]+\]' "$dir/log"
  awk '/slowest tests:$/ || /^== Tests result/ { on = 1 } on' "$dir/log"
  echo "--- cases skipped ($(grep -c ' \.\.\. skipped' "$dir/log")) ---"
  grep -E ' \.\.\. skipped' "$dir/log" | sort
fi
echo "=== CPython's tests: exit $rc after $(($(date +%s) - start)) s ==="
exit $rc
