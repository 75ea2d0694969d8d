#!/usr/bin/env bash
# Installs the Debian packages weft needs to build and test, if any is missing.
# As root it runs apt-get; otherwise it prints the exact command and fails.
#   scripts/deps.sh          build + test dependencies, with the real backends of
#                            tests/integration/test_backends.c: PostgreSQL and libpq, redis and
#                            hiredis, libcurl (the tests start their own servers); python3
#                            and chromium for weft-bench report's test (tests/integration/report_test.py)
#   scripts/deps.sh bench    also what the peer benchmarks need (Go, Boost.Context, Java,
#                            ab, wrk, nginx, h2o (bench/https.sh); for http-db PostgreSQL's
#                            JDBC driver)
#   scripts/deps.sh cross    also Debian's cross compilers for aarch64 and riscv64 (with
#                            their C libraries), qemu-user, and arm64's liburing and libdw
#                            -dev packages (adding the arm64 architecture to dpkg): tests/arch's
#                            switch test builds for each and runs under qemu; the library
#                            builds for aarch64 and riscv64 (debootstrap: riscv64's
#                            package tree) and scripts/cross-tests.sh runs its tests
#                            under qemu (issue 28)
# man-db and groff-base render the man pages for their test (tests/integration/docs_test.sh man).
# A fresh cloud machine often runs unattended-upgrades (or apt-daily) in its
# first minutes, holding dpkg's lock: rather than fail at once, this waits up
# to 10 minutes for the lock, saying who holds it.
set -euo pipefail
pkgs=(gcc make cmake pkg-config libc6-dev util-linux liburing-dev libdw-dev clang libclang-rt-14-dev
      postgresql libpq-dev redis-server libhiredis-dev libcurl4-openssl-dev
      tmux # tmux: test_console draws weft-top in a detached session
      python3 chromium # tests/integration/report_test.py: weft-bench report's page, rendered headless
      curl sqlite3 git # run.everyday_binaries_give_byte_identical_output: the same bytes under weft-run
      libpython3.11-testsuite # scripts/cpython-tests.sh: CPython's own tests under weft-run
      man-db groff-base # tests/integration/docs_test.sh man: the man pages render without warnings
      haproxy # tests/integration/haproxy_test.sh: zero-loss restarts behind a real balancer (docs/deploy.md)
      dpkg-dev lintian # tests/integration/deb_test.sh: cpack's Debian packages (dpkg-shlibdeps), linted
      libssl-dev openssl) # weft-load's https (OpenSSL 3); openssl s_server is its test's peer
if [[ ${1:-} == cross ]]; then
  pkgs+=(gcc-aarch64-linux-gnu gcc-riscv64-linux-gnu qemu-user)
  # riscv64's libraries: a tree of Debian 13's riscv64 packages that
  # scripts/sysroot.sh makes with debootstrap (Debian 12 has no riscv64); the same
  # for the branch-protected aarch64 build (Debian 12's start files carry no BTI note)
  pkgs+=(debootstrap)
  # the whole library for aarch64 (cmake/toolchain-aarch64.cmake): the arm64
  # -dev packages it links, from Debian's arm64 archive (multiarch; libc6:arm64
  # comes with them, whose ld.so qemu-aarch64 then runs the tests with)
  pkgs+=(liburing-dev:arm64 libdw-dev:arm64)
fi
if [[ ${1:-} == bench ]]; then
  # (weft-bench parallel: its OpenMP peer needs only gcc -- libgomp comes with it -- and
  # its Java peer the JDK here, Java 17 on Debian 12: bench/parallel/peer.sh)
  pkgs+=(golang-go libboost-context-dev g++ default-jdk-headless apache2-utils wrk nginx-light h2o curl libpostgresql-jdbc-java)
fi
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

lock_wait_s=600
# Prints "PID (COMMAND)" of a process holding one of apt's or dpkg's locks
# (POSIX locks, listed in /proc/locks by device and inode), or nothing.
apt_lock_holder() {
  local f ino pid
  for f in /var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock; do
    ino=$(stat -c %i "$f" 2>/dev/null) || continue
    # "1: POSIX  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; waiters' lines have "->"
    pid=$(awk -v ino="$ino" '$2 != "->" { n = split($6, id, ":"); if (id[n] == ino) { print $5; exit } }' /proc/locks)
    if [[ -n $pid ]]; then
      echo "$pid ($(cat "/proc/$pid/comm" 2>/dev/null || echo '?'))"
      return
    fi
  done
}
# apt-get ARGS...: waits while another apt or dpkg holds a lock, then runs
# apt-get, which itself waits for dpkg's lock (DPkg::Lock::Timeout) but not
# for the package lists' (apt-get update): if it fails while another holds a
# lock -- taken meanwhile -- it waits and runs again.
apt_get() {
  local holder waited=0 said=0 rc
  while :; do
    while holder=$(apt_lock_holder); [[ -n $holder ]]; do
      if [[ $waited -ge $lock_wait_s ]]; then
        echo "weft: process $holder still holds apt's lock after $((lock_wait_s / 60)) minutes; try again later" >&2
        return 1
      fi
      if [[ $said -eq 0 ]]; then
        echo "weft: waiting for another apt/dpkg to finish: process $holder holds its lock (up to $((lock_wait_s / 60)) minutes)..." >&2
        said=1
      fi
      sleep 5
      waited=$((waited + 5))
    done
    [[ $said -eq 1 ]] && echo "weft: the lock is free after $waited s" >&2
    said=0
    rc=0
    apt-get -o DPkg::Lock::Timeout=$lock_wait_s "$@" || rc=$?
    [[ $rc -eq 0 || -z $(apt_lock_holder) ]] && return $rc
  done
}

echo "weft: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# (arm64 packages need the architecture added before the lists are fetched)
if [[ " ${missing[*]} " == *":arm64 "* ]] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
  dpkg --add-architecture arm64
fi
apt_get update -qq
apt_get install -y -qq "${missing[@]}" >/dev/null
