#!/usr/bin/env bash
# bench/https.sh static|handshake -- weft-httpd's HTTPS against nginx (one worker) and
# h2o (one thread), in one sitting, each server pinned to CPU 1 and the client to CPU 0.
#
#   static      keep-alive GET /hello.html over TLS 1.3, wrk -t1 for DURATION s at each
#               of CONNS connections (after a 3 s warm-up at the largest): req/s, and the
#               server's CPU per request (its processes' utime+stime over the load / the
#               requests wrk counted) -- the figure that does not depend on which side of
#               the pair is the bottleneck
#   handshake   a new connection per request (Connection: close), TLS 1.3, no resumption
#               (every connection a full handshake: ECDHE X25519 + an ECDSA P-256
#               signature), weft-load --carriers 1 -c HS_CONNS for DURATION s: handshakes
#               a second, and the server's CPU per handshake.  One client CPU may not keep
#               one server CPU busy (the client's half of a handshake costs about as much
#               as the server's): the CPU per handshake is the comparison, the rate says
#               which side was the bottleneck (srv_cpu_pct).
# Servers (SERVERS, in this order each repetition; REPS repetitions alternate them):
#   nginx-w1   Debian's nginx, one worker: ssl_protocols TLSv1.2 TLSv1.3, access_log off,
#              keepalive_requests raised to 1000000 (its default of 1000 would add a
#              handshake every 1000 requests that the others do not pay)
#   h2o-t1     Debian's h2o, num-threads 1, minimum-version TLSv1.2
#   weft       weft-httpd --carriers 1 --tls-cert --tls-key (its defaults: TLS 1.2 and 1.3)
# All three get the same certificate: self-signed ECDSA P-256, made here.  OpenSSL
# picks the cipher: each line says what the server negotiated (openssl s_client).
# Output: one line per load,
#   experiment=https-static|https-handshake peer=P rep=R concurrency=C rps=X
#     srv_cpu_us_req=Y srv_cpu_pct=Z client_cpu_us_req=W client_cpu_pct=V requests=N errors=E
#     tls=PROTOCOL/CIPHER
# (client_*: the load generator's own user+system CPU, /usr/bin/time: a client near 100 % of
# its CPU is the bottleneck, and its CPU per request says what a server costs the client)
# and a summary of the medians with the ratios weft/nginx and weft/h2o (req/s: higher is
# better for weft; CPU per request: lower is better for weft).
# Environment: SERVERS, REPS=3, CONNS="100 1000", HS_CONNS=64, DURATION=10,
#   WEFT_HTTPD, WEFT_LOAD (default build-release/apps/...), WEFT_PEERS (the peers
#   directory, for its docroot), QUIET_WAIT_S=30 (wait up to this long for the machine
#   to go below 25 % CPU busy before each load), CLIENT_EVENTS (perf events, comma-separated,
#   e.g. syscalls:sys_enter_read,syscalls:sys_enter_epoll_wait,sched:sched_wakeup: the load
#   runs under `perf stat` -- its own process only, not the server's -- and each line gains
#   ev_EVENT=count per request: what a server costs the client beyond its CPU time; needs
#   perf and root).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
(($# == 1)) || usage
case $1 in static|handshake) EXP=$1 ;; *) usage ;; esac
SERVERS=${SERVERS:-"nginx-w1 h2o-t1 weft"}
REPS=${REPS:-3}
CONNS=${CONNS:-"100 1000"}
HS_CONNS=${HS_CONNS:-64}
DURATION=${DURATION:-10}
QUIET_WAIT_S=${QUIET_WAIT_S:-30}
httpd=${WEFT_HTTPD:-$repo/build-release/apps/httpd/weft-httpd}
load=${WEFT_LOAD:-$repo/build-release/apps/load/weft-load}
peers=$(cd "${WEFT_PEERS:-$repo/../shared/peers}" && pwd)
docroot=$peers/http/docroot
HZ=$(getconf CLK_TCK)
ulimit -n "$(ulimit -Hn)"

