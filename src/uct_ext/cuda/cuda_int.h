/*
 * Shared by the cuda components and the staging pipelines: a copier, i.e.
 * pooled streams and events on which asynchronous copies are posted, and
 * whose completions the owning worker polls (never a blocking
 * synchronise on a worker thread).
 */
#ifndef OTE_UCT_EXT_CUDA_CUDA_INT_H
#define OTE_UCT_EXT_CUDA_CUDA_INT_H

#include "cuda_api.h"
#include "uct_ext/tl.h"

#include <stdbool.h>
#include <stddef.h>

#define OTE_CUDA_MAX_DEVICES 64

typedef struct ote_cuda_copier ote_cuda_copier_t;

/* Called from ote_cuda_copier_progress() when a copy ended. */
typedef void (*ote_cuda_copy_cb_t)(void *arg, ote_status_t status);

/* streams_per_device streams on each device, created on first use. */
ote_status_t ote_cuda_copier_create(unsigned streams_per_device, ote_cuda_copier_t **c_p);
/*
 * Waits (bounded) for copies still on the device, calls their callbacks
 * (OK when they finished, TIMEOUT if the device never answered), and frees
 * streams and events.
 */
void         ote_cuda_copier_destroy(ote_cuda_copier_t *c);
/*
 * Post dst <- src (n bytes) on a stream of device dev (-1: device 0). The
 * callback runs later from progress, exactly once; an error return means
 * it never will.
 */
ote_status_t ote_cuda_copier_post(ote_cuda_copier_t *c, int dev, void *dst, const void *src,
                                  size_t n, ote_cuda_copy_cb_t cb, void *arg);
/* Poll events; returns the number of copies completed. */
unsigned     ote_cuda_copier_progress(ote_cuda_copier_t *c);
/* Copies posted and not completed. */
size_t       ote_cuda_copier_pending(const ote_cuda_copier_t *c);

/* The device of a location "cuda:N", or -1. */
int ote_cuda_location_device(const char *location);

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
