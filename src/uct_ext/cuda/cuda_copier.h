/*
 * What the cuda component offers the layers above (the staging protocol):
 * a copier, i.e. pooled streams and events on which asynchronous copies
 * are posted, and whose completions the owning worker polls (never a
 * blocking synchronise on a worker thread).
 */
#ifndef OTE_UCT_EXT_CUDA_CUDA_COPIER_H
#define OTE_UCT_EXT_CUDA_CUDA_COPIER_H

#include "base/config.h"
#include "base/cuda_api.h"

#include <ote/ote.h>
#include <stdbool.h>
#include <stddef.h>

#define OTE_CUDA_MAX_DEVICES 64

typedef struct ote_cuda_copier ote_cuda_copier_t;

/* OTE_CUDA_*: settings of cuda_copy, cuda_ipc and of the staging protocol's copies. */
typedef struct {
    long  ipc_cache_entries; /* imported IPC mappings kept per peer */
    char *lib;               /* library loaded instead of CUDA's; "" = CUDA's */
} ote_cuda_config_t;

extern const ote_config_table_t ote_cuda_config_table;

/*
 * Load the CUDA entry points (base/cuda_api.h) from the library OTE_CUDA_LIB
 * names, or from libcudart/libcuda; OTE_ERR_UNSUPPORTED when there is none.
 */
ote_status_t ote_cuda_load(void);

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

#endif
