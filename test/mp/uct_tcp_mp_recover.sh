#!/bin/sh
# test_mp_recover over UCT's tcp (uct_tcp) only.
exec "$(dirname "$0")/mp_tls.sh" uct_tcp test_mp_recover "$@"
