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

srcdir=$(cd "$(dirname "$0")/.." && pwd)
builddir=${1:-build-asan}
jobs=${JOBS:-2}

case $builddir in
/*) ;;
*) builddir=$srcdir/$builddir ;;
esac

if [ ! -x "$srcdir/configure" ]; then
    (cd "$srcdir" && ./autogen.sh)
fi
mkdir -p "$builddir"
cd "$builddir"
if [ ! -f Makefile ]; then
    # shellcheck disable=SC2086
    "$srcdir/configure" --enable-asan --enable-werror CFLAGS="-O1 -g" ${CONFIGURE_FLAGS:-}
fi
make -j"$jobs"

# Leaks are errors too; a sanitizer report makes the test exit non-zero.
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export ASAN_OPTIONS UBSAN_OPTIONS

if [ -z "${ASAN_TESTS:-}" ]; then
    # Every test of the multi-process and fuzz fragments, as make knows them.
    ASAN_TESTS=$(make -s -C test --no-print-directory \
        --eval 'ote-print-tests: ; @echo $(TESTS)' ote-print-tests |
        tr ' ' '\n' | grep -E '^(mp|fuzz)/' | tr '\n' ' ')
fi
echo "check-asan: running $ASAN_TESTS"
make -C test -j"$jobs" check TESTS="$ASAN_TESTS"
# The logs must hold no sanitizer report, even from a child that a test
# did not wait for.
if grep -l -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' test/mp/*.log test/fuzz/*.log \
        2>/dev/null; then
    echo "check-asan: sanitizer reports in the logs above" >&2
    exit 1
fi
echo "check-asan: clean"
