/*
 * cuda_copy: host<->GPU and GPU<->GPU copies inside one process (a segment
 * opened on the engine itself). The "remote" range is memory of this very
 * engine, checked against its region table like any target access; the
 * copy runs on a pooled stream and ends when its event is seen complete by
 * the worker's progress.
 */
#include "cuda_int.h"

#include "base/config.h"
#include "base/log.h"

#include <stdlib.h>
#include <string.h>

#define CUDA_COPY_STREAMS    4
#define CUDA_COPY_SLICE      (16u << 20)
#define CUDA_COPY_BANDWIDTH  20e9

typedef struct {
    ote_tl_iface_t      super;
    ote_cuda_copier_t  *copier;
    ote_mem_table_t    *regions;
    uint64_t            instance_id;
    size_t              inflight_bytes;
} cuda_copy_iface_t;

typedef struct {
    ote_tl_ep_t super;
} cuda_copy_ep_t;

/* One posted operation: the target region stays referenced until the copy ends. */
typedef struct {
    cuda_copy_iface_t   *iface;
    ote_region_t        *target;
    size_t               length;
    ote_tl_completion_t *comp;
} cuda_copy_op_t;

static ote_status_t cuda_copy_query_resources(ote_tl_component_t *comp,
                                              const ote_tl_iface_params_t *params,
                                              ote_tl_resource_t **res_p, size_t *count_p)
{
    ote_tl_resource_t *res;

    if (ote_cuda_load() != OTE_OK)
        return OTE_ERR_UNSUPPORTED;
    res = calloc(1, sizeof(*res));
    if (res == NULL)
        return OTE_ERR_NO_MEMORY;
    snprintf(res->tl_name, sizeof(res->tl_name), "cuda_copy");
    /* One resource for every visible device: streams are per device inside. */
    snprintf(res->dev_name, sizeof(res->dev_name), "cuda");
    res->component = comp;
    *res_p         = res;
    *count_p       = 1;
    return OTE_OK;
}

static void cuda_copy_iface_close(ote_tl_iface_t *tl_iface)
{
    cuda_copy_iface_t *iface = (cuda_copy_iface_t *)tl_iface;

    ote_cuda_copier_destroy(iface->copier);
    free(iface);
}

static void cuda_copy_iface_query(ote_tl_iface_t *tl_iface, ote_tl_caps_t *caps)
{
    (void)tl_iface;
    memset(caps, 0, sizeof(*caps));
    caps->ops        = OTE_TL_CAP_PUT_ZCOPY | OTE_TL_CAP_GET_ZCOPY | OTE_TL_CAP_CHECKED |
                       OTE_TL_CAP_DEVICE_PAIRS;
    caps->mem_local  = OTE_MEM_TYPE_HOST | OTE_MEM_TYPE_CUDA;
    caps->mem_remote = OTE_MEM_TYPE_HOST | OTE_MEM_TYPE_CUDA;
    caps->scope      = OTE_TL_SCOPE_PROCESS;
    caps->max_iov    = 1;
    caps->slice_size = CUDA_COPY_SLICE;
    caps->bandwidth  = CUDA_COPY_BANDWIDTH;
    caps->latency    = 10e-6;
    caps->conn_model = OTE_TL_CONN_TO_IFACE;
}

static ote_status_t cuda_copy_get_address(ote_tl_iface_t *tl_iface, void *buf, size_t max,
                                          size_t *len_p)
{
    cuda_copy_iface_t *iface = (cuda_copy_iface_t *)tl_iface;

    if (max < sizeof(iface->instance_id))
        return OTE_ERR_NO_MEMORY;
    memcpy(buf, &iface->instance_id, sizeof(iface->instance_id));
    *len_p = sizeof(iface->instance_id);
    return OTE_OK;
}

static int cuda_copy_event_fd(ote_tl_iface_t *tl_iface)
{
    (void)tl_iface;
    return -1;
}

