#!/bin/sh
# test_mp_mem_dereg over the native tcp component only: deregistration while
# the target receives WRITEs (merged into WRITEVs) into the region.
exec "$(dirname "$0")/mp_tls.sh" tcp test_mp_mem_dereg "$@"
