#!/usr/bin/env bash
# Fuzzes weft-httpd's request parser with libFuzzer for SECONDS (default 60).
# Usage: scripts/fuzz.sh [SECONDS]
# Builds build-fuzz/fuzz_http_parse with clang (ASan + UBSan, the parser's
# paranoid self-checks on), then runs it on a working copy of the seed corpus
# in build-fuzz/corpus-http_parse (new inputs go there, never into fuzz/; the
# copy is kept between runs, so coverage accumulates).  Crash inputs land in
# build-fuzz/artifacts/.  Prints the number of executions; exits non-zero on
# a crash, a leak, a timeout or an invariant failure.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
[[ $secs =~ ^[0-9]+$ ]] || { echo "usage: $0 [SECONDS]" >&2; exit 2; }
cc=${CC_FUZZ:-clang}
command -v "$cc" >/dev/null || { echo "fuzz.sh: $cc not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 1; }
out=build-fuzz
mkdir -p "$out/artifacts" "$out/corpus-http_parse"

echo "=== build $out/fuzz_http_parse ==="
"$cc" -std=c11 -g -O1 -fno-omit-frame-pointer \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -DHTTP_PARSE_PARANOID -Wall -Wextra -Iapps/httpd \
  fuzz/fuzz_http_parse.c apps/httpd/http_parse.c -o "$out/fuzz_http_parse"

# Seeds are added to the working corpus; what an earlier run found stays.
cp -n fuzz/corpus/http_parse/* "$out/corpus-http_parse/" 2>/dev/null || true

# Tokens the parser cares about, to reach deep states sooner.
cat >"$out/http_parse.dict" <<'DICT'
"GET"
"HEAD"
"POST"
"OPTIONS"
"CONNECT"
" HTTP/1.1\x0d\x0a"
" HTTP/1.0\x0d\x0a"
"HTTP/2.0"
"\x0d\x0a"
"\x0d\x0a\x0d\x0a"
"\x0a\x0a"
"Host: "
"host:"
"Content-Length: "
"Transfer-Encoding: chunked"
"Transfer-Encoding:"
"chunked"
"Connection: close"
"Connection: keep-alive"
"Expect: 100-continue"
"If-None-Match: "
"Range: bytes=0-"
"http://"
"/../"
"/./"
"%2e%2e"
"%2F"
"%00"
"//"
DICT

log=$out/fuzz_http_parse.log
echo "=== fuzz for ${secs}s ==="
rc=0
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
  "$out/fuzz_http_parse" -max_total_time="$secs" -max_len=20000 -timeout=10 -rss_limit_mb=2048 \
  -dict="$out/http_parse.dict" -artifact_prefix="$out/artifacts/" -print_final_stats=1 \
  "$out/corpus-http_parse" >"$log" 2>&1 || rc=$?
tail -n 25 "$log"
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
echo "=== executions: ${execs:-unknown}; corpus: $(ls "$out/corpus-http_parse" | wc -l) inputs ==="
if [[ $rc -ne 0 ]]; then
  echo "=== fuzz_http_parse FAILED (exit $rc); inputs in $out/artifacts/, log in $log ===" >&2
  exit "$rc"
fi
