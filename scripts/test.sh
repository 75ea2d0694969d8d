#!/usr/bin/env bash
# Builds weft three times -- release, ASan+UBSan, TSan -- and runs the whole
# suite in each.  Usage: scripts/test.sh [release|asan|tsan ...]
# Build trees: build-release, build-asan, build-tsan.  Extra ctest flags can
# come from CTEST_ARGS (e.g. CTEST_ARGS="-R park").
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
variants=("$@")
[[ ${#variants[@]} -eq 0 ]] && variants=(release asan tsan)
jobs=$(nproc)
# LeakSanitizer checks every test child at exit; UBSan stops on the first error.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
for v in "${variants[@]}"; do
  case $v in
    release) san=none ;;
    asan) san=address ;;
    tsan) san=thread ;;
    *) echo "unknown variant $v (release, asan, tsan)" >&2; exit 2 ;;
  esac
  echo "=== $v: build ==="
  cmake -S . -B "build-$v" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEFT_SANITIZE=$san >/dev/null
  cmake --build "build-$v" -j"$jobs" >/dev/null
  echo "=== $v: test ==="
  # TSan cannot start with the kernel's full mmap randomisation; setarch -R
  # turns it off for the test processes only.
  wrap=()
  [[ $v == tsan ]] && wrap=(setarch "$(uname -m)" -R)
  (cd "build-$v" && "${wrap[@]}" ctest --output-on-failure -j"$jobs" ${CTEST_ARGS:-})
done
echo "=== all variants passed: ${variants[*]} ==="
