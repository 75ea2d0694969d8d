#!/usr/bin/env bash
# scripts/sysroot.sh ARCH DIR -- a tree of Debian 13's packages for ARCH (riscv64 or
# arm64) for a cross build (issue 28): glibc's, liburing's and libdw's runtime and -dev
# packages with what they need, and
#  - riscv64: libatomic (gcc 12 calls it for riscv64's one-byte atomics); the tree
#    serves cmake/toolchain-riscv64.cmake, since Debian 12 has no riscv64 port;
#  - arm64: gcc 14's crtbegin/crtend and libgcc (libgcc-14-dev); the tree serves
#    cmake/toolchain-aarch64-bti.cmake, the build with branch protection: Debian 13's
#    start files, libc and libgcc carry the BTI and PAC property note, Debian 12's
#    carry none, so only against these does a whole program come out marked.
#
# As Debian documents for a foreign tree: `debootstrap --foreign --arch=ARCH`
# downloads the packages and unpacks the base system (its first stage, which needs no
# CPU of that architecture); the packages named with --include are only downloaded
# then, and are unpacked here with dpkg-deb -x.  Nothing is configured or run inside
# the tree: it serves gcc's --sysroot and qemu's -L.  Needs root (debootstrap) and
# debootstrap (scripts/deps.sh cross installs it).  A tree already complete
# (DIR/.weft-sysroot) is kept.  MIRROR (default http://deb.debian.org/debian), SUITE
# (default trixie).
set -euo pipefail
arch=${1:?usage: sysroot.sh riscv64|arm64 DIR}
dir=${2:?usage: sysroot.sh riscv64|arm64 DIR}
case $arch in
  riscv64) extra=libatomic1 multi=riscv64-linux-gnu ld=usr/lib/ld-linux-riscv64-lp64d.so.1 ;;
  arm64) extra=libgcc-14-dev multi=aarch64-linux-gnu ld=usr/lib/ld-linux-aarch64.so.1 ;;
  *) echo "sysroot: ARCH is riscv64 or arm64, not $arch" >&2; exit 2 ;;
esac
mirror=${MIRROR:-http://deb.debian.org/debian}
suite=${SUITE:-trixie}
if [[ -e $dir/.weft-sysroot ]]; then echo "sysroot: $dir is ready"; exit 0; fi
command -v debootstrap >/dev/null || { echo "sysroot: debootstrap is not installed (scripts/deps.sh cross)" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "sysroot: debootstrap needs root" >&2; exit 2; }
rm -rf "$dir"
mkdir -p "$dir"
log=$(mktemp /tmp/weft-debootstrap-XXXXXX.log)
if ! debootstrap --foreign --arch="$arch" --variant=minbase --include=libc6-dev,liburing-dev,libdw-dev,$extra \
     "$suite" "$dir" "$mirror" >"$log" 2>&1; then
  echo "sysroot: debootstrap failed:" >&2; tail -20 "$log" >&2; rm -f "$log"; exit 1
fi
rm -f "$log"
for deb in "$dir"/var/cache/apt/archives/*.deb; do dpkg-deb -x "$deb" "$dir"; done
for f in usr/include/liburing.h usr/include/elfutils/libdw.h "usr/lib/$multi/libc.so" "usr/lib/$multi/crt1.o" "$ld"; do
  [[ -e $dir/$f ]] || { echo "sysroot: $dir/$f is missing after unpacking" >&2; exit 1; }
done
rm -rf "$dir"/var/cache/apt/archives/*.deb
touch "$dir/.weft-sysroot"
echo "sysroot: $dir ($arch, $suite, $(du -sh "$dir" | cut -f1))"
