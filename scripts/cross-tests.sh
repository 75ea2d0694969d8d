#!/usr/bin/env bash
# The suite on aarch64 and riscv64, under qemu-user (issue 28).  scripts/test.sh's
# "cross" pass runs it, one architecture at a time.
#
#   scripts/cross-tests.sh [aarch64|riscv64] [REGEX]     (no architecture: both)
#
# Builds build-ARCH with Debian's cross compiler (cmake/toolchain-ARCH.cmake;
# scripts/deps.sh cross installs the compilers, qemu-user, debootstrap and arm64's -dev
# packages), then runs ctest there on the epoll backend -- qemu-user 7.2 has no
# io_uring (io_uring_setup answers ENOSYS), so the io_uring backend is not exercised
# under it -- for the tests whose names match REGEX: by default the core areas
# (threads, park, timers, io, sync, chan, scope, exec, local, fork) and weft-bench
# micro's smoke check, which must say that its figures are an emulator's.
#  - aarch64 links arm64's packages from Debian 12's own archive (multiarch).
#  - riscv64 links a tree of Debian 13's riscv64 packages (Debian 12 has no riscv64),
#    build-riscv64-sysroot, made by scripts/riscv64-sysroot.sh when missing (as root;
#    about 25 s and 240 MB here); the tests load that tree's glibc (qemu-riscv64 -L).
# ctest runs each test under qemu-ARCH; the tests that start other programs (a forked
# child's exec of a helper, weft-httpd) exec the architecture's binaries by path, which
# the kernel hands to qemu only where qemu-ARCH is registered with binfmt_misc:
# Debian's qemu-user-binfmt does that on a machine that runs systemd-binfmt; elsewhere
# this script registers it (as root), from the same file.  Exit 0 when every selected
# test passes; 2 when this machine cannot run the pass (the reason on a line that
# starts with "cross-tests:").
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
if [[ ${1:-} != aarch64 && ${1:-} != riscv64 ]]; then
  rc=0
  for a in aarch64 riscv64; do "$0" "$a" "$@" || rc=$?; [[ $rc -eq 0 ]] || exit $rc; done
  exit 0
fi
arch=$1
shift
regex=${1:-'^(threads|park|timers|io|sync|chan|scope|exec|local|fork)\.|^bench\.micro_smoke$'}
for t in "$arch-linux-gnu-gcc" "qemu-$arch"; do
  command -v "$t" >/dev/null || { echo "cross-tests: $t is not installed (scripts/deps.sh cross)" >&2; exit 2; }
done
if [[ ! -e /proc/sys/fs/binfmt_misc/qemu-$arch ]]; then
  conf=/usr/lib/binfmt.d/qemu-$arch.conf
  if [[ $(id -u) -ne 0 || ! -r $conf ]]; then
    echo "cross-tests: qemu-$arch is not registered with binfmt_misc, and this is not root with $conf" \
         "(Debian's qemu-user-binfmt) to register it: tests that exec $arch programs would fail" >&2
    exit 2
  fi
  [[ -e /proc/sys/fs/binfmt_misc/register ]] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc || exit 2
  cat "$conf" >/proc/sys/fs/binfmt_misc/register || exit 2
  echo "cross-tests: registered qemu-$arch with binfmt_misc ($conf)"
fi
if [[ $arch == riscv64 && ! -e build-riscv64-sysroot/.weft-sysroot ]]; then
  echo "=== cross: riscv64 package tree (scripts/riscv64-sysroot.sh) ==="
  scripts/riscv64-sysroot.sh build-riscv64-sysroot || {
    echo "cross-tests: no riscv64 package tree (scripts/riscv64-sysroot.sh build-riscv64-sysroot failed)" >&2
    exit 2
  }
fi
jobs=$(nproc)
echo "=== cross: $arch build ==="
cmake -S . -B "build-$arch" -DCMAKE_TOOLCHAIN_FILE="cmake/toolchain-$arch.cmake" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DWEFT_SANITIZE=none >/dev/null || exit 1
cmake --build "build-$arch" -j"$jobs" >/dev/null || { cmake --build "build-$arch" -j1 2>&1 | tail -30; exit 1; }
echo "=== cross: $arch under qemu-$arch, io=epoll, tests matching $regex ==="
(cd "build-$arch" && WEFT_IO=epoll ctest --output-on-failure -j"$jobs" -R "$regex" ${CTEST_ARGS:-})
