#!/usr/bin/env bash
# tests/arch/cross.sh SRC_DIR -- the context switch on every architecture weft has one
# for (issue 28), built with Debian's cross compilers and run under qemu-user.
#
# For x86-64 (natively), aarch64 and riscv64 (qemu-aarch64, qemu-riscv64; static
# binaries): tests/arch/switch_regs.c with the architecture's src/arch/switch_<arch>.S
# and src/arch/ctx.c -- 10,000 contexts, 1,000 passes, every callee-saved register and
# the FP rounding mode checked around each of the 20,020,000 switches, the passes taking
# turns on two OS threads, so that every context migrates 1,000 times (qemu-aarch64
# takes ~40 s of it, -cpu max as long again; qemu-riscv64 ~6 s).
#
# aarch64 hardened: the same test built with -mbranch-protection=standard into a shared
# library linked without the C runtime's start files (Debian 12's crt objects carry no
# BTI landing pads, so a whole program cannot be marked), which then carries the GNU
# property note for BTI and PAC (readelf -n, checked), run under `qemu-aarch64 -cpu
# max`: the loader maps a marked library with BTI enforced and the CPU authenticates
# return addresses.  Two controls show both are live -- else the check proves nothing:
#   - a marked library whose exported function has no landing pad must die (SIGILL);
#   - the switch with a fresh context's return address left unsigned (ctx.c's pacia1716
#     made a nop) must die at that context's first return.
# Exit 0: all passed; 1: a check failed; 77 (skipped, with the reason): a cross compiler
# or qemu is missing (scripts/deps.sh cross installs them), or qemu enforces neither.
set -uo pipefail
src=$(cd "${1:?usage: cross.sh SRC_DIR}" && pwd)
need=(aarch64-linux-gnu-gcc riscv64-linux-gnu-gcc aarch64-linux-gnu-readelf qemu-aarch64 qemu-riscv64 gcc)
for t in "${need[@]}"; do
  command -v "$t" >/dev/null || { echo "SKIP: $t is not installed (scripts/deps.sh cross installs the cross compilers and qemu-user)"; exit 77; }
