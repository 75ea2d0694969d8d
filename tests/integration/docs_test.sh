#!/usr/bin/env bash
# tests/integration/docs_test.sh -- keeps docs/ honest.
#
# The guide (docs/guide.md) shows every example program of docs/examples/
# verbatim, each followed by what it prints.  The files are the source of
# truth for the code, the guide for the expected output:
#
#   <!-- example: 01-hello.c -->          the next ```c block is the file,
#   ```c                                  byte for byte
#   ...
#   ```
#   <!-- output: 01-hello.c -->           the next ```text block is what the
#   ```text                               program prints on stdout, exactly
#   ...
#   ```
#
# Modes (each exits 0 on success, 1 with a message naming the problem, 2 on
# bad usage, 77 for a skip):
#   sync GUIDE DIR            every DIR/*.c has an example block identical to
#                             it and an output block; every block names a file
#   update GUIDE DIR          rewrites the guide's example blocks from the
#                             files (run it after editing an example)
#   run GUIDE NAME [--skip-det WHY] -- CMD...
#                             runs CMD (timeout 60 s) and compares its stdout
#                             with NAME's output block; --skip-det: exit 77
#                             when $WEFT_DETERMINISTIC is set (deterministic
#                             mode cannot run it, WHY says why)
#   man PAGE [--] HELPCMD...  PAGE renders with no warning (man -l, groff's
#                             warnings all on) and names every long option
#                             (--word) that HELPCMD's output lists, and has
#                             the sections NAME, SYNOPSIS, DESCRIPTION,
#                             OPTIONS, ENVIRONMENT, EXIT STATUS, EXAMPLES,
#                             SEE ALSO
#   api PAGE INCLUDE_DIR      PAGE (weft(3)) renders with no warning, has its
#                             sections, and names every public function
#                             declared under INCLUDE_DIR
#   count README GUIDE DIR    the number README gives in words before
#                             "complete programs" is the number of DIR/*.c,
#                             and README and GUIDE both list weft-top(1) among
#                             the man pages
# Needs bash, awk, diff, timeout, and man-db + groff for `man`.
set -uo pipefail

