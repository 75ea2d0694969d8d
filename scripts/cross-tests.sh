#!/usr/bin/env bash
# The suite on aarch64 and riscv64, under qemu-user (issue 28).  scripts/test.sh's
# "cross" pass runs it, one architecture at a time.
#
#   scripts/cross-tests.sh [aarch64|riscv64|aarch64-bti] [REGEX]
#                                   (none named: aarch64, riscv64, then aarch64-bti)
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
#    build-riscv64-sysroot, made by scripts/sysroot.sh when missing (as root; about
#    25 s and 240 MB here); the tests load that tree's glibc (qemu-riscv64 -L).
#  - aarch64-bti is aarch64 with -mbranch-protection=standard on the whole program,
#    linked against a tree of Debian 13's arm64 packages (build-arm64-sysroot, the same
#    way: Debian 12's start files carry no BTI note, so no program of theirs is marked;
#    cmake/toolchain-aarch64-bti.cmake), its tests run under qemu-aarch64 -cpu max,
#    which enforces BTI and authenticates return addresses.
# ctest runs each test under qemu-ARCH; the tests that start other programs (a forked
# child's exec of a helper, weft-httpd) exec the architecture's binaries by path, which
# the kernel hands to qemu only where qemu-ARCH is registered with binfmt_misc:
# Debian's qemu-user-binfmt does that on a machine that runs systemd-binfmt; elsewhere
# this script registers it (as root), from the same file.  Exit 0 when every selected
# test passes; 2 when this machine cannot run the pass (the reason on a line that
# starts with "cross-tests:").
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
if [[ ${1:-} != aarch64 && ${1:-} != riscv64 && ${1:-} != aarch64-bti ]]; then
  rc=0
  for a in aarch64 riscv64 aarch64-bti; do "$0" "$a" "$@" || rc=$?; [[ $rc -eq 0 ]] || exit $rc; done
  exit 0
fi
build=$1
arch=${build%-bti}
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
tree=""
[[ $build == riscv64 ]] && tree=riscv64
[[ $build == aarch64-bti ]] && tree=arm64
if [[ -n $tree && ! -e build-$tree-sysroot/.weft-sysroot ]]; then
  echo "=== cross: $tree package tree (scripts/sysroot.sh) ==="
  scripts/sysroot.sh "$tree" "build-$tree-sysroot" || {
    echo "cross-tests: no $tree package tree (scripts/sysroot.sh $tree build-$tree-sysroot failed)" >&2
    exit 2
  }
fi
jobs=$(nproc)
echo "=== cross: $build build ==="
cmake -S . -B "build-$build" -DCMAKE_TOOLCHAIN_FILE="cmake/toolchain-$build.cmake" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DWEFT_SANITIZE=none >/dev/null || exit 1
cmake --build "build-$build" -j"$jobs" >/dev/null || { cmake --build "build-$build" -j1 2>&1 | tail -30; exit 1; }
if [[ $build == aarch64-bti ]]; then
  # every program of the build must be marked, or the loader maps it unenforced
  # and the run proves nothing: a test program and the preload library stand for
  # all (one toolchain file builds them all)
  for f in "build-$build"/tests/test_threads "build-$build"/libweft-hook.so; do
    aarch64-linux-gnu-readelf -n "$f" | grep -q 'AArch64 feature: BTI, PAC' ||
      { echo "cross-tests: $f lacks the BTI/PAC property note" >&2; exit 1; }
  done
  echo "=== cross: $build programs carry the BTI and PAC property note ==="
  # and the emulator enforces it: a marked program whose function has no
  # landing pad, reached by an indirect call, must die (SIGILL)
  t=$(mktemp -d /tmp/weft-bti-XXXXXX)
  printf '%s\n' '    .text' '    .globl nopad' '    .type nopad, %function' 'nopad:' '    mov x0, #7' '    ret' \
    '    .section .note.gnu.property, "a"' '    .p2align 3' '    .word 4, 16, 5' '    .asciz "GNU"' \
    '    .word 0xc0000000, 4, 3, 0' '    .section .note.GNU-stack,"",%progbits' >"$t/nopad.S"
  printf '%s\n' 'int nopad(void);' 'int (*volatile f)(void) = nopad;' 'int main(void) { return f() == 7 ? 0 : 1; }' >"$t/main.c"
  gcc_dir=$(ls -d "build-arm64-sysroot"/usr/lib/gcc/aarch64-linux-gnu/* | head -1)
  lib=build-arm64-sysroot/usr/lib/aarch64-linux-gnu
  aarch64-linux-gnu-gcc --sysroot=build-arm64-sysroot -B"$gcc_dir" -B"$lib" -L"$lib" -mbranch-protection=standard \
    -o "$t/nopad" "$t/main.c" "$t/nopad.S" || { echo "cross-tests: the BTI control does not build" >&2; rm -rf "$t"; exit 1; }
  rc=0 # (a subshell that waits -- not one that execs it -- says "Illegal instruction" to /dev/null)
  (timeout 60 env QEMU_CPU=max,pauth-impdef=on QEMU_LD_PREFIX=build-arm64-sysroot qemu-aarch64 "$t/nopad"; exit $?) \
    2>/dev/null || rc=$?
  rm -rf "$t"
  if [[ $rc -ne 132 ]]; then
    echo "cross-tests: qemu-aarch64 -cpu max did not enforce BTI (a missing landing pad exited $rc, not SIGILL): the run would prove nothing" >&2
    exit 1
  fi
  echo "=== cross: $build: qemu-aarch64 -cpu max enforces BTI (the control without a landing pad died of SIGILL) ==="
fi
echo "=== cross: $build under qemu-$arch, io=epoll, tests matching $regex ==="
(cd "build-$build" && WEFT_IO=epoll ctest --output-on-failure -j"$jobs" -R "$regex" ${CTEST_ARGS:-})
