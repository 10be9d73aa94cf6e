/*
 * What the cuda component offers the layers above (the staging protocol):
 * a copier, i.e. pooled streams and events on which asynchronous copies
 * are posted, and whose completions the owning worker polls (never a
 * blocking synchronise on a worker thread); and the cuda base that
 * cuda_copy, cuda_ipc and staging share: an iface around a copier (its
 * set-up, progress, arming and close) and an ep whose put and get go to
 * one post function.
 */
#ifndef OTE_UCT_EXT_CUDA_CUDA_COPIER_H
#define OTE_UCT_EXT_CUDA_CUDA_COPIER_H

#include "base/config.h"
#include "base/cuda_api.h"
#include "uct_ext/tl.h"

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

/* ---- cuda base ---------------------------------------------------------------- */

/* A put (write) or get of length bytes between local and remote_addr. */
typedef ote_status_t (*ote_cuda_post_cb_t)(ote_tl_ep_t *ep, bool write, void *local,
                                           size_t length, ote_region_t *local_region,
                                           uint64_t remote_addr, const void *rkey,
                                           size_t rkey_len, ote_tl_completion_t *comp);

/* An ep of the cuda base: put_zcopy and get_zcopy call post. */
typedef struct {
    ote_tl_ep_t        super;
    ote_cuda_post_cb_t post;
} ote_cuda_ep_t;

ote_status_t ote_cuda_ep_put_zcopy(ote_tl_ep_t *ep, void *local, size_t length,
                                   ote_region_t *local_region, uint64_t remote_addr,
                                   const void *rkey, size_t rkey_len, ote_tl_completion_t *comp);
ote_status_t ote_cuda_ep_get_zcopy(ote_tl_ep_t *ep, void *local, size_t length,
                                   ote_region_t *local_region, uint64_t remote_addr,
                                   const void *rkey, size_t rkey_len, ote_tl_completion_t *comp);
/* Copies only fail, they never leave a connection behind. */
bool         ote_cuda_ep_is_alive(ote_tl_ep_t *ep);
/* A new ep of iface (size bytes, an ote_cuda_ep_t first) posting with post. */
ote_status_t ote_cuda_ep_create(ote_tl_iface_t *iface, size_t size, ote_cuda_post_cb_t post,
                                ote_tl_ep_t **ep_p);

/* An iface of the cuda base: a copier, progressed by the worker. */
typedef struct {
    ote_tl_iface_t     super;
    ote_cuda_copier_t *copier;
    ote_mem_table_t   *regions;
    uint64_t           instance_id;
    size_t             inflight_bytes; /* posted on the copier, not ended */
} ote_cuda_iface_t;

/*
 * Open an iface of size bytes (an ote_cuda_iface_t first) with a copier of
 * streams streams per device, the given ops, and res, md and params.
 */
ote_status_t ote_cuda_iface_open(size_t size, unsigned streams, const ote_tl_iface_ops_t *ops,
                                 const ote_tl_ep_ops_t *ep_ops, const ote_tl_resource_t *res,
                                 ote_md_t *md, const ote_tl_iface_params_t *params,
                                 ote_tl_iface_t **iface_p);
void         ote_cuda_iface_close(ote_tl_iface_t *iface);
/*
 * The capabilities both cuda ifaces share (PUT and GET of one iov, from host
 * or cuda memory, 10 us, connected to the iface) with the ones given.
 */
void         ote_cuda_iface_caps(ote_tl_caps_t *caps, unsigned extra_ops, unsigned mem_remote,
                                 unsigned scope, size_t slice_size, double bandwidth);
int          ote_cuda_iface_event_fd(ote_tl_iface_t *iface);
unsigned     ote_cuda_iface_progress(ote_tl_iface_t *iface);
/* BUSY while copies run: they are polled, no fd announces their end. */
ote_status_t ote_cuda_iface_event_arm(ote_tl_iface_t *iface);
size_t       ote_cuda_ep_inflight_bytes(ote_tl_ep_t *ep);
/*
 * Copy between local and remote on device dev for iface (write: local to
 * remote); from progress, the copy's end lets go of what it held
 * (release(hold)) and hands its status to comp. inflight_bytes counts
 * length until then. Not OK: nothing was posted and hold is the caller's.
 */
ote_status_t ote_cuda_iface_copy(ote_cuda_iface_t *iface, bool write, int dev, void *local,
                                 void *remote, size_t length, ote_tl_completion_t *comp,
                                 void (*release)(void *hold), void *hold);
/* The ops of a cuda base iface and its eps: what differs is named. */
#define OTE_CUDA_IFACE_OPS(_query, _get_address, _ep_create)                                 \
    {                                                                                        \
        .close = ote_cuda_iface_close, .query = (_query), .get_address = (_get_address),     \
        .event_fd = ote_cuda_iface_event_fd, .progress = ote_cuda_iface_progress,            \
        .ep_create = (_ep_create), .event_arm = ote_cuda_iface_event_arm,                    \
        .format_address = ote_tl_no_format_address,                                          \
        .check_timeouts = ote_tl_no_check_timeouts, .has_deadlines = ote_tl_no_deadlines,    \
        OTE_TL_IFACE_OPS_TO_IFACE_ONLY,                                                      \
    }
/*
 * The ep ops of the cuda base for an ep of its own (an ote_cuda_ep_t
 * first, made by whoever owns it: staging's eps): put and get go to its
 * post function; what differs is named.
 */
#define OTE_CUDA_BASE_EP_OPS(_inflight_bytes, _is_alive, _destroy)                           \
    {                                                                                        \
        .put_zcopy = ote_cuda_ep_put_zcopy, .get_zcopy = ote_cuda_ep_get_zcopy,              \
        .inflight_bytes = (_inflight_bytes), .is_alive = (_is_alive),                        \
        .destroy = (_destroy), OTE_TL_EP_OPS_NO_CONNECTION,                                  \
    }
#define OTE_CUDA_EP_OPS(_destroy)                                                            \
    OTE_CUDA_BASE_EP_OPS(ote_cuda_ep_inflight_bytes, ote_cuda_ep_is_alive, _destroy)

/* The one resource ("cuda" device) of component comp named tl_name, where CUDA loads. */
ote_status_t ote_cuda_query_resources(ote_tl_component_t *comp, const char *tl_name,
                                      ote_tl_resource_t **res_p, size_t *count_p);
/* Why CUDA is not available (the component ops' unavailable). */
const char  *ote_cuda_unavailable(ote_tl_component_t *comp);

#endif
