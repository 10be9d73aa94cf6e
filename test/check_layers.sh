#!/bin/sh
# Includes run one way: core -> proto -> {mem, uct_ext} -> base. A layer
# includes nothing of the layers above it, mem nothing of uct_ext, and
# proto no component's private header (uct_ext/<component>/*_int.h).
set -eu
src="$(dirname "$0")/../src"
bad=0
check() { # layer, pattern of forbidden includes, why
    hits=$(grep -rnE "#include \"($2)" "$src/$1" --include=*.c --include=*.h || true)
    if [ -n "$hits" ]; then
        echo "src/$1 includes $3:"
        echo "$hits"
        bad=1
    fi
}
check base 'core/|proto/|mem/|uct_ext/' 'a layer above it'
check mem 'core/|proto/|uct_ext/' 'core, proto or uct_ext'
check uct_ext 'core/|proto/' 'core or proto'
check proto 'core/|uct_ext/[a-z]+/[a-z_]*_int\.h' 'core or a component private header'
# core/obs/ reads the engine through engine.h only (its opening comment).
check core/obs '\.\./|core/(batch|ctl|desc|fexport|meta|segment|worker)' 'core files other than engine.h'
if [ $bad -ne 0 ]; then
    echo "0 passed, 1 failed"
    exit 1
fi
echo "includes run one way: core -> proto -> {mem, uct_ext} -> base"
echo "1 passed, 0 failed"
