/*
 * A peer's exported file, initiator side (see file_remote.h). Each slice
 * is a job of the engine's protocol pool: one FILE_IO request and its
 * answer; a full pool queue ends the slice BUSY.
 */
#include "file_remote.h"

#include "ctl_ep.h"

#include "base/log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    ote_tl_ep_t             super;
    ote_proto_ctl_iface_t  *iface; /* the rail's: these ops, no component */
    ote_file_remote_hooks_t hooks;
} file_remote_ep_t;

/* Holds nothing of the ep, which the segment may destroy meanwhile. */
typedef struct {
    ote_proto_job_t         job; /* first: the pool's entry */
    ote_ctl_file_io_t       m;
    uint8_t                *local;
    ote_tl_completion_t    *comp;
    const atomic_bool      *cancel;
    ote_file_remote_hooks_t hooks;
} file_remote_op_t;

ote_file_remote_mode_t ote_proto_file_remote_mode(const char *value)
{
    if (strcmp(value, "rails") == 0)
        return OTE_FILE_REMOTE_RAILS;
    if (strcmp(value, "ctl") == 0)
        return OTE_FILE_REMOTE_CTL;
    return OTE_FILE_REMOTE_AUTO;
}

static const char *file_remote_op_name(const file_remote_op_t *op)
{
    return op->m.op == OTE_CTL_FILE_IO_READ ? "read" : "write";
}

static ote_status_t file_remote_exchange(file_remote_op_t *op)
{
    ote_buf_t out = {0};
    uint8_t *resp = NULL;
    const uint8_t *data = NULL;
    size_t len = 0, n = 0, max = op->m.op == OTE_CTL_FILE_IO_READ ? op->m.length : 0;
    ote_status_t status, remote = OTE_OK;

    status = ote_ctl_file_io_encode(&op->m, &out);
    if (status == OTE_OK)
        status = op->hooks.base.ctl(op->hooks.base.ctl_arg, out.data, out.len, &resp, &len);
    free(out.data);
    if (status == OTE_OK && op->m.rails)
        status = ote_ctl_file_io_rails_ack_decode(resp, len, max, &remote, &n);
    else if (status == OTE_OK)
        status = ote_ctl_file_io_ack_decode(resp, len, max, &remote, &data, &n);
    /*
     * A READ that met the end of the file still lands, and counts, the
     * bytes before it (by rails the target wrote them already).
     */
    if (status == OTE_OK && n > 0) {
        if (data != NULL)
            memcpy(op->local, data, n);
        op->comp->transferred = n;
    }
    if (status == OTE_OK && remote == OTE_OK && op->m.op == OTE_CTL_FILE_IO_READ &&
        n != op->m.length)
        status = OTE_ERR_PROTOCOL;
    free(resp);
    return status != OTE_OK ? status : remote;
}

static void file_remote_main(ote_proto_job_t *job)
{
    file_remote_op_t *op = (file_remote_op_t *)job;
    ote_status_t status;

    if (op->cancel != NULL && atomic_load(op->cancel))
        status = OTE_ERR_CANCELED;
    else
        status = file_remote_exchange(op);
    /*
     * auto: a peer whose rails do not reach this engine (it cannot open it
     * or no transport of its reaches this memory) answers UNREACHABLE; the
     * slice goes again by the control plane, and so do the segment's next
     * ones.
     */
    if (status == OTE_ERR_UNREACHABLE && op->m.rails && op->hooks.mode == OTE_FILE_REMOTE_AUTO &&
        !(op->cancel != NULL && atomic_load(op->cancel))) {
        ote_debug("remote file: %s %#llx+%u: the peer's rails do not reach '%s'; by the "
                  "control plane",
                  file_remote_op_name(op), (unsigned long long)op->m.offset, op->m.length,
                  op->m.name);
        if (op->hooks.rails_off != NULL)
            atomic_store(op->hooks.rails_off, true);
        op->m.rails           = false;
        op->m.data            = op->m.op == OTE_CTL_FILE_IO_WRITE ? op->local : NULL;
        op->comp->transferred = 0;
        status                = file_remote_exchange(op);
    }
    if (status != OTE_OK)
        ote_debug("remote file: %s %#llx+%u%s: %s", file_remote_op_name(op),
                  (unsigned long long)op->m.offset, op->m.length,
                  op->m.rails ? " by rails" : "", ote_status_string(status));
    ote_proto_ctl_ep_complete(&op->hooks.base, op->comp, status);
    free(op);
}

/*
 * By rails or by the control plane (OTE_FILE_REMOTE): by rails the target
 * moves the bytes into or out of local, which must lie in a region this
 * engine's transports let a peer write (READ) or read (WRITE).
 */
static ote_status_t file_remote_rails(const file_remote_ep_t *ep, uint8_t op_code, void *local,
                                      size_t length, const ote_region_t *local_region,
                                      bool *rails_p)
{
    unsigned need = op_code == OTE_CTL_FILE_IO_READ ? OTE_ACCESS_REMOTE_WRITE
                                                    : OTE_ACCESS_REMOTE_READ;
    bool allowed  = local_region != NULL && (local_region->access & need) == need;

    *rails_p = false;
    if (ep->hooks.mode == OTE_FILE_REMOTE_CTL ||
        (ep->hooks.mode == OTE_FILE_REMOTE_AUTO && ep->hooks.rails_off != NULL &&
         atomic_load(ep->hooks.rails_off)))
        return OTE_OK;
    if (allowed) {
        *rails_p = true;
        return OTE_OK;
    }
    if (ep->hooks.mode == OTE_FILE_REMOTE_RAILS) {
        ote_warn("remote file: %s of %p+%zu refused: OTE_FILE_REMOTE=rails and the local region "
                 "lacks OTE_ACCESS_REMOTE_%s (the peer moves the bytes over its rails)",
                 op_code == OTE_CTL_FILE_IO_READ ? "read" : "write", local, length,
                 need == OTE_ACCESS_REMOTE_WRITE ? "WRITE" : "READ");
        return OTE_ERR_ACCESS;
    }
    return OTE_OK;
}

