#!/bin/sh
# test_mp_mem_dereg over the native cma component only: deregistration while
# the target copies into the region.
exec "$(dirname "$0")/mp_tls.sh" cma test_mp_mem_dereg "$@"
