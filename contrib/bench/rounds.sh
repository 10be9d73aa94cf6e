#!/bin/sh
# Interleaved rounds of the bandwidth measurements of docs/performance.md:
# each round takes every reference and every OrbitTE figure once, one after
# the other, so that ratios compare numbers taken under the same conditions.
# Usage: contrib/bench/rounds.sh BUILD_DIR [ROUNDS]. Prints one line per
# round (GB/s, 10^9 bytes per second). Nothing here is a test.
set -u
build=${1:-build-release}
rounds=${2:-5}
pt="$build/src/tools/ote_perftest"
[ -x "$pt" ] || { echo "build $build first (contrib/configure-release)"; exit 1; }
export OTE_LOG_LEVEL=error
trap 'pkill -f "iperf3 -s -p 5298" 2>/dev/null; pkill -f "ucx_perftest -p 1345" 2>/dev/null' EXIT

ote() { "$pt" --loopback -q "$@" 2>/dev/null | awk '!/^#/ {printf "%.2f", $3}'; }
iperf() {
    iperf3 -s -p 5298 -D -1 >/dev/null 2>&1; sleep 0.5
    iperf3 -c 127.0.0.1 -p 5298 -l 1M -P 2 -t 4 -f g 2>/dev/null |
        awk '/SUM.*receiver/ {printf "%.2f", $6/8}'
}
ucxcma() {
    port=$((13450 + $1))
    ucx_perftest -p $port >/dev/null 2>&1 &
    sleep 1
    ucx_perftest 127.0.0.1 -p $port -d memory -x cma -t put_bw -D zcopy -s 1048576 -n 4000 2>/dev/null |
        awk '/Final/ {printf "%.2f", $6*1.048576/1000}'
    wait
}
echo "round iperf3 tcp_w1m tcp_r1m tcp_w64k tcp_r64k tcp_w4k tcp_r4k ucx_cma cma_w cma_r uct_cma_w uct_cma_r uct_tcp_w"
i=1
while [ $i -le "$rounds" ]; do
    printf "%s %s" $i "$(iperf)"
    for t in write_bw read_bw; do printf " %s" "$(ote -x tcp -t $t -s 1m -b 8)"; done
    for t in write_bw read_bw; do printf " %s" "$(ote -x tcp -t $t -s 64k -b 32)"; done
    for t in write_bw read_bw; do printf " %s" "$(ote -x tcp -t $t -s 4k -b 128)"; done
    printf " %s" "$(ucxcma $i)"
    for x in cma uct_cma; do
        for t in write_bw read_bw; do printf " %s" "$(ote -x $x -t $t -s 1m -b 8)"; done
    done
    printf " %s\n" "$(ote -x uct_tcp -t write_bw -s 1m -b 8)"
    i=$((i + 1))
done
