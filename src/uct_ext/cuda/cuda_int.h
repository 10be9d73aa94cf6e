/* Private to the cuda components: the cuda_ipc rkey and the components. */
#ifndef OTE_UCT_EXT_CUDA_CUDA_INT_H
#define OTE_UCT_EXT_CUDA_CUDA_INT_H

#include "cuda_copier.h"
#include "uct_ext/tl.h"

#include <stdbool.h>
#include <stddef.h>

/*
 * cuda_ipc rkey: u32 magic "OTCI", u8 version, u8 device, u16 reserved (0),
 * u64 allocation base, u64 allocation size, the IPC handle of the allocation.
 */
#define OTE_CUDA_IPC_RKEY_LEN (4 + 1 + 1 + 2 + 8 + 8 + OTE_CUDA_IPC_HANDLE_SIZE)
typedef struct {
    ote_cuda_ipc_handle_t handle;
    uint64_t              base;
    uint64_t              size;
    uint8_t               device;
} ote_cuda_ipc_rkey_t;

/* buf holds OTE_CUDA_IPC_RKEY_LEN bytes. */
void         ote_cuda_ipc_rkey_encode(const ote_cuda_ipc_rkey_t *k, uint8_t *buf);
/* Bytes from a peer: length, magic, version, reserved, size and overflow checked. */
ote_status_t ote_cuda_ipc_rkey_decode(const void *rkey, size_t len, ote_cuda_ipc_rkey_t *k);

extern ote_tl_component_t ote_cuda_copy_component;
extern ote_tl_component_t ote_cuda_ipc_component;

#endif
