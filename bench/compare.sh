#!/usr/bin/env bash
# bench/compare.sh EXPERIMENT [weft-bench args...]
#
# Runs the peer programs that match a weft-bench experiment, then weft-bench
# itself, in the same sitting, and hands the peers' result lines to weft-bench
# (--peer-file) so that its table shows weft, the article and the peers side by
# side.  Every line (peers' and weft's) goes to stdout, ready to be copied
# into notes; "# ..." lines say what was run.
#
#   EXPERIMENT   peers run (with $WEFT_PEERS/runtime/run.sh)
#   threads      park-many go N, park-many java25-virtual N, park-many c-pthread N 60 64
#                (N = weft-bench's -n, default 1000000)
#   sleep-tasks  sleep-tasks go N, sleep-tasks java25-virtual N (N = -n, default 100000)
#   micro        switch boost-context, switch go-gosched, switch go-chan,
#                spawn-join go N, spawn-join java25-virtual N (N = -n, default 1000000),
#                and for pingpong-cross also switch c-pthread-futex 200000 nopin (two
#                pthreads waking each other across cores: the same kind of hand-off);
#                with --only, just the peers of the chosen benchmarks; chan-pingpong and
#                chan-buffered: switch go-chan; mutex: mutex go 1000 1000; select:
#                bench/go/select.go (this repository's, built with go build)
#   cancel-storm (no peer has it: weft-bench cancel-storm alone)
#   file-write   file-write c-write, c-uring, java17-fos, java17-async, java17-async-default
#                (5-byte writes, 2 warm-up + 5 one-second intervals), then every
#                weft-bench file-write mode
#
#   EXPERIMENT   peers run (with $WEFT_PEERS/http/run.sh EXP PEER, REPS=1 here)
#   http-delay   run.sh delay100 PEER for PEERS (default: go java25-virtual java17-pool200)
#                with LOADS = weft-bench's --conc points (C alone gets --requests, default
#                3000; default "50 150 300 500 1000 1000:20000"), then weft-bench http-delay.
#                Points with C >= 10000 (--big) are weft's only: ab cannot hold them.
#   http-every10 run.sh delay2s-every10 PEER (same default PEERS; ab -r -c 100 -n 10000),
#                then weft-bench http-every10
#   http-db      no run.sh peer: weft-bench http-db runs its Java peers (bench/http-db/) itself,
#                in the same run, against the PostgreSQL it starts; compare.sh just runs it
#   parallel     no run.sh peer: weft-bench parallel runs its peers (pthreads inside it,
#                OpenMP: weft-par-omp beside it, Java 17 streams: bench/parallel/peer.sh)
#                itself, in the same run; compare.sh waits for a quiet machine and runs it
#   http-static  run.sh static-pinned nginx-w1 (CONNS="100 1000"), then the same
#                run.sh procedure for weft: PEER cmd:'WEFT_HTTPD --carriers 1 --port {port}
#                --root {docroot} --quiet' (LABEL=weft): server pinned to CPU 1, wrk -t1
#                (keep-alive, 10 s) to CPU 0; then both sets of lines and a side-by-side
#                summary (req/s at each C, ratio weft/nginx, server CPU per request).
#                No weft-bench run; PEERS="nginx-w1 go ..." adds peers to the summary.
#   https-static    bench/https.sh static: keep-alive over TLS 1.3, weft-httpd --carriers 1
#                   against nginx (one worker) and h2o (one thread), each pinned to CPU 1,
#                   wrk -t1 on CPU 0 at 100 and 1000 connections, REPS=3 alternated; req/s
#                   and server CPU per request, with the ratios (see bench/https.sh)
#   https-handshake bench/https.sh handshake: a full TLS 1.3 handshake per request
#                   (no keep-alive, no resumption), weft-load as the client: handshakes/s
#                   and server CPU per handshake against the same two peers
#   A peer that cannot run here (its toolchain missing, its build or start failing) is
#   skipped with a message on stderr and "# skipped" in the output; the rest still run.
#   What run.sh needs: ab (delay), wrk and taskset (static), curl, ss, pgrep, setsid,
#   /usr/bin/time; go for go; java + javac (17) for java17-*; $JAVA25 (default
#   /usr/lib/jvm/temurin-25-jdk-amd64/bin/java) for java25-*; node; nginx for nginx-wN.
#
# Environment:
#   PEERS="go java25-virtual"  run only these peers (names as in run.sh); for http-*,
#                              the peers to run
#   WEFT_PEERS                 the peers directory (default: ../shared/peers beside
#                              the source tree, i.e. ../../shared/peers from this
#                              script); weft-bench gets it too, for the docroot
#   WEFT_BENCH                 the weft-bench binary (default: build/apps/bench/weft-bench,
#                              else build-release/apps/bench/weft-bench)
#   WEFT_HTTPD                 weft-httpd (default: ../httpd/weft-httpd beside weft-bench)
#   QUIET_WAIT_S               wait at most this long for a quiet machine (< 25% CPU
#                              busy) before each run (default 10; 0 = do not wait);
#                              weft-bench http-* also waits so before each load
#   REPS (default 1 here), CONNS, DURATION, QUIET, QUIET_MAX, OTHER_MAX, RETRIES,
#   BUILD, JAVA25           passed on to the http run.sh (see its header); its LOADS
#                           is set from --conc and --requests
# Examples:
#   WEFT_BENCH=build-helper/apps/bench/weft-bench bench/compare.sh micro --rounds 1000000
#   WEFT_BENCH=build-release/apps/bench/weft-bench bench/compare.sh http-delay
#   REPS=3 bench/compare.sh http-delay --conc "50 150 300 500 1000 1000:20000 2000:10000"
#   bench/compare.sh http-every10
#   bench/compare.sh http-static
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
peers_dir=${WEFT_PEERS:-$here/../../shared/peers}
peers_dir=$(cd "$peers_dir" 2>/dev/null && pwd) || { echo "compare.sh: no peers directory ${WEFT_PEERS:-$here/../../shared/peers}" >&2; exit 2; }
export WEFT_PEERS=$peers_dir # weft-bench's docroot: the peers'
bench=${WEFT_BENCH:-$repo/build/apps/bench/weft-bench}
if [[ -z ${WEFT_BENCH:-} && ! -x $bench && -x $repo/build-release/apps/bench/weft-bench ]]; then
  bench=$repo/build-release/apps/bench/weft-bench
