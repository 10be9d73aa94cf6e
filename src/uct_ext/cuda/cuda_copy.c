/*
 * cuda_copy: host<->GPU and GPU<->GPU copies inside one process (a segment
 * opened on the engine itself). The "remote" range is memory of this very
 * engine, checked against its region table like any target access; the
 * copy runs on a pooled stream and ends when its event is seen complete by
 * the worker's progress. Built on the cuda base (cuda_copier.h).
 */
#include "cuda_int.h"

#include "base/config.h"
#include "base/log.h"

#include <stdlib.h>
#include <string.h>

#define CUDA_COPY_STREAMS    4
#define CUDA_COPY_SLICE      (16u << 20)
#define CUDA_COPY_BANDWIDTH  20e9

static ote_status_t cuda_copy_query_resources(ote_tl_component_t *comp,
                                              const ote_tl_iface_params_t *params,
                                              ote_tl_resource_t **res_p, size_t *count_p)
{
    (void)params;
    return ote_cuda_query_resources(comp, "cuda_copy", res_p, count_p);
}

static void cuda_copy_iface_query(ote_tl_iface_t *tl_iface, ote_tl_caps_t *caps)
{
    (void)tl_iface;
    ote_cuda_iface_caps(caps, OTE_TL_CAP_CHECKED | OTE_TL_CAP_DEVICE_PAIRS,
                        OTE_MEM_TYPE_HOST | OTE_MEM_TYPE_CUDA, OTE_TL_SCOPE_PROCESS,
                        CUDA_COPY_SLICE, CUDA_COPY_BANDWIDTH);
}

static ote_status_t cuda_copy_get_address(ote_tl_iface_t *tl_iface, void *buf, size_t max,
                                          size_t *len_p)
{
    ote_cuda_iface_t *iface = (ote_cuda_iface_t *)tl_iface;

    if (max < sizeof(iface->instance_id))
        return OTE_ERR_NO_MEMORY;
    memcpy(buf, &iface->instance_id, sizeof(iface->instance_id));
    *len_p = sizeof(iface->instance_id);
    return OTE_OK;
}

static ote_status_t cuda_copy_post(ote_tl_ep_t *tl_ep, bool write, void *local, size_t length,
                                   ote_region_t *local_region, uint64_t remote_addr,
                                   const void *rkey, size_t rkey_len, ote_tl_completion_t *comp);

static ote_status_t cuda_copy_ep_create(ote_tl_iface_t *tl_iface, const void *addr,
                                        size_t addr_len, const ote_tl_peer_t *peer,
                                        ote_tl_ep_t **ep_p)
{
    ote_cuda_iface_t *iface = (ote_cuda_iface_t *)tl_iface;
    uint64_t inst;

    if (addr_len != sizeof(inst))
        return OTE_ERR_UNREACHABLE;
    memcpy(&inst, addr, sizeof(inst));
    /* Only this very engine: the addresses are pointers of this process. */
    if (inst != iface->instance_id || peer->instance_id != iface->instance_id)
        return OTE_ERR_UNREACHABLE;
    return ote_cuda_ep_create(tl_iface, sizeof(ote_cuda_ep_t), cuda_copy_post, ep_p);
}

/* A copy's end: the target region, referenced while it ran, goes. */
static void cuda_copy_release(void *target)
{
    ote_mem_region_put(target);
}

static ote_status_t cuda_copy_post(ote_tl_ep_t *tl_ep, bool write, void *local, size_t length,
                                   ote_region_t *local_region, uint64_t remote_addr,
                                   const void *rkey, size_t rkey_len, ote_tl_completion_t *comp)
{
    ote_cuda_iface_t *iface = (ote_cuda_iface_t *)tl_ep->iface;
    unsigned access = write ? OTE_ACCESS_REMOTE_WRITE : OTE_ACCESS_REMOTE_READ;
    ote_region_t *target;
    ote_status_t status;
    int dev;

    (void)rkey;
    (void)rkey_len;
    status = ote_mem_region_acquire(iface->regions, remote_addr, length, access, &target);
    if (status != OTE_OK)
        return status;
    /* The stream of a device that takes part: the copy engine sits there. */
    dev = local_region->mem_type == OTE_MEM_TYPE_CUDA
              ? ote_cuda_location_device(local_region->location)
              : ote_cuda_location_device(target->location);
    status = ote_cuda_iface_copy(iface, write, dev, local, (void *)(uintptr_t)remote_addr,
                                 length, comp, cuda_copy_release, target);
    if (status != OTE_OK) {
        ote_mem_region_put(target);
        return status;
    }
    return OTE_INPROGRESS;
}

/* Copies already on a stream cannot be withdrawn; they end through progress. */
static void cuda_copy_ep_destroy(ote_tl_ep_t *ep)
{
    free(ep);
}

static const ote_tl_iface_ops_t cuda_copy_iface_ops =
    OTE_CUDA_IFACE_OPS(cuda_copy_iface_query, cuda_copy_get_address, cuda_copy_ep_create);

static const ote_tl_ep_ops_t cuda_copy_ep_ops = OTE_CUDA_EP_OPS(cuda_copy_ep_destroy);

static ote_status_t cuda_copy_iface_open(const ote_tl_resource_t *res, ote_md_t *md,
                                         const ote_tl_iface_params_t *params,
                                         ote_tl_iface_t **iface_p)
{
    return ote_cuda_iface_open(sizeof(ote_cuda_iface_t), CUDA_COPY_STREAMS, &cuda_copy_iface_ops,
                               &cuda_copy_ep_ops, res, md, params, iface_p);
}

OTE_TL_COMPONENT_DEFINE(ote_cuda_copy_component, "cuda_copy", &ote_cuda_config_table,
                        cuda_copy_query_resources, ote_tl_unsupported_md_open, ote_tl_no_md_close,
                        cuda_copy_iface_open, ote_cuda_unavailable);
