/*
 * Local staging pipeline (see stage.h).
 *
 * One stage iface per worker holds a pool of pinned host chunks (allocated
 * on first use, registered in the engine's region table so host rails can
 * send from and receive into it), a copier for the device copies, and the
 * slices waiting for a free chunk. Everything runs on the worker thread
 * that owns the iface and the host rail.
 */
#include "stage.h"

#include "base/config.h"
#include "base/log.h"
#include "base/util.h"
#include "uct_ext/cuda/cuda_copier.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define STAGE_STREAMS 2

typedef struct stage_iface stage_iface_t;
typedef struct stage_op    stage_op_t;

typedef struct stage_chunk {
    ote_tl_completion_t  comp;   /* first: the host rail's completion */
    stage_iface_t       *iface;
    stage_op_t          *op;
    uint8_t             *buf;
    size_t               off, len;
    unsigned long        seq;
    struct stage_chunk  *next;   /* free list */
} stage_chunk_t;

struct stage_iface {
    ote_tl_iface_t      super;
    ote_cuda_copier_t  *copier;
    ote_mem_table_t    *regions;
    size_t              chunk_size;
    unsigned            slots;
    unsigned            nchunks;
    ote_region_t       *pool_region;
    uint8_t            *pool_base;
    stage_chunk_t      *chunks;
    stage_chunk_t      *free_chunks;
    stage_op_t         *wait_head, *wait_tail; /* slices waiting for a chunk */
    size_t              active_ops;
};

typedef struct {
    ote_tl_ep_t super;
    ote_rail_t *host;
    /* remote staging rail: the peer's GPU memory through its pinned chunks */
    bool                     remote;
    ote_rail_t              *lstage; /* local staging over host, or NULL */
    ote_stage_remote_hooks_t hooks;
} stage_ep_t;

static ote_status_t remote_post(stage_ep_t *ep, bool write, void *local, size_t length,
                                ote_region_t *local_region, uint64_t remote_addr,
                                ote_tl_completion_t *comp);

struct stage_op {
    stage_iface_t       *iface;
    ote_rail_t          *host;
    ote_tl_ep_t         *host_ep;  /* the host rail's ep when the slice began */
    bool                 write;
    uint8_t             *gpu;
    int                  dev;
    uint64_t             remote;
    size_t               length;
    const void          *rkey;
    size_t               rkey_len;
    ote_tl_completion_t *comp;
    const atomic_bool   *cancel;
    size_t               next_off;
    unsigned             inflight;  /* chunks taken by this slice */
    unsigned             on_net;    /* of which on the host rail  */
    unsigned long        next_seq, done_seq;
    ote_status_t         error;
    bool                 waiting;
    stage_op_t          *wnext;
};

static struct {
    atomic_ulong chunks, overlapped, pool_waits, max_inflight, out_of_order, remote_busy;
    atomic_long  in_use;
} stats;

void ote_proto_stage_stats(ote_proto_stage_stats_t *s)
{
    s->chunks        = atomic_load(&stats.chunks);
    s->overlapped    = atomic_load(&stats.overlapped);
    s->pool_waits    = atomic_load(&stats.pool_waits);
    s->max_inflight  = atomic_load(&stats.max_inflight);
    s->chunks_in_use = atomic_load(&stats.in_use);
    s->out_of_order  = atomic_load(&stats.out_of_order);
    s->remote_busy   = atomic_load(&stats.remote_busy);
    s->target_pinned = ote_stage_target_pinned_now();
}

/* ---- pool ------------------------------------------------------------------- */

static ote_status_t pool_ensure(stage_iface_t *si)
{
    ote_status_t status;

    if (si->chunks != NULL)
        return OTE_OK;
    si->chunks = calloc(si->nchunks, sizeof(*si->chunks));
    if (si->chunks == NULL)
        return OTE_ERR_NO_MEMORY;
    /* Pinned memory near device 0, local use only (never a remote target). */
    status = ote_mem_table_alloc(si->regions, si->chunk_size * si->nchunks, "cuda_host:0", 0,
                                 (void **)&si->pool_base, &si->pool_region);
    if (status != OTE_OK) {
        ote_error("staging: no pinned pool of %u x %zu bytes: %s", si->nchunks, si->chunk_size,
                  ote_status_string(status));
        free(si->chunks);
        si->chunks = NULL;
        return status;
    }
    for (unsigned i = si->nchunks; i-- > 0;) {
        stage_chunk_t *c = &si->chunks[i];

        c->iface        = si;
        c->buf          = si->pool_base + (size_t)i * si->chunk_size;
        c->next         = si->free_chunks;
        si->free_chunks = c;
    }
    ote_debug("staging: pool of %u pinned chunks of %zu bytes", si->nchunks, si->chunk_size);
    return OTE_OK;
}

