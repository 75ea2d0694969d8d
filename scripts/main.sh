#!/usr/bin/env bash
# The main job: builds weft in release mode and runs weft-httpd serving the
# bundled www/ on 127.0.0.1:8080 (Ctrl-C drains and stops it).
# Extra arguments go to weft-httpd, e.g. scripts/main.sh --port 9000 --root /srv/www
# The build's full output goes to build-release/main-build.log; the terminal
# gets one progress line (a line every 10 % when stderr is not a terminal),
# and the log's end if the build fails.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
mkdir -p build-release
log=build-release/main-build.log
: >"$log"

# Reads the build's output: all of it to the log, "[ NN%] ..." to stderr.
progress() {
  local line pct last=-10 tty=0 width
  [[ -t 2 ]] && tty=1
  width=$(( $( (tput cols 2>/dev/null || echo 80) ) - 12 ))
  while IFS= read -r line; do
    printf '%s\n' "$line" >>"$log"
    [[ $line =~ ^\[\ *([0-9]+)%\]\ (.*) ]] || continue
    pct=${BASH_REMATCH[1]}
    if [[ $tty -eq 1 ]]; then
      printf '\r\033[K  [%3d%%] %.*s' "$pct" "$width" "${BASH_REMATCH[2]}" >&2
    elif [[ $((pct / 10)) -gt $((last / 10)) ]]; then
      printf '  [%3d%%] %s\n' "$pct" "${BASH_REMATCH[2]}" >&2
      last=$pct
    fi
  done
  [[ $tty -eq 0 ]] || printf '\r\033[K' >&2
}
failed() {
  echo "weft: $1 failed; the end of $log:" >&2
  tail -30 "$log" >&2
  exit 1
}

server=build-release/apps/httpd/weft-httpd
if [[ -x $server ]]; then
  echo "weft: building weft..." >&2
else
  echo "weft: building weft (the first build takes about a minute)..." >&2
fi
cmake -S . -B build-release -DCMAKE_BUILD_TYPE=RelWithDebInfo >>"$log" 2>&1 || failed "cmake configure"
cmake --build build-release -j"$(nproc)" 2>&1 | progress || failed "the build"
echo "weft: starting $server --root www $*" >&2
exec "$server" --root www "$@"
