#!/usr/bin/env bash
# The main job (until weft-httpd lands): builds weft in release mode and runs a
# short weft-bench session.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build-release -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-release -j"$(nproc)" >/dev/null
b=build-release/apps/bench/weft-bench
"$b" micro
"$b" sleep-tasks -n 100000
"$b" threads -n 1000000
