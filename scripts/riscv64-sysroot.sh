#!/usr/bin/env bash
# scripts/riscv64-sysroot.sh DIR -- a tree of Debian's riscv64 packages for the riscv64
# cross build (cmake/toolchain-riscv64.cmake; issue 28): glibc's, liburing's and
# libdw's runtime and -dev packages with what they need, and libatomic (gcc 12 calls it
# for riscv64's one-byte atomics).
#
# Debian 12 has no riscv64 port to add with `dpkg --add-architecture`; Debian 13
# (trixie) does, so this takes trixie's packages, as Debian documents for a foreign
# tree: `debootstrap --foreign --arch=riscv64` downloads them and unpacks the base
# system (its first stage, which needs no riscv64 CPU); the packages named with
# --include are only downloaded then, and are unpacked here with dpkg-deb -x.
# Nothing is configured or run inside the tree: it serves gcc's --sysroot and
# qemu-riscv64's -L.  Needs root (debootstrap) and debootstrap (scripts/deps.sh
# cross installs it).  A tree already complete (DIR/.weft-sysroot) is kept.
# MIRROR (default http://deb.debian.org/debian), SUITE (default trixie).
set -euo pipefail
dir=${1:?usage: riscv64-sysroot.sh DIR}
mirror=${MIRROR:-http://deb.debian.org/debian}
suite=${SUITE:-trixie}
if [[ -e $dir/.weft-sysroot ]]; then echo "riscv64-sysroot: $dir is ready"; exit 0; fi
command -v debootstrap >/dev/null || { echo "riscv64-sysroot: debootstrap is not installed (scripts/deps.sh cross)" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "riscv64-sysroot: debootstrap needs root" >&2; exit 2; }
rm -rf "$dir"
mkdir -p "$dir"
log=$(mktemp /tmp/weft-debootstrap-XXXXXX.log)
if ! debootstrap --foreign --arch=riscv64 --variant=minbase --include=libc6-dev,liburing-dev,libdw-dev,libatomic1 \
     "$suite" "$dir" "$mirror" >"$log" 2>&1; then
  echo "riscv64-sysroot: debootstrap failed:" >&2; tail -20 "$log" >&2; rm -f "$log"; exit 1
fi
rm -f "$log"
for deb in "$dir"/var/cache/apt/archives/*.deb; do dpkg-deb -x "$deb" "$dir"; done
for f in usr/include/liburing.h usr/include/elfutils/libdw.h usr/lib/riscv64-linux-gnu/libc.so \
         usr/lib/riscv64-linux-gnu/crt1.o usr/lib/ld-linux-riscv64-lp64d.so.1; do
  [[ -e $dir/$f ]] || { echo "riscv64-sysroot: $dir/$f is missing after unpacking" >&2; exit 1; }
done
rm -rf "$dir"/var/cache/apt/archives/*.deb
touch "$dir/.weft-sysroot"
echo "riscv64-sysroot: $dir ($suite, $(du -sh "$dir" | cut -f1))"
