#!/usr/bin/env bash
# tests/integration/micro_smoke.sh WEFT_BENCH native|emulated -- weft-bench micro as a
# smoke check (issue 28): every benchmark runs a few thousand rounds and says
# status=ok, or status=unsupported where the architecture lacks the feature (switch-tls
# and the hook's trap off x86-64), or status=skipped with its reason where the run
# cannot have it (pingpong-cross with one carrier: WEFT_DETERMINISTIC=1); under qemu-user (a cross build's tests) the output
# must say the figures are an emulator's, natively it must not.
set -uo pipefail
bench=${1:?usage: micro_smoke.sh WEFT_BENCH native|emulated}
want=${2:?usage: micro_smoke.sh WEFT_BENCH native|emulated}
out=$(timeout 300 "$bench" micro --rounds 2000 -n 2000 2>&1)
rc=$?
fail=0
[[ $rc -eq 0 ]] || { echo "FAIL: weft-bench micro exited $rc"; fail=1; }
n=$(grep -c '^experiment=' <<<"$out")
[[ $n -ge 10 ]] || { echo "FAIL: $n result lines, expected one per benchmark (10 or more)"; fail=1; }
bad=$(grep '^experiment=' <<<"$out" | grep -v -e ' status=ok' -e ' status=unsupported' -e ' status=skipped reason=')
[[ -z $bad ]] || { echo "FAIL: benchmarks neither ok, unsupported nor skipped with a reason:"; echo "$bad"; fail=1; }
if [[ $want == emulated ]]; then
  grep -q '^# emulated: .*not speeds' <<<"$out" || { echo "FAIL: no '# emulated' line under emulation"; fail=1; }
else
  ! grep -q '^# emulated' <<<"$out" || { echo "FAIL: '# emulated' said on a native run"; fail=1; }
fi
[[ $fail -eq 0 ]] || { echo "--- output:"; echo "$out"; exit 1; }
echo "ok: $n benchmarks ($(grep -c ' status=unsupported' <<<"$out") unsupported, $(grep -c ' status=skipped' <<<"$out") skipped here), $want"
