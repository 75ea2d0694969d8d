#!/usr/bin/env bash
# bench/tpc/startup.sh [N] -- what weft-run adds to a program's start and exit, in one
# sitting.
#
# Each round execs each program N times natively and N times under weft-run, one
# after the other, and prints the wall time of one exec (ms, the mean of the N).  The
# programs: /bin/true (nothing but the start and exit) and `python3 -c pass` (a
# program that loads a few dozen libraries).  A weft-run'd exec starts the runtime in
# the exec'd process (libweft-hook.so: its carriers, rings, monitor, the trap), so a
# shell script or a test suite that spawns processes pays it at each one.  Lines:
#   experiment=startup round=R prog=P native_ms=A weft_run_ms=B added_ms=B-A
#   experiment=startup summary prog=P rounds=R median_native_ms= median_weft_run_ms=
#
#   N        execs per program and side per round (default 200)
# Environment: ROUNDS=3, BUILD (default build-release beside bench/), PYTHON=/usr/bin/python3.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
N=${1:-200}
ROUNDS=${ROUNDS:-3}
build=${BUILD:-$repo/build-release}
run=$build/apps/run/weft-run
PY=${PYTHON:-/usr/bin/python3}
[ -x "$run" ] || { echo "startup.sh: no $run: build it first (cmake --build $build)" >&2; exit 2; }

# mean ms of one exec of "$@", N times
per_exec() {
  local s e
  s=$(date +%s%N)
  for ((i = 0; i < N; i++)); do "$@" >/dev/null 2>&1 || true; done
  e=$(date +%s%N)
  awk -v d=$((e - s)) -v n="$N" 'BEGIN { printf "%.3f", d / n / 1e6 }'
}

median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

echo "# bench/tpc/startup.sh $N ($(date -u +%Y-%m-%dT%H:%M:%SZ)); rounds=$ROUNDS nproc=$(nproc) kernel=$(uname -r)"
for prog in true python; do
  if [ $prog = true ]; then cmd=(/bin/true); else cmd=("$PY" -c pass); fi
  nat=() wr=()
  for ((r = 1; r <= ROUNDS; r++)); do
    a=$(per_exec "${cmd[@]}")
    b=$(per_exec "$run" "${cmd[@]}")
    nat+=("$a") wr+=("$b")
    echo "experiment=startup round=$r prog=$prog native_ms=$a weft_run_ms=$b added_ms=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b - a }')"
  done
  echo "experiment=startup summary prog=$prog rounds=$ROUNDS median_native_ms=$(printf '%s\n' "${nat[@]}" | median) median_weft_run_ms=$(printf '%s\n' "${wr[@]}" | median)"
done
