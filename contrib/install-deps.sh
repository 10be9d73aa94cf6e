#!/bin/sh
# Installs the Debian 12 packages OrbitTE builds, tests and benchmarks with.
# Safe to run again: installs only what is missing. Needs root (or sudo).
# etcd-server and redis-server are for the metadata tests, which start servers
# of their own on free loopback ports (never the system services).
set -eu
pkgs="build-essential autoconf automake libtool pkg-config git
libucx-dev ucx-utils libibverbs-dev libhwloc-dev hwloc
libcmocka-dev libjson-c-dev libssl-dev liburing-dev
libcurl4-openssl-dev libhiredis-dev etcd-server redis-server
iproute2 iperf3 fio clang procps
python3-dev python3-setuptools python3-pytest python3-numpy
python3-venv python3-pip python3-wheel python3-matplotlib
libmicrohttpd-dev prometheus"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing="$missing $p"
done
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
echo "installing:$missing"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $missing
