/*
 * File component: the "file" transport, one iface (an io_uring ring) per
 * worker, one ep per file segment and worker. Its ifaces publish no
 * address: eps are made only from the address blob of a file this process
 * opened (ote_file_address), for the segment that opened it.
 */
#include "file_int.h"

#include "base/config.h"
#include "base/dlist.h"
#include "base/log.h"
#include "base/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

static void file_iface_query(ote_tl_iface_t *tl_iface, ote_tl_caps_t *caps)
{
    memset(caps, 0, sizeof(*caps));
    /* Checked: every access is bounded by the file and the access it was opened with. */
    caps->ops        = OTE_TL_CAP_PUT_ZCOPY | OTE_TL_CAP_GET_ZCOPY | OTE_TL_CAP_CHECKED;
    /* GPU memory where the md registers it with cuFile (file_gds.c). */
    caps->mem_local  = OTE_MEM_TYPE_HOST | (tl_iface->md != NULL ? OTE_MEM_TYPE_CUDA : 0);
    caps->mem_remote = OTE_MEM_TYPE_HOST;
    caps->scope      = OTE_TL_SCOPE_PROCESS;
    caps->max_iov    = 1;
    caps->max_msg    = 0; /* any length: requests are continued in the ring */
    caps->align      = 1;
    /*
     * Requests are not cut: a cut would fall anywhere and lose the O_DIRECT
     * alignment of an aligned request. Requests spread over the workers.
     */
    caps->slice_size = (size_t)1 << 40;
    caps->bandwidth  = 2e9;
    caps->latency    = 20e-6;
    caps->conn_model = OTE_TL_CONN_TO_IFACE;
}

static ote_status_t file_iface_get_address(ote_tl_iface_t *iface, void *buf, size_t max,
                                           size_t *len_p)
{
    /* Never published: peers cannot reach this process's files. */
    return OTE_ERR_UNSUPPORTED;
}

static int file_iface_event_fd(ote_tl_iface_t *tl_iface)
{
    return ((file_iface_t *)tl_iface)->efd;
}

static bool ep_gpu(const ote_tl_ep_t *tl_ep, const ote_region_t *region)
{
    return region != NULL && region->mem_type == OTE_MEM_TYPE_CUDA;
}

/* The region's cuFile registration (file_gds_buf_t), or NULL. */
static void *ep_gds_memh(const ote_tl_ep_t *tl_ep, const ote_region_t *region)
{
    int i = tl_ep->iface->md_index;

    return region != NULL && i >= 0 ? region->memh[i] : NULL;
}

static ote_status_t file_ep_put(ote_tl_ep_t *tl_ep, void *local, size_t length,
                                ote_region_t *local_region, uint64_t remote_addr,
                                const void *rkey, size_t rkey_len, ote_tl_completion_t *comp)
{
    return ote_file_op_post((file_ep_t *)tl_ep, true, local, length, remote_addr,
                            ep_gpu(tl_ep, local_region), ep_gds_memh(tl_ep, local_region), comp);
}

static ote_status_t file_ep_get(ote_tl_ep_t *tl_ep, void *local, size_t length,
                                ote_region_t *local_region, uint64_t remote_addr,
                                const void *rkey, size_t rkey_len, ote_tl_completion_t *comp)
{
    return ote_file_op_post((file_ep_t *)tl_ep, false, local, length, remote_addr,
                            ep_gpu(tl_ep, local_region), ep_gds_memh(tl_ep, local_region), comp);
}

static size_t file_ep_inflight_bytes(ote_tl_ep_t *tl_ep)
{
    return ((file_ep_t *)tl_ep)->bytes;
}

static bool file_ep_is_alive(ote_tl_ep_t *tl_ep)
{
    return true;
}

static void file_ep_destroy(ote_tl_ep_t *tl_ep)
{
    file_ep_t *ep = (file_ep_t *)tl_ep;

    ote_file_iface_drain((file_iface_t *)tl_ep->iface, ep);
    ote_file_ep_unfix(ep);
    ote_file_put(ep->file);
    free(ep);
}

static const ote_tl_ep_ops_t file_ep_ops = {
    .put_zcopy       = file_ep_put,
    .get_zcopy       = file_ep_get,
    .inflight_bytes  = file_ep_inflight_bytes,
    .is_alive        = file_ep_is_alive,
    .destroy         = file_ep_destroy,
    OTE_TL_EP_OPS_NO_CONNECTION,
};

/* Touches no iface state: safe without the worker lock. */
static ote_status_t file_ep_create(ote_tl_iface_t *iface, const void *addr, size_t addr_len,
                                   const ote_tl_peer_t *peer, ote_tl_ep_t **ep_p)
{
    ote_file_t *f = ote_file_from_address(addr, addr_len);
    file_ep_t *ep;

    if (f == NULL)
        return OTE_ERR_UNREACHABLE;
    ep = calloc(1, sizeof(*ep));
    if (ep == NULL) {
        ote_file_put(f);
        return OTE_ERR_NO_MEMORY;
    }
    ep->super.iface  = iface;
    ep->file         = f;
    ep->fixed_fd     = -1;
    ep->fixed_direct = -1;
    *ep_p           = &ep->super;
    return OTE_OK;
}

