#!/bin/sh
# Fuzz every target of test/fuzz for a few seconds each (libFuzzer, with
# ASan and UBSan), so that a harness or a decoder that falls behind the code
# fails the run. Built in a separate folder with clang:
#
#   contrib/check-fuzz.sh [BUILD_DIR]      (default: build-fuzz)
#
# Without clang or its libFuzzer runtime it says so and exits 0 (skipped).
# Environment: OTE_FUZZ_SECONDS (per target, default 5), JOBS (default 2),
# CONFIGURE_FLAGS (extra configure options).
set -eu

CC=${CC:-clang}
if ! command -v "$CC" > /dev/null 2>&1 ||
    [ ! -f "$("$CC" -print-file-name="libclang_rt.fuzzer_no_main-$(uname -m).a")" ]; then
    echo "check-fuzz: SKIPPED: no $CC with libFuzzer (libclang_rt.fuzzer_no_main)" \
        "here; install clang (contrib/install-deps.sh) to fuzz the targets"
    exit 0
fi
export CC

. "$(dirname "$0")/sanitizer-build.sh"
CONFIGURE_FLAGS="--enable-fuzzers ${CONFIGURE_FLAGS:-}" sanitizer_build --enable-asan \
    "${1:-build-fuzz}"

OTE_FUZZ_SECONDS=${OTE_FUZZ_SECONDS:-5}
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export OTE_FUZZ_SECONDS UBSAN_OPTIONS
tests=$(sanitizer_tests '^fuzz/')
echo "check-fuzz: fuzzing for $OTE_FUZZ_SECONDS s each: $tests"
# Only the fuzz targets are built (check_PROGRAMS), not every test program.
if ! make -C test -j"$jobs" check TESTS="$tests" check_PROGRAMS="$tests"; then
    for log in test/fuzz/*.log; do
        grep -q -E 'invariant failed|ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer)|runtime error:' \
            "$log" 2>/dev/null || continue
        echo "check-fuzz: $log:"
        grep -E 'invariant failed|ERROR:|runtime error:|Test unit written|Base64:' "$log" | head -n 8
    done
    echo "check-fuzz: a target failed; its input is in $builddir/test/fuzz/<target>-crash-*" >&2
    exit 1
fi
echo "check-fuzz: every target fuzzed without a finding"