static unsigned cuda_copy_progress(ote_tl_iface_t *tl_iface)
{
    return ote_cuda_copier_progress(((cuda_copy_iface_t *)tl_iface)->copier);
}

static ote_status_t cuda_copy_event_arm(ote_tl_iface_t *tl_iface)
{
    return ote_cuda_copier_pending(((cuda_copy_iface_t *)tl_iface)->copier) ? OTE_ERR_BUSY
                                                                            : OTE_OK;
}

static ote_status_t cuda_copy_ep_create(ote_tl_iface_t *tl_iface, const void *addr,
                                        size_t addr_len, const ote_tl_peer_t *peer,
                                        ote_tl_ep_t **ep_p)
{
    cuda_copy_iface_t *iface = (cuda_copy_iface_t *)tl_iface;
    cuda_copy_ep_t *ep;
    uint64_t inst;

    if (addr_len != sizeof(inst))
        return OTE_ERR_UNREACHABLE;
    memcpy(&inst, addr, sizeof(inst));
    /* Only this very engine: the addresses are pointers of this process. */
    if (inst != iface->instance_id || peer->instance_id != iface->instance_id)
        return OTE_ERR_UNREACHABLE;
    ep = calloc(1, sizeof(*ep));
    if (ep == NULL)
        return OTE_ERR_NO_MEMORY;
    ep->super.iface = tl_iface;
    *ep_p           = &ep->super;
    return OTE_OK;
}

static void cuda_copy_done(void *arg, ote_status_t status)
{
    cuda_copy_op_t *op = arg;

    op->iface->inflight_bytes -= op->length;
    ote_mem_region_put(op->target);
    op->comp->func(op->comp, status);
    free(op);
}

static ote_status_t cuda_copy_post(ote_tl_ep_t *tl_ep, bool write, void *local, size_t length,
                                   ote_region_t *local_region, uint64_t remote_addr,
                                   ote_tl_completion_t *comp)
{
    cuda_copy_iface_t *iface = (cuda_copy_iface_t *)tl_ep->iface;
    unsigned access = write ? OTE_ACCESS_REMOTE_WRITE : OTE_ACCESS_REMOTE_READ;
    cuda_copy_op_t *op;
    ote_region_t *target;
    ote_status_t status;
    void *remote;
    int dev;

    status = ote_mem_region_acquire(iface->regions, remote_addr, length, access, &target);
    if (status != OTE_OK)
        return status;
    op = malloc(sizeof(*op));
    if (op == NULL) {
        ote_mem_region_put(target);
        return OTE_ERR_NO_MEMORY;
    }
    *op = (cuda_copy_op_t){.iface = iface, .target = target, .length = length, .comp = comp};
    remote = (void *)(uintptr_t)remote_addr;
    /* The stream of a device that takes part: the copy engine sits there. */
    dev = local_region->mem_type == OTE_MEM_TYPE_CUDA
              ? ote_cuda_location_device(local_region->location)
              : ote_cuda_location_device(target->location);
    status = write ? ote_cuda_copier_post(iface->copier, dev, remote, local, length,
                                          cuda_copy_done, op)
                   : ote_cuda_copier_post(iface->copier, dev, local, remote, length,
                                          cuda_copy_done, op);
    if (status != OTE_OK) {
        ote_mem_region_put(target);
        free(op);
        return status;
    }
    iface->inflight_bytes += length;
    return OTE_INPROGRESS;
}

static ote_status_t cuda_copy_put_zcopy(ote_tl_ep_t *ep, void *local, size_t length,
                                        ote_region_t *local_region, uint64_t remote_addr,
                                        const void *rkey, size_t rkey_len,
                                        ote_tl_completion_t *comp)
{
    (void)rkey;
    (void)rkey_len;
    return cuda_copy_post(ep, true, local, length, local_region, remote_addr, comp);
}

