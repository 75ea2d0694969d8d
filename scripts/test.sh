#!/usr/bin/env bash
# Builds weft three times -- release, ASan+UBSan, TSan -- and runs the whole
# suite in each, once on the io_uring backend and once on the epoll one
# (WEFT_IO) -- the release build also in deterministic mode
# (WEFT_DETERMINISTIC=1) on each backend; then CPython's own tests of
# threads, signals and sockets under weft-run on the release build
# ("foreign": scripts/cpython-tests.sh, about 5 minutes; too long for the
# ctest suite); then runs the HTTP parser's fuzz target for FUZZ_SECONDS (60;
# 0 skips it).  Usage: scripts/test.sh [release|asan|tsan|foreign|package|cross ...]
# ("package": the Debian packages built, linted, installed on this machine,
# used and purged, tests/integration/deb_test.sh -- root only; about 1 minute.)
# ("cross": the core areas built for aarch64, for riscv64 and for aarch64
# with branch protection, and run under qemu-user on the epoll backend,
# scripts/cross-tests.sh, about 3-6 minutes each; issue 28.)
# Build trees: build-release, build-asan, build-tsan.  Extra ctest flags can
# come from CTEST_ARGS (e.g. CTEST_ARGS="-R park").
# Where io_uring cannot be used (a container's seccomp profile, or
# kernel.io_uring_disabled: tests/io_probe asks weft itself), the io_uring
# passes are skipped, said so at once and in the last line, and the epoll
# passes run.  To see that path on a machine that has io_uring:
#   build-release/tests/no_uring scripts/test.sh release
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
variants=("$@")
[[ ${#variants[@]} -eq 0 ]] && variants=(release asan tsan foreign package cross)
# (cross: also Debian's cross compilers, qemu-user and the arm64 -dev packages)
if [[ " ${variants[*]} " == *" cross "* ]]; then scripts/deps.sh cross || exit 1; else scripts/deps.sh || exit 1; fi
jobs=$(nproc)
# ctest runs twice as many release tests as there are CPUs: about half of
# the suite's time is tests waiting (timers, sleeps, children, sockets), and
# a release pass used 54 % of two CPUs at -j2 (163 s; 105 s at -j4, the same
# CPU time).  The sanitizer builds run one test per CPU: at two per CPU four
# timing-sensitive tests failed in one ASan pass (the monitor's pinned
# lines, a thousand TLS clients on --model async), where ASan's allocator
# lock alone held a carrier for seconds.  CTEST_JOBS overrides both.
ctest_jobs_release=${CTEST_JOBS:-$((2 * jobs))}
ctest_jobs_sanitized=${CTEST_JOBS:-$jobs}
# LeakSanitizer checks every test child at exit; UBSan stops on the first error.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
passed=0 failed=0 ran=0
no_uring=""   # why the io_uring passes could not run, if they could not
log=$(mktemp)
trap 'rm -f "$log"' EXIT
no_cross=""   # why a cross pass could not run, if one could not
# tally LABEL RC: adds the ctest summary in $log ("NN% tests passed, F tests
# failed out of T") to the totals; stops the run if no test ran or RC says
# the pass failed
tally() {
  local f t
  read -r f t < <(sed -n 's/.* tests passed, \([0-9]*\) tests failed out of \([0-9]*\).*/\1 \2/p' "$log" | tail -1)
  passed=$((passed + ${t:-0} - ${f:-0})); failed=$((failed + ${f:-0}))
  if [[ ${t:-0} -eq 0 ]]; then
    echo "=== $1: no test ran ==="
    exit 1
  fi
  if [[ $2 -ne 0 ]]; then
    echo "=== $1: FAILED ==="
    echo "$passed passed, $((failed > 0 ? failed : 1)) failed"
    exit 1
  fi
}
for v in "${variants[@]}"; do
  if [[ $v == cross ]]; then
    # the core areas on aarch64 and riscv64 under qemu-user, epoll backend
    # (scripts/cross-tests.sh; exit 2: this machine cannot run it)
    for arch in aarch64 riscv64 aarch64-bti; do
      ran=$((ran + 1))
      rc=0
      scripts/cross-tests.sh "$arch" 2>&1 | tee "$log" || rc=$?
      if [[ $rc -eq 2 ]]; then
        no_cross+="${no_cross:+; }$arch: $(grep -m1 '^cross-tests:' "$log" || echo "cross-tests.sh could not start")"
        echo "=== cross: the $arch pass could NOT run here: $no_cross ==="
        continue
      fi
      tally "cross: $arch under qemu" $rc
    done
    continue
  fi
  if [[ $v == foreign ]]; then
    # the release build's weft-run (built here if an earlier variant did not)
    cmake -S . -B build-release -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEFT_SANITIZE=none >/dev/null || exit 1
    cmake --build build-release -j"$jobs" >/dev/null || exit 1
    ran=$((ran + 1))
    if ! scripts/cpython-tests.sh build-release; then
      echo "=== foreign: CPython's tests under weft-run: FAILED ==="
      echo "$passed passed, $((failed + 1)) failed"
      exit 1
    fi
    passed=$((passed + 1))
    continue
  fi
  if [[ $v == package ]]; then
    ran=$((ran + 1))
    rc=0
    bash tests/integration/deb_test.sh . || rc=$?
    if [[ $rc -eq 77 ]]; then
      echo "=== package: skipped (above: why) ==="
      continue
    fi
    if [[ $rc -ne 0 ]]; then
      echo "=== package: the Debian packages: FAILED ==="
      echo "$passed passed, $((failed + 1)) failed"
      exit 1
    fi
    passed=$((passed + 1))
    continue
  fi
  case $v in
    release) san=none ;;
    asan) san=address ;;
    tsan) san=thread ;;
    *) echo "unknown variant $v (release, asan, tsan, foreign, package, cross)" >&2; exit 2 ;;
  esac
  echo "=== $v: build ==="
  ctest_jobs=$ctest_jobs_release
  [[ $v == release ]] || ctest_jobs=$ctest_jobs_sanitized
  cmake -S . -B "build-$v" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEFT_SANITIZE=$san >/dev/null || exit 1
  cmake --build "build-$v" -j"$jobs" >/dev/null || { cmake --build "build-$v" -j1 2>&1 | tail -30; exit 1; }
  # TSan cannot start with the kernel's full mmap randomisation; setarch -R
  # turns it off for the test processes only.
  wrap=()
  [[ $v == tsan ]] && wrap=(setarch "$(uname -m)" -R)
  for io in ${WEFT_TEST_BACKENDS:-uring epoll}; do
    if [[ $io == uring ]] && ! why=$("${wrap[@]}" "build-$v/tests/io_probe" 2>&1 >/dev/null); then
      # weft's line: "... cannot be used here (REASON); use WEFT_IO=epoll or auto"
      no_uring=$(sed -n 's/.*cannot be used here (\(.*\)); use .*/\1/p' <<<"$why" | head -1)
      no_uring=${no_uring:-${why:-io_probe failed}}
      echo "=== $v, io=uring: io_uring is not available here ($no_uring): the io_uring passes could not run; epoll passes only ==="
      continue
    fi
    echo "=== $v, io=$io: test ==="
    ran=$((ran + 1))
    rc=0
    # arch.switch_cross runs no weft runtime (the switch built for other
    # architectures, under qemu; release builds only): the first pass runs
    # it, the others leave it out
    again=()
    [[ -n ${switch_ran:-} ]] && again=(-E '^arch\.switch_cross$')
    [[ $v == release ]] && switch_ran=1
    (cd "build-$v" && WEFT_IO=$io "${wrap[@]}" ctest --output-on-failure -j"$ctest_jobs" "${again[@]}" ${CTEST_ARGS:-}) | tee "$log" || rc=$?
    tally "$v, io=$io" $rc
    # The release build once more in deterministic mode (one carrier,
    # virtual time, seed 1): tests that need several carriers or real time
    # skip themselves there (DET_SKIP in tests/support/harness.h).
    if [[ $v == release ]]; then
      echo "=== $v, io=$io, WEFT_DETERMINISTIC=1: test ==="
      rc=0
      (cd "build-$v" && WEFT_IO=$io WEFT_DETERMINISTIC=1 ctest --output-on-failure -j"$ctest_jobs" -E '^arch\.switch_cross$' ${CTEST_ARGS:-}) | tee "$log" || rc=$?
      tally "$v, io=$io, deterministic" $rc
    fi
  done
done
if [[ ${FUZZ_SECONDS:-60} -gt 0 && -x scripts/fuzz.sh ]]; then
  echo "=== fuzz: request parser, ${FUZZ_SECONDS:-60} s ==="
  scripts/fuzz.sh "${FUZZ_SECONDS:-60}" || { echo "=== fuzz: FAILED ==="; echo "$passed passed, 1 failed"; exit 1; }
fi
if [[ $ran -eq 0 ]]; then
  echo "=== no test pass could run (io_uring is not available here, and only its passes were asked for) ==="
  exit 1
fi
if [[ -n $no_cross ]]; then
  echo "=== NOTE: a cross pass could NOT run here: $no_cross ==="
fi
if [[ -n $no_uring ]]; then
  echo "=== all variants passed on epoll: ${variants[*]}; the io_uring passes could NOT run here: io_uring is not available ($no_uring) ==="
  echo "$passed passed, $failed failed (epoll only: io_uring passes not run)"
else
  echo "=== all variants passed: ${variants[*]} ==="
  echo "$passed passed, $failed failed"
fi
