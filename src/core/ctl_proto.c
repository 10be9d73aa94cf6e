/*
 * Requests the protocols serve over the control plane: STAGE (remote
 * staging of this engine's GPU memory) and PUTBACK (READ over put-only
 * transports), on the listener's thread, PUTBACKs on a bounded pool of
 * threads (CTL_PUTBACK_THREADS) with the segments to their initiators kept
 * open between requests (CTL_PUTBACK_PEERS; FILE_IOs by rails, ctl_file.c,
 * use the same segments).
 */
#include "ctl_int.h"

#include "base/log.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

/* STAGE: remote staging of this engine's GPU memory (proto/stage_target.c). */
static ote_status_t stage_handle(ote_ctl_t *ctl, ctl_conn_t *c)
{
    ote_engine_h e = ctl->engine;
    ote_ctl_stage_t *m = malloc(sizeof(*m));
    uint64_t chunks[OTE_CTL_STAGE_MAX];
    size_t count = 0;
    uint32_t chunk_size = 0;
    ote_buf_t out = {0};
    ote_status_t status, st;

    if (m == NULL)
        return OTE_ERR_NO_MEMORY;
    status = ote_ctl_stage_decode(c->payload, c->h.length, m);
    if (status != OTE_OK) {
        free(m);
        return status;
    }
    if (m->target != e->instance_id)
        st = OTE_ERR_NOT_FOUND;
    else if (ctl->stage == NULL &&
             (st = ote_stage_target_create(e->regions, &e->stage_config,
                                           e->config.xfer_timeout_ms, &ctl->stage)) != OTE_OK)
        ;
    else
        st = ote_stage_target_request(ctl->stage, (uintptr_t)c, m, chunks, &count,
                                      &chunk_size);
    if (st != OTE_OK)
        count = 0;
    status = ote_ctl_stage_ack_encode(st, count ? chunk_size : 0, chunks, count, &out);
    if (status == OTE_OK)
        status = ote_ctl_reply(ctl, c, OTE_CTL_STAGE_ACK, out.data, out.len, NULL, 0);
    free(out.data);
    free(m);
    return status;
}

static void stage_sweep(ote_ctl_t *ctl, uint64_t now_ns)
{
    ote_stage_target_sweep(ctl->stage, now_ns);
}

static void stage_conn_gone(ote_ctl_t *ctl, ctl_conn_t *c)
{
    ote_stage_target_conn_gone(ctl->stage, (uintptr_t)c);
}

static void stage_destroy(ote_ctl_t *ctl)
{
    ote_stage_target_destroy(ctl->stage);
    ctl->stage = NULL;
}

static const ote_ctl_handler_t stage_handlers[] = {
    {.type = OTE_CTL_STAGE, .refuse_type = OTE_CTL_AUTH_DONE, .handle = stage_handle},
};

const ote_ctl_service_t ote_ctl_stage_service = {
    .name         = "stage",
    .handlers     = stage_handlers,
    .num_handlers = sizeof(stage_handlers) / sizeof(stage_handlers[0]),
    .sweep        = stage_sweep,
    .conn_gone    = stage_conn_gone,
    .destroy      = stage_destroy,
};

/* ---- Segments to initiators, kept between requests (PUTBACK, FILE_IO) ------ */

static void putback_peer_clear(putback_peer_t *p)
{
    memset(p, 0, sizeof(*p));
}

