#!/bin/sh
# Runs the measurements recorded in docs/performance.md, each beside its
# reference taken in the same run. Usage: contrib/bench/run.sh BUILD_DIR
# Prints one line per measurement; nothing here is a test.
set -u
build=${1:-build-release}
here=$(cd "$(dirname "$0")" && pwd)
pt="$build/src/tools/ote_perftest"
[ -x "$pt" ] || { echo "build $build first (contrib/configure-release)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; pkill -f "iperf3 -s -p 5299" 2>/dev/null; pkill -f "ucx_perftest -d" 2>/dev/null' EXIT

cc -O2 -o "$tmp/memcpy_bw" "$here/memcpy_bw.c"
echo "== references"
"$tmp/memcpy_bw" 256 10
iperf3 -s -p 5299 -D -1 >/dev/null 2>&1; sleep 0.5
iperf3 -c 127.0.0.1 -p 5299 -l 1M -P 2 -t 5 -f g 2>/dev/null | awk '/SUM.*receiver/ {print "iperf3 -l 1M -P 2: " $6 " Gbit/s = " $6/8 " GB/s"}'
sleep 0.5
iperf3 -s -p 5299 -D -1 >/dev/null 2>&1; sleep 0.5
iperf3 -c 127.0.0.1 -p 5299 -P 2 -t 5 -f g 2>/dev/null | awk '/SUM.*receiver/ {print "iperf3 -P 2 (128 KiB writes): " $6 " Gbit/s = " $6/8 " GB/s"}'
if command -v ucx_perftest >/dev/null; then
    ucx_perftest -p 13337 >/dev/null 2>&1 &
    sleep 1
    ucx_perftest 127.0.0.1 -p 13337 -d memory -x cma -t put_bw -D zcopy -s 1048576 -n 4000 2>/dev/null |
        awk '/Final/ {print "ucx_perftest -t put_bw -x cma -D zcopy -s 1m: " $6 " MiB/s = " $6*1.048576/1000 " GB/s"}'
    wait
    ucx_perftest -p 13338 >/dev/null 2>&1 &
    sleep 1
    ucx_perftest 127.0.0.1 -p 13338 -d lo -x tcp -t put_bw -D zcopy -s 1048576 -n 2000 2>/dev/null |
        awk '/Final/ {print "ucx_perftest -t put_bw -x tcp -D zcopy -s 1m: " $6 " MiB/s = " $6*1.048576/1000 " GB/s"}'
    wait
fi

run() {
    echo "ote_perftest --loopback $*"
    "$pt" --loopback -q "$@" 2>/dev/null | grep -v '^#'
}
echo "== native tcp"
for t in write_bw read_bw; do
    run -x tcp -t $t -s 1m -b 8
    run -x tcp -t $t -s 64k -b 32
    run -x tcp -t $t -s 4k -b 128
done
run -x tcp -t write_lat -s 8
run -x tcp -t read_lat -s 8
echo "== intra-host (native cma, UCT cma, UCT tcp)"
for t in write_bw read_bw; do
    run -x cma -t $t -s 1m -b 8
    run -x uct_cma -t $t -s 1m -b 8
done
run -x uct_tcp -t write_bw -s 1m -b 8
run -x cma -t write_lat -s 8
echo "== authentication: 1 MiB WRITE without and with OTE_AUTH_KEY, alternated"
for i in 1 2 3; do
    OTE_AUTH_KEY= run -x tcp -t write_bw -s 1m -b 8
    OTE_AUTH_KEY=bench-key-0123456789abcdef0123 run -x tcp -t write_bw -s 1m -b 8
done
