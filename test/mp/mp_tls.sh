#!/bin/sh
# Run a multi-process test program with only one transport selected:
#   mp_tls.sh TLS PROGRAM [ARGS...]
# Both the test and the target processes it starts inherit OTE_TLS.
tls=$1
prog=$2
shift 2
dir=${ORBITTE_TEST_BUILDDIR:?run under make check}/mp
OTE_TLS=$tls
export OTE_TLS
exec "$dir/$prog" "$@"
