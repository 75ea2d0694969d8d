#!/usr/bin/env bash
# bench/idle-conns.sh [N] -- what an idle keep-alive connection costs a server.
#
# Each server is started alone on a free port and answers one request (warm); then N
# keep-alive connections are opened (weft-load -k --hold, spread over source addresses
# from 127.0.1.0/24 as weft-load does, split over CLIENTS processes), each sends one
# GET /hello.html and is then held open and idle.  The server's resident memory (VmRSS,
# summed over its processes: nginx's master and worker) is read before the connections
# and once they are all held, and so is the kernel's own memory (/proc/meminfo's
# KernelStack + PageTables + SUnreclaim, machine-wide): a kernel thread's stack,
# task_struct and page tables are memory a thread-per-connection server costs that
# RSS does not show, where a vthread's counterparts (its descriptor, TLS block, the
# frames of its park) are in RSS.  The kernel figure includes the client's half of
# each connection (its sockets), the same for every server.  One line per server:
#   experiment=idle-conns peer=P conns=N held=H rss_before_kib=B rss_held_kib=R per_conn_bytes=(R-B)*1024/H
#     kernel_kib=K (the kernel's growth) kernel_per_conn_bytes=K*1024/H
#     total_per_conn_bytes=(R-B+K)*1024/H
#
#   N        connections (default 19500: this machine's hard RLIMIT_NOFILE is 20000 per
#            process, and the server needs a few descriptors of its own)
# Environment:
#   SERVERS="weft-async weft-virtual nginx-w1 go"   which servers (in this order); also
#                      tpc and tpc-weft-run: bench/tpc's thread-per-connection server
#                      natively and under weft-run (--delay-ms 0)
#   CLIENTS=2          weft-load processes sharing the N connections
#   HOLD=15            seconds the connections are held (the reading comes after ~2 s)
#   WEFT_HTTPD, WEFT_LOAD   the binaries (default build-release/apps/...)
#   WEFT_PEERS         the peers directory (default ../shared/peers beside the tree)
# The servers: weft-httpd --model async|virtual (--idle-timeout 300: longer than the hold);
# nginx with one worker, the peers' nginx.conf.in with worker_connections raised from
# 16384 to 32768 so that one worker can take N (run as nobody, as the peers' run.sh does);
# the peers' Go server (go build; Go's net/http has no idle timeout unless set).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
N=${1:-19500}
SERVERS=${SERVERS:-"weft-async weft-virtual nginx-w1 go"}
CLIENTS=${CLIENTS:-2}
HOLD=${HOLD:-15}
httpd=${WEFT_HTTPD:-$repo/build-release/apps/httpd/weft-httpd}
load=${WEFT_LOAD:-$repo/build-release/apps/load/weft-load}
tpc=${WEFT_TPC_SERVER:-$repo/build-release/tpc_server}
weft_run=${WEFT_RUN:-$repo/build-release/apps/run/weft-run}
peers=$(cd "${WEFT_PEERS:-$repo/../shared/peers}" && pwd)
docroot=$peers/http/docroot
build=/tmp/weft-idle-conns
mkdir -p "$build"
ulimit -n "$(ulimit -Hn)"

free_port() {
  local p
  for p in $(shuf -i 20000-29999 -n 50); do
    if ! ss -Htln "sport = :$p" | grep -q .; then echo "$p"; return; fi
  done
  echo "no free port" >&2; exit 1
}

# KernelStack + PageTables + SUnreclaim (KiB), machine-wide
kernel_kib() {
  awk '/^(KernelStack|PageTables|SUnreclaim):/ {s += $2} END {print s}' /proc/meminfo
}

# VmRSS (KiB) summed over the process group $1
group_rss() {
  local sum=0 pid v
  for pid in $(pgrep -g "$1"); do
    v=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
    sum=$((sum + ${v:-0}))
  done
  echo "$sum"
}

