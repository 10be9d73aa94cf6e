#!/bin/sh
# test_mp_late_region over the native shm component only (\shm: the name, not the alias).
exec "$(dirname "$0")/mp_tls.sh" '\shm' test_mp_late_region "$@"
