#!/bin/sh
# Intra-host rounds for docs/performance.md: in each round, the kernel's raw
# single-copy rates (cma_raw.c), ucx_perftest's cma put_bw and OrbitTE's
# WRITE and READ through the native cma and UCT's cma, all with one 1 MiB
# block per side (ucx_perftest's footprint), eight in flight. Targets run on
# CPU 1 and initiators on CPU 0 for every tool alike ("pinned"), then the
# same again unbound with --loopback ("free"). Nothing here is a test.
# Usage: contrib/bench/cma_rounds.sh BUILD_DIR [ROUNDS]; GB/s = 10^9 B/s.
set -u
build=${1:-build-release}
rounds=${2:-5}
pt="$build/src/tools/ote_perftest"
here=$(dirname "$0")
[ -x "$pt" ] || { echo "build $build first (contrib/configure-release)"; exit 1; }
tmp=$(mktemp -d)
trap 'pkill -f "ote_perftest -l 127.0.0.1:0" 2>/dev/null; pkill -f "ucx_perftest -p 136" 2>/dev/null; rm -rf "$tmp"' EXIT
cc -O2 -o "$tmp/cma_raw" "$here/cma_raw.c" || exit 1
export OTE_LOG_LEVEL=error

ucx() { # $1 port, $2 target cpu prefix, $3 initiator cpu prefix
    $2 ucx_perftest -p "$1" >/dev/null 2>&1 &
    sleep 0.7
    $3 ucx_perftest 127.0.0.1 -p "$1" -d memory -x cma -t put_bw -D zcopy -s 1048576 -n 4000 \
        2>/dev/null | awk '/Final/ {printf "%.2f", $6*1.048576/1000}'
    wait
}
ote() { # initiator prefix, then ote_perftest arguments
    pre=$1
    shift
    $pre "$pt" -q -s 1m -b 1 -D 8 "$@" 2>/dev/null | awk '!/^#/ {printf "%.2f", $3}'
}

echo "round raw_readv raw_writev | pinned: ucx cma_w cma_r uct_cma_w uct_cma_r | free: ucx cma_w cma_r"
i=1
while [ "$i" -le "$rounds" ]; do
    raw=$("$tmp/cma_raw" 4000 1 0 | awk '{printf " %.2f", $(NF-1)}')
    printf "%s%s |" "$i" "$raw"
    printf " %s" "$(ucx $((13600 + 2 * i)) "taskset -c 1" "taskset -c 0")"
    taskset -c 1 "$pt" -l 127.0.0.1:0 >"$tmp/srv" 2>&1 &
    srv=$!
    for _ in $(seq 100); do grep -q serving "$tmp/srv" && break; sleep 0.1; done
    seg=$(awk '/serving segment/ {print $4}' "$tmp/srv")
    for x in cma uct_cma; do
        for t in write_bw read_bw; do printf " %s" "$(ote "taskset -c 0" -x $x -t $t "$seg")"; done
    done
    kill "$srv" 2>/dev/null
    wait "$srv"
    printf " | %s" "$(ucx $((13601 + 2 * i)) "" "")"
    for t in write_bw read_bw; do printf " %s" "$(ote "" --loopback -x cma -t $t)"; done
    echo
    i=$((i + 1))
done
