#!/bin/sh
# libote.so exports exactly the functions include/ote/ote.h declares.
set -eu
lib="$ORBITTE_TEST_BUILDDIR/../src/.libs/libote.so"
hdr="$(dirname "$0")/../include/ote/ote.h"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
grep -oE '\bote_[a-z0-9_]+\(' "$hdr" | tr -d '(' | sort -u > "$tmp/declared"
nm -D --defined-only "$lib" | awk '$2 == "T" || $2 == "W" || $2 == "D" || $2 == "B" { print $3 }' |
    sed 's/@.*//' | sort -u > "$tmp/exported"
if ! cmp -s "$tmp/declared" "$tmp/exported"; then
    echo "libote.so exports (+) or lacks (-) against ote.h:"
    diff "$tmp/declared" "$tmp/exported" | sed -n 's/^> /+ /p; s/^< /- /p'
    echo "0 passed, 1 failed"
    exit 1
fi
echo "libote.so exports the $(wc -l < "$tmp/declared") functions of ote.h and nothing else"
echo "1 passed, 0 failed"
