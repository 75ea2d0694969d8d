#!/usr/bin/env bash
# scripts/api-rename.sh -- the mechanical part of issue 24's API cleanup:
# one name per thing, one rule per kind of name.  Idempotent: run it again
# on a tree where code has moved (or new code uses the old names) and it
# renames what is left; a second run changes nothing.
#
#   scripts/api-rename.sh [DIR...]     default: src apps tests examples
#                                      docs include bench fuzz README.md
#
# What it does, over every text file under the DIRs (C, headers, CMake,
# shell, Markdown, man pages), with word boundaries so that no longer name
# is touched:
#   try-calls       try_ before the verb:   weft_mutex_trylock    -> weft_mutex_try_lock
#                                           weft_rwlock_tryrdlock -> weft_rwlock_try_rdlock
#                                           weft_rwlock_trywrlock -> weft_rwlock_try_wrlock
#                                           weft_select_try       -> weft_try_select
#   options         weft_<what>_opts:       weft_config -> weft_runtime_opts
#                                           weft_attr   -> weft_thread_opts
#   constructors    weft_<type>_create:     weft_chan_make -> weft_chan_create
#   aliases         one name each:          weft_future_free -> weft_future_unref
#                   (the alias's own declaration and definition are dropped)
# The compatibility section at the end of include/weft.h (between the
# WEFT-COMPAT-BEGIN and WEFT-COMPAT-END lines) is left alone: it keeps the
# names ../shared/DESIGN.md uses working.  Conversions that change a call's
# shape (weft_group_new -> weft_group_create(&g, ...), weft_file_open ->
# weft_file_create(&f, ...), weft_chan_new -> weft_chan_create(&c, ...),
# weft_future_new -> weft_future_create(&f), weft_scope_open ->
# weft_scope_create(&s, ...), weft_executor_virtual/_fixed/_cached/
# _scheduled/_group -> weft_executor_create_KIND(&e, ...)) are not
# mechanical; they were made by hand (git log -- scripts/api-rename.sh
# says which commits).  Code that still uses one of those old names fails
# to build in the library and the apps (WEFT_NO_DEPRECATED) and warns
# (deprecated, naming the replacement) anywhere else.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -eq 0 ]; then
    set -- src apps tests examples docs include bench fuzz README.md
fi

# 1. drop the aliases' own declaration and definition (exact text; gone
#    already on a second run)
perl -0pi -e 's{\n/\* The same as weft_future_unref, for code that never calls\n \* weft_future_ref: then it simply frees f\. \*/\nWEFT_API void weft_future_free\(weft_future \*f\);\n}{\n}' \
    include/weft/future.h
for f in $(grep -rl 'void weft_future_free(weft_future \*f) {' src || true); do
    perl -0pi -e 's{\nvoid weft_future_free\(weft_future \*f\) \{\n    if \(!f\) return;\n    CHECK_REFERENCED\(f, "weft_future_free"\);\n    weft_future_unref\(f\);\n\}\n}{\n}' "$f"
done
# ... and the sentences that name both
perl -0pi -e 's{weft_future_unref\n \*    \(or weft_future_free, the same call\) drops one, and the last drop frees\n \*    the future\.}{weft_future_unref\n *    drops one, and the last drop frees the future.}' include/weft/future.h
perl -0pi -e 's{the last `weft_future_unref` /\n  `weft_future_free`, }{the last `weft_future_unref`,\n  }' docs/errors.md

# 2. the renames
RENAMES=(
    weft_mutex_trylock:weft_mutex_try_lock
    weft_rwlock_tryrdlock:weft_rwlock_try_rdlock
    weft_rwlock_trywrlock:weft_rwlock_try_wrlock
    weft_select_try:weft_try_select
    weft_config:weft_runtime_opts
    weft_attr:weft_thread_opts
    weft_chan_make:weft_chan_create
    weft_future_free:weft_future_unref
)
expr=""
for r in "${RENAMES[@]}"; do
    expr+="s/\\b${r%%:*}\\b/${r##*:}/g;"
done
# errors.md's rows shorten a family to "_trywrlock" after its first name
expr+='s/`_trywrlock`/`_try_wrlock`/g;'

files=$(grep -rlIE "\\b($(printf '%s|' "${RENAMES[@]%%:*}" | sed 's/|$//'))\\b|\`_trywrlock\`" "$@" \
        --include='*.[ch]' --include='*.md' --include='*.txt' --include='*.cmake' --include='*.sh' \
        --include='*.[0-9]' --include='*.in' --include='*.py' --include='*.S' 2>/dev/null || true)
for f in $files; do
    # a file that uses the old names on purpose (tests/api/compat.c) says so
    if grep -q 'WEFT-COMPAT-FILE' "$f"; then continue; fi
    if grep -q 'WEFT-COMPAT-BEGIN' "$f"; then
        sed -i "/WEFT-COMPAT-BEGIN/,/WEFT-COMPAT-END/!{$expr}" "$f"
    else
        sed -i "$expr" "$f"
    fi
done
echo "api-rename: $(echo $files | wc -w) files"