static stage_chunk_t *chunk_get(stage_iface_t *si)
{
    stage_chunk_t *c = si->free_chunks;

    if (c != NULL) {
        si->free_chunks = c->next;
        atomic_fetch_add(&stats.in_use, 1);
    }
    return c;
}

static void op_pump(stage_op_t *op);
static bool op_try_finish(stage_op_t *op);

static void chunk_put(stage_chunk_t *c)
{
    stage_iface_t *si = c->iface;

    c->op           = NULL;
    c->next         = si->free_chunks;
    si->free_chunks = c;
    atomic_fetch_sub(&stats.in_use, 1);
}

/* Slices that waited for a chunk get another go, oldest first. */
static void wake_waiters(stage_iface_t *si)
{
    while (si->free_chunks != NULL && si->wait_head != NULL) {
        stage_op_t *op = si->wait_head;

        si->wait_head = op->wnext;
        if (si->wait_head == NULL)
            si->wait_tail = NULL;
        op->waiting = false;
        op_pump(op);
        op_try_finish(op);
    }
}

/* ---- one slice ---------------------------------------------------------------- */

/*
 * The host rail's ep this slice started on, or NULL once it is gone: a
 * segment rebuilt for a restarted peer reuses the rail slot, and a chunk
 * must never go to the new instance.
 */
static ote_tl_ep_t *op_host_ep(const stage_op_t *op)
{
    return op->host->ep == op->host_ep ? op->host_ep : NULL;
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
    stage_iface_t *si = op->iface;
    ote_status_t status;

    if (op->inflight > 0 || op->waiting)
        return false;
    if (op->error == OTE_OK && op->next_off < op->length && !op_canceled(op))
        return false;
    status = op->error != OTE_OK ? op->error
             : op->next_off < op->length ? OTE_ERR_CANCELED
                                         : OTE_OK;
    si->active_ops--;
    op->comp->func(op->comp, status);
    free(op);
    return true;
}

static void chunk_end(stage_chunk_t *c, ote_status_t status)
{
    stage_op_t *op    = c->op;
    stage_iface_t *si = c->iface;

    if (status != OTE_OK)
        op_fail(op, status);
    else if (c->seq != op->done_seq)
        atomic_fetch_add(&stats.out_of_order, 1);
    if (status == OTE_OK)
        op->done_seq = c->seq + 1 > op->done_seq ? c->seq + 1 : op->done_seq;
    op->inflight--;
    chunk_put(c);
    if (!op_try_finish(op)) {
        op_pump(op);
        op_try_finish(op);
    }
    wake_waiters(si);
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
    post = host->iface->ep_ops->put_zcopy(op->host_ep, c->buf, c->len, op->iface->pool_region,
                                          op->remote + c->off, op->rkey, op->rkey_len, &c->comp);
    if (post != OTE_INPROGRESS)
        chunk_net_done(&c->comp, post);
}

