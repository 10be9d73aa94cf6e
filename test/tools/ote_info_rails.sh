#!/bin/sh
# ote_info -r names every field of ote_rail_info_t (include/ote/ote.h) with
# what it means: the list cannot fall behind the structure.
set -u
info="$ORBITTE_TEST_BUILDDIR/../src/tools/ote_info"
header="$(cd "$(dirname "$0")/../.." && pwd)/include/ote/ote.h"
out=$(mktemp)
trap 'rm -f "$out"' EXIT

"$info" -r >"$out" 2>&1 || { echo "ote_info -r failed"; cat "$out"; exit 1; }
# The member names of the struct that ends "} ote_rail_info_t;" (the lines
# since the last "typedef struct {" before it).
fields=$(awk '/^typedef struct \{$/ {body = ""; next}
              /^} ote_rail_info_t;$/ {printf "%s", body; exit}
              {body = body $0 "\n"}' "$header" |
    sed -n 's/^ *[a-z_0-9]* *\([a-z_]*\)\(\[[0-9]*\]\)\{0,1\};.*/\1/p')
[ -n "$fields" ] || { echo "no fields of ote_rail_info_t found in $header"; exit 1; }
n=0 fail=0
for f in $fields; do
    n=$((n + 1))
    grep -qE "^#   $f +[A-Za-z]" "$out" || { echo "ote_info -r does not explain '$f'"; fail=1; }
done
[ "$n" -ge 10 ] || { echo "only $n fields found in ote_rail_info_t"; fail=1; }
[ $fail -eq 0 ] || cat "$out"
exit $fail
