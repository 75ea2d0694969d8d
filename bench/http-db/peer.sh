#!/usr/bin/env bash
# bench/http-db/peer.sh PEER PORT CONNINFO [DB_POOL [SLEEP_S]] -- builds (if needed) and
# runs a Java peer of weft-bench http-db in the foreground (exec: its pid is the JVM's).
#
#   PEER  java25-virtual   HttpDb.java on Java 25 ($JAVA25), a virtual thread per request
#         java17-pool200   HttpDb.java on Java 17 (java in PATH), 200 platform threads
#         java25-pool200   the same pool on Java 25
#   CONNINFO  libpq's "host=127.0.0.1 port=N user=U dbname=D" (as bench/pg.sh prints it);
#             turned into jdbc:postgresql://HOST:PORT/D?user=U
# It prints "listening on 127.0.0.1:PORT" when ready (PORT 0: the kernel's pick).
# Environment: JAVA25 (default /usr/lib/jvm/temurin-25-jdk-amd64/bin/java), JAVA17 (default:
# java in PATH), JDBC_JAR (default /usr/share/java/postgresql.jar, Debian's
# libpostgresql-jdbc-java), BUILD (default /tmp/weft-http-db-build: the compiled classes),
# JAVA_OPTS (extra JVM options).
set -euo pipefail
[[ $# -ge 3 && $# -le 5 ]] || { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
peer=$1 port=$2 conninfo=$3 pool=${4:-200} sleep_s=${5:-0.1}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
JAVA25=${JAVA25:-/usr/lib/jvm/temurin-25-jdk-amd64/bin/java}
JAVA17=${JAVA17:-java}
JDBC_JAR=${JDBC_JAR:-/usr/share/java/postgresql.jar}
BUILD=${BUILD:-/tmp/weft-http-db-build}
read -r -a jopts <<<"${JAVA_OPTS:-}"

[[ -f $JDBC_JAR ]] || { echo "peer.sh: no JDBC driver at $JDBC_JAR (apt-get install libpostgresql-jdbc-java; scripts/deps.sh bench does)" >&2; exit 1; }
command -v javac >/dev/null || { echo "peer.sh: no javac (apt-get install default-jdk-headless)" >&2; exit 1; }
case $peer in
  java25-*) java=$JAVA25; [[ -x $java ]] || { echo "peer.sh: no Java 25 at $java (set JAVA25)" >&2; exit 1; } ;;
  java17-*) java=$JAVA17; command -v "$java" >/dev/null || { echo "peer.sh: no java in PATH" >&2; exit 1; } ;;
  *) echo "peer.sh: unknown peer $peer (java25-virtual, java17-pool200, java25-pool200)" >&2; exit 2 ;;
esac
case $peer in
  *-virtual) model=virtual ;;
  *-pool*) model=pool:${peer##*-pool} ;;
esac

# libpq conninfo -> JDBC URL
host=127.0.0.1 pgport=5432 user=$(id -un) db=postgres
for kv in $conninfo; do
  case $kv in
    host=*) host=${kv#host=} ;; port=*) pgport=${kv#port=} ;;
    user=*) user=${kv#user=} ;; dbname=*) db=${kv#dbname=} ;;
  esac
done
[[ $host != /* ]] || { echo "peer.sh: JDBC needs a TCP host, not the socket directory $host" >&2; exit 2; }
url="jdbc:postgresql://$host:$pgport/$db?user=$user"

mkdir -p "$BUILD"
if [[ ! -f $BUILD/HttpDb.class || $here/HttpDb.java -nt $BUILD/HttpDb.class ]]; then
  javac --release 17 -d "$BUILD" "$here/HttpDb.java"
fi
exec "$java" "${jopts[@]}" -cp "$BUILD:$JDBC_JAR" HttpDb "$port" "$url" "$model" "$pool" "$sleep_s"
