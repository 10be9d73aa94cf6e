#!/bin/sh
# The GPU check program on the CUDA and cuFile test doubles, small sizes:
# every path test/gpu/run.sh takes on a GPU also runs here (data verified;
# the GB/s printed mean nothing).
set -eu
b="$ORBITTE_TEST_BUILDDIR"
export OTE_CUDA_LIB="$b/unit/cuda/.libs/libote_cuda_double.so"
# GPU memory to and from files through the cuFile double (the direct path).
export OTE_CUFILE_LIB="$b/unit/cuda/.libs/libote_cufile_double.so"
export OTE_LOG_LEVEL=error
if "$b/gpu/ote_gpu_check" -s 3000000 -n 2 all; then
    echo "1 passed, 0 failed"
else
    echo "0 passed, 1 failed"
    exit 1
fi
