#!/bin/sh
# test_mp_late_region over the native tcp component only.
exec "$(dirname "$0")/mp_tls.sh" tcp test_mp_late_region "$@"
