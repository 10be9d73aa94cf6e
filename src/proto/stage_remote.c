/*
 * Remote staging, initiator side (see stage.h): the peer's GPU memory
 * through its pinned host chunks.
 */
#include "stage_int.h"

#include "base/config.h"
#include "base/log.h"
#include "base/util.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- remote staging, initiator side ------------------------------------------- */

/*
 * One slice to the peer's GPU memory is a job of the engine's protocol
 * pool (jobs.h): a pool thread talks to the peer's control listener
 * (blocking requests) and posts the chunk transfers on the worker's host
 * (or local staging) rail under the worker's lock; their completions come
 * back through the worker. The pool bounds the threads: slices beyond them
 * wait in its queue, and a full queue ends the slice BUSY.
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
    ote_proto_job_t      job;      /* first: the pool's entry */
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

    m->initiator = op->hooks.base.initiator;
    m->target    = op->hooks.base.target;
    status       = ote_ctl_stage_encode(m, &out);
    if (status == OTE_OK)
        status = op->hooks.base.ctl(op->hooks.base.ctl_arg, out.data, out.len, &resp, &len);
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
        atomic_fetch_add(&ote_stage_stats.remote_busy, 1);
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
    atomic_fetch_add(&ote_stage_stats.chunks, got);
    return OTE_OK;
}

/* Post the group's chunk transfers (local memory <-> the peer's chunks). */
static ote_status_t remote_post_group(remote_op_t *op, remote_group_t *g)
{
    ote_status_t status = OTE_OK;
    uint64_t one        = 1;
    size_t off          = g->off;

    pthread_mutex_lock(op->hooks.base.worker_lock);
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
    pthread_mutex_unlock(op->hooks.base.worker_lock);
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
        ts = ote_clock_after(CLOCK_REALTIME, 10 * 1000 * 1000);
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

static void remote_main(ote_proto_job_t *job)
{
    remote_op_t *op           = (remote_op_t *)job;
    pthread_mutex_t *wl       = op->hooks.base.worker_lock;
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
                atomic_fetch_add(&ote_stage_stats.overlapped, 1);
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
    ote_proto_ctl_iface_put(op->hooks.base.iface_ref);
    if (leak) {
        /* A completion may still come: op stays allocated. */
        ote_error("staging: a chunk transfer to the peer never ended");
        return;
    }
    pthread_mutex_destroy(&op->lock);
    pthread_cond_destroy(&op->cond);
    free(op);
}

ote_status_t ote_stage_remote_post(stage_ep_t *ep, bool write, void *local, size_t length,
                                   ote_region_t *local_region, uint64_t remote_addr,
                                   ote_tl_completion_t *comp)
{
    stage_worker_t *sw = ep->sw;
    ote_rail_t *rail   = local_region->mem_type == OTE_MEM_TYPE_CUDA ? ep->lstage : ep->host;
    remote_op_t *op;
    ote_status_t status;

    if (rail == NULL)
        return OTE_ERR_UNREACHABLE;
    if (rail->ep == NULL || ep->host->ep == NULL)
        return OTE_ERR_CANCELED;
    op = malloc(sizeof(*op));
    if (op == NULL)
        return OTE_ERR_NO_MEMORY;
    *op = (remote_op_t){.hooks = ep->hooks, .rail = rail, .rail_ep = rail->ep, .write = write,
                        .local = local, .local_region = local_region, .remote = remote_addr,
                        .length = length, .chunk_size = sw->chunk_size, .slots = sw->slots,
                        .comp = comp, .cancel = ((ote_slice_t *)comp)->cancel,
                        .job.run = remote_main};
    pthread_mutex_init(&op->lock, NULL);
    pthread_cond_init(&op->cond, NULL);
    ote_proto_ctl_iface_get(ep->iface);
    status = ote_proto_jobs_submit(ep->hooks.base.jobs, &op->job);
    if (status != OTE_OK) {
        ote_proto_ctl_iface_put(ep->iface);
        pthread_mutex_destroy(&op->lock);
        pthread_cond_destroy(&op->cond);
        free(op);
        return status;
    }
    return OTE_INPROGRESS;
}

ote_status_t ote_proto_stage_remote_rail_init(ote_rail_t *rail, ote_rail_t *host,
                                              ote_rail_t *local_stage, ote_stage_worker_t *sw,
                                              const ote_stage_remote_hooks_t *hooks)
{
    const ote_tl_caps_t *hc = &host->caps;
    stage_ep_t *ep;

    /* The chunks are reached by address: only transports the target checks (no rkey). */
    if (sw == NULL || host->ep == NULL || (hc->mem_remote & OTE_MEM_TYPE_CUDA) ||
        !(hc->mem_local & OTE_MEM_TYPE_HOST) || !(hc->mem_remote & OTE_MEM_TYPE_HOST) ||
        !(hc->ops & OTE_TL_CAP_CHECKED) ||
        (hc->ops & (OTE_TL_CAP_PUT_ZCOPY | OTE_TL_CAP_GET_ZCOPY)) !=
            (OTE_TL_CAP_PUT_ZCOPY | OTE_TL_CAP_GET_ZCOPY))
        return OTE_ERR_UNSUPPORTED;
    ep = ote_stage_ep_new(rail, host, sw);
    if (ep == NULL)
        return OTE_ERR_NO_MEMORY;
    ep->remote            = true;
    ep->lstage            = local_stage;
    ep->hooks             = *hooks;
    ep->hooks.base.iface_ref = ep->iface; /* each slice holds it until it has ended */
    rail->caps.ops        = OTE_TL_CAP_PUT_ZCOPY | OTE_TL_CAP_GET_ZCOPY | OTE_TL_CAP_CHECKED |
                            OTE_TL_CAP_DEVICE_PAIRS;
    rail->caps.mem_local  = OTE_MEM_TYPE_HOST | (local_stage ? OTE_MEM_TYPE_CUDA : 0);
    rail->caps.mem_remote = OTE_MEM_TYPE_CUDA;
    rail->remote_md       = -1;
    return OTE_OK;
}