ote_status_t ote_ctl_peer_seg_get(ote_ctl_t *ctl, const char *name, uint64_t initiator,
                                  ote_segment_h *seg_p, int *slot_p)
{
    ote_engine_h e      = ctl->engine;
    ote_segment_h evict = NULL, seg = NULL;
    putback_peer_t *p   = NULL;
    uint64_t instance   = 0;
    ote_status_t status;
    int slot = -1;

    pthread_mutex_lock(&ctl->done_lock);
    for (;;) {
        for (int i = 0; i < CTL_PUTBACK_PEERS; i++) {
            p = &ctl->peers[i];
            if ((p->opening || p->seg != NULL) && !p->stale &&
                strncmp(p->name, name, sizeof(p->name)) == 0)
                break;
            p = NULL;
        }
        if (p == NULL || !p->opening)
            break;
        pthread_cond_wait(&ctl->done_cond, &ctl->done_lock);
    }
    if (p != NULL && p->instance == initiator) {
        p->refs++;
        p->used_ns = ote_time_ns();
        *seg_p     = p->seg;
        *slot_p    = (int)(p - ctl->peers);
        pthread_mutex_unlock(&ctl->done_lock);
        return OTE_OK;
    }
    if (p != NULL) {
        /* Another instance behind the name: its successor gets a segment of its own. */
        p->stale = true;
        if (p->refs == 0) {
            evict = p->seg;
            putback_peer_clear(p);
        }
    }
    for (int i = 0; i < CTL_PUTBACK_PEERS; i++) {
        putback_peer_t *q = &ctl->peers[i];

        if (!q->opening && q->seg == NULL) {
            slot = i;
            break;
        }
        if (q->refs == 0 && !q->opening && evict == NULL &&
            (slot < 0 || q->used_ns < ctl->peers[slot].used_ns))
            slot = i;
    }
    if (slot >= 0) {
        p = &ctl->peers[slot];
        if (p->seg != NULL) {
            /* The least recently used one goes. */
            evict = p->seg;
        }
        putback_peer_clear(p);
        snprintf(p->name, sizeof(p->name), "%s", name);
        p->opening = true;
        p->refs    = 1;
    }
    pthread_mutex_unlock(&ctl->done_lock);
    if (evict != NULL)
        ote_segment_close(evict);

    status = ote_segment_open_internal(e, name, &seg);
    if (status == OTE_OK) {
        pthread_mutex_lock(&seg->lock);
        instance = seg->desc != NULL ? seg->desc->instance_id : 0;
        pthread_mutex_unlock(&seg->lock);
        /* Only into the instance that asked: a name now served by another is refused. */
        if (instance != initiator) {
            ote_warn("control listener: '%s' is not the instance that asked; refused", name);
            ote_segment_close(seg);
            seg    = NULL;
            status = OTE_ERR_PEER_RESTARTED;
        }
    } else {
        ote_warn("control listener: cannot open '%s' to serve its request: %s", name,
                 ote_status_string(status));
        if (status == OTE_ERR_NOT_FOUND)
            status = OTE_ERR_UNREACHABLE;
    }
    pthread_mutex_lock(&ctl->done_lock);
    ctl->putback_opens++;
    if (slot >= 0) {
        p = &ctl->peers[slot];
        if (status == OTE_OK) {
            p->seg      = seg;
            p->instance = instance;
            p->opening  = false;
            p->used_ns  = ote_time_ns();
        } else {
            putback_peer_clear(p);
        }
        pthread_cond_broadcast(&ctl->done_cond);
    }
    pthread_mutex_unlock(&ctl->done_lock);
    if (status == OTE_OK) {
        *seg_p  = seg;
        *slot_p = slot;
    }
    return status;
}

void ote_ctl_peer_seg_put(ote_ctl_t *ctl, ote_segment_h seg, int slot, ote_status_t status)
{
    ote_segment_h close_seg = slot < 0 ? seg : NULL;

    if (slot >= 0) {
        putback_peer_t *p = &ctl->peers[slot];

        pthread_mutex_lock(&ctl->done_lock);
        if (status != OTE_OK)
            p->stale = true;
        if (--p->refs == 0 && p->stale) {
            close_seg = p->seg;
            putback_peer_clear(p);
        }
        pthread_mutex_unlock(&ctl->done_lock);
    }
    if (close_seg != NULL)
        ote_segment_close(close_seg);
}

static void putback_serve_job(ote_proto_job_t *pj)
{
    putback_job_t *job = (putback_job_t *)pj;
    ote_ctl_t *ctl     = job->base.ctl;
    ote_segment_h seg;
    int slot;

    job->status = ote_ctl_peer_seg_get(ctl, job->m.name, job->m.initiator, &seg, &slot);
    if (job->status == OTE_OK) {
        job->status = ote_putback_serve(ctl->engine, seg, &job->m);
        ote_ctl_peer_seg_put(ctl, seg, slot, job->status);
    }
    ote_mem_region_put(job->region);
    job->region = NULL;
    ote_ctl_job_end(ctl, &ctl->done, &job->base);
}

static ote_status_t putback_answer(ote_ctl_t *ctl, ctl_conn_t *c, ctl_job_t *base)
{
    putback_job_t *job = (putback_job_t *)base;
    ote_buf_t out      = {0};
    ote_status_t status;

    status = ote_ctl_putback_ack_encode(job->status, job->m.id, &out);
    if (status == OTE_OK)
        status = ote_ctl_reply(ctl, c, OTE_CTL_PUTBACK_ACK, out.data, out.len, NULL, 0);
    free(out.data);
    return status;
}

