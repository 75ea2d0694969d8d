#!/usr/bin/env bash
# bench/tpc/python.sh -- Debian's CPython, unmodified, natively and under weft-run, in
# one sitting.
#
#  threads     bench/tpc/py_threads.py: N threading.Threads that each time.sleep(1), all
#              joined -- under weft-run, then natively with --deadline-s twice weft-run's
#              wall time (natively it makes a few thousand a second, so it is stopped
#              there rather than left to run for many minutes).  One line each:
#                experiment=py-threads peer=weft-run|native created= joined= stopped_by=
#                wall_s= create_s= peak_rss_kib= rss_per_thread_b=
#  http        python3 -m http.server (a ThreadingHTTPServer: a thread per connection)
#              serving www/, under ab -r -n REQ -c CONC for GET /index.html, after a warm-up
#              of REQ/10; ROUNDS rounds, natively and under weft-run alternately; the
#              server's peak RSS (VmHWM) at the end.  ab waits AB_TIMEOUT_S (240) for a
#              response, not its 30 s: http.server listens with a backlog of 5
#              (socketserver's request_queue_size), so at C=200 the kernel drops SYNs and
#              some connections wait for the client's retransmissions (1, 3, 7 ... s) --
#              natively too; the req/s then measure that as much as the server.
#              BACKLOG=N runs the same module with request_queue_size raised to N first,
#              so that neither side is held back by dropped SYNs.
#              One line per run, then the medians:
#                experiment=py-http peer=... round=R rps= failed= p95_ms= peak_rss_kib=
#                experiment=py-http summary rps_ratio=weft-run/native rss_ratio=...
#
# Environment: N=100000, REQ=5000, CONC=200, ROUNDS=3, PARTS="threads http", AB_TIMEOUT_S=240, BACKLOG,
# BUILD (default build-release beside bench/), PYTHON=/usr/bin/python3.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
N=${N:-100000}
REQ=${REQ:-5000}
CONC=${CONC:-200}
ROUNDS=${ROUNDS:-3}
PARTS=${PARTS:-"threads http"}
PY=${PYTHON:-/usr/bin/python3}
build=${BUILD:-$repo/build-release}
run=$build/apps/run/weft-run
[ -x "$run" ] || { echo "python.sh: $run is missing (build the weft-run target)" >&2; exit 2; }
[ -x "$PY" ] || { echo "python.sh: $PY is missing (apt-get install python3)" >&2; exit 2; }
ulimit -n "$(ulimit -Hn)"

key() { sed -n "s/.*[[:space:]]$1=\([^[:space:]]*\).*/\1/p; s/^$1=\([^[:space:]]*\).*/\1/p" <<<"$2" | head -1; }
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

if [[ " $PARTS " == *" threads "* ]]; then
  w=$(timeout 900 "$run" "$PY" "$here/py_threads.py" "$N")
  echo "experiment=py-threads peer=weft-run n=$N $w"
  dl=$(awk -v w="$(key wall_s "$w")" 'BEGIN { printf "%.0f", 2 * w }')
  nat=$(timeout 1800 "$PY" "$here/py_threads.py" "$N" --deadline-s "$dl" || true)
  echo "experiment=py-threads peer=native n=$N deadline_s=$dl $nat"
fi

free_port() {
  "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# http_run PEER ROUND: starts the server (under weft-run for weft-run), loads it, stops it
http_run() {
  local peer=$1 round=$2 port pid out hwm
  port=$(free_port)
  local srv=("$PY" -m http.server)
  if [ -n "${BACKLOG:-}" ]; then
    # the same module, run as its own main, with socketserver's backlog raised first
    srv=("$PY" -c 'import runpy, socketserver, sys
socketserver.TCPServer.request_queue_size = int(sys.argv.pop(1))
runpy.run_module("http.server", run_name="__main__", alter_sys=True)' "$BACKLOG")
  fi
  if [ "$peer" = weft-run ]; then
    "$run" "${srv[@]}" "$port" --bind 127.0.0.1 --directory "$repo/www" >/dev/null 2>&1 &
  else
    "${srv[@]}" "$port" --bind 127.0.0.1 --directory "$repo/www" >/dev/null 2>&1 &
  fi
  pid=$!
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/index.html" && break; sleep 0.1; done
  # (under weft-run the server is weft-run's child: python is the process exec'd in place)
  ab -s "${AB_TIMEOUT_S:-240}" -r -q -n $((REQ / 10)) -c "$CONC" "http://127.0.0.1:$port/index.html" >/dev/null 2>&1 || true
  out=$(ab -s "${AB_TIMEOUT_S:-240}" -r -n "$REQ" -c "$CONC" "http://127.0.0.1:$port/index.html" 2>&1 || true)
  hwm=$(awk '/VmHWM/ { print $2 }' "/proc/$pid/status" 2>/dev/null || echo 0)
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  local rps failed p95
  rps=$(awk '/^Requests per second/ { print $4 }' <<<"$out")
  failed=$(awk '/^Failed requests/ { print $3 }' <<<"$out")
  p95=$(awk '$1 == "95%" { print $2 }' <<<"$out")
  echo "experiment=py-http peer=$peer round=$round n=$REQ c=$CONC backlog=${BACKLOG:-5} rps=${rps:-0} failed=${failed:--} p95_ms=${p95:--} peak_rss_kib=${hwm:-0}"
}

if [[ " $PARTS " == *" http "* ]]; then
  command -v ab >/dev/null || { echo "python.sh: ab is not in PATH (apt-get install apache2-utils)" >&2; exit 2; }
  declare -A RPS RSS
  for r in $(seq 1 "$ROUNDS"); do
    for peer in native weft-run; do
      line=$(http_run "$peer" "$r")
      echo "$line"
      RPS[$peer]+="$(key rps "$line") "
      RSS[$peer]+="$(key peak_rss_kib "$line") "
    done
  done
  mr_n=$(tr ' ' '\n' <<<"${RPS[native]}" | grep . | median)
  mr_w=$(tr ' ' '\n' <<<"${RPS[weft-run]}" | grep . | median)
  ms_n=$(tr ' ' '\n' <<<"${RSS[native]}" | grep . | median)
  ms_w=$(tr ' ' '\n' <<<"${RSS[weft-run]}" | grep . | median)
  echo "experiment=py-http summary rounds=$ROUNDS native_rps=$mr_n weft_run_rps=$mr_w" \
       "rps_ratio=$(awk -v a="$mr_n" -v b="$mr_w" 'BEGIN { printf "%.2f", b / a }')" \
       "native_rss_kib=$ms_n weft_run_rss_kib=$ms_w rss_ratio=$(awk -v a="$ms_n" -v b="$ms_w" 'BEGIN { printf "%.2f", b / a }')"
fi