run_one() {
  local name=$1 port run argv=()
  port=$(free_port)
  run=$(mktemp -d /tmp/weft-idle-conns-run.XXXXXX)
  case $name in
    weft-async|weft-virtual)
      argv=("$httpd" --model "${name#weft-}" --port "$port" --root "$docroot" --quiet --idle-timeout 300) ;;
    nginx-w1)
      sed -e "s|@WORKERS@|1|; s|@PORT@|$port|; s|@DOCROOT@|$docroot|; s|@RUN@|$run|g; s|worker_connections 16384|worker_connections 32768|" \
        "$peers/http/nginx/nginx.conf.in" >"$run/nginx.conf"
      argv=(nginx -p "$run" -c "$run/nginx.conf" -e "$run/error.log")
      if [ "$(id -u)" = 0 ]; then
        chown -R nobody:nogroup "$run"
        argv=(setpriv --reuid=nobody --regid=nogroup --clear-groups -- "${argv[@]}")
      fi ;;
    tpc)
      argv=("$tpc" --port "$port" --delay-ms 0) ;;
    tpc-weft-run)
      argv=("$weft_run" "$tpc" --port "$port" --delay-ms 0) ;;
    go)
      if [ ! -x "$build/go-server" ] || [ "$peers/http/go/server.go" -nt "$build/go-server" ]; then
        (cd "$peers/http/go" && GOCACHE=${GOCACHE:-$build/gocache} go build -o "$build/go-server" server.go)
      fi
      argv=("$build/go-server" "$port" "$docroot" static) ;;
    *) echo "idle-conns: unknown server $name" >&2; return 1 ;;
  esac
  setsid "${argv[@]}" >"$run/server.log" 2>&1 </dev/null &
  local spid=$! ok=0
  for _ in $(seq 200); do
    if curl -s -o /dev/null "http://127.0.0.1:$port/hello.html"; then ok=1; break; fi
    sleep 0.05
  done
  if [ $ok = 0 ]; then
    echo "experiment=idle-conns peer=$name status=error msg=did_not_start"; cat "$run/server.log" >&2
    kill -- -"$spid" 2>/dev/null || true; return 0
  fi
  sleep 1
  local before held=0 rss k pids=()
  before=$(group_rss "$spid")
  local kbefore kheld
  kbefore=$(kernel_kib)
  local per=$(( N / CLIENTS ))
  for k in $(seq "$CLIENTS"); do
    "$load" -k -q -n "$per" -c "$per" --hold "$HOLD" --timeout 60 "http://127.0.0.1:$port/hello.html" \
      >"$run/load$k.out" 2>"$run/load$k.err" &
    pids+=($!)
  done
  for _ in $(seq 1200); do
    local n=0
    for k in $(seq "$CLIENTS"); do grep -q "holding" "$run/load$k.err" 2>/dev/null && n=$((n + 1)); done
    [ $n = "$CLIENTS" ] && break
    sleep 0.1
  done
  for k in $(seq "$CLIENTS"); do
    local h
    h=$(sed -n 's/.*holding \([0-9]*\) idle.*/\1/p' "$run/load$k.err")
    held=$((held + ${h:-0}))
  done
  sleep 2 # settle: the last responses' buffers returned
  rss=$(group_rss "$spid")
  kheld=$(kernel_kib)
  local per_conn=NA kper=NA total=NA
  if [ "$held" -gt 0 ]; then
    per_conn=$(( (rss - before) * 1024 / held ))
    kper=$(( (kheld - kbefore) * 1024 / held ))
    total=$(( (rss - before + kheld - kbefore) * 1024 / held ))
  fi
  echo "experiment=idle-conns peer=$name status=ok conns=$N held=$held rss_before_kib=$before rss_held_kib=$rss per_conn_bytes=$per_conn kernel_kib=$((kheld - kbefore)) kernel_per_conn_bytes=$kper total_per_conn_bytes=$total"
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait "${pids[@]}" 2>/dev/null || true
  kill -TERM -- -"$spid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$spid" 2>/dev/null || break; sleep 0.05; done
  kill -KILL -- -"$spid" 2>/dev/null || true
  wait "$spid" 2>/dev/null || true
  rm -rf "$run"
}

echo "# bench/idle-conns.sh $N ($(date -u +%Y-%m-%dT%H:%M:%SZ)); servers: $SERVERS; $CLIENTS clients; nproc=$(nproc) kernel=$(uname -r)"
for s in $SERVERS; do
  run_one "$s"
  sleep 2
done
