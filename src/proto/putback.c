/*
 * READ over put-only transports, initiator side (see putback.h). Each slice
 * is a job of the engine's protocol pool (jobs.h): the control request
 * blocks a pool thread until the target's PUT completed, while the worker
 * stays free to receive that PUT. A full pool queue ends the slice BUSY.
 */
#include "putback.h"

#include "ctl_ep.h"

#include "base/log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    ote_tl_ep_t         super;
    ote_proto_ctl_iface_t *iface; /* the rail's: the host's resource, these ops */
    ote_rail_t         *host;
    ote_putback_hooks_t hooks;
    _Atomic uint64_t    next_id;
} putback_ep_t;

/* Holds nothing of the ep, which the segment may destroy meanwhile. */
typedef struct {
    ote_proto_job_t      job; /* first: the pool's entry */
    ote_ctl_putback_t    m;
    ote_tl_completion_t *comp;
    ote_putback_hooks_t  hooks;
} putback_op_t;

static void putback_read_job(ote_proto_job_t *job)
{
    putback_op_t *op = (putback_op_t *)job;
    ote_buf_t out    = {0};
    uint8_t *resp    = NULL;
    size_t len       = 0;
    uint64_t id      = 0;
    ote_status_t status, remote = OTE_OK;

    status = ote_ctl_putback_encode(&op->m, &out);
    if (status == OTE_OK)
        status = op->hooks.base.ctl(op->hooks.base.ctl_arg, out.data, out.len, &resp, &len);
    if (status == OTE_OK)
        status = ote_ctl_putback_ack_decode(resp, len, &remote, &id);
    if (status == OTE_OK && id != op->m.id)
        status = OTE_ERR_PROTOCOL;
    if (status == OTE_OK)
        status = remote;
    if (status != OTE_OK)
        ote_debug("putback: read %#llx+%u: %s", (unsigned long long)op->m.remote, op->m.length,
                  ote_status_string(status));
    free(resp);
    free(out.data);
    ote_proto_ctl_ep_complete(&op->hooks.base, op->comp, status);
    free(op);
}

static ote_status_t putback_get_zcopy(ote_tl_ep_t *tl_ep, void *local, size_t length,
                                      ote_region_t *local_region, uint64_t remote_addr,
                                      const void *rkey, size_t rkey_len,
                                      ote_tl_completion_t *comp)
{
    putback_ep_t *ep = (putback_ep_t *)tl_ep;
    putback_op_t *op;

    (void)local_region;
    (void)rkey;
    (void)rkey_len;
    if (length == 0 || length > OTE_CTL_PUTBACK_MAX_BYTES)
        return OTE_ERR_INVALID_PARAM;
    op = calloc(1, sizeof(*op));
    if (op == NULL)
        return OTE_ERR_NO_MEMORY;
    op->comp        = comp;
    op->hooks       = ep->hooks;
    op->m.initiator = ep->hooks.base.initiator;
    op->m.target    = ep->hooks.base.target;
    op->m.id        = atomic_fetch_add(&ep->next_id, 1) + 1;
    op->m.remote    = remote_addr;
    op->m.local     = (uint64_t)(uintptr_t)local;
    op->m.length    = (uint32_t)length;
    memcpy(op->m.name, ep->hooks.name, sizeof(op->m.name));
    op->job.run     = putback_read_job;
    return ote_proto_ctl_ep_submit(&ep->hooks.base, &op->job);
}

static const ote_tl_ep_ops_t putback_ep_ops =
    OTE_PROTO_CTL_EP_OPS(ote_tl_unsupported_zcopy, putback_get_zcopy);

bool ote_proto_putback_rail(const ote_rail_t *rail)
{
    return rail->iface != NULL && rail->iface->ep_ops == &putback_ep_ops;
}

ote_status_t ote_proto_putback_rail_init(ote_rail_t *rail, ote_rail_t *host,
                                         const ote_putback_hooks_t *hooks)
{
    const ote_tl_caps_t *hc = &host->caps;
    putback_ep_t *ep;

    if (host->ep == NULL || !(hc->ops & OTE_TL_CAP_PUT_ZCOPY) ||
        (hc->ops & (OTE_TL_CAP_GET_ZCOPY | OTE_TL_CAP_DEVICE_PAIRS)) ||
        !(hc->mem_local & OTE_MEM_TYPE_HOST) || !(hc->mem_remote & OTE_MEM_TYPE_HOST))
        return OTE_ERR_UNSUPPORTED;
    ep = calloc(1, sizeof(*ep));
    if (ep == NULL || (ep->iface = ote_proto_ctl_iface_new()) == NULL) {
        free(ep);
        return OTE_ERR_NO_MEMORY;
    }
    ote_tl_iface_copy(&ep->iface->iface, host->iface);
    ep->iface->iface.ep_ops    = &putback_ep_ops;
    ep->super.iface            = &ep->iface->iface;
    ep->host                   = host;
    ep->hooks                  = *hooks;
    ep->hooks.base.iface_ref   = ep->iface;
    atomic_init(&ep->next_id, 0);
    memset(rail, 0, sizeof(*rail));
    rail->iface          = &ep->iface->iface;
    rail->ep             = &ep->super;
    rail->caps           = *hc;
    /* The target checks every range against its region table. */
    rail->caps.ops        = OTE_TL_CAP_GET_ZCOPY | OTE_TL_CAP_CHECKED;
    rail->caps.mem_local  = OTE_MEM_TYPE_HOST;
    rail->caps.mem_remote = OTE_MEM_TYPE_HOST;
    if (rail->caps.max_msg == 0 || rail->caps.max_msg > OTE_CTL_PUTBACK_MAX_BYTES)
        rail->caps.max_msg = OTE_CTL_PUTBACK_MAX_BYTES;
    rail->worker    = host->worker;
    rail->remote_md = -1;
    return OTE_OK;
}