need=()
for t in openssl curl taskset setsid ss pgrep; do command -v "$t" >/dev/null || need+=("$t"); done
[[ -x /usr/bin/time ]] || need+=(/usr/bin/time)
[[ $EXP == handshake ]] || command -v wrk >/dev/null || need+=(wrk)
for s in $SERVERS; do
  case $s in
    nginx-w*) command -v nginx >/dev/null || need+=(nginx) ;;
    h2o-t*) command -v h2o >/dev/null || need+=(h2o) ;;
    weft) [[ -x $httpd ]] || need+=("$httpd") ;;
    *) echo "https.sh: unknown server $s (nginx-wN, h2o-tN, weft)" >&2; exit 2 ;;
  esac
done
[[ $EXP == static || -x $load ]] || need+=("$load")
((${#need[@]} == 0)) || { echo "https.sh: needs ${need[*]} (scripts/deps.sh installs them)" >&2; exit 2; }

work=$(mktemp -d /tmp/weft-https.XXXXXX)
chmod 755 "$work"
srv_pgid=
stop_server() {
  [[ -n $srv_pgid ]] || return 0
  kill -TERM -- "-$srv_pgid" 2>/dev/null || true
  for _ in $(seq 50); do pgrep -g "$srv_pgid" >/dev/null || break; sleep 0.1; done
  kill -KILL -- "-$srv_pgid" 2>/dev/null || true
  srv_pgid=
}
trap 'stop_server; rm -rf "$work"' EXIT

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
  -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null
chmod 644 "$work/key.pem" "$work/cert.pem" # (the throwaway key of a benchmark)

free_port() {
  local p
  for p in $(shuf -i 20000-29999 -n 50); do # (below the ephemeral range: no client socket holds it)
    ss -Htln "sport = :$p" | grep -q . || { echo "$p"; return; }
  done
  echo "https.sh: no free port" >&2; exit 1
}

busy_pct() { # the machine's busy CPU % over 1 s
  local a b
  a=$(awk '/^cpu /{print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat); sleep 1
  b=$(awk '/^cpu /{print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat)
  awk -v a="$a" -v b="$b" 'BEGIN {split(a, x); split(b, y); t = y[2] - x[2]; print (t > 0 ? int(100 * (y[1] - x[1]) / t) : 0)}'
}
wait_quiet() {
  local t0=$SECONDS
  while (($(busy_pct) >= 25 && SECONDS - t0 < QUIET_WAIT_S)); do :; done
}

# the server's CPU ticks: utime + stime of every process in its group
srv_ticks() {
  local p s=0 t
  for p in $(pgrep -g "$srv_pgid"); do
    t=$(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null) || continue
    s=$((s + t))
  done
  echo "$s"
}

start_server() { # NAME PORT
  local name=$1 port=$2 run=$work/$1
  mkdir -p "$run"
  chmod 777 "$run"
  case $name in
    nginx-w*)
      cat >"$run/nginx.conf" <<EOF
worker_processes ${name#nginx-w};
user nobody nogroup;
daemon off;
pid $run/nginx.pid;
error_log $run/error.log warn;
events { worker_connections 16384; }
http {
    access_log off;
    types { text/html html; }
    default_type application/octet-stream;
    client_body_temp_path $run/client_body;
    proxy_temp_path $run/proxy;
    fastcgi_temp_path $run/fastcgi;
    uwsgi_temp_path $run/uwsgi;
    scgi_temp_path $run/scgi;
    keepalive_requests 1000000;
    server {
        listen 127.0.0.1:$port ssl backlog=4096;
        ssl_certificate $work/cert.pem;
        ssl_certificate_key $work/key.pem;
        ssl_protocols TLSv1.2 TLSv1.3;
        root $docroot;
    }
}
EOF
      taskset -c 1 setsid nginx -c "$run/nginx.conf" -e "$run/error.log" >"$run/out.log" 2>&1 &
      ;;
    h2o-t*)
      cat >"$run/h2o.conf" <<EOF
num-threads: ${name#h2o-t}
user: nobody
pid-file: $run/h2o.pid
error-log: $run/error.log
max-connections: 16384
listen:
  host: 127.0.0.1
  port: $port
  ssl:
    certificate-file: $work/cert.pem
    key-file: $work/key.pem
    minimum-version: TLSv1.2
hosts:
  default:
    paths:
      /:
        file.dir: $docroot
EOF
      taskset -c 1 setsid h2o -c "$run/h2o.conf" >"$run/out.log" 2>&1 &
      ;;
    weft)
      taskset -c 1 setsid "$httpd" --carriers 1 --port "$port" --root "$docroot" --tls-cert "$work/cert.pem" \
        --tls-key "$work/key.pem" --quiet >"$run/out.log" 2>&1 &
      ;;
  esac
  srv_pgid=$!
  for _ in $(seq 100); do
    curl -sk -o /dev/null "https://127.0.0.1:$port/hello.html" && return 0
    sleep 0.1
  done
  echo "https.sh: $name did not answer on port $port; its log:" >&2
  tail -n 5 "$run"/*.log >&2 || true
  stop_server
  return 1
}

tls_of() { # PORT: what the server negotiates with a TLS 1.3 client
  openssl s_client -connect "127.0.0.1:$1" -tls1_3 </dev/null 2>/dev/null |
    awk '/^New, /{p = $2; c = $NF} END {printf "%s/%s", p ? p : "?", c ? c : "?"}' | tr -d ','
}

lines=$work/lines
: >"$lines"
emit() { echo "$1"; echo "$1" >>"$lines"; }

# one load against the server on PORT; prints its line
load_once() { # NAME REP PORT C TLS
  local name=$1 rep=$2 port=$3 c=$4 tls=$5 log t0 t1 w0 w1 req rps err cl
  log=$work/$name-rep$rep-c$c.log
  wait_quiet
  t0=$(srv_ticks); w0=$(date +%s%N)
  local perf=()
  [[ -z ${CLIENT_EVENTS:-} ]] || perf=(perf stat -x, -e "$CLIENT_EVENTS" -o "$log.perf")
  if [[ $EXP == static ]]; then
    taskset -c 0 "${perf[@]}" /usr/bin/time -f '%U %S' -o "$log.time" wrk -t1 -c"$c" -d"${DURATION}s" \
      "https://127.0.0.1:$port/hello.html" >"$log" 2>&1 || true
  else
    taskset -c 0 "${perf[@]}" /usr/bin/time -f '%U %S' -o "$log.time" "$load" --carriers 1 -c "$c" -t "$DURATION" \
      --tls-version 1.3 -q "https://127.0.0.1:$port/hello.html" >"$log" 2>&1 || true
  fi
  t1=$(srv_ticks); w1=$(date +%s%N)
  if [[ $EXP == static ]]; then
    req=$(awk '/requests in/ {print $1}' "$log")
    err=$(awk '/Socket errors:/ {gsub(",", ""); s += $4 + $6 + $8 + $10} /Non-2xx/ {s += $NF} END {print s + 0}' "$log")
  else
    req=$(grep -o 'complete=[0-9]*' "$log" | cut -d= -f2)
    err=$(grep -o ' failed=[0-9]*' "$log" | cut -d= -f2)
  fi
  req=${req:-0} err=${err:-NA}
  cl=$(tail -n 1 "$log.time" 2>/dev/null | awk '{print $1 + $2}')
  awk -v pre="experiment=https-$EXP peer=$name rep=$rep concurrency=$c" -v req="$req" -v err="$err" -v tls="$tls" \
      -v t="$((t1 - t0))" -v hz="$HZ" -v ns="$((w1 - w0))" -v cl="${cl:-0}" 'BEGIN {
    wall = ns / 1e9; cpu = t / hz
    printf "%s rps=%.0f srv_cpu_us_req=%s srv_cpu_pct=%.0f client_cpu_us_req=%s client_cpu_pct=%.0f requests=%d errors=%s tls=%s\n",
      pre, req / wall, (req > 0) ? sprintf("%.2f", cpu * 1e6 / req) : "NA", 100 * cpu / wall,
      (req > 0) ? sprintf("%.2f", cl * 1e6 / req) : "NA", 100 * cl / wall, req, err, tls }' |
    { # (perf stat -x, lines: count,unit,event,...)
      read -r line
      if [[ -n ${CLIENT_EVENTS:-} && -s $log.perf ]]; then
        line+=$(awk -F, -v req="$req" '$3 != "" && $1 ~ /^[0-9]+$/ {
          e = $3; sub(/^[^:]*:/, "", e); printf " ev_%s=%s", e, (req > 0) ? sprintf("%.3f", $1 / req) : "NA" }' "$log.perf")
      fi
      echo "$line"
    }
}

if [[ $EXP == static ]]; then points=$CONNS; else points=$HS_CONNS; fi
echo "# bench/https.sh $EXP ($(date -u +%Y-%m-%dT%H:%M:%SZ)): servers on CPU 1, client on CPU 0; SERVERS=\"$SERVERS\" REPS=$REPS DURATION=$DURATION connections=\"$points\""
for rep in $(seq "$REPS"); do
  for name in $SERVERS; do
    port=$(free_port)
    start_server "$name" "$port" || { echo "# skipped $name (rep $rep): it did not start"; continue; }
    tls=$(tls_of "$port")
    if [[ $EXP == static ]]; then # warm-up: the largest count, 3 s
      taskset -c 0 wrk -t1 -c"$(tr ' ' '\n' <<<"$CONNS" | sort -n | tail -n 1)" -d3s \
        "https://127.0.0.1:$port/hello.html" >/dev/null 2>&1 || true
    fi
    for c in $points; do emit "$(load_once "$name" "$rep" "$port" "$c" "$tls")"; done
    stop_server
  done
done

echo
echo "https-$EXP: medians over $REPS repetitions (req/s; server CPU us per request)"
awk '
  { delete kv; for (i = 1; i <= NF; i++) { j = index($i, "="); if (j) kv[substr($i, 1, j - 1)] = substr($i, j + 1) } }
  kv["rps"] == "" { next }
  {
    p = kv["peer"]; c = kv["concurrency"]; k = p SUBSEP c
    if (!(p in seen)) { seen[p] = 1; order[++np] = p }
    if (!(c in cs)) { cs[c] = 1; corder[++nc] = c }
    n[k]++; rps[k, n[k]] = kv["rps"]; cpu[k, n[k]] = kv["srv_cpu_us_req"]
  }
  function med(a, k, m,   i, j, t, v) {
    for (i = 1; i <= m; i++) v[i] = a[k, i] + 0
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
    return m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
  }
  END {
    printf "  %-6s", "conns"
    for (i = 1; i <= np; i++) printf "  %12s  %10s", order[i] " rps", "us/req"
    if (("weft" in seen) && ("nginx-w1" in seen)) printf "  %16s", "weft/nginx rps"
    if (("weft" in seen) && ("h2o-t1" in seen)) printf "  %14s", "weft/h2o rps"
    if (("weft" in seen) && ("nginx-w1" in seen)) printf "  %16s", "weft/nginx cpu"
    if (("weft" in seen) && ("h2o-t1" in seen)) printf "  %14s", "weft/h2o cpu"
    printf "\n"
    for (j = 1; j <= nc; j++) {
      c = corder[j]; printf "  %-6s", c
      for (i = 1; i <= np; i++) {
        k = order[i] SUBSEP c
        if (k in n) { R[order[i]] = med(rps, k, n[k]); C[order[i]] = med(cpu, k, n[k]); printf "  %12.0f  %10.2f", R[order[i]], C[order[i]] }
        else { delete R[order[i]]; printf "  %12s  %10s", "-", "-" }
      }
      split("nginx-w1 h2o-t1", peersl, " ")
      for (q = 1; q <= 2; q++) if (("weft" in seen) && (peersl[q] in seen))
        printf (q == 1 ? "  %16s" : "  %14s"), (((peersl[q] in R) && ("weft" in R) && R[peersl[q]] > 0) ? sprintf("%.2f", R["weft"] / R[peersl[q]]) : "-")
      for (q = 1; q <= 2; q++) if (("weft" in seen) && (peersl[q] in seen))
        printf (q == 1 ? "  %16s" : "  %14s"), (((peersl[q] in C) && ("weft" in C) && C[peersl[q]] > 0) ? sprintf("%.2f", C["weft"] / C[peersl[q]]) : "-")
      printf "\n"
    }
  }' "$lines"
