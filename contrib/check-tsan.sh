#!/bin/sh
# Build OrbitTE with ThreadSanitizer in a separate folder and run the tests
# whose code runs on several threads at once: the core unit tests, the core
# multi-process tests and the load tests (test/mp/test_mp_load*, the stress
# test among them). Any data race, lock-order inversion or other TSan
# report fails the run.
#
#   contrib/check-tsan.sh [BUILD_DIR]      (default: build-tsan)
#
# Environment: JOBS (default 2) for the build, TSAN_TEST_JOBS (default 1)
# for the tests: instrumented targets are slow, and two multi-process tests
# at once on a small machine can outlast the tests' command timeouts; CC,
# CONFIGURE_FLAGS (extra configure options), TSAN_TESTS (a test list to run
# instead), OTE_TEST_STRESS_MS (submission time of the stress test, default
# 2500).
#
# contrib/tsan.supp names code outside OrbitTE (uninstrumented libraries)
# and one scan of OrbitTE's own, each with its reason.
set -eu

. "$(dirname "$0")/sanitizer-build.sh"
sanitizer_build --enable-tsan "${1:-build-tsan}"

# UCX's memory hooks (libucm) patch glibc's mmap/madvise family, and TSan's
# runtime crashes when a thread exits through them: keep them off. Without
# them the registration cache keeps no unreferenced entry (it never serves a
# stale mapping); nothing these tests check depends on it.
UCX_MEM_MMAP_HOOK_MODE=none
UCX_MEM_MALLOC_HOOKS=no
export UCX_MEM_MMAP_HOOK_MODE UCX_MEM_MALLOC_HOOKS

# halt_on_error: the first report ends the process with exitcode, so the
# test fails; second_deadlock_stack for readable lock-order reports.
TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:exitcode=66:second_deadlock_stack=1:suppressions=$srcdir/contrib/tsan.supp}
export TSAN_OPTIONS

[ -n "${TSAN_TESTS:-}" ] || TSAN_TESTS=$(sanitizer_tests '^(unit/core/|mp/test_mp_)')
echo "check-tsan: running $TSAN_TESTS"
make -C test -j"${TSAN_TEST_JOBS:-1}" check TESTS="$TSAN_TESTS"
# (grep exits 2 when a pattern names no file, even after a match: read its output.)
reports=$(grep -l -E 'WARNING: ThreadSanitizer|ERROR: ThreadSanitizer' test/unit/core/*.log \
    test/mp/*.log 2>/dev/null || true)
if [ -n "$reports" ]; then
    echo "$reports"
    echo "check-tsan: ThreadSanitizer reports in the logs above" >&2
    exit 1
fi
echo "check-tsan: clean"
