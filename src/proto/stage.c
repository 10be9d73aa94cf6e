/*
 * Local staging pipeline (see stage.h).
 *
 * One staging context per worker holds a pool of pinned host chunks
 * (allocated on first use, registered in the engine's region table so host
 * rails can send from and receive into it), a copier for the device
 * copies, and the slices waiting for a free chunk. Everything runs on the
 * worker that owns the host rail, under its lock: the slices it posts and
 * the progress it registered on it.
 */
#include "stage_int.h"

#include "base/config.h"
#include "base/dlist.h"
#include "base/log.h"
#include "base/util.h"
#include "uct_ext/cuda/cuda_copier.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct stage_op {
    stage_worker_t      *sw;
    ote_rail_t          *host;
    ote_tl_ep_t         *host_ep;  /* the host rail's ep when the slice began */
    const _Atomic uint32_t *rails_gen; /* the segment's build of its rails now (NULL: none) */
    uint32_t             gen;       /* and the build the slice was planned on */
    bool                 write;
    uint8_t             *gpu;
    int                  dev;
    uint64_t             remote;
    size_t               length;
    const void          *rkey;
    size_t               rkey_len;
    ote_tl_completion_t *comp;
    ote_proto_ctl_iface_t *iface;   /* the rail's, held until the slice has ended */
    const atomic_bool   *cancel;
    size_t               next_off;
    unsigned             inflight;  /* chunks taken by this slice */
    unsigned             on_net;    /* of which on the host rail  */
    unsigned long        next_seq, done_seq;
    ote_status_t         error;
    bool                 waiting;
    stage_op_t          *wnext;
};

ote_stage_stats_t ote_stage_stats;

void ote_proto_stage_stats(ote_proto_stage_stats_t *s)
{
    s->chunks        = atomic_load(&ote_stage_stats.chunks);
    s->overlapped    = atomic_load(&ote_stage_stats.overlapped);
    s->pool_waits    = atomic_load(&ote_stage_stats.pool_waits);
    s->max_inflight  = atomic_load(&ote_stage_stats.max_inflight);
    s->chunks_in_use = atomic_load(&ote_stage_stats.in_use);
    s->out_of_order  = atomic_load(&ote_stage_stats.out_of_order);
    s->remote_busy   = atomic_load(&ote_stage_stats.remote_busy);
    s->target_pinned = ote_stage_target_pinned_now();
}

/* ---- pool ------------------------------------------------------------------- */

static ote_status_t pool_ensure(stage_worker_t *sw)
{
    ote_status_t status;

    if (sw->chunks != NULL)
        return OTE_OK;
    sw->chunks = calloc(sw->nchunks, sizeof(*sw->chunks));
    if (sw->chunks == NULL)
        return OTE_ERR_NO_MEMORY;
    /* Pinned memory near device 0, local use only (never a remote target). */
    status = ote_mem_table_alloc(sw->regions, sw->chunk_size * sw->nchunks, "cuda_host:0", 0,
                                 (void **)&sw->pool_base, &sw->pool_region);
    if (status != OTE_OK) {
        ote_error("staging: no pinned pool of %u x %zu bytes: %s", sw->nchunks, sw->chunk_size,
                  ote_status_string(status));
        free(sw->chunks);
        sw->chunks = NULL;
        return status;
    }
    for (unsigned i = sw->nchunks; i-- > 0;) {
        stage_chunk_t *c = &sw->chunks[i];

        c->sw        = sw;
        c->buf          = sw->pool_base + (size_t)i * sw->chunk_size;
        c->next         = sw->free_chunks;
        sw->free_chunks = c;
    }
    ote_debug("staging: pool of %u pinned chunks of %zu bytes", sw->nchunks, sw->chunk_size);
    return OTE_OK;
}

static stage_chunk_t *chunk_get(stage_worker_t *sw)
{
    stage_chunk_t *c = sw->free_chunks;

    if (c != NULL) {
        sw->free_chunks = c->next;
        atomic_fetch_add(&ote_stage_stats.in_use, 1);
    }
    return c;
}

static void op_pump(stage_op_t *op);
static bool op_try_finish(stage_op_t *op);

static void chunk_put(stage_chunk_t *c)
{
    stage_worker_t *sw = c->sw;

    c->op           = NULL;
    c->next         = sw->free_chunks;
    sw->free_chunks = c;
    atomic_fetch_sub(&ote_stage_stats.in_use, 1);
}

