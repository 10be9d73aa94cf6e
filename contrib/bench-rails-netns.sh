#!/bin/sh
# Rails on veth: two network namespaces joined by two veth pairs (rail0,
# rail1), each link shaped with tc tbf, ote_perftest write_bw from A to B
# over rail0 alone and over both rails. Needs root, ip and tc.
# Usage: contrib/bench-rails-netns.sh BUILD_DIR RATE0 RATE1 [SIZE] [ITERS]
#   e.g. contrib/bench-rails-netns.sh build 400mbit 400mbit
set -eu
build=$(cd "${1:?build dir}" && pwd)
rate0=${2:?rate of rail0}
rate1=${3:?rate of rail1}
size=${4:-4m}
iters=${5:-40}
pt="$build/src/tools/ote_perftest"
a=ote_bench_a$$
b=ote_bench_b$$
cleanup() {
    [ -n "${tpid:-}" ] && kill "$tpid" 2>/dev/null || true
    ip netns del "$a" 2>/dev/null || true
    ip netns del "$b" 2>/dev/null || true
}
trap cleanup EXIT INT TERM
ip netns add "$a"
ip netns add "$b"
for k in 0 1; do
    ip link add "obr$$a$k" type veth peer name "obr$$b$k"
    ip link set "obr$$a$k" netns "$a"
    ip link set "obr$$b$k" netns "$b"
    ip -n "$a" link set "obr$$a$k" name "rail$k"
    ip -n "$b" link set "obr$$b$k" name "rail$k"
    ip -n "$a" addr add "10.82.$k.1/24" dev "rail$k"
    ip -n "$b" addr add "10.82.$k.2/24" dev "rail$k"
    ip -n "$a" link set "rail$k" up
    ip -n "$b" link set "rail$k" up
done
ip -n "$a" link set lo up
ip -n "$b" link set lo up
tc -n "$a" qdisc add dev rail0 root tbf rate "$rate0" burst 512k latency 200ms
tc -n "$a" qdisc add dev rail1 root tbf rate "$rate1" burst 512k latency 200ms
ip netns exec "$b" env OTE_TLS=tcp OTE_NET_DEVICES=rail0,rail1 \
    "$pt" -l 0.0.0.0:18515 --region 256m >/dev/null 2>&1 &
tpid=$!
sleep 1
for devs in rail0 rail1 rail0,rail1; do
    echo "== rail0 $rate0, rail1 $rate1: OTE_NET_DEVICES=$devs"
    ip netns exec "$a" env OTE_TLS=tcp OTE_NET_DEVICES="$devs" \
        "$pt" -l 0.0.0.0:0 -s "$size" -b 8 -n "$iters" -q 10.82.0.2:18515 2>&1 |
        grep -v 'warn  auth'
done
