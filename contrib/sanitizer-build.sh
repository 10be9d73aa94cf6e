# Shared by contrib/check-asan.sh and contrib/check-tsan.sh (sourced, not
# run): the sanitizer build folder and the list of tests it runs.

# sanitizer_build CONFIGURE_OPTION BUILD_DIR: configure (once) and build in
# BUILD_DIR (relative to the source tree unless absolute) with -O1 -g,
# warnings as errors and CONFIGURE_OPTION (--enable-asan, --enable-tsan);
# leaves the shell in BUILD_DIR and sets srcdir, builddir and jobs for the
# caller. Environment: JOBS (default 2), CONFIGURE_FLAGS (extra configure
# options), CC.
sanitizer_build() {
    srcdir=$(cd "$(dirname "$0")/.." && pwd)
    builddir=$2
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
        "$srcdir/configure" "$1" --enable-werror CFLAGS="-O1 -g" ${CONFIGURE_FLAGS:-}
    fi
    make -j"$jobs"
}

# sanitizer_tests REGEX: the tests make knows (TESTS) whose names match REGEX.
sanitizer_tests() {
    make -s -C test --no-print-directory --eval 'ote-print-tests: ; @echo $(TESTS)' \
        ote-print-tests | tr ' ' '\n' | grep -E "$1" | tr '\n' ' '
}