static ote_status_t file_remote_post(ote_tl_ep_t *tl_ep, uint8_t op_code, void *local,
                                     size_t length, const ote_region_t *local_region,
                                     uint64_t remote_addr, ote_tl_completion_t *comp)
{
    file_remote_ep_t *ep = (file_remote_ep_t *)tl_ep;
    file_remote_op_t *op;
    ote_status_t status;
    bool rails;

    if (length == 0 || length > ep->hooks.max_bytes || remote_addr + length < remote_addr)
        return OTE_ERR_INVALID_PARAM;
    status = file_remote_rails(ep, op_code, local, length, local_region, &rails);
    if (status != OTE_OK)
        return status;
    op = calloc(1, sizeof(*op));
    if (op == NULL)
        return OTE_ERR_NO_MEMORY;
    op->comp        = comp;
    comp->transferred = 0;
    op->cancel      = ((ote_slice_t *)comp)->cancel;
    op->hooks       = ep->hooks;
    op->local       = local;
    op->m.op        = op_code;
    op->m.rails     = rails;
    op->m.initiator = ep->hooks.base.initiator;
    op->m.target    = ep->hooks.base.target;
    op->m.file_id   = ep->hooks.file_id;
    op->m.offset    = remote_addr;
    op->m.length    = (uint32_t)length;
    op->m.data      = op_code == OTE_CTL_FILE_IO_WRITE && !rails ? local : NULL;
    op->m.local     = (uintptr_t)local;
    snprintf(op->m.name, sizeof(op->m.name), "%s", ep->hooks.name);
    op->job.run     = file_remote_main;
    return ote_proto_ctl_ep_submit(&ep->hooks.base, &op->job);
}

/* put_zcopy and get_zcopy: one FILE_IO request, WRITE or READ; no rkey (the file is the peer's). */
#define FILE_REMOTE_ZCOPY(_fn, _op_code)                                                        \
    static ote_status_t _fn(ote_tl_ep_t *tl_ep, void *local, size_t length,                    \
                            ote_region_t *local_region, uint64_t remote_addr, const void *rkey, \
                            size_t rkey_len, ote_tl_completion_t *comp)                        \
    {                                                                                          \
        (void)rkey;                                                                            \
        (void)rkey_len;                                                                        \
        return file_remote_post(tl_ep, _op_code, local, length, local_region, remote_addr,     \
                                comp);                                                         \
    }
FILE_REMOTE_ZCOPY(file_remote_put_zcopy, OTE_CTL_FILE_IO_WRITE)
FILE_REMOTE_ZCOPY(file_remote_get_zcopy, OTE_CTL_FILE_IO_READ)

static const ote_tl_ep_ops_t file_remote_ep_ops =
    OTE_PROTO_CTL_EP_OPS(file_remote_put_zcopy, file_remote_get_zcopy);

ote_status_t ote_proto_file_remote_rail_init(ote_rail_t *rail, size_t worker,
                                             const ote_file_remote_hooks_t *hooks)
{
    file_remote_ep_t *ep;

    if (hooks->max_bytes == 0 || hooks->max_bytes > OTE_CTL_FILE_IO_MAX_BYTES)
        return OTE_ERR_INVALID_PARAM;
    ep = calloc(1, sizeof(*ep));
    if (ep == NULL || (ep->iface = ote_proto_ctl_iface_new()) == NULL) {
        free(ep);
        return OTE_ERR_NO_MEMORY;
    }
    ep->iface->iface.ep_ops   = &file_remote_ep_ops;
    ep->iface->iface.md_index = -1;
    snprintf(ep->iface->iface.resource.tl_name, sizeof(ep->iface->iface.resource.tl_name), "%s",
             OTE_FILE_REMOTE_TL_NAME);
    snprintf(ep->iface->iface.resource.dev_name, sizeof(ep->iface->iface.resource.dev_name),
             "ctl");
    ep->iface->iface.resource.is_network = true;
    ep->super.iface                      = &ep->iface->iface;
    ep->hooks                            = *hooks;
    ep->hooks.base.iface_ref             = ep->iface;
    memset(rail, 0, sizeof(*rail));
    rail->iface           = &ep->iface->iface;
    rail->ep              = &ep->super;
    /* The target checks every range against the exported size and access. */
    rail->caps.ops        = OTE_TL_CAP_PUT_ZCOPY | OTE_TL_CAP_GET_ZCOPY | OTE_TL_CAP_CHECKED;
    rail->caps.mem_local  = OTE_MEM_TYPE_HOST;
    rail->caps.mem_remote = OTE_MEM_TYPE_HOST;
    rail->caps.scope      = OTE_TL_SCOPE_HOST | OTE_TL_SCOPE_NETWORK;
    rail->caps.max_msg    = hooks->max_bytes;
    rail->caps.slice_size = hooks->max_bytes;
    rail->caps.bandwidth  = 1e9;
    rail->caps.latency    = 100e-6;
    rail->worker          = worker;
    rail->remote_md       = -1;
    rail->topo_nic        = -1;
    return OTE_OK;
}