done
dir=$(mktemp -d /tmp/weft-cross-XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail=0
say() { echo "cross: $*"; }
# run NAME EXPECT CMD...: EXPECT 0 (must pass, with the test's line) or "dies"
run() {
  local name=$1 expect=$2 out rc
  shift 2
  out=$(timeout 400 "$@" 2>&1)
  rc=$?
  if [[ $expect == 0 ]]; then
    if [[ $rc -eq 0 && $out == *"mismatches=0"* ]]; then say "ok   $name: $out"
    else say "FAIL $name (exit $rc): $out"; fail=1; fi
  else
    if [[ $rc -ne 0 && $rc -ne 124 ]]; then say "ok   $name: died as it must (exit $rc)"; return 0
    else say "control $name did not die (exit $rc): $out"; return 1; fi
  fi
}
cflags=(-O2 -std=gnu11 -D_GNU_SOURCE -I"$src/include" -I"$src/src" -I"$src/src/arch")
for arch in x86_64 aarch64 riscv64; do
  if [[ $arch == x86_64 ]]; then cc=gcc; static=(); qemu=(); else cc=$arch-linux-gnu-gcc; static=(-static); qemu=(qemu-$arch); fi
  if ! "$cc" "${cflags[@]}" "${static[@]}" -pthread -o "$dir/sw_$arch" "$src/tests/arch/switch_regs.c" \
       "$src/tests/arch/regs_$arch.S" "$src/src/arch/switch_$arch.S" "$src/src/arch/ctx.c" 2>"$dir/cc.err"; then
    say "FAIL $arch: does not build:"; cat "$dir/cc.err"; fail=1; continue
  fi
  run "$arch" 0 "${qemu[@]}" "$dir/sw_$arch"
done

# aarch64 with BTI and PAC
A=aarch64-linux-gnu
hf=(-O2 -std=gnu11 -fPIC -mbranch-protection=standard)
# the arm64 C library the dynamic runs load: the multiarch one where it is
# installed (libc6:arm64: its ld.so and libc.so.6 from one package), else the
# cross toolchain's tree.  Never a mix: qemu's -L serves a path from the prefix
# only where it exists there, and the cross ld.so with the multiarch libc.so.6
# (another build of 2.36) walks a corrupt stack-cache list in pthread_create
# for ever.
if [[ -e /lib/ld-linux-aarch64.so.1 && -e /lib/aarch64-linux-gnu/libc.so.6 ]]; then L=(); else L=(-L /usr/aarch64-linux-gnu); fi
mklib() { # mklib OUT CTX_SOURCE
  "$A-gcc" "${hf[@]}" -D_GNU_SOURCE -I"$src/include" -I"$src/src" -I"$src/src/arch" -shared -nostartfiles -pthread \
    -Dmain=weft_test_switch_regs_main -o "$1" "$2" "$src/tests/arch/switch_regs.c" "$src/tests/arch/regs_aarch64.S" \
    "$src/src/arch/switch_aarch64.S"
}
printf 'int weft_test_switch_regs_main(int, char **);\nint main(int argc, char **argv) { return weft_test_switch_regs_main(argc, argv); }\n' >"$dir/main.c"
if mklib "$dir/libsw.so" "$src/src/arch/ctx.c" 2>"$dir/cc.err" &&
   "$A-gcc" -O2 -o "$dir/sw_bti" "$dir/main.c" "$dir/libsw.so" -Wl,-rpath,"$dir" 2>>"$dir/cc.err"; then
  notes=$("$A-readelf" -n "$dir/libsw.so")
  if [[ $notes == *"AArch64 feature: BTI, PAC"* ]]; then say "ok   aarch64 BTI+PAC library carries the property note (AArch64 feature: BTI, PAC)"
  else say "FAIL aarch64 BTI+PAC library lacks the BTI/PAC property note:"; echo "$notes"; fail=1; fi
  run "aarch64 -mbranch-protection=standard, qemu -cpu max" 0 qemu-aarch64 -cpu max "${L[@]}" "$dir/sw_bti"
else
  say "FAIL aarch64 BTI+PAC build:"; cat "$dir/cc.err"; fail=1
fi
live=1
# control 1: a marked library, an exported function without a landing pad, reached through the PLT (br x17)
cat >"$dir/nopad.S" <<'ASM'
    .text
    .globl  nopad
    .type   nopad, %function
nopad:
    mov     x0, #7
    ret
    .section .note.gnu.property, "a"
    .p2align 3
    .word   4, 16, 5
    .asciz  "GNU"
    .word   0xc0000000, 4, 3, 0
    .section .note.GNU-stack,"",%progbits
ASM
printf '#include <stdio.h>\nint nopad(void);\nint main(void) { printf("switch_regs mismatches=0 nopad=%%d\\n", nopad()); return 0; }\n' >"$dir/nopad_main.c"
if "$A-gcc" -shared -nostartfiles -o "$dir/libnopad.so" "$dir/nopad.S" &&
   "$A-gcc" -O2 -o "$dir/nopad" "$dir/nopad_main.c" "$dir/libnopad.so" -Wl,-rpath,"$dir"; then
  run "control: BTI enforced (no landing pad)" dies qemu-aarch64 -cpu max "${L[@]}" "$dir/nopad" || live=0
else
  say "control 1 does not build"; live=0
fi
# control 2: a fresh context's return address left unsigned
sed 's/"hint 8"/"nop"/' "$src/src/arch/ctx.c" >"$dir/ctx_nosign.c"
if grep -q '"nop"' "$dir/ctx_nosign.c" && mklib "$dir/libswn.so" "$dir/ctx_nosign.c" &&
   "$A-gcc" -O2 -o "$dir/sw_nosign" "$dir/main.c" "$dir/libswn.so" -Wl,-rpath,"$dir"; then
  run "control: return addresses authenticated (fresh lr unsigned)" dies qemu-aarch64 -cpu max "${L[@]}" "$dir/sw_nosign" || live=0
else
  say "control 2 does not build (ctx.c's pacia1716 not found?)"; live=0
fi
if [[ $fail -ne 0 ]]; then exit 1; fi
if [[ $live -eq 0 ]]; then echo "SKIP: qemu-aarch64 here does not enforce BTI or PAC: the hardened run proves nothing"; exit 77; fi
exit 0
