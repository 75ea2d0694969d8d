#!/usr/bin/env bash
# bench/parallel/peer.sh java17-streams uniform|skewed N THREADS REPS [MAX_ITER] -- compiles
# (if needed) and runs Par.java, the Java 17 parallel-streams peer of weft-bench parallel,
# with the common ForkJoinPool sized to THREADS (THREADS - 1 workers + the caller).
# Environment: JAVA17 (default /usr/lib/jvm/java-17-openjdk-amd64/bin/java, else java in
# PATH), BUILD (default /tmp/weft-parallel-build: the compiled class), JAVA_OPTS.
set -euo pipefail
[[ $# -ge 5 && $# -le 6 && $1 == java17-streams ]] || { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
shift
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
java=${JAVA17:-/usr/lib/jvm/java-17-openjdk-amd64/bin/java}
[[ -x $java ]] || java=$(command -v java) || { echo "peer.sh: no Java 17 (set JAVA17; scripts/deps.sh bench installs a JDK)" >&2; exit 1; }
javac=$(dirname "$java")/javac
[[ -x $javac ]] || javac=$(command -v javac) || { echo "peer.sh: no javac (apt-get install default-jdk-headless)" >&2; exit 1; }
BUILD=${BUILD:-/tmp/weft-parallel-build}
read -r -a jopts <<<"${JAVA_OPTS:-}"
mkdir -p "$BUILD"
if [[ ! -f $BUILD/Par.class || $here/Par.java -nt $BUILD/Par.class ]]; then
  "$javac" --release 17 -d "$BUILD" "$here/Par.java"
fi
threads=$3
exec "$java" "${jopts[@]}" -Djava.util.concurrent.ForkJoinPool.common.parallelism=$((threads > 1 ? threads - 1 : 1)) \
  -cp "$BUILD" Par "$@"
