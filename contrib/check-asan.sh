#!/bin/sh
# Build OrbitTE with AddressSanitizer and UndefinedBehaviorSanitizer in a
# separate folder and run the multi-process tests (test/mp) there, plus the
# fuzz targets' corpus replay. Any sanitizer report fails the run.
#
#   contrib/check-asan.sh [BUILD_DIR]      (default: build-asan)
#
# Environment: JOBS (default 2), CC, CONFIGURE_FLAGS (extra configure options),
# ASAN_TESTS (a test list to run instead of test/mp/* and test/fuzz/*).
set -eu

. "$(dirname "$0")/sanitizer-build.sh"
sanitizer_build --enable-asan "${1:-build-asan}"

# Leaks are errors too; a sanitizer report makes the test exit non-zero.
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export ASAN_OPTIONS UBSAN_OPTIONS

# Every test of the multi-process and fuzz fragments, as make knows them.
[ -n "${ASAN_TESTS:-}" ] || ASAN_TESTS=$(sanitizer_tests '^(mp|fuzz)/')
echo "check-asan: running $ASAN_TESTS"
make -C test -j"$jobs" check TESTS="$ASAN_TESTS"
# The logs must hold no sanitizer report, even from a child that a test
# did not wait for.
# (grep exits 2 when a pattern names no file, even after a match: read its output.)
reports=$(grep -l -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' test/mp/*.log \
    test/fuzz/*.log 2>/dev/null || true)
if [ -n "$reports" ]; then
    echo "$reports"
    echo "check-asan: sanitizer reports in the logs above" >&2
    exit 1
fi
echo "check-asan: clean"