fi
quiet_wait=${QUIET_WAIT_S:-10}

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
[[ $# -ge 1 && $1 != -h && $1 != --help ]] || usage
exp=$1
shift

if [[ $exp == parallel ]]; then
  [[ -x $bench ]] || { echo "compare.sh: no weft-bench at $bench (build it, or set WEFT_BENCH)" >&2; exit 2; }
  wait_quiet_early() { # (busy/wait_quiet are defined further down; CPU-bound runs need a quiet machine)
    local t b0 i0 b1 i1
    for ((t = 0; t < quiet_wait * 2; t++)); do
      read -r b0 i0 < <(awk '/^cpu /{print $2+$3+$4+$7+$8, $5+$6}' /proc/stat); sleep 0.5
      read -r b1 i1 < <(awk '/^cpu /{print $2+$3+$4+$7+$8, $5+$6}' /proc/stat)
      (( 100 * (b1 - b0) / (b1 - b0 + i1 - i0 + 1) < 25 )) && return 0
    done
    echo "# note: the machine was still busy after ${quiet_wait}s"
  }
  wait_quiet_early
  echo "# compare.sh parallel $* ($(date -u +%Y-%m-%dT%H:%M:%SZ)): the peers run inside weft-bench parallel"
  exec "$bench" parallel "$@"
fi

case $exp in
  http-*) run=$peers_dir/http/run.sh ;;
  *) run=$peers_dir/runtime/run.sh ;;
