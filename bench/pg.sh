#!/usr/bin/env bash
# bench/pg.sh -- a throwaway PostgreSQL for benchmarks and examples (the
# shell twin of tests/support/backends.h).
#
#   bench/pg.sh start DIR [PORT]   initdb into DIR/data (if not there yet), start postgres
#                                  in the background (pg_ctl), wait until it accepts, print
#                                  one line: the libpq conninfo over TCP
#                                  ("host=127.0.0.1 port=PORT user=weft dbname=postgres")
#   bench/pg.sh stop DIR           fast shutdown, then remove DIR
#   bench/pg.sh run DIR [PORT]     start, print "ready CONNINFO", stay in the foreground
#                                  until SIGTERM/SIGINT (or the parent's death, where the
#                                  parent set PR_SET_PDEATHSIG, as weft-bench does), then
#                                  stop and remove DIR: nothing outlives the caller
#
# DIR must be empty or not exist (start/run refuse a non-empty DIR without DIR/data, so a
# typo cannot make stop remove the wrong directory).  PORT defaults to a free one in
# 20000-29999.  The server listens on 127.0.0.1:PORT and on a Unix socket in DIR; user
# "weft", trust authentication, database "postgres".  Settings for benchmarks, not for
# data: fsync, synchronous_commit, full_page_writes off; max_connections from
# $PG_MAX_CONNECTIONS (default 300: a pool of 200 and room to spare).
#
# PostgreSQL refuses to run as root: as root, DIR goes to the "postgres" system user
# (Debian's package creates it) and initdb, pg_ctl and postgres run as that user
# (setpriv, which execs in place: no PAM session, no su).  Binaries: the newest
# /usr/lib/postgresql/N/bin (Debian keeps them off PATH), else PATH.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
[[ $# -ge 2 ]] || usage
cmd=$1 dir=$2 port=${3:-}

bindir=
for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k4 -n -r); do
  [[ -x $d/postgres && -x $d/initdb && -x $d/pg_ctl ]] && { bindir=$d; break; }
done
if [[ -z $bindir ]]; then
  p=$(command -v postgres || true)
  [[ -n $p ]] || { echo "pg.sh: no PostgreSQL server (apt-get install postgresql; scripts/deps.sh bench does)" >&2; exit 1; }
  bindir=$(dirname "$p")
fi

as_owner=()
if [[ $(id -u) -eq 0 ]]; then
  user=postgres
  id "$user" >/dev/null 2>&1 || user=nobody
  as_owner=(setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups --)
fi

free_port() {
  local p
  for _ in $(seq 200); do
    p=$((20000 + RANDOM % 10000))
    ss -Htan "( sport = :$p )" | grep -q . || { echo "$p"; return; }
  done
  echo "pg.sh: no free port" >&2; exit 1
}

start() {
  if [[ -e $dir && ! -d $dir/data && -n $(ls -A "$dir" 2>/dev/null) ]]; then
    echo "pg.sh: $dir is not empty and holds no cluster: refusing" >&2; exit 1
  fi
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  [[ ${#as_owner[@]} -eq 0 ]] || chown "$user:" "$dir"
  if [[ ! -d $dir/data ]]; then
    (cd "$dir" && "${as_owner[@]}" "$bindir/initdb" -D "$dir/data" -U weft -A trust -E UTF8 --locale=C --no-sync \
       >"$dir/initdb.log" 2>&1) || { cat "$dir/initdb.log" >&2; echo "pg.sh: initdb failed" >&2; exit 1; }
  fi
  port=${port:-$(free_port)}
  local opts="-k $dir -p $port -h 127.0.0.1 -c max_connections=${PG_MAX_CONNECTIONS:-300}"
  opts+=" -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c shared_buffers=64MB"
  opts+=" -c wal_level=minimal -c max_wal_senders=0 -c log_min_messages=warning"
  (cd "$dir" && "${as_owner[@]}" "$bindir/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -o "$opts" -w -t 120 start \
     >/dev/null) || { cat "$dir/postgres.log" >&2 || true; echo "pg.sh: postgres did not start" >&2; exit 1; }
  conninfo="host=127.0.0.1 port=$port user=weft dbname=postgres"
}

stop() {
  [[ -d $dir ]] || return 0
  if [[ -f $dir/data/postmaster.pid ]]; then
    (cd "$dir" && "${as_owner[@]}" "$bindir/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null 2>&1) ||
      (cd "$dir" && "${as_owner[@]}" "$bindir/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1) || true
  fi
  # only what start made: a cluster directory
  [[ -d $dir/data || -f $dir/initdb.log ]] && rm -rf "$dir"
  return 0
}

case $cmd in
  start) start; echo "$conninfo" ;;
  stop) stop ;;
  run)
    stopped=0 sp=
    cleanup() { [[ -z $sp ]] || kill "$sp" 2>/dev/null || true; [[ $stopped -eq 1 ]] || { stopped=1; stop; }; }
    trap cleanup EXIT
    trap 'exit 0' TERM INT HUP
    start
    echo "ready $conninfo"
    # sleep in the background and wait for it, so that a signal is handled at once
    while :; do sleep 3600 & sp=$!; wait "$sp" || true; done ;;
  *) usage ;;
esac
