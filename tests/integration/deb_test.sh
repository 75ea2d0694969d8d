#!/usr/bin/env bash
# tests/integration/deb_test.sh SOURCE_DIR -- the Debian packages, end to end
# (issue 29; scripts/test.sh package, which CI runs once).
#
#  1. configures SOURCE_DIR afresh in a temporary directory for /usr (release,
#     no tests), builds it and runs `cpack -G DEB`: libweft0, libweft-dev and
#     weft-tools must come out, their Depends filled in by dpkg-shlibdeps
#     (liburing2, libc6 and, for weft-load's https, libssl3; libdw1, which the
#     library dlopens, by hand);
#  2. runs lintian on them and prints what it says; an error fails the test,
#     the warnings and notes are listed (docs/deploy.md's neighbour, the
#     README's "Debian packages", says which are left and why);
#  3. installs them with dpkg -i, builds docs/examples/01-hello.c with the
#     installed `pkg-config weft` and runs it; man finds weft(3) and
#     weft-httpd(1); the installed weft-run runs a program;
#  4. starts the installed /usr/bin/weft-httpd on a free port with a docroot
#     of its own and fetches a page from it with curl; SIGTERM, exit 0;
#  5. removes the packages (dpkg --purge) and checks that no file of theirs
#     is left on the machine.
# It installs into this machine, so it needs root, and it refuses to touch
# one where any of the three is already installed (exit 77, skipped, as
# without root or without dpkg-deb, cpack or lintian).  The temporary
# directory is removed, and the packages purged, however it ends.
set -uo pipefail
[[ $# -eq 1 ]] || { echo "usage: $0 SOURCE_DIR" >&2; exit 2; }
src=$(cd "$1" && pwd)
skip() { echo "skipped: $*"; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "dpkg -i needs root"
for t in dpkg-deb dpkg-shlibdeps cpack lintian curl pkg-config cc; do
    command -v "$t" >/dev/null || skip "$t is not installed (scripts/deps.sh)"
done
pkgs=(weft-tools libweft-dev libweft0)
for p in "${pkgs[@]}"; do
    if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        skip "$p is installed on this machine already: not replacing it"
    fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-deb.XXXXXX")
installed=0
srv=0
cleanup() {
    [[ $srv -gt 0 ]] && kill -KILL "$srv" 2>/dev/null
    ((installed)) && dpkg --purge "${pkgs[@]}" >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT
log=$tmp/log
fail() {
    echo "deb_test: $*" >&2
    [[ -s $log ]] && sed 's/^/  | /' "$log" | tail -n 40 >&2
    exit 1
}
quiet() { "$@" >"$log" 2>&1 || fail "failed: $*"; }

# 1. build and package
quiet cmake -S "$src" -B "$tmp/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr \
    -DWEFT_SANITIZE=none -DWEFT_BUILD_TESTS=OFF
quiet cmake --build "$tmp/build" -j"$(nproc)"
(cd "$tmp/build" && cpack -G DEB) >"$log" 2>&1 || fail "cpack -G DEB failed"
debs=()
for p in libweft0 libweft-dev weft-tools; do
    f=$(ls "$tmp/build/${p}_"*.deb 2>/dev/null | head -1)
    [[ -n $f ]] || fail "cpack made no $p package: $(ls "$tmp/build"/*.deb 2>/dev/null)"
    debs+=("$f")
    echo "deb_test: $(basename "$f"): $(dpkg-deb -f "$f" Depends)"
done
dep_tools=$(dpkg-deb -f "${debs[2]}" Depends)
for d in liburing2 libdw1 libc6 libssl3; do
    grep -q "$d" <<<"$dep_tools" || fail "weft-tools does not depend on $d: $dep_tools"
done
grep -q libc6 <<<"$(dpkg-deb -f "${debs[0]}" Depends)" || fail "libweft0 has no Depends from dpkg-shlibdeps"
for i in 0 1 2; do dpkg-deb -c "${debs[i]}" >"$tmp/contents$i" || fail "dpkg-deb -c ${debs[i]}"; done
grep -q 'usr/lib/.*libweft\.so\.0' "$tmp/contents0" || fail "libweft0 holds no libweft.so.0"
grep -q 'usr/include/weft\.h' "$tmp/contents1" || fail "libweft-dev holds no weft.h"
grep -q 'usr/bin/weft-httpd' "$tmp/contents2" || fail "weft-tools holds no weft-httpd"

# 2. lintian: errors fail, the rest is listed
lintian --tag-display-limit 0 "${debs[@]}" >"$tmp/lintian" 2>&1
echo "deb_test: lintian says ($(grep -c '^[EWIP]:' "$tmp/lintian") tags):"
sed 's/^/  /' "$tmp/lintian"
if grep -q '^E:' "$tmp/lintian"; then
    fail "lintian reports errors (above)"
fi

# 3. install, build the first example against the installed library
installed=1
quiet dpkg -i "${debs[@]}"
flags=$(pkg-config --cflags --libs weft) || fail "pkg-config knows no weft after the install"
quiet cc -o "$tmp/hello" "$src/docs/examples/01-hello.c" $flags
"$tmp/hello" >"$tmp/hello.out" 2>&1 || { cp "$tmp/hello.out" "$log"; fail "the example built against the package failed"; }
libs=$(ldd "$tmp/hello")
grep -qE '=> (/usr)?/lib/.*libweft\.so\.0' <<<"$libs" || fail "the example is not linked with the packaged libweft.so.0: $libs"
echo "deb_test: docs/examples/01-hello.c, built with pkg-config weft, says: $(head -1 "$tmp/hello.out")"
man -w weft >/dev/null 2>&1 && man -w 3 weft >/dev/null 2>&1 || fail "man does not find weft(3)"
man -w weft-httpd >/dev/null 2>&1 || fail "man does not find weft-httpd(1)"
# weft-run finds its preload module where the package put it (LIBDIR/weft)
out=$(/usr/bin/weft-run /bin/echo "run by the packaged weft-run" 2>"$log") || fail "the installed weft-run failed"
[[ $out == "run by the packaged weft-run" ]] || fail "the installed weft-run printed: $out"

# 4. the installed server serves a page
mkdir -p "$tmp/www"
printf 'served by the packaged weft-httpd\n' >"$tmp/www/index.html"
/usr/bin/weft-httpd --port 0 --root "$tmp/www" --quiet >"$tmp/httpd.out" 2>"$tmp/httpd.err" &
srv=$!
for _ in $(seq 100); do grep -q '^listening on ' "$tmp/httpd.out" && break; sleep 0.05; done
port=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$tmp/httpd.out")
[[ -n $port ]] || { cp "$tmp/httpd.err" "$log"; fail "the installed weft-httpd did not start"; }
body=$(curl -sf "http://127.0.0.1:$port/") || fail "curl got no page from the installed weft-httpd"
[[ $body == "served by the packaged weft-httpd" ]] || fail "the page came back as: $body"
kill -TERM "$srv"
st=0
wait "$srv" || st=$?
srv=0
[[ $st -eq 0 ]] || fail "the installed weft-httpd exited $st after SIGTERM"
echo "deb_test: /usr/bin/weft-httpd served $tmp/www/index.html on port $port"

# 5. remove: nothing of theirs may stay
files=$(dpkg -L "${pkgs[@]}" 2>/dev/null | sort -u)
quiet dpkg --purge "${pkgs[@]}"
installed=0
left=()
while read -r f; do
    [[ -n $f && ( -f $f || -L $f ) ]] && left+=("$f")
done <<<"$files"
((${#left[@]} == 0)) || fail "files left after dpkg --purge: ${left[*]}"
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "installed" && fail "$p is still installed"
done
echo "deb_test: $(wc -l <<<"$files") paths installed and removed; none left"
exit 0
