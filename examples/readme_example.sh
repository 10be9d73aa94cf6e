#!/bin/sh
# The code block of README.md's "Using the library" is examples/hello_write.c
# verbatim, and compiles as printed against the installed header layout
# (-I PREFIX/include, <ote/ote.h>) with no other include path.
set -eu
srcdir=${top_srcdir:?run under make check}
readme="$srcdir/README.md"
example="$srcdir/examples/hello_write.c"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

awk '/^## Using the library/ { s = 1; next }
     s == 1 && /^```c$/ { s = 2; next }
     s == 2 && /^```$/ { exit }
     s == 2 { print }' "$readme" >"$tmp/readme_example.c"
if [ ! -s "$tmp/readme_example.c" ]; then
    echo "README.md: no \`\`\`c block under \"## Using the library\""
    exit 1
fi
if ! diff -u "$example" "$tmp/readme_example.c"; then
    echo "README.md's example differs from examples/hello_write.c (above); quote it verbatim"
    exit 1
fi

mkdir -p "$tmp/include/ote"
cp "$srcdir/include/ote/ote.h" "$tmp/include/ote/"
${CC:-cc} -std=c11 -pedantic -Wall -Wextra -Werror -I"$tmp/include" \
    -c "$tmp/readme_example.c" -o "$tmp/readme_example.o"
echo "README.md's example is examples/hello_write.c and compiles as printed"
