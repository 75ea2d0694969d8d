#!/usr/bin/env bash
# The suite on aarch64, under qemu-user (issue 28).  scripts/test.sh's "cross" pass
# runs it.
#
#   scripts/cross-tests.sh [REGEX]
#
# Builds build-aarch64 with Debian's cross compiler (cmake/toolchain-aarch64.cmake;
# scripts/deps.sh cross installs it, qemu-user and the arm64 -dev packages), then runs
# ctest there on the epoll backend -- qemu-user 7.2 has no io_uring (io_uring_setup
# answers ENOSYS), so the io_uring backend is not exercised under it -- for the tests
# whose names match REGEX: by default the core areas (threads, park, timers, io, sync,
# chan, scope, exec, local, fork) and weft-bench micro's smoke check, which must say
# that its figures are an emulator's.  ctest runs each test under qemu-aarch64; the tests
# that start other programs (a forked child's exec of a helper, weft-httpd) exec arm64
# binaries by path, which the kernel hands to qemu only where qemu-aarch64 is
# registered with binfmt_misc: Debian's qemu-user-binfmt does that on a machine that
# runs systemd-binfmt; elsewhere this script registers it (as root), from the same
# file.  Exit 0 when every selected test passes.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
regex=${1:-'^(threads|park|timers|io|sync|chan|scope|exec|local|fork)\.|^bench\.micro_smoke$'}
for t in aarch64-linux-gnu-gcc qemu-aarch64; do
  command -v "$t" >/dev/null || { echo "cross-tests: $t is not installed (scripts/deps.sh cross)" >&2; exit 2; }
done
if [[ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]]; then
  conf=/usr/lib/binfmt.d/qemu-aarch64.conf
  if [[ $(id -u) -ne 0 || ! -r $conf ]]; then
    echo "cross-tests: qemu-aarch64 is not registered with binfmt_misc, and this is not root with $conf" \
         "(Debian's qemu-user-binfmt) to register it: tests that exec arm64 programs would fail" >&2
    exit 2
  fi
  [[ -e /proc/sys/fs/binfmt_misc/register ]] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc || exit 2
  cat "$conf" >/proc/sys/fs/binfmt_misc/register || exit 2
  echo "cross-tests: registered qemu-aarch64 with binfmt_misc ($conf)"
fi
jobs=$(nproc)
echo "=== cross: aarch64 build ==="
cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DWEFT_SANITIZE=none >/dev/null || exit 1
cmake --build build-aarch64 -j"$jobs" >/dev/null || { cmake --build build-aarch64 -j1 2>&1 | tail -30; exit 1; }
echo "=== cross: aarch64 under qemu-aarch64, io=epoll, tests matching $regex ==="
(cd build-aarch64 && WEFT_IO=epoll ctest --output-on-failure -j"$jobs" -R "$regex" ${CTEST_ARGS:-})
