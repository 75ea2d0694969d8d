#!/usr/bin/env bash
# tests/integration/haproxy_test.sh HTTPD LOAD [SECONDS [RATE]]
#
# Zero-loss restarts behind a real load balancer (issue 29): three weft-httpd
# instances on 127.0.0.2, .3 and .4 (standing for three machines; the third
# runs --workers 4) behind Debian's HAProxy, configured as docs/deploy.md
# says -- health checks on GET /healthz, retries with redispatch.  weft-load
# sends RATE requests a second (default 2,000) through HAProxy for SECONDS
# (default 60), a new connection each, while:
#   at 1/8 of the run   instance 1 gets SIGTERM (with --drain-notice 1 its
#                       /healthz answers 503 for a second, so HAProxy's check
#                       takes it out; then it drains and exits 0) and is
#                       started again on the same address and port;
#   at 2/8              instance 3 (--workers 4) gets SIGHUP: its workers are
#                       replaced one at a time;
#   at 3/8              instance 2: SIGTERM, started again;
#   at 4/8              instance 3: SIGHUP again;
#   at 5/8              instance 3: SIGTERM, started again.
# It passes when weft-load counts every request answered (failed=0: no
# connect, read, write, timeout or status error) and HAProxy's own log shows
# each instance taken out (DOWN, by the 503) and back (UP).  The SIGHUPs do
# not show there, and must not: the instance never stops answering.
#
# HAProxy runs in the foreground (-db) from a temporary directory, on a free
# port of its own, and is stopped at the end with everything else; the
# temporary directory is removed.  Exit 77 (skipped) without haproxy
# (scripts/deps.sh installs it) or in deterministic mode (this is real time
# across several processes).
set -uo pipefail
[[ $# -ge 2 ]] || { echo "usage: $0 HTTPD LOAD [SECONDS [RATE]]" >&2; exit 2; }
httpd=$1 load=$2 secs=${3:-60} rate=${4:-2000}
haproxy=$(command -v haproxy || echo /usr/sbin/haproxy)
[[ -x $haproxy ]] || { echo "skipped: haproxy is not installed (scripts/deps.sh)"; exit 77; }
[[ -z ${WEFT_DETERMINISTIC:-} ]] || { echo "skipped: real time across processes; not in deterministic mode"; exit 77; }
unset WEFT_DETERMINISTIC WEFT_TRACE

tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-haproxy.XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    wait 2>/dev/null
    [[ -n ${KEEP:-} ]] || rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
    echo "haproxy_test: $*" >&2
    for f in "$tmp"/*.err "$tmp"/haproxy.log; do
        [[ -s $f ]] && { echo "--- $(basename "$f") (last lines)" >&2; tail -n 15 "$f" >&2; }
    done
    # the requests HAProxy logged as failed (dontlog-normal: only those), by
    # status, termination state and server; and the checks' verdicts
    if [[ -s $tmp/haproxy.log ]]; then
        echo "--- haproxy.log: failed requests (count status termination server)" >&2
        awk '/"GET / { for (i = 1; i < NF; i++) if ($i ~ /^-?[0-9]+\/-?[0-9]+\/-?[0-9]+\/-?[0-9]+\/\+?-?[0-9]+$/) {
                 print $(i + 1), $(i + 5), $(i - 1); break } }' "$tmp/haproxy.log" | sort | uniq -c | sort -rn | head >&2
        echo "--- haproxy.log: checks" >&2
        grep -oE "Server weft/w[123] is (DOWN|UP), reason: [^,]*(, code: [0-9]+)?" "$tmp/haproxy.log" | sort | uniq -c >&2
    fi
    exit 1
}

mkdir -p "$tmp/www"
printf 'hello through the balancer\n' >"$tmp/www/hello.txt"

hosts=(127.0.0.2 127.0.0.3 127.0.0.4)
extra=("" "" "--workers 4")
ports=(0 0 0)
ipid=(0 0 0)

# start I: instance I on its address (the port it had, or a free one the first
# time); waits for its "listening" line
start() {
    local i=$1 out=$tmp/inst$1.out
    : >"$out"
    # shellcheck disable=SC2086
    "$httpd" --host "${hosts[i]}" --port "${ports[i]}" --root "$tmp/www" --carriers 1 --drain-notice 1 ${extra[i]} \
        >"$out" 2>>"$tmp/inst$i.err" &
    ipid[i]=$!
    pids+=("$!")
    for _ in $(seq 200); do
        grep -q '^listening on ' "$out" && break
        kill -0 "${ipid[i]}" 2>/dev/null || fail "instance $((i + 1)) did not start"
        sleep 0.05
    done
    local line
    line=$(grep -m1 '^listening on ' "$out") || fail "instance $((i + 1)) printed no listening line"
    ports[i]=${line##*:}
}

# restart I: SIGTERM -- a second of notice (/healthz 503: HAProxy's check takes
# it out), then the drain -- it must exit 0; then start it again
restart() {
    local i=$1 st=0
    kill -TERM "${ipid[i]}"
    wait "${ipid[i]}" || st=$?
    [[ $st -eq 0 ]] || fail "instance $((i + 1)) exited $st after SIGTERM (0 expected: a clean drain)"
    start "$i"
}

# hup 3: SIGHUP to instance 3 and wait until it says its workers are replaced
hup() {
    local i=$1 before
    before=$(grep -c 'worker(s) replaced' "$tmp/inst$i.err")
    kill -HUP "${ipid[i]}"
    for _ in $(seq 400); do
        (($(grep -c 'worker(s) replaced' "$tmp/inst$i.err") > before)) && return 0
        sleep 0.05
    done
    fail "instance $((i + 1)) did not finish replacing its workers within 20 s of SIGHUP"
}

for i in 0 1 2; do start $i; done

front=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$tmp/haproxy.cfg" <<EOF
global
    log stderr format short local0 info
    stats socket $tmp/haproxy.sock mode 600 level admin
    maxconn 4096

defaults
    mode http
    log global
    option httplog
    option dontlog-normal
    timeout connect 2s
    timeout check 2s
    timeout client 30s
    timeout server 30s
    retries 3
    option redispatch 1
    retry-on all-retryable-errors

frontend web
    bind 127.0.0.1:$front
    default_backend weft

backend weft
    balance roundrobin
    option httpchk GET /healthz
    http-check expect status 200
    http-reuse safe
    default-server check inter 200ms fall 1 rise 1
    server w1 ${hosts[0]}:${ports[0]}
    server w2 ${hosts[1]}:${ports[1]}
    server w3 ${hosts[2]}:${ports[2]}
EOF
"$haproxy" -db -f "$tmp/haproxy.cfg" >"$tmp/haproxy.log" 2>&1 &
hpid=$!
pids+=("$hpid")
for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$front/hello.txt" && break
    kill -0 "$hpid" 2>/dev/null || fail "haproxy did not start"
    sleep 0.1
done

"$load" -q -r "$rate" -c 64 -t "$secs" --timeout 10 "http://127.0.0.1:$front/hello.txt" >"$tmp/load.out" 2>"$tmp/load.err" &
lpid=$!
pids+=("$lpid")
step=$(awk -v s="$secs" 'BEGIN { printf "%.2f", s / 8 }')
sleep "$step"; restart 0
sleep "$step"; hup 2
sleep "$step"; restart 1
sleep "$step"; hup 2
sleep "$step"; restart 2
st=0
wait "$lpid" || st=$?
line=$(grep '^experiment=load' "$tmp/load.out") || fail "weft-load printed no result (status $st): $(cat "$tmp/load.err")"
echo "$line"
key() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$line"; }
complete=$(key complete) failed=$(key failed)
want=$(awk -v s="$secs" -v r="$rate" 'BEGIN { printf "%d", s * r * 0.9 }')
[[ $failed == 0 && $st -eq 0 ]] || fail "$failed request(s) failed through HAProxy (weft-load exit $st): $line"
((complete >= want)) || fail "only $complete requests answered in $secs s at $rate/s (want at least $want)"
# HAProxy saw each instance go and come back
for w in w1 w2 w3; do
    grep -q "Server weft/$w is DOWN" "$tmp/haproxy.log" || fail "HAProxy's log never took $w out"
    grep -q "Server weft/$w is UP" "$tmp/haproxy.log" || fail "HAProxy's log never brought $w back"
done
echo "haproxy_test: $complete requests through HAProxy, 0 failed; 3 restarts and 2 rolling SIGHUPs; HAProxy's log:"
grep -E "^<[0-9]>Server weft/w[123] is (DOWN|UP)" "$tmp/haproxy.log" | cut -c1-110 | sed "s/^/  /"
# HAProxy's counters: checks that took a server down, its time down, and the
# requests HAProxy retried (wretr) or sent elsewhere (wredis) on its account
python3 - "$tmp/haproxy.sock" <<'PY' || echo "  (HAProxy's stats socket did not answer)"
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b"show stat\n")
data = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    data += b
rows = [l.split(",") for l in data.decode().splitlines() if l]
head = rows[0]
head[0] = head[0].lstrip("# ")
col = {n: i for i, n in enumerate(head)}
for r in rows[1:]:
    if r[col["pxname"]] == "weft" and r[col["svname"]].startswith("w"):
        print("  stats: %s status=%s chkdown=%s downtime_s=%s wretr=%s wredis=%s" % tuple(
            r[col[k]] for k in ("svname", "status", "chkdown", "downtime", "wretr", "wredis")))
PY
kill -TERM "$hpid" 2>/dev/null
for i in 0 1 2; do kill -TERM "${ipid[i]}" 2>/dev/null; done
wait 2>/dev/null
exit 0
