#!/bin/sh
# The wheel, as Python users install engines: `pip wheel bindings/python`
# builds libote from this source tree and carries it; the wheel goes into a
# fresh venv in a temporary folder outside the tree, and two processes of
# that venv's Python move bytes (test/python/wheel_transfer.py, every byte
# checked) with LD_LIBRARY_PATH and PYTHONPATH unset: nothing of this build
# tree on any path. Needs Debian's python3-pip, python3-wheel, python3-venv
# and python3-setuptools (contrib/install-deps.sh); PYTHON overrides the
# interpreter. Logs in <builddir>/python-wheel.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$ORBITTE_TEST_BUILDDIR/.." && pwd)
py=${PYTHON:-/usr/bin/python3}
if ldd "$build/src/.libs/libote.so" | grep -q 'libasan\|libtsan'; then
    echo "SKIP: the wheel is tested in the build without sanitizers"
    exit 77
fi
for m in pip wheel setuptools venv ensurepip; do
    "$py" -c "import $m" 2>/dev/null || {
        echo "run_wheel.sh: $py has no module $m: install python3-pip, python3-wheel," \
            "python3-setuptools and python3-venv (contrib/install-deps.sh)"
        exit 1
    }
done
out="$build/python-wheel"
rm -rf "$out"
mkdir -p "$out"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/orbitte-wheel.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
case "$tmp" in "$top"/*) echo "run_wheel.sh: TMPDIR is inside the tree"; exit 1 ;; esac

# 1. the wheel, libote built by setup.py from this tree (not this build's)
(cd "$top" && env -u LD_LIBRARY_PATH -u ORBITTE_BUILD_DIR -u ORBITTE_PREFIX \
    -u ORBITTE_SOURCE_DIR ORBITTE_BUNDLE=1 ORBITTE_BUILD_JOBS=${ORBITTE_BUILD_JOBS:-2} \
    "$py" -m pip wheel --no-build-isolation --no-deps --no-index -w "$tmp/dist" \
    bindings/python) > "$out/wheel.log" 2>&1 ||
    { tail -n 40 "$out/wheel.log"; echo "run_wheel.sh: pip wheel bindings/python failed" \
        "(all of it in $out/wheel.log)"; exit 1; }
set -- "$tmp"/dist/orbitte-*.whl
[ $# -eq 1 ] && [ -f "$1" ] || { echo "run_wheel.sh: no single wheel in $tmp/dist: $*"; exit 1; }
whl=$1
"$py" -m zipfile -l "$whl" > "$out/wheel-files.txt"
grep -q 'orbitte/libote\.so\.' "$out/wheel-files.txt" ||
    { cat "$out/wheel-files.txt"; echo "run_wheel.sh: the wheel carries no libote"; exit 1; }

# 2. a fresh venv, the wheel alone installed into it
"$py" -m venv "$tmp/venv" > "$out/venv.log" 2>&1 &&
    "$tmp/venv/bin/python" -m pip install --no-index --no-deps "$whl" >> "$out/venv.log" 2>&1 ||
    { tail -n 20 "$out/venv.log"; echo "run_wheel.sh: installing the wheel into a venv failed"; exit 1; }

# 3. two processes of the venv, from a folder outside the tree
cp "$top/test/python/wheel_transfer.py" "$tmp/"
cd "$tmp"
env -u LD_LIBRARY_PATH -u PYTHONPATH -u PYTHONHOME "$tmp/venv/bin/python" wheel_transfer.py
echo "run_wheel.sh: $(basename "$whl") built, installed into a fresh venv, transfer checked"
