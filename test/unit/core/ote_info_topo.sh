#!/bin/sh
# ote_info -d with OTE_HWLOC_XML on a fixture machine and OTE_SYSFS_ROOT on
# a fixture tree of RDMA devices: each memory of that machine with its NICs
# ranked, and those hwloc does not place kept. (This host's own network
# devices are ranked too when the fixture names them: not checked here.)
set -u
info="$ORBITTE_TEST_BUILDDIR/../src/tools/ote_info"
here="$(cd "$(dirname "$0")" && pwd)"
xml="$here/topologies/32em64t-2n8c2t-pci-mlx5socket0.xml"
out=$(mktemp)
trap 'rm -f "$out"' EXIT

env OTE_HWLOC_XML="$xml" OTE_SYSFS_ROOT="$here/../uct_ext/sysfs/multi" OTE_TLS=tcp \
    OTE_AUTH_KEY=ote-info-topo-shared-key "$info" -d >"$out" 2>&1
rc=$?
[ $rc -eq 0 ] || { echo "ote_info -d exited $rc"; cat "$out"; exit 1; }
grep -q "^# Rails by topology (hwloc: not available)" "$out" && exit 77 # built without hwloc

fail=0
while IFS= read -r line; do
    grep -qxF -- "$line" "$out" || { echo "missing: $line"; fail=1; }
done <<LINES
# Rails by topology (hwloc: $xml)
#   memory cpu:0
#   memory cpu:1
#   memory cuda:0
#     mlx5_0:1     score 1.000 weight 1.00 (on NUMA node 0)
#     mlx5_3:1     not ranked (mlx5_3:1 not in the topology): kept, weight 1
LINES
[ $fail -eq 0 ] || cat "$out"
exit $fail
