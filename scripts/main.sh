#!/usr/bin/env bash
# The main job: builds weft in release mode and runs weft-httpd serving the
# bundled www/ on 127.0.0.1:8080 (Ctrl-C drains and stops it).
# Extra arguments go to weft-httpd, e.g. scripts/main.sh --port 9000 --root /srv/www
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build-release -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-release -j"$(nproc)" >/dev/null
exec build-release/apps/httpd/weft-httpd --root www "$@"
