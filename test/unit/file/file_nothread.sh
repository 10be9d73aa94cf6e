#!/bin/sh
# test_file without worker threads (OTE_PROGRESS_THREAD=n): only the thread
# in ote_batch_wait() polls the rings, and arms them before it sleeps.
dir=${ORBITTE_TEST_BUILDDIR:?run under make check}/unit/file
OTE_PROGRESS_THREAD=n
export OTE_PROGRESS_THREAD
exec "$dir/test_file" "$@"
