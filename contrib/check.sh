#!/bin/sh
# Installs what is missing, builds OrbitTE and runs every test:
#  1. optimised build with warnings as errors: make check (unit, multi-process,
#     fuzz-target replays, CPU-side CUDA checks through the test double);
#  2. ASan+UBSan build (contrib/configure-devel): the multi-process tests again;
#  3. ThreadSanitizer build (contrib/check-tsan.sh): core unit, core
#     multi-process and load tests, the stress test among them.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc)
sh "$top/contrib/install-deps.sh"
cd "$top"
./autogen.sh > /dev/null 2>&1

mkdir -p build-check
(
    cd build-check
    ../configure --enable-werror CFLAGS="-O2 -g" > configure.log
    make -j"$jobs" > make.log
    make -j"$jobs" check
)

mkdir -p build-asan
(
    cd build-asan
    ../contrib/configure-devel > configure.log
    make -j"$jobs" > make.log
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        make -j"$jobs" check
)
JOBS=$jobs sh "$top/contrib/check-tsan.sh" build-tsan
echo "check.sh: all test suites passed"
