#!/bin/sh
# ote_info -d with OTE_SYSFS_ROOT on the fixture trees: each RDMA device and
# port, the GID chosen, why not the others, and a pinned port that is down.
set -u
info="$ORBITTE_TEST_BUILDDIR/../src/tools/ote_info"
trees="$(cd "$(dirname "$0")" && pwd)/sysfs"
pass=0
fail=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# expect NAME: the output holds each line given on stdin, verbatim.
expect() {
    missing=0
    while IFS= read -r line; do
        grep -qxF -- "$line" "$out" || { echo "$1: missing: $line"; missing=1; }
    done
    if [ $missing -eq 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); cat "$out"; fi
}

run() { # root, then NAME=VALUE settings
    root=$1
    shift
    env OTE_SYSFS_ROOT="$trees/$root" OTE_AUTH_KEY=ote-info-rdma "$@" "$info" -d >"$out" 2>&1
}

run roce_v2_ipv4
rc=$?
[ $rc -eq 0 ] || { echo "roce_v2_ipv4: ote_info -d exited $rc"; fail=$((fail + 1)); }
expect roce_v2_ipv4 <<'LINES'
#   device mlx5_0: 1 port(s)
#     port mlx5_0:1   Ethernet, ACTIVE, selected: yes
#       GID index 3 RoCE v2 IPv4 ::ffff:10.0.0.1 netdev eth0: chosen
#       GID index 0 RoCE v1 fe80::202:c9ff:fe00:1 netdev eth0: not chosen: RoCE v1 ranks below RoCE v2 IPv4 (index 3)
#       GID index 1 RoCE v2 link-local fe80::202:c9ff:fe00:1 netdev eth0: not chosen: RoCE v2 link-local ranks below RoCE v2 IPv4 (index 3)
#       GID index 5 RoCE v2 IPv6 2001:db8::1 netdev eth0: not chosen: RoCE v2 IPv6 ranks below RoCE v2 IPv4 (index 3)
#       GID index 7 RoCE v2 IPv4 ::ffff:10.0.0.2 netdev eth0.100: not chosen: index 3 has the same rank and comes first
#       transports: none (UCX offers no rc, dc or ud transport on it here)
LINES

run ib
expect ib <<'LINES'
#   device mlx5_0: 2 port(s)
#     port mlx5_0:1   InfiniBand, ACTIVE, LID 0x1a, selected: yes
#       GID index 0 IB fe80::2:c903:a1:b2c3: chosen
#     port mlx5_0:2   InfiniBand, INIT, LID 0x0, selected: no (port state 2: INIT)
#     port mlx5_1:1   InfiniBand, ACTIVE, LID 0x0, selected: no (no LID assigned (is a subnet manager running?))
LINES

run ndev_missing
expect ndev_missing <<'LINES'
#       GID index 1 RoCE v2 IPv4 ::ffff:10.1.0.1: not chosen: no netdev behind it (gid_attrs/ndevs/1)
#     port mlx5_1:1   Ethernet, ACTIVE, selected: no (no usable GID (1 listed))
#       GID: none usable
LINES

# A pin on a port that is down: the engine fails, ote_info says why and lists all.
run multi OTE_NET_DEVICES=mlx5_3:1
rc=$?
[ $rc -eq 1 ] || { echo "multi pin: ote_info -d exited $rc, expected 1"; fail=$((fail + 1)); }
expect "multi pin" <<'LINES'
ote_info: listing with OTE_TLS=all OTE_NET_DEVICES=all
#     port mlx5_3:1   Ethernet, DOWN, selected: no (port state 1: DOWN)
#       GID index 0 RoCE v1 fe80::202:c9ff:fe00:13 netdev eth3: first choice once the port is usable
LINES
grep -q "OTE_NET_DEVICES: 'mlx5_3:1' names no usable device: mlx5_3:1: port state 1: DOWN" "$out" ||
    { echo "multi pin: no error naming the port"; fail=$((fail + 1)); }

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
