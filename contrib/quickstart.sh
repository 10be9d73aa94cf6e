#!/bin/sh
# Installs what is missing, builds OrbitTE, and runs the demo: two processes
# on this host move data with the embedded peer-to-peer metadata (no server:
# the peer's descriptor comes from its control port on loopback), verifying
# every byte: first over the transport chosen automatically for a peer on
# this host (the native shm), then over the native tcp on loopback.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
sh "$top/contrib/install-deps.sh"
cd "$top"
[ -x configure ] || ./autogen.sh
mkdir -p build-release
cd build-release
[ -f Makefile ] || ../contrib/configure-release --prefix="$top/install" > configure.log
make -j"$(nproc)" > make.log
for tls in all tcp; do
    for t in write_bw read_bw; do
        ./src/tools/ote_perftest --loopback -x $tls -t $t -s 64k,1m -b 8 -n 300 --check
    done
    ./src/tools/ote_perftest --loopback -x $tls -t write_lat -s 8 -n 2000
done