esac
[[ -x $run ]] || { echo "compare.sh: no peer runner at $run (set WEFT_PEERS)" >&2; exit 2; }
if [[ $exp != http-static ]]; then
  [[ -x $bench ]] || { echo "compare.sh: no weft-bench at $bench (build it, or set WEFT_BENCH)" >&2; exit 2; }
fi

# The weft-bench options that decide which peers run and with which size.
n="" only="" sleep_ms="" conc="" big=0
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  a=${args[i]}
  case $a in
    -n|--requests) n=${args[i+1]:-} ;;
    -n*) n=${a#-n} ;;
    --requests=*) n=${a#--requests=} ;;
    --only) only=${args[i+1]:-} ;;
    --only=*) only=${a#--only=} ;;
    --sleep-ms) sleep_ms=${args[i+1]:-} ;;
    --sleep-ms=*) sleep_ms=${a#--sleep-ms=} ;;
    --conc) conc=${args[i+1]:-} ;;
    --conc=*) conc=${a#--conc=} ;;
    --big) big=1 ;;
  esac
done

# % of the machine's CPU busy over 0.5 s
busy() {
  local b0 i0 b1 i1
  read -r b0 i0 < <(awk '/^cpu /{print $2+$3+$4+$7+$8, $5+$6}' /proc/stat); sleep 0.5
  read -r b1 i1 < <(awk '/^cpu /{print $2+$3+$4+$7+$8, $5+$6}' /proc/stat)
  echo $(( 100 * (b1 - b0) / (b1 - b0 + i1 - i0 + 1) ))
}
wait_quiet() {
  local t
  for ((t = 0; t < quiet_wait * 2; t++)); do
    (( $(busy) < 25 )) && return 0
  done
  echo "# note: the machine was still busy after ${quiet_wait}s"
}

lines=$(mktemp)
tmp=$(mktemp -d)
trap 'rm -rf "$lines" "$tmp"' EXIT

# ---------------------------------------------------------------------------
# HTTP: $WEFT_PEERS/http/run.sh
# ---------------------------------------------------------------------------

