#!/bin/sh
# Includes run one way: core -> proto -> {mem, uct_ext} -> base. A layer
# includes nothing of the layers above it, mem nothing of uct_ext; core and
# proto reach the components through uct_ext/tl.h (ops and capability
# flags) and a component's public header only where one is listed below,
# never its private ones; core's headers name no component at all.
# Inside uct_ext a component folder includes of another folder only the
# stream base's public header (uct_ext/stream/stream.h), and the stream base
# no component's header.
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
check proto 'core/' 'core'
# The public headers of components core and proto may include: rdma's (RDMA
# devices and ports, core's device monitor) and cuda's copier (staging).
# Every other uct_ext/<component>/ header is the component's own.
public='uct_ext/(rdma/rdma|cuda/cuda_copier)\.h"'
for layer in core proto; do
    hits=$(grep -rnE '#include "uct_ext/[a-z_]+/' "$src/$layer" --include=*.c --include=*.h |
        grep -vE "$public" || true)
    if [ -n "$hits" ]; then
        echo "src/$layer includes a component header that is not a listed public one:"
        echo "$hits"
        bad=1
    fi
done
# uct_ext/<component>/ includes nothing of another component, and of stream/
# only stream.h. Known exception, until uct learns rdma's devices from the
# rdma component's ops: uct_iface.c's use of rdma's sysfs helpers.
allowed_cross='uct_ext/uct/uct_iface.c:#include "uct_ext/rdma/rdma.h"'
for dir in "$src"/uct_ext/*/; do
    comp=$(basename "$dir")
    if [ "$comp" = stream ]; then
        shared='^$' # the base includes no component
    else
        shared='#include "uct_ext/stream/stream\.h"'
    fi
    hits=$(cd "$src" && grep -rE '#include "(uct_ext/[a-z_]+/|\.\./)' "uct_ext/$comp" \
               --include=*.c --include=*.h | grep -vF "#include \"uct_ext/$comp/" |
           grep -vE "$shared" | grep -vxF "$allowed_cross" || true)
    if [ -n "$hits" ]; then
        echo "src/uct_ext/$comp includes another component's header (only stream/stream.h and base/ are shared):"
        echo "$hits"
        bad=1
    fi
done
hits=$(grep -nE '#include "uct_ext/[a-z_]+/' "$src"/core/*.h "$src"/core/*/*.h || true)
if [ -n "$hits" ]; then
    echo "a core header names a component (core learns what a transport does from tl.h):"
    echo "$hits"
    bad=1
fi
# Inside core the rooms run one way, the engine at the top (src/core/*.c):
#   ctl/ -> xfer/ -> segment/ -> worker/ -> meta/ -> wire/
# a room includes nothing of the rooms left of it, and nothing outside its
# room by "../". The engine's struct is private to the engine's own files:
# core/engine_int.h (struct ote_engine) is included only by
# src/core/engine*.c and host.c; core/engine.h (the engine's functions) by
# no room. A room reads the engine through core/engine_facts.h and its own
# state through its own header (meta/ and wire/ not even that). The one
# arrow back up is the completion of the submit <-> completion circle: a
# slice's end reported to its task (xfer/batch.h) by the worker that
# posted it and by the spray that could not.
hits=$(cd "$src/core" && grep -rlE '#include "(core/)?engine_int\.h"' . --include=*.c --include=*.h |
       grep -vxE '\./(engine[a-z_]*\.c|host\.c)' || true)
if [ -n "$hits" ]; then
    echo "core/engine_int.h (struct ote_engine) is included outside the engine's files (engine*.c, host.c):"
    echo "$hits"
    bad=1
fi
completion='^(worker/worker\.c|segment/spray\.c):#include "core/xfer/batch\.h"$'
room() { # room, pattern of forbidden includes, why
    hits=$(cd "$src/core" && grep -rnE "#include \"(\.\./|$2)" "$1" --include=*.c --include=*.h |
           sed -E 's/:[0-9]+:/:/' | grep -vE "$completion" || true)
    if [ -n "$hits" ]; then
        echo "src/core/$1 includes $3:"
        echo "$hits"
        bad=1
    fi
}
eng='engine\.h|engine_int\.h|select\.h'
room ctl     "core/($eng)" 'an engine file'
room xfer    "core/($eng|ctl/)" 'ctl or an engine file'
room segment "core/($eng|ctl/|xfer/)" 'ctl, xfer or an engine file'
room worker  "core/($eng|ctl/|xfer/|segment/)" 'ctl, xfer, segment or an engine file'
room meta    "core/($eng|engine_facts\.h|ctl/|xfer/|segment/|worker/)" 'the engine or a room above meta'
room wire    "core/($eng|engine_facts\.h|ctl/|xfer/|segment/|worker/|meta/)" 'the engine or another room of core'
# Inside segment/ the files run one way, top first: segment_reread.c ->
# segment.c -> segment_export.c -> wireup.c -> segment_ref.c ->
# segment_ctl.c (a file includes no header of a file above it), and
# only spray.c, the room's one file in the submit <-> completion circle,
# includes worker.h (the others read a worker's fields from
# worker_def.h) or spray.h; a segment's life ends waiting slices through
# the table's backlog_end.
seg_above() { # file stem, headers of the files above it
    if [ ! -f "$src/core/segment/$1.c" ]; then
        echo "src/core/segment/$1.c is gone: say in check_layers.sh where segment/ runs now"
        bad=1
        return
    fi
    hits=$(cd "$src/core/segment" && grep -nE "#include \"(core/segment/)?($2)\.h\"" \
               "$1.c" $( [ -f "$1.h" ] && echo "$1.h") || true)
    if [ -n "$hits" ]; then
        echo "src/core/segment/$1 includes the header of a file above it in segment/:"
        echo "$hits"
        bad=1
    fi
}
seg_above segment_ctl 'segment|segment_ref|wireup|segment_export|segment_reread|spray'
seg_above segment_ref 'segment|wireup|segment_export|segment_reread|spray'
seg_above wireup 'segment|segment_export|segment_reread|spray'
seg_above segment_export 'segment|segment_reread|spray'
seg_above segment 'segment_reread|spray'
hits=$(cd "$src/core" && grep -rnE '#include "(core/worker/worker(_wait)?|(core/segment/)?spray)\.h"' segment |
       grep -vE '^segment/spray\.c:' || true)
if [ -n "$hits" ]; then
    echo "src/core/segment: only spray.c includes worker.h, worker_wait.h or spray.h (the circle's one file there):"
    echo "$hits"
    bad=1
fi
# core/obs/ reads the engine through engine_facts.h only, and what it
# reads of the rooms above through the sources the engine gives it (its
# opening comment): it includes no other file of core.
check core/obs '\.\./|core/(engine\.h|engine_int\.h|select\.h|ctl/|wire/|meta/|worker/|xfer/|segment/)' 'core files other than engine_facts.h'
if [ $bad -ne 0 ]; then
    echo "0 passed, 1 failed"
    exit 1
fi
echo "includes run one way: core -> proto -> {mem, uct_ext} -> base; in core: ctl -> xfer -> segment -> worker -> meta -> wire; in segment/: reread -> segment -> export -> wireup -> ref -> ctl"
echo "1 passed, 0 failed"