static void file_iface_close(ote_tl_iface_t *tl_iface)
{
    file_iface_t *iface = (file_iface_t *)tl_iface;

    if (iface->ring_ok) {
        ote_file_iface_drain(iface, NULL);
        io_uring_queue_exit(&iface->ring);
    }
    ote_file_gds_stop(iface);
    ote_fd_close(iface->efd);
    OTE_LIST_FREE(iface->free_ops, next);
    free(iface->bounce_mem);
    free(iface);
}

static const ote_tl_iface_ops_t file_iface_ops = {
    .close          = file_iface_close,
    .query          = file_iface_query,
    .get_address    = file_iface_get_address,
    .event_fd       = file_iface_event_fd,
    .progress       = ote_file_iface_progress,
    .event_arm      = ote_file_iface_event_arm,
    .check_timeouts = ote_file_iface_check_timeouts,
    .ep_create      = file_ep_create,
    .format_address = ote_tl_no_format_address,
    .has_deadlines  = ote_tl_no_deadlines,
    OTE_TL_IFACE_OPS_TO_IFACE_ONLY,
};

static ote_status_t file_iface_open(const ote_tl_resource_t *res, ote_md_t *md,
                                    const ote_tl_iface_params_t *params,
                                    ote_tl_iface_t **iface_p)
{
    file_iface_t *iface;
    ote_file_config_t cfg;
    unsigned qd;
    int rc;

    if (ote_config_fill(&ote_file_config_table, &cfg) != OTE_OK)
        return OTE_ERR_INVALID_PARAM;
    qd    = (unsigned)cfg.uring_qd;
    ote_config_release(&ote_file_config_table, &cfg);
    iface = calloc(1, sizeof(*iface));
    if (iface == NULL)
        return OTE_ERR_NO_MEMORY;
    iface->super.ops      = &file_iface_ops;
    iface->super.ep_ops   = &file_ep_ops;
    iface->super.resource = *res;
    iface->super.md       = md;
    iface->qd             = qd;
    iface->efd            = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (iface->efd < 0)
        goto err_io;
    /* Twice the queue depth: room for a cancellation next to every request. */
    rc = io_uring_queue_init(2 * qd, &iface->ring, 0);
    if (rc < 0) {
        ote_warn("file: io_uring_queue_init(%u): %s", 2 * qd, strerror(-rc));
        goto err_io;
    }
    iface->ring_ok = true;
    rc             = io_uring_register_eventfd(&iface->ring, iface->efd);
    if (rc < 0) {
        ote_warn("file: io_uring_register_eventfd: %s", strerror(-rc));
        goto err_io;
    }
    /* Without a file table (old kernels) requests name plain fds. */
    iface->fixed_ok = io_uring_register_files_sparse(&iface->ring, OTE_FILE_FIXED_SLOTS) == 0;
    *iface_p = &iface->super;
    return OTE_OK;

err_io:
    file_iface_close(&iface->super);
    return OTE_ERR_IO;
}

/* Why io_uring cannot be used here, or NULL. */
static const char *uring_unusable(void)
{
    struct io_uring ring;
    int rc = io_uring_queue_init(2, &ring, 0);

    if (rc == 0) {
        io_uring_queue_exit(&ring);
        return NULL;
    }
    switch (-rc) {
    case ENOSYS:
        return "the kernel has no io_uring";
    case EPERM:
    case EACCES:
        return "io_uring is not permitted here (kernel.io_uring_disabled, seccomp)";
    case ENOMEM:
        return "io_uring_setup: out of memory (RLIMIT_MEMLOCK)";
    default:
        return "io_uring_setup failed";
    }
}

static ote_status_t file_query_resources(ote_tl_component_t *comp,
                                         const ote_tl_iface_params_t *params,
                                         ote_tl_resource_t **res_p, size_t *count_p)
{
    ote_tl_resource_t *r = calloc(1, sizeof(*r));

    if (r == NULL)
        return OTE_ERR_NO_MEMORY;
    snprintf(r->tl_name, sizeof(r->tl_name), "%s", OTE_FILE_TL_NAME);
    snprintf(r->dev_name, sizeof(r->dev_name), "io_uring");
    r->is_network = false;
    r->unusable   = uring_unusable();
    r->component  = comp;
    *res_p        = r;
    *count_p      = 1;
    return OTE_OK;
}

/* The md that registers GPU memory with cuFile, where GPU memory goes direct; else none. */
static ote_status_t file_md_open(ote_tl_component_t *comp, const ote_tl_resource_t *res,
                                 ote_md_t **md_p)
{
    ote_file_config_t cfg;
    const char *why;
    ote_status_t status;

    if (ote_config_fill(&ote_file_config_table, &cfg) != OTE_OK)
        return OTE_ERR_INVALID_PARAM;
    status = ote_file_gds_load(&cfg, &why);
    ote_config_release(&ote_file_config_table, &cfg);
    if (status != OTE_OK) {
        ote_debug("file: GPU memory to and from files: %s", why);
        return OTE_ERR_UNSUPPORTED; /* no md: the component needs none */
    }
    return ote_file_gds_md_open(md_p);
}

static void file_md_close(ote_tl_component_t *comp, ote_md_t *md)
{
    ote_file_gds_md_close(md);
}

OTE_TL_OBJECT_COMPONENT_DEFINE(ote_file_component, OTE_FILE_TL_NAME, &ote_file_config_table,
                               file_query_resources, file_md_open, file_md_close, file_iface_open,
                               ote_tl_no_reason, &ote_file_object_ops);