# Why PEER cannot run EXPERIMENT here ("" when it can).
http_missing() {
  local e=$1 p=$2 miss=() t
  for t in curl ss pgrep setsid; do command -v "$t" >/dev/null || miss+=("$t"); done
  [[ -x /usr/bin/time ]] || miss+=(/usr/bin/time)
  case $e in
    static*) command -v wrk >/dev/null || miss+=(wrk); [[ $e != static-pinned ]] || command -v taskset >/dev/null || miss+=(taskset) ;;
    *) command -v ab >/dev/null || miss+=("ab (apache2-utils)") ;;
  esac
  case $p in
    go) command -v go >/dev/null || [[ -x ${BUILD:-/tmp/peers-http-build}/go-server ]] || miss+=("go (the Go toolchain)") ;;
    java17-*) command -v java >/dev/null || miss+=(java); command -v javac >/dev/null || miss+=(javac) ;;
    java25-*) [[ -x ${JAVA25:-/usr/lib/jvm/temurin-25-jdk-amd64/bin/java} ]] || miss+=("Java 25 at ${JAVA25:-/usr/lib/jvm/temurin-25-jdk-amd64/bin/java} (set JAVA25)")
              command -v javac >/dev/null || miss+=(javac) ;;
    node) command -v node >/dev/null || miss+=(node) ;;
    nginx-w*) command -v nginx >/dev/null || miss+=(nginx)
              [[ $e == static* ]] || { echo "nginx serves static files only (no per-request delay)"; return; } ;;
    cmd:*) ;;
    *) echo "unknown peer (run.sh knows go, java17-pool200, java17-pool200-fair, java17-thread, java25-virtual, java25-pool200, node, nginx-wN)"; return ;;
  esac
  ((${#miss[@]} == 0)) || echo "needs ${miss[*]}"
}

skipped=()
# http_peer EXPERIMENT PEER [LABEL]: runs run.sh, prints its lines, keeps the result lines.
http_peer() {
  local e=$1 p=$2 label=${3:-} why rc out=$tmp/out err=$tmp/err name
  name=${label:-$p}
  why=$(http_missing "$e" "$p")
  if [[ -n $why ]]; then
    echo "compare.sh: skipping peer $name: $why" >&2
    echo "# skipped $name: $why"
    skipped+=("$name")
    return 0
  fi
  wait_quiet
  echo "# run.sh $e $p${label:+ (LABEL=$label)}"
  set +e
  if [[ -n $label ]]; then LABEL=$label "$run" "$e" "$p" 2>"$err" | tee "$out"
  else "$run" "$e" "$p" 2>"$err" | tee "$out"; fi
  rc=${PIPESTATUS[0]}
  set -e
  if ! grep -v '^[[:space:]]*#' "$out" | grep 'experiment=' >>"$lines"; then
    echo "compare.sh: peer $name gave no result line (run.sh exit $rc); its last messages:" >&2
    tail -n 8 "$err" | sed 's/^/  /' >&2
    echo "# skipped $name: run.sh exit $rc, no result line"
    skipped+=("$name")
  elif ((rc != 0)); then
    echo "compare.sh: peer $name: run.sh exit $rc; its last messages:" >&2
    tail -n 8 "$err" | sed 's/^/  /' >&2
  fi
}

# weft-bench's --conc points as run.sh's LOADS ("C:N ..."); C >= 10000 left out
http_loads() {
  local list=$1 n=$2 out="" e c
  for e in ${list//,/ }; do
    if [[ $e == *:* ]]; then c=${e%%:*}; else c=$e; e=$e:$n; fi
    if ((c >= 10000)); then echo "# the peers skip C=$c (ab cannot hold it; weft uses weft-load)" >&2; continue; fi
    out+="${out:+ }$e"
  done
  echo "$out"
}

# Side-by-side summary of static lines: req/s per label at each concurrency.
static_summary() {
  awk -v want="$1" '
    /^[[:space:]]*#/ || $0 !~ /experiment=/ { next }
    {
      delete kv
      for (i = 1; i <= NF; i++) { j = index($i, "="); if (j) kv[substr($i, 1, j - 1)] = substr($i, j + 1) }
      if (kv["experiment"] != want || kv["rps"] == "" || kv["rps"] == "NA") next
      p = kv["peer"]; c = kv["concurrency"]; k = p SUBSEP c
      if (!(p in seen)) { seen[p] = 1; order[++np] = p }
      if (!(c in cseen)) { cseen[c] = 1; corder[++nc] = c }
      if (kv["rep"] == "median" || !(k in med)) { rps[k] = kv["rps"]; cpu[k] = kv["srv_cpu_us_req"]; fail[k] = kv["failed"]; anyfail += fail[k] > 0 }
      if (kv["rep"] == "median") med[k] = 1
    }
    END {
      if (!np) { print "(no result lines to summarize)"; exit }
      printf "  %-6s", "conns"
      for (i = 1; i <= np; i++) printf "  %16s", order[i] " req/s"
      if (("weft" in seen) && ("nginx-w1" in seen)) printf "  %10s", "weft/nginx"
      for (i = 1; i <= np; i++) printf "  %18s", order[i] " us/req"
      printf "\n"
      for (j = 1; j <= nc; j++) {
        c = corder[j]; printf "  %-6s", c
        for (i = 1; i <= np; i++) { k = order[i] SUBSEP c; printf "  %16s", (k in rps) ? sprintf("%.0f%s", rps[k], fail[k] > 0 ? "!" : "") : "-" }
        if (("weft" in seen) && ("nginx-w1" in seen)) {
          a = "weft" SUBSEP c; b = "nginx-w1" SUBSEP c
          printf "  %10s", ((a in rps) && (b in rps) && rps[b] > 0) ? sprintf("%.2f", rps[a] / rps[b]) : "-"
        }
        for (i = 1; i <= np; i++) { k = order[i] SUBSEP c; printf "  %18s", (k in cpu && cpu[k] != "") ? cpu[k] : "-" }
        printf "\n"
      }
      if (anyfail) print "  (! = some requests failed; see the lines)"
    }' "$lines"
}

if [[ $exp == https-static || $exp == https-handshake ]]; then
  (($# == 0)) || { echo "compare.sh: $exp takes no weft-bench arguments (SERVERS, REPS, CONNS, DURATION are bench/https.sh's)" >&2; exit 2; }
  export WEFT_HTTPD=${WEFT_HTTPD:-$(dirname "$bench")/../httpd/weft-httpd}
  export WEFT_LOAD=${WEFT_LOAD:-$(dirname "$bench")/../load/weft-load}
  exec "$here/https.sh" "${exp#https-}"
fi
if [[ $exp == http-db ]]; then
  echo "# compare.sh http-db $*: the Java peers run inside weft-bench http-db"
  exec "$bench" http-db "$@"
fi
if [[ $exp == http-* ]]; then
  export REPS=${REPS:-1}
  echo "# compare.sh $exp $* ($(date -u +%Y-%m-%dT%H:%M:%SZ)); peers from $peers_dir/http, REPS=$REPS"
  case $exp in
    http-delay|http-every10)
      if [[ $exp == http-delay ]]; then
        pexp=delay100; dconc="50 150 300 500 1000 1000:20000"; dn=3000
      else
        pexp=delay2s-every10; dconc=100; dn=10000
      fi
      loads=$(http_loads "${conc:-$dconc}" "${n:-$dn}")
      ((big == 0)) || [[ $exp != http-delay ]] || echo "# --big: C=10000 is weft's only (ab cannot hold it)"
      if [[ -n $loads ]]; then
        export LOADS=$loads
        echo "# LOADS=\"$LOADS\""
        for p in ${PEERS:-go java25-virtual java17-pool200}; do http_peer "$pexp" "$p"; done
      fi
      wait_quiet
      echo "# $bench $exp${*:+ $*} --peer-file (the lines above)"
      rc=0
      "$bench" "$exp" --peer-file "$lines" "$@" || rc=$?
      ((${#skipped[@]} == 0)) || echo "compare.sh: skipped peers: ${skipped[*]}" >&2
      exit $rc ;;
    http-static)
      (($# == 0)) || { echo "compare.sh: http-static takes no weft-bench arguments (CONNS, DURATION, REPS are run.sh's)" >&2; exit 2; }
      httpd=${WEFT_HTTPD:-$(dirname "$bench")/../httpd/weft-httpd}
      [[ -x $httpd ]] || { echo "compare.sh: no weft-httpd at $httpd (build the weft-httpd target, or set WEFT_HTTPD)" >&2; exit 2; }
      httpd=$(cd "$(dirname "$httpd")" && pwd)/$(basename "$httpd")
      export CONNS=${CONNS:-100 1000}
      echo "# CONNS=\"$CONNS\"; server pinned to CPU 1, wrk to CPU 0"
      for p in ${PEERS:-nginx-w1}; do http_peer static-pinned "$p"; done
      http_peer static-pinned "cmd:$(printf '%q' "$httpd") --carriers 1 --port {port} --root {docroot} --quiet" weft
      echo
      echo "# result lines (static-pinned)"
      cat "$lines"
      echo
      echo "http-static: hello.html with keep-alive, wrk -t1 -d${DURATION:-10}s pinned to CPU 0, server pinned to CPU 1"
      echo "(weft: weft-httpd --carriers 1; nginx-w1: one worker; the same run.sh procedure; REPS=$REPS)"
      static_summary static-pinned
      if ((${#skipped[@]})); then echo "compare.sh: skipped: ${skipped[*]}" >&2; exit 1; fi
      exit 0 ;;
    *)
      echo "compare.sh: unknown experiment '$exp' (threads, sleep-tasks, micro, http-delay, http-every10, http-static)" >&2
      exit 2 ;;
  esac
fi

# ---------------------------------------------------------------------------
# runtime experiments: $WEFT_PEERS/runtime/run.sh
# ---------------------------------------------------------------------------

# Each job: "PEER_EXPERIMENT PEER [ARGS...]".
jobs=()
wants() { [[ -z $only || ,$only, == *,$1,* ]]; }
case $exp in
  threads)
    N=${n:-1000000}
    jobs=("park-many go $N" "park-many java25-virtual $N" "park-many c-pthread $N 60 64") ;;
  sleep-tasks)
    N=${n:-100000}
    if [[ -n $sleep_ms && $sleep_ms != 1000 ]]; then
      echo "compare.sh: note: the peers sleep 1000 ms per task, weft $sleep_ms ms; wall times will not compare" >&2
    fi
    jobs=("sleep-tasks go $N" "sleep-tasks java25-virtual $N") ;;
  micro)
    N=${n:-1000000}
    if wants switch; then jobs+=("switch boost-context" "switch go-gosched"); fi
    if wants switch || wants pingpong || wants pingpong-cross; then jobs+=("switch go-chan"); fi
    if wants pingpong-cross; then jobs+=("switch c-pthread-futex 200000 nopin"); fi
    if wants spawn-join; then jobs+=("spawn-join go $N" "spawn-join java25-virtual $N"); fi
    if (wants chan-pingpong || wants chan-buffered) && [[ " ${jobs[*]-} " != *"switch go-chan"* ]]; then jobs+=("switch go-chan"); fi
    if wants mutex; then jobs+=("mutex go 1000 1000"); fi
    if wants select; then jobs+=("local:select go"); fi ;;
  cancel-storm) ;; # no peer has the experiment: weft alone
  file-write)
    jobs=("file-write c-write" "file-write c-uring" "file-write java17-fos" "file-write java17-async"
          "file-write java17-async-default") ;;
  *)
    echo "compare.sh: unknown experiment '$exp' (threads, sleep-tasks, micro, cancel-storm, file-write, parallel, http-delay, http-every10, http-db, http-static, https-static, https-handshake)" >&2
    exit 2 ;;
esac

if [[ -n ${PEERS:-} ]]; then
  kept=()
  for j in "${jobs[@]}"; do
    read -r _ peer _ <<<"$j"
    if [[ " $PEERS " == *" $peer "* ]]; then kept+=("$j"); fi
  done
  jobs=("${kept[@]+"${kept[@]}"}")
fi

echo "# compare.sh $exp $* ($(date -u +%Y-%m-%dT%H:%M:%SZ)); peers from $peers_dir/runtime"
for j in "${jobs[@]+"${jobs[@]}"}"; do
  read -r -a job <<<"$j"
  wait_quiet
  if [[ ${job[0]} == local:* ]]; then
    # a peer program of this repository (bench/go/NAME.go), not of ../shared/peers
    name=${job[0]#local:}
    echo "# go run bench/go/$name.go"
    mkdir -p /tmp/weft-peers-local
    line=$( (cd "$here/go" && GOCACHE=${GOCACHE:-/tmp/weft-peers-local/gocache} go build -o "/tmp/weft-peers-local/$name" "$name.go" \
             && "/tmp/weft-peers-local/$name") 2>&1 | grep 'experiment=' | tail -1) || true
    [[ -n $line ]] || line="experiment=$name peer=${job[1]} status=error msg=no_result_line"
    echo "$line"
    echo "$line" >>"$lines"
    continue
  fi
  echo "# run.sh ${job[*]}"
  line=$("$run" "${job[@]}" 2>&1 | grep 'experiment=' | tail -1) || true
  [[ -n $line ]] || line="experiment=${job[0]} peer=${job[1]} status=error msg=no_result_line"
  echo "$line"
  echo "$line" >>"$lines"
done

wait_quiet
echo "# $bench $exp${*:+ $*}"
rc=0
"$bench" "$exp" --peer-file "$lines" "$@" || rc=$?
exit $rc
