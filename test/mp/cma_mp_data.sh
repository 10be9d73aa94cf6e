#!/bin/sh
# test_mp_data over the native cma component (single copy, target-checked) only.
exec "$(dirname "$0")/mp_tls.sh" cma test_mp_data "$@"