/* Slices that waited for a chunk get another go, oldest first. */
static void wake_waiters(stage_worker_t *sw)
{
    while (sw->free_chunks != NULL && sw->wait_head != NULL) {
        stage_op_t *op = sw->wait_head;

        sw->wait_head = op->wnext;
        if (sw->wait_head == NULL)
            sw->wait_tail = NULL;
        op->waiting = false;
        op_pump(op);
        op_try_finish(op);
    }
}

/* ---- one slice ---------------------------------------------------------------- */

/* Whether the segment built its rails again since build gen (rails_gen NULL: no segment). */
static bool rails_built_again(const _Atomic uint32_t *rails_gen, uint32_t gen)
{
    return rails_gen != NULL && atomic_load(rails_gen) != gen;
}

/*
 * The host rail's ep this slice started on, or NULL once the rails were
 * built again: a segment rebuilt for a restarted peer reuses the rail slot,
 * and a chunk must never go to the new instance, whose ep may sit at the
 * freed one's address. The build number is the segment's: a rebuild raises
 * it before it destroys the eps, each under its worker's lock, which the
 * caller holds, so an unchanged number means the ep is still this one; the
 * rail itself is not read (a rebuild rewrites it without that lock).
 */
static ote_tl_ep_t *op_host_ep(const stage_op_t *op)
{
    return rails_built_again(op->rails_gen, op->gen) ? NULL : op->host_ep;
}

static bool op_canceled(const stage_op_t *op)
{
    return op->cancel != NULL && atomic_load_explicit(op->cancel, memory_order_relaxed);
}

static void op_fail(stage_op_t *op, ote_status_t status)
{
    if (op->error == OTE_OK)
        op->error = status;
}

/* Ends the slice once nothing of it is in flight and nothing more will be posted. */
static bool op_try_finish(stage_op_t *op)
{
    stage_worker_t *sw           = op->sw;
    ote_proto_ctl_iface_t *iface = op->iface;
    ote_status_t status;

    if (op->inflight > 0 || op->waiting)
        return false;
    if (op->error == OTE_OK && op->next_off < op->length && !op_canceled(op))
        return false;
    status = op->error != OTE_OK ? op->error
             : op->next_off < op->length ? OTE_ERR_CANCELED
                                         : OTE_OK;
    sw->active_ops--;
    op->comp->func(op->comp, status);
    free(op);
    ote_proto_ctl_iface_put(iface);
    return true;
}

static void chunk_end(stage_chunk_t *c, ote_status_t status)
{
    stage_op_t *op    = c->op;
    stage_worker_t *sw = c->sw;

    if (status != OTE_OK)
        op_fail(op, status);
    else if (c->seq != op->done_seq)
        atomic_fetch_add(&ote_stage_stats.out_of_order, 1);
    if (status == OTE_OK)
        op->done_seq = c->seq + 1 > op->done_seq ? c->seq + 1 : op->done_seq;
    op->inflight--;
    chunk_put(c);
    if (!op_try_finish(op)) {
        op_pump(op);
        op_try_finish(op);
    }
    wake_waiters(sw);
}

static void chunk_net_done(ote_tl_completion_t *comp, ote_status_t status);

static void chunk_copy_done(void *arg, ote_status_t status)
{
    stage_chunk_t *c  = arg;
    stage_op_t *op    = c->op;
    ote_rail_t *host  = op->host;
    ote_status_t post;

    if (status != OTE_OK || !op->write) {
        /* READ: the chunk reached the GPU, it is done. */
        chunk_end(c, status);
        return;
    }
    if (op->error != OTE_OK || op_host_ep(op) == NULL) {
        chunk_end(c, op->error != OTE_OK ? op->error : OTE_ERR_CANCELED);
        return;
    }
    op->on_net++;
    post = host->iface->ep_ops->put_zcopy(op->host_ep, c->buf, c->len, op->sw->pool_region,
                                          op->remote + c->off, op->rkey, op->rkey_len, &c->comp);
    if (post != OTE_INPROGRESS)
        chunk_net_done(&c->comp, post);
}

static ote_status_t chunk_copy(stage_op_t *op, stage_chunk_t *c)
{
    /* The device copy of this chunk runs while others are on the network. */
    if (op->on_net > 0)
        atomic_fetch_add(&ote_stage_stats.overlapped, 1);
    if (op->write)
        return ote_cuda_copier_post(op->sw->copier, op->dev, c->buf, op->gpu + c->off, c->len,
                                    chunk_copy_done, c);
    return ote_cuda_copier_post(op->sw->copier, op->dev, op->gpu + c->off, c->buf, c->len,
                                chunk_copy_done, c);
}