fail() { echo "docs_test: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

# block GUIDE KIND NAME: prints the fenced block after "<!-- KIND: NAME -->";
# exit 3 when there is no such marker, 4 when no fenced block follows it
block() {
    awk -v marker="<!-- $2: $3 -->" '
        state == 0 && $0 == marker { state = 1; next }
        state == 1 { if ($0 ~ /^```[a-z]*$/) { state = 2; next } exit 4 }
        state == 2 { if ($0 == "```") { done = 1; exit 0 } print }
        END { if (done) exit 0; if (state == 0) exit 3; exit 4 }
    ' "$1"
}

# markers GUIDE KIND: the names the guide's KIND markers carry
markers() { sed -n "s/^<!-- $2: \\(.*\\) -->\$/\\1/p" "$1"; }

mode_sync() {
    local guide=$1 dir=$2 f name bad=0 out
    [[ -f $guide && -d $dir ]] || fail "no guide $guide or no directory $dir"
    for f in "$dir"/*.c; do
        name=$(basename "$f")
        out=$(block "$guide" example "$name")
        case $? in
        0) ;;
        3) echo "docs_test: $guide does not show $name (no '<!-- example: $name -->')" >&2; bad=1; continue ;;
        *) echo "docs_test: $guide: '<!-- example: $name -->' is not followed by a fenced block" >&2; bad=1; continue ;;
        esac
        if ! diff -u --label "$f" --label "$guide ($name)" "$f" <(printf '%s\n' "$out") >&2; then
            echo "docs_test: the guide's copy of $name differs from the file (tests/integration/docs_test.sh update fixes it)" >&2
            bad=1
        fi
        block "$guide" output "$name" >/dev/null || { echo "docs_test: $guide has no output block for $name" >&2; bad=1; }
    done
    for name in $(markers "$guide" example) $(markers "$guide" output); do
        [[ -f $dir/$name ]] || { echo "docs_test: $guide names $name, which is not in $dir" >&2; bad=1; }
    done
    [[ $bad -eq 0 ]] || exit 1
    echo "ok     $(ls "$dir"/*.c | wc -l) examples in $guide match $dir"
}

mode_update() {
    local guide=$1 dir=$2 tmp
    tmp=$(mktemp "$guide.XXXXXX") || exit 1
    awk -v dir="$dir" '
        state == 1 { if ($0 ~ /^```[a-z]*$/) { print; state = 2; next } state = 0 }
        state == 2 { if ($0 == "```") {
                         while ((getline line < file) > 0) print line
                         close(file); print; state = 0 }
                     next }
        { print }
        match($0, /^<!-- example: .* -->$/) {
            file = dir "/" substr($0, 15, length($0) - 18); state = 1 }
    ' "$guide" >"$tmp" && mv "$tmp" "$guide" || { rm -f "$tmp"; fail "update failed"; }
    mode_sync "$guide" "$dir"
}

mode_run() {
    local guide=$1 name=$2 want got rc
    shift 2
    if [[ ${1:-} == --skip-det ]]; then
        if [[ -n ${WEFT_DETERMINISTIC:-} ]]; then
            echo "skip   $name: not in deterministic mode ($2)"
            exit 77
        fi
        shift 2
    fi
    [[ ${1:-} == -- ]] && shift
    [[ $# -gt 0 ]] || usage
    want=$(block "$guide" output "$name") || fail "$guide has no output block for $name"
    got=$(timeout 60 "$@")
    rc=$?
    [[ $rc -eq 0 ]] || fail "$name: exit status $rc (124: it ran past 60 s); it printed:"$'\n'"$got"
    if [[ $got != "$want" ]]; then
        diff -u --label "$guide (output of $name)" --label "what $name printed" \
            <(printf '%s\n' "$want") <(printf '%s\n' "$got") >&2
        fail "$name printed something else than the guide says"
    fi
    echo "ok     $name prints what the guide says"
}

mode_man() {
    local page=$1 text src warn opts o bad=0 s
    shift
    [[ ${1:-} == -- ]] && shift
    [[ -f $page && $# -gt 0 ]] || usage
    command -v man >/dev/null || fail "man is not installed (Debian: man-db; scripts/deps.sh)"
    # groff's warnings all on (-ww); man passes them through with --warnings
    warn=$(LC_ALL=C.UTF-8 MANWIDTH=100 man --warnings=w -l "$page" 2>&1 >/dev/null)
    [[ -z $warn ]] || fail "$page renders with warnings:"$'\n'"$warn"
    text=$(LC_ALL=C.UTF-8 MANWIDTH=200 MAN_KEEP_FORMATTING= man -l "$page" 2>/dev/null | col -b) ||
        fail "$page does not render"
    for s in NAME SYNOPSIS DESCRIPTION OPTIONS ENVIRONMENT "EXIT STATUS" EXAMPLES "SEE ALSO"; do
        grep -qx "$s" <<<"$text" || { echo "docs_test: $page has no $s section" >&2; bad=1; }
    done
    opts=$("$@" 2>&1 | grep -o -- '--[a-z][a-z0-9-]*' | sort -u)
    [[ -n $opts ]] || fail "'$*' lists no long option"
    # options are looked for in the source (\- is a hyphen), where the
    # renderer's line breaks cannot split them
    src=$(sed 's/\\-/-/g' "$page")
    for o in $opts; do
        grep -q -- "$o\\b" <<<"$src" || { echo "docs_test: $page does not document $o (in '$*')" >&2; bad=1; }
    done
    [[ $bad -eq 0 ]] || exit 1
    echo "ok     $page: renders cleanly, documents all $(wc -w <<<"$opts") long options of $(basename "$1")"
}

# api PAGE INCLUDE_DIR: the library's page renders without a warning, has
# its sections, and names every public function (WEFT_API weft_NAME, not
# the weft__ internals) declared under INCLUDE_DIR as `.BR weft_NAME ()`
mode_api() {
    local page=$1 inc=$2 warn text fns f bad=0 s
    [[ -f $page && -d $inc ]] || usage
    command -v man >/dev/null || fail "man is not installed (Debian: man-db; scripts/deps.sh)"
    warn=$(LC_ALL=C.UTF-8 MANWIDTH=100 man --warnings=w -l "$page" 2>&1 >/dev/null)
    [[ -z $warn ]] || fail "$page renders with warnings:"$'\n'"$warn"
    text=$(LC_ALL=C.UTF-8 MANWIDTH=200 MAN_KEEP_FORMATTING= man -l "$page" 2>/dev/null | col -b) ||
        fail "$page does not render"
    for s in NAME SYNOPSIS DESCRIPTION FUNCTIONS EXAMPLES "SEE ALSO"; do
        grep -qx "$s" <<<"$text" || { echo "docs_test: $page has no $s section" >&2; bad=1; }
    done
    fns=$(cat "$inc"/weft.h "$inc"/weft/*.h | tr '\n' ' ' | grep -oE 'WEFT_API[^;{(]*\bweft_[a-z0-9_]+ *\(' |
          grep -oE '\bweft_[a-z0-9_]+ *\($' | tr -d ' (' | grep -v '^weft__' | sort -u)
    [[ -n $fns ]] || fail "no WEFT_API function found under $inc"
    for f in $fns; do
        grep -qx "\.BR $f ()" "$page" || { echo "docs_test: $page does not name $f" >&2; bad=1; }
    done
    [[ $bad -eq 0 ]] || exit 1
    echo "ok     $page: renders cleanly, names all $(wc -w <<<"$fns") public functions of $inc"
}

mode_count() {
    local readme=$1 guide=$2 dir=$3 word n files
    [[ -f $readme && -f $guide && -d $dir ]] || fail "no README $readme, guide $guide or directory $dir"
    # the claim may be broken across lines: join them first
    word=$(tr '\n' ' ' <"$readme" | grep -oE '[A-Za-z-]+ complete programs' | head -1 | cut -d' ' -f1)
    [[ -n $word ]] || fail "$readme: no 'N complete programs' claim"
    local -a words=(zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen
                    fifteen sixteen seventeen eighteen nineteen twenty twenty-one twenty-two twenty-three
                    twenty-four twenty-five)
    n=-1
    for i in "${!words[@]}"; do [[ ${words[$i]} == "${word,,}" ]] && n=$i; done
    [[ $n -ge 0 ]] || fail "$readme: '$word complete programs': not a number this test reads"
    files=$(find "$dir" -maxdepth 1 -name '*.c' | wc -l)
    [[ $n -eq $files ]] || fail "$readme says $word ($n) complete programs; $dir holds $files"
    for f in "$readme" "$guide"; do
        grep -q 'weft-top(1)\|weft-top\.1' "$f" || fail "$f does not list weft-top(1)"
    done
    echo "ok     $readme: '$word complete programs', and $dir holds $files; weft-top(1) listed"
}

case ${1:-} in
sync) [[ $# -eq 3 ]] || usage; mode_sync "$2" "$3" ;;
update) [[ $# -eq 3 ]] || usage; mode_update "$2" "$3" ;;
run) [[ $# -ge 4 ]] || usage; shift; mode_run "$@" ;;
man) [[ $# -ge 3 ]] || usage; shift; mode_man "$@" ;;
count) [[ $# -eq 4 ]] || usage; mode_count "$2" "$3" "$4" ;;
api) [[ $# -eq 3 ]] || usage; mode_api "$2" "$3" ;;
*) usage ;;
esac
