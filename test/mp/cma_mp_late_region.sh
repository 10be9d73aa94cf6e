#!/bin/sh
# test_mp_late_region over the native cma component only.
exec "$(dirname "$0")/mp_tls.sh" cma test_mp_late_region "$@"