static void chunk_net_done(ote_tl_completion_t *comp, ote_status_t status)
{
    stage_chunk_t *c = (stage_chunk_t *)comp;
    stage_op_t *op   = c->op;
    ote_status_t post;

    op->on_net--;
    if (op->write || status != OTE_OK || op->error != OTE_OK) {
        chunk_end(c, status != OTE_OK ? status : op->error);
        return;
    }
    post = chunk_copy(op, c);
    if (post != OTE_OK)
        chunk_end(c, post);
}

/* Start chunks while the slice has room (OTE_STAGE_SLOTS) and the pool has chunks. */
static void op_pump(stage_op_t *op)
{
    stage_worker_t *sw = op->sw;

    while (op->error == OTE_OK && op->next_off < op->length && !op_canceled(op) &&
           op->inflight < sw->slots) {
        ote_rail_t *host = op->host;
        stage_chunk_t *c = chunk_get(sw);
        ote_status_t post;

        if (c == NULL) {
            if (!op->waiting) {
                op->waiting = true;
                OTE_QUEUE_PUSH(sw->wait_head, sw->wait_tail, op, wnext);
                atomic_fetch_add(&ote_stage_stats.pool_waits, 1);
            }
            return;
        }
        c->op   = op;
        c->off  = op->next_off;
        c->len  = op->length - op->next_off < sw->chunk_size ? op->length - op->next_off
                                                              : sw->chunk_size;
        c->seq  = op->next_seq++;
        op->next_off += c->len;
        op->inflight++;
        atomic_fetch_add(&ote_stage_stats.chunks, 1);
        {
            unsigned long m = atomic_load(&ote_stage_stats.max_inflight);

            while (op->inflight > m &&
                   !atomic_compare_exchange_weak(&ote_stage_stats.max_inflight, &m, op->inflight))
                ;
        }
        c->comp.func = chunk_net_done;
        if (op->write) {
            post = chunk_copy(op, c);
        } else if (op_host_ep(op) == NULL) {
            post = OTE_ERR_CANCELED;
        } else {
            op->on_net++;
            post = host->iface->ep_ops->get_zcopy(op->host_ep, c->buf, c->len, sw->pool_region,
                                                  op->remote + c->off, op->rkey, op->rkey_len,
                                                  &c->comp);
            if (post == OTE_INPROGRESS) {
                post = OTE_OK;
            } else {
                /* Ended at once: no completion will come. */
                op->on_net--;
                if (post == OTE_OK)
                    post = chunk_copy(op, c);
            }
        }
        if (post != OTE_OK) {
            op_fail(op, post);
            op->inflight--;
            chunk_put(c);
        }
    }
}

static ote_status_t stage_post(ote_tl_ep_t *tl_ep, bool write, void *local, size_t length,
                               ote_region_t *local_region, uint64_t remote_addr,
                               const void *rkey, size_t rkey_len, ote_tl_completion_t *comp)
{
    stage_ep_t *ep     = (stage_ep_t *)tl_ep;
    stage_worker_t *sw = ep->sw;
    const ote_proto_route_t *route;
    stage_op_t *op;
    ote_status_t status;

    if (ep->remote)
        return ote_stage_remote_post(ep, write, local, length, local_region, remote_addr, comp);
    if (local_region->mem_type != OTE_MEM_TYPE_CUDA)
        return OTE_ERR_UNSUPPORTED; /* host<->host is the host rail's own */
    route = ((ote_slice_t *)comp)->route;
    if (route != NULL && rails_built_again(route->rails_gen, route->gen))
        return OTE_ERR_CANCELED; /* built again since it was planned */
    if (ep->host->ep == NULL)
        return OTE_ERR_CANCELED;
    status = pool_ensure(sw);
    if (status != OTE_OK)
        return status;
    op = calloc(1, sizeof(*op));
    if (op == NULL)
        return OTE_ERR_NO_MEMORY;
    *op = (stage_op_t){.sw = sw, .host = ep->host, .host_ep = ep->host->ep,
                       .rails_gen = route != NULL ? route->rails_gen : NULL,
                       .gen = route != NULL ? route->gen : 0,
                       .write = write, .gpu = local,
                       .dev = ote_cuda_location_device(local_region->location),
                       .remote = remote_addr, .length = length, .rkey = rkey,
                       .rkey_len = rkey_len, .comp = comp, .iface = ep->iface,
                       /* The completion is the slice: its task's cancel flag. */
                       .cancel = ((ote_slice_t *)comp)->cancel};
    sw->active_ops++;
    ote_proto_ctl_iface_get(ep->iface);
    op_pump(op);
    if (op->inflight == 0 && !op->waiting) {
        /* Nothing started: the caller gets the error, the completion never runs. */
        status = op->error != OTE_OK ? op->error : OTE_ERR_CANCELED;
        sw->active_ops--;
        free(op);
        ote_proto_ctl_iface_put(ep->iface);
        return status;
    }
    return OTE_INPROGRESS;
}