static ote_status_t chunk_copy(stage_op_t *op, stage_chunk_t *c)
{
    /* The device copy of this chunk runs while others are on the network. */
    if (op->on_net > 0)
        atomic_fetch_add(&stats.overlapped, 1);
    if (op->write)
        return ote_cuda_copier_post(op->iface->copier, op->dev, c->buf, op->gpu + c->off, c->len,
                                    chunk_copy_done, c);
    return ote_cuda_copier_post(op->iface->copier, op->dev, op->gpu + c->off, c->buf, c->len,
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
    stage_iface_t *si = op->iface;

    while (op->error == OTE_OK && op->next_off < op->length && !op_canceled(op) &&
           op->inflight < si->slots) {
        ote_rail_t *host = op->host;
        stage_chunk_t *c = chunk_get(si);
        ote_status_t post;

        if (c == NULL) {
            if (!op->waiting) {
                op->waiting = true;
                op->wnext   = NULL;
                if (si->wait_tail)
                    si->wait_tail->wnext = op;
                else
                    si->wait_head = op;
                si->wait_tail = op;
                atomic_fetch_add(&stats.pool_waits, 1);
            }
            return;
        }
        c->op   = op;
        c->off  = op->next_off;
        c->len  = op->length - op->next_off < si->chunk_size ? op->length - op->next_off
                                                              : si->chunk_size;
        c->seq  = op->next_seq++;
        op->next_off += c->len;
        op->inflight++;
        atomic_fetch_add(&stats.chunks, 1);
        {
            unsigned long m = atomic_load(&stats.max_inflight);

            while (op->inflight > m &&
                   !atomic_compare_exchange_weak(&stats.max_inflight, &m, op->inflight))
                ;
        }
        c->comp.func = chunk_net_done;
        if (op->write) {
            post = chunk_copy(op, c);
        } else if (op_host_ep(op) == NULL) {
            post = OTE_ERR_CANCELED;
        } else {
            op->on_net++;
            post = host->iface->ep_ops->get_zcopy(op->host_ep, c->buf, c->len, si->pool_region,
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
    stage_ep_t *ep    = (stage_ep_t *)tl_ep;
    stage_iface_t *si = (stage_iface_t *)tl_ep->iface;
    stage_op_t *op;
    ote_status_t status;

    if (ep->remote)
        return remote_post(ep, write, local, length, local_region, remote_addr, comp);
    if (local_region->mem_type != OTE_MEM_TYPE_CUDA)
        return OTE_ERR_UNSUPPORTED; /* host<->host is the host rail's own */
    if (ep->host->ep == NULL)
        return OTE_ERR_CANCELED;
    status = pool_ensure(si);
    if (status != OTE_OK)
        return status;
    op = calloc(1, sizeof(*op));
    if (op == NULL)
        return OTE_ERR_NO_MEMORY;
    *op = (stage_op_t){.iface = si, .host = ep->host, .host_ep = ep->host->ep,
                       .write = write, .gpu = local,
                       .dev = ote_cuda_location_device(local_region->location),
                       .remote = remote_addr, .length = length, .rkey = rkey,
                       .rkey_len = rkey_len, .comp = comp,
                       /* The completion is the slice: its task's cancel flag. */
                       .cancel = ((ote_slice_t *)comp)->cancel};
    si->active_ops++;
    op_pump(op);
    if (op->inflight == 0 && !op->waiting) {
        /* Nothing started: the caller gets the error, the completion never runs. */
        status = op->error != OTE_OK ? op->error : OTE_ERR_CANCELED;
        si->active_ops--;
        free(op);
        return status;
    }
    return OTE_INPROGRESS;
}

static ote_status_t stage_put_zcopy(ote_tl_ep_t *ep, void *local, size_t length,
                                    ote_region_t *local_region, uint64_t remote_addr,
                                    const void *rkey, size_t rkey_len, ote_tl_completion_t *comp)
{
    return stage_post(ep, true, local, length, local_region, remote_addr, rkey, rkey_len, comp);
}

static ote_status_t stage_get_zcopy(ote_tl_ep_t *ep, void *local, size_t length,
                                    ote_region_t *local_region, uint64_t remote_addr,
                                    const void *rkey, size_t rkey_len, ote_tl_completion_t *comp)
{
    return stage_post(ep, false, local, length, local_region, remote_addr, rkey, rkey_len, comp);
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

/* The host rail's own ep is destroyed with its rail; slices in flight end through it. */
static void stage_ep_destroy(ote_tl_ep_t *tl_ep)
{
    free(tl_ep);
}

/* ---- iface ------------------------------------------------------------------- */

static void stage_iface_close(ote_tl_iface_t *tl_iface)
{
    stage_iface_t *si = (stage_iface_t *)tl_iface;

    ote_cuda_copier_destroy(si->copier);
    if (si->active_ops > 0)
        ote_warn("staging: %zu slices still active at close", si->active_ops);
    if (si->pool_region != NULL)
        ote_mem_table_free(si->regions, si->pool_region);
    free(si->chunks);
    free(si);
}

static void stage_iface_query(ote_tl_iface_t *tl_iface, ote_tl_caps_t *caps)
{
    (void)tl_iface;
    memset(caps, 0, sizeof(*caps));
    /*
     * Alone it reaches no peer (no scope): a stage rail takes its host
     * rail's caps. What it adds is local device memory.
     */
    caps->ops        = OTE_TL_CAP_PUT_ZCOPY | OTE_TL_CAP_GET_ZCOPY | OTE_TL_CAP_DEVICE_PAIRS;
    caps->mem_local  = OTE_MEM_TYPE_CUDA;
    caps->conn_model = OTE_TL_CONN_TO_IFACE;
}

static ote_status_t stage_get_address(ote_tl_iface_t *iface, void *buf, size_t max,
                                      size_t *len_p)
{
    return OTE_ERR_UNSUPPORTED; /* not published: peers need nothing from it */
}

static int stage_event_fd(ote_tl_iface_t *iface)
{
    return -1;
}

static unsigned stage_progress(ote_tl_iface_t *tl_iface)
{
    stage_iface_t *si = (stage_iface_t *)tl_iface;
    unsigned n        = ote_cuda_copier_progress(si->copier);

    wake_waiters(si);
    return n;
}

static ote_status_t stage_event_arm(ote_tl_iface_t *tl_iface)
{
    stage_iface_t *si = (stage_iface_t *)tl_iface;

    return ote_cuda_copier_pending(si->copier) ? OTE_ERR_BUSY : OTE_OK;
}

static ote_status_t stage_ep_create(ote_tl_iface_t *iface, const void *addr, size_t addr_len,
                                    const ote_tl_peer_t *peer, ote_tl_ep_t **ep_p)
{
    return OTE_ERR_UNREACHABLE; /* stage rails are made by ote_proto_stage_rail_init */
}

static const ote_tl_iface_ops_t stage_iface_ops = {
    .close          = stage_iface_close,
    .query          = stage_iface_query,
    .get_address    = stage_get_address,
    .event_fd       = stage_event_fd,
    .progress       = stage_progress,
    .ep_create      = stage_ep_create,
    .event_arm      = stage_event_arm,
    .format_address = ote_tl_no_format_address,
    .check_timeouts = ote_tl_no_check_timeouts,
    .has_deadlines  = ote_tl_no_deadlines,
    .ep_open        = ote_tl_unsupported_ep_open,
    .ep_accept      = ote_tl_unsupported_ep_accept,
    .ep_release     = ote_tl_no_ep_release,
};

static const ote_tl_ep_ops_t stage_ep_ops = {
    .put_zcopy       = stage_put_zcopy,
    .get_zcopy       = stage_get_zcopy,
    .inflight_bytes  = stage_inflight_bytes,
    .is_alive        = stage_is_alive,
    .destroy         = stage_ep_destroy,
    .connect_to_ep   = ote_tl_unsupported_connect_to_ep,
    .needs_reconnect = ote_tl_no_reconnect_needed,
    .reconnect       = ote_tl_unsupported_reconnect,
};

bool ote_proto_stage_iface(const ote_tl_iface_t *iface)
{
    return iface->ops == &stage_iface_ops;
}

ote_rail_t *ote_proto_stage_rail_host(const ote_rail_t *rail)
{
    if (rail->iface == NULL || !ote_proto_stage_iface(rail->iface) || rail->ep == NULL)
        return NULL;
    return ((stage_ep_t *)rail->ep)->host;
}

ote_status_t ote_proto_stage_rail_init(ote_rail_t *rail, ote_rail_t *host,
                                       ote_tl_iface_t *stage_iface)
{
    const ote_tl_caps_t *hc = &host->caps;
    stage_iface_t *si       = (stage_iface_t *)stage_iface;
    stage_ep_t *ep;

    /* A host rail that reaches device memory itself (GPUDirect) needs no staging. */
    if (host->ep == NULL || (hc->mem_local & OTE_MEM_TYPE_CUDA) ||
        (hc->ops & OTE_TL_CAP_DEVICE_PAIRS) || !(hc->mem_local & OTE_MEM_TYPE_HOST) ||
        !(hc->mem_remote & OTE_MEM_TYPE_HOST) ||
        !(hc->ops & (OTE_TL_CAP_PUT_ZCOPY | OTE_TL_CAP_GET_ZCOPY)))
        return OTE_ERR_UNSUPPORTED;
    ep = calloc(1, sizeof(*ep));
    if (ep == NULL)
        return OTE_ERR_NO_MEMORY;
    ep->super.iface = stage_iface;
    ep->host        = host;
    memset(rail, 0, sizeof(*rail));
    rail->iface            = stage_iface;
    rail->ep               = &ep->super;
    rail->caps             = *hc;
    rail->caps.ops         = (hc->ops & (OTE_TL_CAP_PUT_ZCOPY | OTE_TL_CAP_GET_ZCOPY |
                                         OTE_TL_CAP_CHECKED)) |
                             OTE_TL_CAP_DEVICE_PAIRS;
    rail->caps.mem_local   = OTE_MEM_TYPE_HOST | OTE_MEM_TYPE_CUDA;
    rail->caps.mem_remote  = OTE_MEM_TYPE_HOST;
    rail->caps.max_msg     = 0;
    /* One slice holds the chunks of a pipeline: OTE_STAGE_SLOTS in flight. */
    rail->caps.slice_size  = si->chunk_size * si->slots;
    rail->worker           = host->worker;
    rail->remote_md        = host->remote_md; /* the rkey is the host rail's */
    return OTE_OK;
}

/* ---- remote staging, initiator side ------------------------------------------- */

/*
 * One slice to the peer's GPU memory runs on its own thread, which talks
 * to the peer's control listener (blocking requests) and posts the chunk
 * transfers on the worker's host (or local staging) rail under the
 * worker's lock; their completions come back through the worker.
 *
 * The slice moves in groups of OTE_STAGE_SLOTS / 2 chunks, two groups at a
 * time: while the peer copies group k between its chunks and its GPU
 * (Delegate), the chunks of group k+1 are on the network. A group's chunks
 * are pinned only while nothing waits for a pin: when the peer's pool is
 * taken the slice finishes the group it holds first, then waits for chunks
 * holding none (no slice holds chunks while it waits for more).
 */
typedef struct remote_op remote_op_t;

typedef struct {
    ote_slice_t  s;      /* first: the completion, shaped like a slice */
    remote_op_t *op;
    unsigned    *pending;
    ote_status_t status;
} remote_chunk_t;

typedef struct {
    ote_ctl_stage_t m;       /* the Delegate of this group */
    remote_chunk_t  rc[OTE_CTL_STAGE_MAX];
    unsigned        pending; /* transfers posted and not ended */
    size_t          off, end;
    bool            held;    /* chunks pinned */
    ote_status_t    status;  /* of its posts */
} remote_group_t;

struct remote_op {
    ote_stage_remote_hooks_t hooks;
    ote_rail_t          *rail;     /* host or local staging rail the chunks go on */
    ote_tl_ep_t         *rail_ep;
    bool                 write;
    uint8_t             *local;
    ote_region_t        *local_region;
    uint64_t             remote;
    size_t               length;
    size_t               chunk_size;
    unsigned             slots;
    ote_tl_completion_t *comp;
    const atomic_bool   *cancel;
    pthread_mutex_t      lock;
    pthread_cond_t       cond;
    remote_group_t       g[2];
};

static void remote_chunk_done(ote_tl_completion_t *comp, ote_status_t status)
{
    remote_chunk_t *rc = (remote_chunk_t *)comp;
    remote_op_t *op    = rc->op;

    pthread_mutex_lock(&op->lock);
    rc->status = status;
    (*rc->pending)--;
    pthread_cond_signal(&op->cond);
    pthread_mutex_unlock(&op->lock);
}

static ote_status_t remote_ctl(remote_op_t *op, ote_ctl_stage_t *m, uint64_t *chunks,
                               size_t *count_p, size_t *chunk_size_p)
{
    uint32_t cs = 0;
    ote_buf_t out = {0};
    uint8_t *resp = NULL;
    size_t len, count = 0;
    uint64_t dummy[OTE_CTL_STAGE_MAX];
    ote_status_t status, remote = OTE_OK;

    m->initiator = op->hooks.initiator;
    m->target    = op->hooks.target;
    status       = ote_ctl_stage_encode(m, &out);
    if (status == OTE_OK)
        status = op->hooks.ctl(op->hooks.ctl_arg, out.data, out.len, &resp, &len);
    if (status == OTE_OK)
        status = ote_ctl_stage_ack_decode(resp, len, &remote, &cs, chunks ? chunks : dummy,
                                          &count);
    if (status == OTE_OK && (count > m->count || (m->op != OTE_CTL_STAGE_PIN && count != 0)))
        status = OTE_ERR_PROTOCOL;
    free(resp);
    free(out.data);
    if (count_p)
        *count_p = count;
    if (chunk_size_p)
        *chunk_size_p = cs;
    return status != OTE_OK ? status : remote;
}

static bool remote_canceled(const remote_op_t *op)
{
    return op->cancel != NULL && atomic_load(op->cancel);
}

/*
 * Pin chunks for group g starting at off: the Delegate entries for them.
 * With wait, BUSY is retried (growing pause) within OTE_XFER_TIMEOUT_MS;
 * without, BUSY is returned at once.
 */
static ote_status_t remote_pin(remote_op_t *op, remote_group_t *g, size_t off, bool wait)
{
    unsigned per_group = op->slots > 1 ? op->slots / 2 : 1;
    size_t want = (op->length - off + op->chunk_size - 1) / op->chunk_size, got = 0, tcs = 0, cs;
    uint64_t deadline = ote_time_ns() + (uint64_t)op->hooks.timeout_ms * 1000000ull;
    uint64_t chunks[OTE_CTL_STAGE_MAX];
    useconds_t backoff = 500;
    ote_status_t status;

    if (want > per_group)
        want = per_group;
    if (want > OTE_CTL_STAGE_MAX)
        want = OTE_CTL_STAGE_MAX;
    for (;;) {
        ote_ctl_stage_t m = {.op = OTE_CTL_STAGE_PIN, .count = want};

        status = remote_ctl(op, &m, chunks, &got, &tcs);
        if (status != OTE_ERR_BUSY)
            break;
        atomic_fetch_add(&stats.remote_busy, 1);
        if (!wait)
            return status;
        if (ote_time_ns() > deadline)
            return OTE_ERR_TIMEOUT;
        if (remote_canceled(op))
            return OTE_ERR_CANCELED;
        usleep(backoff);
        backoff = backoff < 50000 ? backoff * 2 : backoff;
    }
    if (status == OTE_OK && got == 0)
        status = OTE_ERR_PROTOCOL;
    if (status != OTE_OK)
        return status;
    /* Chunks are as large as the smaller of the two settings. */
    cs = tcs < op->chunk_size ? tcs : op->chunk_size;
    memset(&g->m, 0, offsetof(ote_ctl_stage_t, e));
    g->m.op    = OTE_CTL_STAGE_DELEGATE;
    g->m.dir   = op->write ? OTE_CTL_STAGE_TO_GPU : OTE_CTL_STAGE_FROM_GPU;
    g->m.count = got;
    g->off     = off;
    for (size_t i = 0; i < got; i++) {
        size_t len = op->length - off < cs ? op->length - off : cs;

        g->m.e[i].chunk  = chunks[i];
        g->m.e[i].gpu    = op->remote + off;
        g->m.e[i].length = (uint32_t)len;
        off += len;
    }
    g->end     = off;
    g->held    = true;
    g->pending = 0;
    g->status  = OTE_OK;
    atomic_fetch_add(&stats.chunks, got);
    return OTE_OK;
}

/* Post the group's chunk transfers (local memory <-> the peer's chunks). */
static ote_status_t remote_post_group(remote_op_t *op, remote_group_t *g)
{
    ote_status_t status = OTE_OK;
    uint64_t one        = 1;
    size_t off          = g->off;

    pthread_mutex_lock(op->hooks.worker_lock);
    for (size_t i = 0; i < g->m.count; i++) {
        remote_chunk_t *rc = &g->rc[i];
        ote_tl_ep_t *ep    = op->rail->ep;
        ote_status_t post;

        rc->op          = op;
        rc->pending     = &g->pending;
        rc->status      = OTE_OK;
        rc->s.comp.func = remote_chunk_done;
        rc->s.cancel    = op->cancel;
        if (ep == NULL || ep != op->rail_ep) {
            status = OTE_ERR_CANCELED;
            break;
        }
        pthread_mutex_lock(&op->lock);
        g->pending++;
        pthread_mutex_unlock(&op->lock);
        post = op->write
                   ? op->rail->iface->ep_ops->put_zcopy(ep, op->local + off, g->m.e[i].length,
                                                        op->local_region, g->m.e[i].chunk,
                                                        NULL, 0, &rc->s.comp)
                   : op->rail->iface->ep_ops->get_zcopy(ep, op->local + off, g->m.e[i].length,
                                                        op->local_region, g->m.e[i].chunk,
                                                        NULL, 0, &rc->s.comp);
        if (post != OTE_INPROGRESS) {
            pthread_mutex_lock(&op->lock);
            g->pending--;
            pthread_mutex_unlock(&op->lock);
            if (post != OTE_OK) {
                status = post;
                break;
            }
        }
        off += g->m.e[i].length;
    }
    pthread_mutex_unlock(op->hooks.worker_lock);
    (void)!write(op->hooks.worker_wake_fd, &one, sizeof(one));
    g->status = status;
    return status;
}

/*
 * Wait for the group's transfers. The rails end every transfer within
 * their own timeouts; TIMEOUT here (twice OTE_XFER_TIMEOUT_MS) means one
 * never ended, and its completion may still come.
 */
static ote_status_t remote_wait_group(remote_op_t *op, remote_group_t *g)
{
    uint64_t deadline = ote_time_ns() + 2ull * (uint64_t)op->hooks.timeout_ms * 1000000ull;
    ote_status_t status = g->status;
    struct timespec ts;

    pthread_mutex_lock(&op->lock);
    while (g->pending > 0) {
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&op->cond, &op->lock, &ts);
        if (g->pending > 0 && ote_time_ns() > deadline) {
            pthread_mutex_unlock(&op->lock);
            return OTE_ERR_TIMEOUT;
        }
    }
    pthread_mutex_unlock(&op->lock);
    for (size_t i = 0; i < g->m.count && status == OTE_OK; i++)
        status = g->rc[i].status;
    return status;
}

static void remote_unpin(remote_op_t *op, remote_group_t *g)
{
    ote_ctl_stage_t um = {.op = OTE_CTL_STAGE_UNPIN, .count = g->m.count};

    if (!g->held)
        return;
    for (size_t i = 0; i < g->m.count; i++)
        um.e[i].chunk = g->m.e[i].chunk;
    /* Best effort: the peer also releases them when our connection goes. */
    (void)remote_ctl(op, &um, NULL, NULL, NULL);
    g->held = false;
}

/*
 * Start group g: WRITE posts its transfers into the peer's chunks; READ
 * has the peer copy its GPU memory into them, then posts the reads.
 */
static ote_status_t remote_start(remote_op_t *op, remote_group_t *g)
{
    ote_status_t status;

    if (op->write)
        return remote_post_group(op, g);
    status = remote_ctl(op, &g->m, NULL, NULL, NULL);
    return status == OTE_OK ? remote_post_group(op, g) : status;
}

/* Finish group g: its transfers end; WRITE then has the peer copy into its GPU. */
static ote_status_t remote_finish(remote_op_t *op, remote_group_t *g)
{
    ote_status_t status = remote_wait_group(op, g);

    if (status == OTE_OK && op->write)
        status = remote_ctl(op, &g->m, NULL, NULL, NULL);
    return status;
}

static void *remote_main(void *arg)
{
    remote_op_t *op           = arg;
    pthread_mutex_t *wl       = op->hooks.worker_lock;
    ote_tl_completion_t *comp = op->comp;
    remote_group_t *cur = &op->g[0], *next = &op->g[1], *t;
    ote_status_t status = OTE_OK, st;
    bool leak = false;
    size_t off;

    status = remote_canceled(op) ? OTE_ERR_CANCELED : remote_pin(op, cur, 0, true);
    if (status == OTE_OK)
        status = remote_start(op, cur);
    while (status == OTE_OK) {
        /* The next group goes out while the current one is finished. */
        off = cur->end;
        if (off < op->length && !remote_canceled(op)) {
            st = remote_pin(op, next, off, false);
            if (st == OTE_OK) {
                atomic_fetch_add(&stats.overlapped, 1);
                st = remote_start(op, next);
            }
            if (st != OTE_OK && st != OTE_ERR_BUSY)
                status = st;
        }
        st = remote_finish(op, cur);
        if (st == OTE_ERR_TIMEOUT)
            leak = true;
        if (status == OTE_OK)
            status = st;
        remote_unpin(op, cur);
        if (status != OTE_OK)
            break;
        if (!next->held) {
            /* Nothing in flight: pin (waiting if need be) and start the next group. */
            off = cur->end;
            if (off >= op->length)
                break;
            if (remote_canceled(op)) {
                status = OTE_ERR_CANCELED;
                break;
            }
            status = remote_pin(op, next, off, true);
            if (status == OTE_OK)
                status = remote_start(op, next);
        }
        t    = cur;
        cur  = next;
        next = t;
        if (status != OTE_OK)
            break;
    }
    /* On an error, whatever is still out ends before the slice does. */
    for (int i = 0; i < 2; i++) {
        if (op->g[i].held) {
            if (remote_wait_group(op, &op->g[i]) == OTE_ERR_TIMEOUT)
                leak = true;
            remote_unpin(op, &op->g[i]);
        }
    }
    if (status == OTE_OK && cur->end < op->length)
        status = OTE_ERR_CANCELED;
    pthread_mutex_lock(wl);
    comp->func(comp, status);
    pthread_mutex_unlock(wl);
    if (leak) {
        /* A completion may still come: op stays allocated. */
        ote_error("staging: a chunk transfer to the peer never ended");
        return NULL;
    }
    pthread_mutex_destroy(&op->lock);
    pthread_cond_destroy(&op->cond);
    free(op);
    return NULL;
}

static ote_status_t remote_post(stage_ep_t *ep, bool write, void *local, size_t length,
                                ote_region_t *local_region, uint64_t remote_addr,
                                ote_tl_completion_t *comp)
{
    stage_iface_t *si = (stage_iface_t *)ep->super.iface;
    ote_rail_t *rail  = local_region->mem_type == OTE_MEM_TYPE_CUDA ? ep->lstage : ep->host;
    remote_op_t *op;
    pthread_attr_t attr;
    pthread_t th;
    int rc;

    if (rail == NULL)
        return OTE_ERR_UNREACHABLE;
    if (rail->ep == NULL || ep->host->ep == NULL)
        return OTE_ERR_CANCELED;
    op = calloc(1, sizeof(*op));
    if (op == NULL)
        return OTE_ERR_NO_MEMORY;
    op->hooks        = ep->hooks;
    op->rail         = rail;
    op->rail_ep      = rail->ep;
    op->write        = write;
    op->local        = local;
    op->local_region = local_region;
    op->remote       = remote_addr;
    op->length       = length;
    op->chunk_size   = si->chunk_size;
    op->slots        = si->slots;
    op->comp         = comp;
    op->cancel       = ((ote_slice_t *)comp)->cancel;
    pthread_mutex_init(&op->lock, NULL);
    pthread_cond_init(&op->cond, NULL);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    rc = pthread_create(&th, &attr, remote_main, op);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        pthread_mutex_destroy(&op->lock);
        pthread_cond_destroy(&op->cond);
        free(op);
        return OTE_ERR_NO_MEMORY;
    }
    return OTE_INPROGRESS;
}

ote_status_t ote_proto_stage_remote_rail_init(ote_rail_t *rail, ote_rail_t *host,
                                              ote_rail_t *local_stage,
                                              ote_tl_iface_t *stage_iface,
                                              const ote_stage_remote_hooks_t *hooks)
{
    const ote_tl_caps_t *hc = &host->caps;
    stage_iface_t *si       = (stage_iface_t *)stage_iface;
    stage_ep_t *ep;

    /* The chunks are reached by address: only transports the target checks (no rkey). */
    if (host->ep == NULL || (hc->mem_remote & OTE_MEM_TYPE_CUDA) ||
        !(hc->mem_local & OTE_MEM_TYPE_HOST) || !(hc->mem_remote & OTE_MEM_TYPE_HOST) ||
        !(hc->ops & OTE_TL_CAP_CHECKED) ||
        (hc->ops & (OTE_TL_CAP_PUT_ZCOPY | OTE_TL_CAP_GET_ZCOPY)) !=
            (OTE_TL_CAP_PUT_ZCOPY | OTE_TL_CAP_GET_ZCOPY))
        return OTE_ERR_UNSUPPORTED;
    ep = calloc(1, sizeof(*ep));
    if (ep == NULL)
        return OTE_ERR_NO_MEMORY;
    ep->super.iface = stage_iface;
    ep->host        = host;
    ep->remote      = true;
    ep->lstage      = local_stage;
    ep->hooks       = *hooks;
    memset(rail, 0, sizeof(*rail));
    rail->iface           = stage_iface;
    rail->ep              = &ep->super;
    rail->caps            = *hc;
    rail->caps.ops        = OTE_TL_CAP_PUT_ZCOPY | OTE_TL_CAP_GET_ZCOPY | OTE_TL_CAP_CHECKED |
                            OTE_TL_CAP_DEVICE_PAIRS;
    rail->caps.mem_local  = OTE_MEM_TYPE_HOST | (local_stage ? OTE_MEM_TYPE_CUDA : 0);
    rail->caps.mem_remote = OTE_MEM_TYPE_CUDA;
    rail->caps.max_msg    = 0;
    rail->caps.slice_size = si->chunk_size * si->slots;
    rail->worker          = host->worker;
    rail->remote_md       = -1;
    return OTE_OK;
}

/* ---- component ---------------------------------------------------------------- */

static ote_status_t stage_query_resources(ote_tl_component_t *comp,
                                          const ote_tl_iface_params_t *params,
                                          ote_tl_resource_t **res_p, size_t *count_p)
{
    ote_tl_resource_t *res;

    if (ote_cuda_api_load(params->config ? params->config->cuda_lib : NULL) != OTE_OK)
        return OTE_ERR_UNSUPPORTED;
    res = calloc(1, sizeof(*res));
    if (res == NULL)
        return OTE_ERR_NO_MEMORY;
    snprintf(res->tl_name, sizeof(res->tl_name), "cuda_stage");
    snprintf(res->dev_name, sizeof(res->dev_name), "cuda");
    res->component = comp;
    *res_p         = res;
    *count_p       = 1;
    return OTE_OK;
}

static ote_status_t stage_iface_open(const ote_tl_resource_t *res, ote_md_t *md,
                                     const ote_tl_iface_params_t *params,
                                     ote_tl_iface_t **iface_p)
{
    stage_iface_t *si = calloc(1, sizeof(*si));
    ote_status_t status;

    if (si == NULL)
        return OTE_ERR_NO_MEMORY;
    status = ote_cuda_copier_create(STAGE_STREAMS, &si->copier);
    if (status != OTE_OK) {
        free(si);
        return status;
    }
    si->super.ops      = &stage_iface_ops;
    si->super.ep_ops   = &stage_ep_ops;
    si->super.resource = *res;
    si->super.md       = md;
    si->super.md_index = -1;
    si->regions        = params->regions;
    si->chunk_size     = params->config ? params->config->stage_chunk_size : 4u << 20;
    si->slots          = params->config ? (unsigned)params->config->stage_slots : 16;
    if (si->chunk_size < 4096)
        si->chunk_size = 4096;
    if (si->slots == 0)
        si->slots = 1;
    si->nchunks = si->slots;
    *iface_p    = &si->super;
    return OTE_OK;
}

static const char *stage_unavailable(ote_tl_component_t *comp)
{
    return ote_cuda_api_source();
}

static const ote_tl_component_ops_t stage_component_ops = {
    .name            = "cuda_stage",
    .query_resources = stage_query_resources,
    .iface_open      = stage_iface_open,
    .unavailable     = stage_unavailable,
    .md_open         = ote_tl_unsupported_md_open,
    .md_close        = ote_tl_no_md_close,
};

ote_tl_component_t ote_cuda_stage_component = {.ops = &stage_component_ops};

ote_tl_component_t *const ote_proto_components[] = {&ote_cuda_stage_component, NULL};
