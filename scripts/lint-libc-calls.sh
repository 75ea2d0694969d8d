#!/usr/bin/env bash
# Fails if an object of libweft, other than the interposers' own, calls a
# hooked C library function directly.
#
#   lint-libc-calls.sh CC REAL_H NM EXEMPT OBJECT...
#
# The library's calls of read, write, close ... must go through weft__libc
# (src/libc/real.h, put in front of every library file by src/prelude.h):
# a direct call binds to weft's own exported interposer (hook.c), which
# reaches up into io and sched from wherever the call was.  A direct call
# shows in the object as an undefined reference to the name (or to its
# _FORTIFY_SOURCE form __NAME_chk).  The names come from the one list that
# defines the table, WEFT__HOOKED_FUNCS in real.h, expanded here by the
# compiler's preprocessor -- not from a second list.  EXEMPT is the source,
# or a comma-separated list of them (src/hook/hook.c,src/hook/locks.c),
# whose objects define the interposers: the only ones allowed to name them.
# $LINT_CPPFLAGS: what the build defines that decides the list
# (-D__SANITIZE_THREAD__=1 in a TSan build, whose list has no locks).
# Registered by cmake/lint-hook.cmake.
set -euo pipefail
if [[ $# -lt 5 ]]; then
  echo "usage: $0 CC REAL_H NM EXEMPT OBJECT..." >&2
  exit 2
fi
cc=$1 real_h=$2 nm=$3 exempt=$4
shift 4
IFS=, read -r -a exempts <<<"$exempt"
# is_exempt OBJECT: the object of one of the EXEMPT sources
is_exempt() {
  local e
  for e in "${exempts[@]}"; do
    [[ $1 == */"$e".o ]] && return 0
  done
  return 1
}

# the expansion of the list, one line, between two markers, after the
# system headers real.h includes
names=$(printf '#define WEFT__NAME(ret, name, params, args) name\nweft_lint_names: WEFT__HOOKED_FUNCS(WEFT__NAME) :weft_lint_names\n' |
  "$cc" -E -P -DWEFT__NO_LIBC_REWRITE ${LINT_CPPFLAGS:-} -include "$real_h" -x c - |
  sed -n 's/^weft_lint_names: \(.*\) :weft_lint_names$/\1/p' | tr -s ' \t' '\n\n' | grep -E '^[A-Za-z_][A-Za-z0-9_]*$' || true)
count=$(printf '%s\n' "$names" | grep -c . || true)
if [[ $count -lt 1 ]]; then
  echo "lint-libc-calls: no names from WEFT__HOOKED_FUNCS in $real_h (the preprocessor failed?)" >&2
  exit 2
fi
# and every other C library function the interposers' object defines (the
# signal family: hook.c wraps them without a table entry, calling sigaction)
for o in "$@"; do
  if is_exempt "$o"; then
    names=$(printf '%s\n%s\n' "$names" "$("$nm" -P --defined-only "$o" | awk '$2 == "T" || $2 == "W" {print $1}' |
      grep -vE '^(weft|_)' || true)" | grep . | sort -u)
  fi
done
count=$(printf '%s\n' "$names" | grep -c . || true)
pattern="^($(printf '%s\n' "$names" | paste -sd'|'))$"
chk="^__($(printf '%s\n' "$names" | paste -sd'|'))_chk$"

bad=0 seen_exempt=0 checked=0
for o in "$@"; do
  [[ $o == *.o ]] || continue
  if is_exempt "$o"; then
    seen_exempt=$((seen_exempt + 1))
    continue
  fi
  checked=$((checked + 1))
  hits=$("$nm" -u "$o" | awk '{print $NF}' | grep -E "$pattern|$chk" || true)
  if [[ -n $hits ]]; then
    bad=1
    for h in $hits; do
      echo "lint-libc-calls: ${o##*/CMakeFiles/} calls $h directly: it binds to weft's own interposer (hook.c), not the C library's; call it as the library does, through weft__libc (src/prelude.h, src/libc/real.h)"
    done
  fi
done
if [[ $seen_exempt -lt ${#exempts[@]} ]]; then
  echo "lint-libc-calls: the interposers' objects ($exempt, .o) are not all among the objects given: update cmake/lint-hook.cmake" >&2
  exit 2
fi
if [[ $checked -eq 0 ]]; then
  echo "lint-libc-calls: no objects to check" >&2
  exit 2
fi
if [[ $bad -ne 0 ]]; then
  echo "lint-libc-calls: FAILED ($count hooked names, $checked objects)"
  exit 1
fi
echo "lint-libc-calls: ok: none of $checked objects calls any of the $count hooked functions directly"