static size_t stage_inflight_bytes(ote_tl_ep_t *tl_ep)
{
    ote_rail_t *host = ((stage_ep_t *)tl_ep)->host;

    return host->ep != NULL ? host->iface->ep_ops->inflight_bytes(host->ep) : 0;
}

static bool stage_is_alive(ote_tl_ep_t *tl_ep)
{
    ote_rail_t *host = ((stage_ep_t *)tl_ep)->host;

    return host->ep != NULL && host->iface->ep_ops->is_alive(host->ep);
}

/*
 * The host rail's own ep is destroyed with its rail; slices in flight end
 * through it, each holding the rail's iface until it has ended.
 */
static void stage_ep_destroy(ote_tl_ep_t *tl_ep)
{
    ote_proto_ctl_iface_t *iface = ((stage_ep_t *)tl_ep)->iface;

    free(tl_ep);
    ote_proto_ctl_iface_put(iface);
}

/* ---- worker context ---------------------------------------------------------- */

static unsigned stage_progress(void *arg)
{
    stage_worker_t *sw = arg;
    unsigned n         = ote_cuda_copier_progress(sw->copier);

    wake_waiters(sw);
    return n;
}

/* Device copies are polled: the worker does not sleep while some run. */
static bool stage_pending(void *arg)
{
    return ote_cuda_copier_pending(((stage_worker_t *)arg)->copier) > 0;
}

bool ote_proto_stage_available(void)
{
    return ote_cuda_load() == OTE_OK;
}

ote_status_t ote_proto_stage_worker_create(ote_mem_table_t *regions,
                                           const ote_stage_config_t *cfg,
                                           const ote_proto_progress_hooks_t *hooks,
                                           ote_stage_worker_t **sw_p)
{
    stage_worker_t *sw;
    ote_status_t status;

    if (!ote_proto_stage_available())
        return OTE_ERR_UNSUPPORTED;
    sw = calloc(1, sizeof(*sw));
    if (sw == NULL)
        return OTE_ERR_NO_MEMORY;
    status = ote_cuda_copier_create(STAGE_STREAMS, &sw->copier);
    if (status != OTE_OK)
        goto err_free;
    sw->regions    = regions;
    sw->chunk_size = cfg->chunk_size; /* 4k to 1g, and 1 to 4096 slots: the table's bounds */
    sw->slots      = (unsigned)cfg->slots;
    sw->nchunks    = sw->slots;
    sw->hooks      = *hooks;
    status = hooks->add(hooks->worker, stage_progress, stage_pending, sw, &sw->progress_id);
    if (status != OTE_OK)
        goto err_copier;
    *sw_p = sw;
    return OTE_OK;

err_copier:
    ote_cuda_copier_destroy(sw->copier);
err_free:
    free(sw);
    return status;
}

void ote_proto_stage_worker_destroy(ote_stage_worker_t *sw)
{
    if (sw == NULL)
        return;
    sw->hooks.remove(sw->hooks.worker, sw->progress_id);
    ote_cuda_copier_destroy(sw->copier);
    if (sw->active_ops > 0)
        ote_warn("staging: %zu slices still active at close", sw->active_ops);
    if (sw->pool_region != NULL)
        ote_mem_table_free(sw->regions, sw->pool_region);
    free(sw->chunks);
    free(sw);
}

/* ---- rails ------------------------------------------------------------------ */

/* The cuda base's ep ops (cuda_copier.h): put and get go to stage_post. */
const ote_tl_ep_ops_t ote_proto_stage_ep_ops =
    OTE_CUDA_BASE_EP_OPS(stage_inflight_bytes, stage_is_alive, stage_ep_destroy);