static ote_status_t cuda_copy_get_zcopy(ote_tl_ep_t *ep, void *local, size_t length,
                                        ote_region_t *local_region, uint64_t remote_addr,
                                        const void *rkey, size_t rkey_len,
                                        ote_tl_completion_t *comp)
{
    (void)rkey;
    (void)rkey_len;
    return cuda_copy_post(ep, false, local, length, local_region, remote_addr, comp);
}

static size_t cuda_copy_inflight_bytes(ote_tl_ep_t *ep)
{
    return ((cuda_copy_iface_t *)ep->iface)->inflight_bytes;
}

static bool cuda_copy_is_alive(ote_tl_ep_t *ep)
{
    (void)ep;
    return true;
}

/* Copies already on a stream cannot be withdrawn; they end through progress. */
static void cuda_copy_ep_destroy(ote_tl_ep_t *ep)
{
    free(ep);
}

static const ote_tl_iface_ops_t cuda_copy_iface_ops = {
    .close          = cuda_copy_iface_close,
    .query          = cuda_copy_iface_query,
    .get_address    = cuda_copy_get_address,
    .event_fd       = cuda_copy_event_fd,
    .progress       = cuda_copy_progress,
    .ep_create      = cuda_copy_ep_create,
    .event_arm      = cuda_copy_event_arm,
    .format_address = ote_tl_no_format_address,
    .check_timeouts = ote_tl_no_check_timeouts,
    .has_deadlines  = ote_tl_no_deadlines,
    .ep_open        = ote_tl_unsupported_ep_open,
    .ep_accept      = ote_tl_unsupported_ep_accept,
    .ep_release     = ote_tl_no_ep_release,
};

static const ote_tl_ep_ops_t cuda_copy_ep_ops = {
    .put_zcopy       = cuda_copy_put_zcopy,
    .get_zcopy       = cuda_copy_get_zcopy,
    .inflight_bytes  = cuda_copy_inflight_bytes,
    .is_alive        = cuda_copy_is_alive,
    .destroy         = cuda_copy_ep_destroy,
    .connect_to_ep   = ote_tl_unsupported_connect_to_ep,
    .needs_reconnect = ote_tl_no_reconnect_needed,
    .reconnect       = ote_tl_unsupported_reconnect,
};

static ote_status_t cuda_copy_iface_open(const ote_tl_resource_t *res, ote_md_t *md,
                                         const ote_tl_iface_params_t *params,
                                         ote_tl_iface_t **iface_p)
{
    cuda_copy_iface_t *iface = calloc(1, sizeof(*iface));
    ote_status_t status;

    if (iface == NULL)
        return OTE_ERR_NO_MEMORY;
    status = ote_cuda_copier_create(CUDA_COPY_STREAMS, &iface->copier);
    if (status != OTE_OK) {
        free(iface);
        return status;
    }
    iface->super.ops      = &cuda_copy_iface_ops;
    iface->super.ep_ops   = &cuda_copy_ep_ops;
    iface->super.resource = *res;
    iface->super.md       = md;
    iface->super.md_index = -1;
    iface->regions        = params->regions;
    iface->instance_id    = params->instance_id;
    *iface_p              = &iface->super;
    return OTE_OK;
}

static const char *cuda_copy_unavailable(ote_tl_component_t *comp)
{
    (void)comp;
    return ote_cuda_api_source();
}

static const ote_tl_component_ops_t cuda_copy_component_ops = {
    .name            = "cuda_copy",
    .config_table    = &ote_cuda_config_table,
    .query_resources = cuda_copy_query_resources,
    .iface_open      = cuda_copy_iface_open,
    .unavailable     = cuda_copy_unavailable,
    .md_open         = ote_tl_unsupported_md_open,
    .md_close        = ote_tl_no_md_close,
};

ote_tl_component_t ote_cuda_copy_component = {.ops = &cuda_copy_component_ops};
