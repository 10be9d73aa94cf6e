#!/bin/sh
# GPU checks for a machine with an NVIDIA GPU (one is enough), in one run
# of at most 8 minutes: builds the library with CUDA, then checks with real
# CUDA, byte for byte, and prints a table of GB/s next to references
# measured in the same run:
#   cuda_copy   pinned host <-> GPU in one process  vs cudaMemcpyAsync  (target >= 0.9x)
#   cuda_ipc    GPU <-> GPU across two processes    vs D2D cudaMemcpy   (target >= 0.8x)
#   staged      GPU <-> TCP <-> host of another process (local staging)
#                                                   vs host->TCP->host  (target >= 0.85x)
#   gpu_tcp_gpu GPU <-> TCP <-> GPU of another process (staging on both sides:
#               local chunks here, the target's pinned chunks there)
#                                                   vs host->TCP->host  (target >= 0.85x)
#   gpu_file    GPU <-> a file segment in the build directory: cuFile where
#               libcufile loads and the file system takes O_DIRECT, else staged
#               (the path is printed)               vs host<->file      (target >= 0.85x)
# Needs only this repository, the Debian build dependencies and the CUDA
# toolkit (CUDA_HOME, default /usr/local/cuda) with a driver.
#
#   test/gpu/run.sh            real GPU
#   test/gpu/run.sh --double   same programs on the CUDA test double (no GPU;
#                              small sizes; the numbers mean nothing)
# Environment: ORBITTE_GPU_BUILD (build dir, default build-gpu), ORBITTE_GPU_SIZE
# (bytes per transfer, default 256 MiB), ORBITTE_GPU_ITERS (default 10).
set -eu

fail() {
    echo "run.sh: FAILED: $*" >&2
    exit 1
}

double=no
[ "${1:-}" = "--double" ] && double=yes
top=$(cd "$(dirname "$0")/../.." && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
build=${ORBITTE_GPU_BUILD:-$top/build-gpu}
size=${ORBITTE_GPU_SIZE:-268435456}
iters=${ORBITTE_GPU_ITERS:-10}
jobs=$(nproc 2>/dev/null || echo 2)
start=$(date +%s)

[ -f "$cuda/include/cuda.h" ] || fail "no CUDA toolkit headers at $cuda/include (set CUDA_HOME)"
if [ $double = no ]; then
    if command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi -L || fail "nvidia-smi sees no GPU"
    else
        echo "run.sh: nvidia-smi not found; relying on the CUDA runtime to find a GPU"
    fi
fi

cd "$top"
if [ ! -x configure ]; then
    ./autogen.sh >/dev/null || fail "autogen.sh"
fi
mkdir -p "$build"
cd "$build"
if [ ! -f Makefile ]; then
    "$top/configure" --with-cuda="$cuda" CFLAGS="-O2 -g" >configure.log 2>&1 ||
        fail "configure (see $build/configure.log)"
fi
grep -q '^#define HAVE_CUDA 1' config.h || fail "configure did not find CUDA at $cuda"
make -j"$jobs" >make.log 2>&1 || fail "make (see $build/make.log)"
make -j"$jobs" -C test common/ote_test_target gpu/ote_gpu_check unit/cuda/libote_cuda_double.la \
    unit/cuda/libote_cufile_double.la >>make.log 2>&1 || fail "building the check programs (see $build/make.log)"
echo "run.sh: built in $(($(date +%s) - start)) s"

export ORBITTE_TEST_BUILDDIR="$build/test"
if [ $double = yes ]; then
    export OTE_CUDA_LIB="$build/test/unit/cuda/.libs/libote_cuda_double.so"
    [ -f "$OTE_CUDA_LIB" ] || fail "no test double at $OTE_CUDA_LIB"
    export OTE_CUFILE_LIB="$build/test/unit/cuda/.libs/libote_cufile_double.so"
    size=${ORBITTE_GPU_SIZE:-8388608}
    iters=${ORBITTE_GPU_ITERS:-2}
else
    unset OTE_CUDA_LIB
    # libcudart from the toolkit, libcuda from the driver.
    export LD_LIBRARY_PATH="$cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
export OTE_LOG_LEVEL=${OTE_LOG_LEVEL:-error}

left=$((480 - ($(date +%s) - start)))
[ $left -gt 30 ] || fail "no time left for the checks after the build"
out="$build/gpu-check.txt"
rc=0
timeout "$left" "$build/test/gpu/ote_gpu_check" -s "$size" -n "$iters" all >"$out" 2>&1 || rc=$?
cat "$out"
case $rc in
0) ;;
3) fail "no CUDA device usable (see the line above)" ;;
124) fail "checks did not finish within the 8-minute budget" ;;
*) fail "a transfer was wrong or did not complete (exit $rc)" ;;
esac

echo
echo "check                 GB/s   reference               GB/s   ratio  target  verdict"
awk '/^RESULT/ {
        verdict = ($9 != "ok") ? "WRONG DATA" : ($7 >= $8 ? "meets target" : "below target");
        printf("%-20s %7.2f   %-20s %7.2f   %5.2f   %4.2f   %s\n", $2, $4, $5, $6, $7, $8, verdict)
     }' "$out"
echo "run.sh: done in $(($(date +%s) - start)) s"
