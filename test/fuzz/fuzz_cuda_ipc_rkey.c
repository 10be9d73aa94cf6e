/*
 * cuda_ipc rkey decoder (bytes from a peer's descriptor): what it accepts
 * is well formed and encodes back to the same bytes.
 */
#include "fuzz.h"

#include "uct_ext/cuda/cuda_int.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ote_cuda_ipc_rkey_t k;
    uint8_t again[OTE_CUDA_IPC_RKEY_LEN];

    if (ote_cuda_ipc_rkey_decode(data, size, &k) != OTE_OK)
        return 0;
    FUZZ_CHECK(size == OTE_CUDA_IPC_RKEY_LEN);
    FUZZ_CHECK(k.size > 0 && k.base + k.size > k.base);
    ote_cuda_ipc_rkey_encode(&k, again);
    FUZZ_CHECK(memcmp(again, data, size) == 0);
    return 0;
}
