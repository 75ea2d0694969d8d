#!/usr/bin/env bash
# tests/integration/load_tls_test.sh LOAD HTTPD -- weft-load's https (issue 29,
# Deliver 5) against OpenSSL's own server, `openssl s_server -WWW` (a
# temporary directory, a self-signed P-256 certificate made for the test, a
# free port; stopped at the end):
#   - 60 requests over 4 connections at a time: all complete, TLS 1.3, none
#     resumed;
#   - --tls-resume: all complete, and every worker's connections after its
#     first resume (at least 60 - 4);
#   - --tls-version 1.2: all complete over TLS 1.2;
#   - https:// against a plain-HTTP server (weft-httpd): every request fails
#     as a connect failure that names the TLS handshake, exit status 1;
#   - a server that closes every connection during the handshake: every
#     request fails as a connect failure, exit status 1.
# Skipped (77) without the openssl program, and in deterministic mode (real
# time across processes).
set -uo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 LOAD HTTPD" >&2; exit 2; }
load=$(realpath "$1") httpd=$(realpath "$2")
command -v openssl >/dev/null || { echo "skipped: the openssl program is not installed (scripts/deps.sh)"; exit 77; }
[[ -z ${WEFT_DETERMINISTIC:-} ]] || { echo "skipped: real time across processes; not in deterministic mode"; exit 77; }
unset WEFT_DETERMINISTIC WEFT_TRACE
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-load-tls.XXXXXX")
pids=()
trap '{ for p in "${pids[@]}"; do kill -KILL "$p"; done; wait; } 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "load_tls_test: $*" >&2; exit 1; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
key() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }

cd "$tmp" || exit 1
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=localhost \
    -keyout key.pem -out cert.pem >/dev/null 2>&1 || fail "openssl could not make a certificate"
printf 'hello over TLS\n' >hello.txt
port=$(free_port)
openssl s_server -quiet -accept "127.0.0.1:$port" -cert cert.pem -key key.pem -WWW >s_server.log 2>&1 &
pids+=("$!")
for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.05
done
url=https://127.0.0.1:$port/hello.txt

# run WHAT ARGS...: weft-load -q ARGS, which must succeed; its line in $line
run() {
    local what=$1 st=0
    shift
    line=$("$load" -q "$@" 2>"$tmp/err") || st=$?
    [[ $st -eq 0 ]] || fail "$what: weft-load exit $st: $line $(cat "$tmp/err")"
    [[ $(key failed "$line") == 0 && $(key complete "$line") == "$(key n "$line")" ]] || fail "$what: $line"
    echo "ok     $what: $(key complete "$line") complete, $(key tls "$line"), $(key tls_resumed "$line") resumed"
}
run "60 requests, 4 at a time" -n 60 -c 4 "$url"
[[ $(key tls "$line") == TLSv1.3 && $(key tls_resumed "$line") == 0 ]] || fail "full handshakes: $line"
run "--tls-resume" -n 60 -c 4 --tls-resume "$url"
(($(key tls_resumed "$line") >= 56)) || fail "--tls-resume resumed $(key tls_resumed "$line") of 60 (want at least 56): $line"
run "--tls-version 1.2" -n 20 -c 2 --tls-version 1.2 "$url"
[[ $(key tls "$line") == TLSv1.2 ]] || fail "--tls-version 1.2: $line"
run "keep-alive" -n 60 -c 4 -k "$url"

# https:// to a plain-HTTP server: the handshake fails, named
mkdir -p www && printf 'plain\n' >www/index.html
"$httpd" --port 0 --root www --quiet >httpd.out 2>httpd.err &
pids+=("$!")
for _ in $(seq 100); do grep -q '^listening on ' httpd.out && break; sleep 0.05; done
hport=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' httpd.out)
[[ -n $hport ]] || fail "weft-httpd did not start"
st=0
out=$("$load" -n 5 -c 1 "https://127.0.0.1:$hport/" 2>&1) || st=$?
[[ $st -eq 1 ]] || fail "https to a plain server: exit $st (1 expected): $out"
grep -q "connect  5  (first: TLS handshake: .*wrong version number" <<<"$out" ||
    fail "https to a plain server: the report does not name the handshake: $out"
echo "ok     https to a plain-HTTP server: 5 connect failures naming the TLS handshake, exit 1"

# a server that hangs up during the handshake
cport=$(free_port)
python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(16)
while True:
    c, _ = s.accept(); c.recv(64); c.close()
' "$cport" &
pids+=("$!")
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$cport") 2>/dev/null && break; sleep 0.05; done
st=0
out=$("$load" -q -n 5 -c 1 "https://127.0.0.1:$cport/" 2>&1) || st=$?
[[ $st -eq 1 && $(key err_connect "$out") == 5 ]] || fail "a server that hangs up in the handshake: exit $st: $out"
echo "ok     a server that hangs up in the handshake: 5 connect failures, exit 1"
exit 0