ote_rail_t *ote_proto_stage_rail_host(const ote_rail_t *rail)
{
    if (rail->iface == NULL || rail->iface->ep_ops != &ote_proto_stage_ep_ops || rail->ep == NULL)
        return NULL;
    return ((stage_ep_t *)rail->ep)->host;
}

stage_ep_t *ote_stage_ep_new(ote_rail_t *rail, ote_rail_t *host, stage_worker_t *sw)
{
    stage_ep_t *ep = calloc(1, sizeof(*ep));
    ote_tl_iface_t *iface;

    if (ep == NULL || (ep->iface = ote_proto_ctl_iface_new()) == NULL) {
        free(ep);
        return NULL;
    }
    /* The rail's iface names staging; its operations are the staging ep's. */
    iface = &ep->iface->iface;
    ote_tl_iface_copy(iface, host->iface);
    iface->ep_ops   = &ote_proto_stage_ep_ops;
    iface->md       = NULL;
    iface->md_index = -1;
    memset(&iface->resource, 0, sizeof(iface->resource));
    snprintf(iface->resource.tl_name, sizeof(iface->resource.tl_name), "%s",
             OTE_PROTO_STAGE_NAME);
    snprintf(iface->resource.dev_name, sizeof(iface->resource.dev_name), "cuda");
    ep->super.super.iface = iface;
    ep->super.post        = stage_post;
    ep->sw                = sw;
    ep->host        = host;
    memset(rail, 0, sizeof(*rail));
    rail->iface      = iface;
    rail->ep         = &ep->super.super;
    rail->caps       = host->caps;
    rail->caps.max_msg = 0;
    /* One slice holds the chunks of a pipeline: OTE_STAGE_SLOTS in flight. */
    rail->caps.slice_size = sw->chunk_size * sw->slots;
    rail->worker     = host->worker;
    return ep;
}

ote_status_t ote_proto_stage_rail_init(ote_rail_t *rail, ote_rail_t *host,
                                       ote_stage_worker_t *sw)
{
    const ote_tl_caps_t *hc = &host->caps;
    ote_tl_caps_t caps;

    /* A host rail that reaches device memory itself (GPUDirect) needs no staging. */
    if (sw == NULL || host->ep == NULL || (hc->mem_local & OTE_MEM_TYPE_CUDA) ||
        (hc->ops & OTE_TL_CAP_DEVICE_PAIRS) || !(hc->mem_local & OTE_MEM_TYPE_HOST) ||
        !(hc->mem_remote & OTE_MEM_TYPE_HOST) ||
        !(hc->ops & (OTE_TL_CAP_PUT_ZCOPY | OTE_TL_CAP_GET_ZCOPY)))
        return OTE_ERR_UNSUPPORTED;
    caps = *hc;
    if (ote_stage_ep_new(rail, host, sw) == NULL)
        return OTE_ERR_NO_MEMORY;
    rail->caps.ops = (caps.ops & (OTE_TL_CAP_PUT_ZCOPY | OTE_TL_CAP_GET_ZCOPY |
                                  OTE_TL_CAP_CHECKED)) |
                     OTE_TL_CAP_DEVICE_PAIRS;
    rail->caps.mem_local  = OTE_MEM_TYPE_HOST | OTE_MEM_TYPE_CUDA;
    rail->caps.mem_remote = OTE_MEM_TYPE_HOST;
    rail->remote_md       = host->remote_md; /* the rkey is the host rail's */
    return OTE_OK;
}

/* ---- configuration ------------------------------------------------------------ */

#define STAGE_F(_f) offsetof(ote_stage_config_t, _f)

static const ote_cfg_entry_t stage_config_fields[] = {
    {"CHUNK_SIZE", "4m", OTE_CFG_SIZE, STAGE_F(chunk_size),
     "Pinned host chunk size for GPU staging pipelines (4k to 1g).",
     .min = 4096, .max = 1ll << 30},
    {"SLOTS", "16", OTE_CFG_INT, STAGE_F(slots),
     "Staging chunks in flight per request, and the chunks of each pinned staging pool "
     "(1 to 4096).",
     .min = 1, .max = 4096},
};

OTE_CONFIG_TABLE_DEFINE(ote_stage_config_table, "STAGE_", "stage", stage_config_fields,
                        ote_stage_config_t, NULL);

const ote_config_table_t *const ote_proto_config_tables[] = {&ote_stage_config_table, NULL};
