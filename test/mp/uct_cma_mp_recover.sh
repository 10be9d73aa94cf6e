#!/bin/sh
# test_mp_recover over UCT's cma (uct_cma) only.
exec "$(dirname "$0")/mp_tls.sh" uct_cma test_mp_recover "$@"