static void putback_release(ote_ctl_t *ctl, ctl_job_t *job)
{
    (void)ctl;
    free(job);
}

static void putback_stop(ote_ctl_t *ctl)
{
    /* Every accepted PUTBACK runs to its end (bounded by the transfer timeout). */
    ote_proto_jobs_destroy(ctl->pool);
    ctl->pool = NULL;
    ote_ctl_job_drop_all(ctl, &ctl->done, &ctl->jobs, putback_release);
    for (int i = 0; i < CTL_PUTBACK_PEERS; i++) {
        if (ctl->peers[i].seg != NULL)
            ote_segment_close(ctl->peers[i].seg);
        putback_peer_clear(&ctl->peers[i]);
    }
}

uint64_t ote_engine_peer_rail_bytes(ote_engine_h e, const char *tl)
{
    ote_ctl_t *ctl = e->ctl;
    uint64_t bytes = 0;

    pthread_mutex_lock(&ctl->done_lock);
    for (int i = 0; i < CTL_PUTBACK_PEERS; i++) {
        ote_rail_info_t info[OTE_PROTO_MAX_RAILS];
        size_t n = 0;

        if (ctl->peers[i].seg == NULL ||
            ote_segment_rails(ctl->peers[i].seg, info, OTE_PROTO_MAX_RAILS, &n) != OTE_OK)
            continue;
        for (size_t k = 0; k < n && k < OTE_PROTO_MAX_RAILS; k++) {
            if (strcmp(info[k].transport, tl) == 0)
                bytes += info[k].bytes;
        }
    }
    pthread_mutex_unlock(&ctl->done_lock);
    return bytes;
}

void ote_engine_putback_stats(ote_engine_h e, unsigned long *opens_p, unsigned *threads_p)
{
    ote_ctl_t *ctl = e->ctl;

    pthread_mutex_lock(&ctl->done_lock);
    *opens_p   = ctl->putback_opens;
    *threads_p = ctl->pool != NULL ? ote_proto_jobs_threads(ctl->pool) : 0;
    pthread_mutex_unlock(&ctl->done_lock);
}

/*
 * PUTBACK (proto/putback.h): the range is checked here, as a checking
 * transport's target does, and answered at once when refused; else a
 * thread of the listener's pool PUTs it back and the answer waits for it
 * (the connection is not read meanwhile).
 */
static ote_status_t putback_handle(ote_ctl_t *ctl, ctl_conn_t *c)
{
    ote_engine_h e = ctl->engine;
    putback_job_t *job = calloc(1, sizeof(*job));
    ote_status_t status, st;

    status = job != NULL ? ote_ctl_putback_decode(c->payload, c->h.length, &job->m)
                         : OTE_ERR_NO_MEMORY;
    if (status != OTE_OK) {
        free(job);
        return status;
    }
    if (job->m.target != e->instance_id)
        st = OTE_ERR_NOT_FOUND;
    else
        st = ote_mem_region_acquire(e->regions, job->m.remote, job->m.length,
                                    OTE_ACCESS_REMOTE_READ, &job->region);
    if (st == OTE_OK) {
        st = ote_ctl_job_start(ctl, c, &ctl->pool, &ctl->jobs, "ote-putback",
                               CTL_PUTBACK_THREADS, CTL_PUTBACK_MAX, &job->base,
                               putback_serve_job);
        if (st == OTE_OK)
            return OTE_OK;
        ote_mem_region_put(job->region);
    }
    ote_debug("control peer %s: putback %#llx+%u refused: %s", c->peer,
              (unsigned long long)job->m.remote, job->m.length, ote_status_string(st));
    job->status = st;
    status      = putback_answer(ctl, c, &job->base);
    free(job);
    return status;
}

/* Answer the PUTBACKs that ended, on the connections still there. */
static void putback_answer_all(ote_ctl_t *ctl)
{
    ote_ctl_job_answer_all(ctl, &ctl->done, &ctl->jobs, putback_answer, putback_release);
}

static const ote_ctl_handler_t putback_handlers[] = {
    {.type = OTE_CTL_PUTBACK, .refuse_type = OTE_CTL_AUTH_DONE, .handle = putback_handle},
};

const ote_ctl_service_t ote_ctl_putback_service = {
    .name         = "putback",
    .handlers     = putback_handlers,
    .num_handlers = sizeof(putback_handlers) / sizeof(putback_handlers[0]),
    .answer       = putback_answer_all,
    .stop         = putback_stop,
};
