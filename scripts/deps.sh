#!/usr/bin/env bash
# Installs the Debian packages weft needs to build and test, if any is missing.
# As root it runs apt-get; otherwise it prints the exact command and fails.
#   scripts/deps.sh          build + test dependencies
#   scripts/deps.sh bench    also what the peer benchmarks need (Go, Boost.Context)
set -euo pipefail
pkgs=(gcc make cmake pkg-config libc6-dev liburing-dev clang libclang-rt-14-dev)
if [[ ${1:-} == bench ]]; then pkgs+=(golang-go libboost-context-dev g++ default-jdk-headless apache2-utils wrk nginx-light curl); fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0
if [[ $(id -u) -ne 0 ]]; then
  echo "weft: missing Debian packages; run as root:" >&2
  echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "weft: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >/dev/null
