#!/usr/bin/env bash
# tests/integration/install_test.sh CMAKE BINARY_DIR CC [SOURCE_DIR]
#
# What a user does with an installed weft, end to end: installs the built tree
# BINARY_DIR to a fresh temporary prefix, then moves that prefix elsewhere (an
# installed weft must not depend on the path it was installed to: packagers
# stage into DESTDIR, users unpack tarballs), and builds one small program
# against it three ways:
#   pkg-config --cflags --libs weft             shared library
#   find_package(weft) + weft::weft             shared library
#   find_package(weft) + weft::weft_static      static library
# Each program spawns a vthread, joins it and prints its result.  The test
# adds no flags of its own: what a sanitizer build of the library needs from
# its consumers (-fsanitize=... at link time) must come from weft.pc and the
# CMake targets.  With SOURCE_DIR, it also checks that every man page of
# SOURCE_DIR/docs/man is installed in the prefix's man1, that man finds it
# there by name and that it renders without a warning (man-db and groff,
# scripts/deps.sh).  The temporary directory is removed on exit.
set -euo pipefail
[[ $# -eq 3 || $# -eq 4 ]] || { echo "usage: $0 CMAKE BINARY_DIR CC [SOURCE_DIR]" >&2; exit 2; }
cmake=$1 bin=$2 cc=$3 src=${4:-}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
log=$tmp/log

fail() {
    echo "install_test: $*" >&2
    [[ -s $log ]] && sed 's/^/  | /' "$log" >&2
    exit 1
}
# quiet CMD...: runs CMD with its output in $log, shown only if it fails
quiet() {
    "$@" >"$log" 2>&1 || fail "failed: $*"
    : >"$log"
}

quiet "$cmake" --install "$bin" --prefix "$tmp/staged"
mv "$tmp/staged" "$tmp/prefix"
prefix=$tmp/prefix
pc=$(find "$prefix" -name weft.pc -path '*/pkgconfig/*' | head -1)
[[ -n $pc ]] || fail "no weft.pc under the prefix"
libdir=$(dirname "$(dirname "$pc")")

cat >"$tmp/app.c" <<'EOF'
#include <weft.h>

#include <stdint.h>
#include <stdio.h>

static void *twice(void *arg) {
    weft_sleep(1000000); /* parks: the carrier runs something else */
    return (void *)(2 * (intptr_t)arg);
}

int main(void) {
    weft_thread *t;
    void *r = NULL;
    if (weft_spawn(&t, twice, (void *)(intptr_t)21, NULL) != 0) return 1;
    if (weft_join(t, &r) != 0) return 1;
    printf("vthread answered %ld\n", (long)(intptr_t)r);
    weft_shutdown();
    return 0;
}
EOF
want="vthread answered 42"

# check NAME PROGRAM: runs PROGRAM and checks what it prints
check() {
    local out
    out=$(timeout 60 "$2" 2>"$log") || fail "$1: exit status $?"
    [[ $out == "$want" ]] || fail "$1: printed '$out', want '$want'"
    echo "ok     $1"
}

# --- pkg-config ---------------------------------------------------------
export PKG_CONFIG_PATH=$(dirname "$pc")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
for var in includedir libdir; do
    dir=$(pkg-config --variable=$var weft)
    real=$(realpath -m "$dir")
    [[ $real == "$(realpath "$prefix")"/* ]] || fail "weft.pc: $var=$dir is outside the prefix $prefix"
done
[[ -f $(pkg-config --variable=includedir weft)/weft.h ]] || fail "weft.pc: no weft.h in its includedir"
flags=$(pkg-config --cflags --libs weft) || fail "pkg-config --cflags --libs weft failed"
# shellcheck disable=SC2086 # the flags are words
quiet "$cc" -o "$tmp/app_pc" "$tmp/app.c" $flags -Wl,-rpath,"$libdir"
check "pkg-config, shared" "$tmp/app_pc"

# --- the dump names a program's files as its compiler was given them -------
# A program built the way a user builds one (cc -g chat.c, a relative name):
# a vthread parked in an io call (its site found through libdw) and one in a
# channel call (its site from __FILE__) must name their file alike, as
# "site.c:LINE" -- libdw used to give the first as /tmp/.../site.c.
cat >"$tmp/site.c" <<'EOF'
#define _GNU_SOURCE
#include <weft.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int sv[2];
static weft_chan *ch;

static void *reader(void *arg) {
    char b;
    (void)arg;
    return weft_recv(sv[0], &b, 1, 0) == 1 ? NULL : (void *)1;
}

static void *taker(void *arg) {
    int m;
    (void)arg;
    return weft_chan_recv(ch, &m) == 0 ? NULL : (void *)1;
}

/* Prints the dump's lines for the two parked calls, once both show. */
int main(void) {
    weft_thread *a, *b;
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) || weft_chan_create(&ch, sizeof(int), 0) ||
        weft_spawn(&a, reader, NULL, NULL) || weft_spawn(&b, taker, NULL, NULL))
        return 1;
    int ok = 0;
    for (int tries = 0; tries < 500 && !ok; tries++) {
        weft_sleep(10000000);
        int fd = memfd_create("dump", 0);
        if (fd < 0 || weft_dump(fd, WEFT_DUMP_TEXT) != 0) return 1;
        off_t len = lseek(fd, 0, SEEK_END);
        char *d = calloc(1, (size_t)len + 1);
        if (!d || pread(fd, d, (size_t)len, 0) != len) return 1;
        close(fd);
        char *r = strstr(d, " in weft_recv at "), *c = strstr(d, " in weft_chan_recv at ");
        if (r && c) {
            ok = 1;
            printf("%.*s\n%.*s\n", (int)strcspn(r, "\n"), r, (int)strcspn(c, "\n"), c);
        }
        free(d);
    }
    int one = 1;
    if (write(sv[1], "x", 1) != 1 || weft_chan_send(ch, &one) != 0) return 1;
    void *ra, *rb;
    weft_join(a, &ra);
    weft_join(b, &rb);
    weft_shutdown();
    return ok && !ra && !rb ? 0 : 1;
}
EOF
# shellcheck disable=SC2086 # the flags are words
(cd "$tmp" && quiet "$cc" -g -O1 -o site site.c $flags -Wl,-rpath,"$libdir")
sites=$(timeout 60 "$tmp/site" 2>"$log") || fail "site: exit status $?"
[[ $(grep -c ' at site\.c:[0-9]' <<<"$sites") == 2 ]] ||
    fail "the dump names site.c two ways or not at all (want 'at site.c:LINE' twice):
$sites"
echo "ok     dump sites: the file as compiled, for an io call and a channel call"

# --- the guide's build commands, as printed ---------------------------------
if [[ -n $src ]]; then
    # the installed one (pkg-config and its rpath), run from the source tree
    # as a reader would: it must build, and the program must run
    cmd=$(awk '/^cc .*pkg-config/ { p = 1 } p { print } p && !/\\$/ { exit }' "$src/docs/guide.md" |
          sed 's/ *# installed$//')
    [[ -n $cmd ]] || fail "no installed build command (cc ... pkg-config ...) in docs/guide.md"
    (cd "$src" && quiet eval "$cmd -o '$tmp/guide_app'")
    timeout 60 "$tmp/guide_app" >"$log" 2>&1 || fail "the guide's command built a program that fails: $cmd"
    : >"$log"
    echo "ok     the guide's install command builds and runs: $(tr -s ' \\\n' ' ' <<<"$cmd")"
fi

# --- find_package -------------------------------------------------------
mkdir "$tmp/proj"
cp "$tmp/app.c" "$tmp/proj/"
cat >"$tmp/proj/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.18)
project(weft_consumer C)
find_package(weft REQUIRED)
add_executable(app app.c)
target_link_libraries(app PRIVATE weft::weft)
add_executable(app_static app.c)
target_link_libraries(app_static PRIVATE weft::weft_static)
EOF
quiet "$cmake" -S "$tmp/proj" -B "$tmp/proj/build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_PREFIX_PATH="$prefix"
found=$(sed -n 's/^weft_DIR:PATH=//p' "$tmp/proj/build/CMakeCache.txt")
[[ $found == "$prefix"/* ]] || fail "find_package found weft in '$found', not under $prefix"
quiet "$cmake" --build "$tmp/proj/build"
check "find_package, weft::weft" "$tmp/proj/build/app"
check "find_package, weft::weft_static" "$tmp/proj/build/app_static"

# --- weft-run: a program weft did not compile, its main on a vthread ------
# (a sanitizer build's libweft-hook.so needs its sanitizer's runtime first
# in the process, which a plain program does not have: not checked there)
if readelf -d "$libdir/weft/libweft-hook.so" | grep -q 'NEEDED.*lib[at]san'; then
    echo "ok     weft-run (not checked: sanitizer build)"
else
    cat >"$tmp/plain.c" <<'EOF'
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>
int main(void) {
    void *(*self)(void) = (void *(*)(void))dlsym(RTLD_DEFAULT, "weft_self");
    usleep(1000);
    printf("vthread answered %d\n", self && self() ? 42 : 0);
    return 0;
}
EOF
    quiet "$cc" -o "$tmp/plain" "$tmp/plain.c"
    out=$(timeout 60 "$prefix/bin/weft-run" "$tmp/plain" 2>"$log") || fail "weft-run: exit status $?"
    [[ $out == "$want" ]] || fail "weft-run: printed '$out', want '$want'"
    echo "ok     weft-run, installed and moved"
fi

# --- man pages ------------------------------------------------------------
if [[ -n $src ]]; then
    pages=("$src"/docs/man/*.1)
    [[ -e ${pages[0]} ]] || fail "no man pages in $src/docs/man"
    command -v man >/dev/null || fail "man is not installed (Debian: man-db; scripts/deps.sh)"
    mandir=$(find "$prefix" -type d -name man1 -path '*/man/man1' | head -1)
    [[ -n $mandir ]] || fail "no man/man1 under the prefix"
    for page in "${pages[@]}"; do
        name=$(basename "$page" .1)
        [[ -f $mandir/$name.1 ]] || fail "man page $name.1 not installed in $mandir"
        cmp -s "$page" "$mandir/$name.1" || fail "$mandir/$name.1 differs from $page"
        found=$(man --manpath="$(dirname "$mandir")" -w "$name" 2>"$log") || fail "man -w $name: not found in $(dirname "$mandir")"
        [[ $found == "$mandir/$name.1"* ]] || fail "man -w $name found $found, not $mandir/$name.1"
        warn=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings=w -l "$mandir/$name.1" 2>&1 >/dev/null)
        [[ -z $warn ]] || fail "man -l $name.1 warns: $warn"
    done
    echo "ok     ${#pages[@]} man pages installed in share/man/man1, found by man, rendered without warnings"
fi
