#!/bin/sh
# The Python package (bindings/python): builds the extension against this
# build tree's libote into <builddir>/python and runs its pytest suite.
# Python is Debian's interpreter, for which contrib/install-deps.sh installs
# python3-dev, setuptools, pytest and numpy; PYTHON overrides it.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$ORBITTE_TEST_BUILDDIR/.." && pwd)
py=${PYTHON:-/usr/bin/python3}
if ldd "$build/src/.libs/libote.so" | grep -q 'libasan\|libtsan'; then
    # a sanitizer runtime cannot be loaded into an interpreter it did not start
    echo "SKIP: the Python tests run in the build without sanitizers"
    exit 77
fi
out="$build/python"
rm -rf "$out"
mkdir -p "$out"
(cd "$top/bindings/python" &&
    ORBITTE_BUILD_DIR="$build" "$py" setup.py -q build --build-base "$out/tmp" \
        --build-lib "$out/lib" > "$out/build.log" 2>&1) ||
    { cat "$out/build.log"; echo "the orbitte extension did not build"; exit 1; }
cd "$out"
PYTHONPATH="$out/lib" exec "$py" -m pytest -q -p no:cacheprovider "$top/bindings/python/tests"
