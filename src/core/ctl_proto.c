/*
 * Requests the protocols serve over the control plane: STAGE (remote
 * staging of this engine's GPU memory) and PUTBACK (READ over put-only
 * transports), on the listener's thread, PUTBACKs on threads of their own.
 */
#include "ctl_int.h"

#include "base/log.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

/* STAGE: remote staging of this engine's GPU memory (proto/stage_target.c). */
ote_status_t ote_ctl_handle_stage(ote_ctl_t *ctl, ctl_conn_t *c)
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

static void *putback_main(void *arg)
{
    putback_job_t *job = arg;
    ote_ctl_t *ctl     = job->ctl;
    uint64_t one       = 1;

    job->status = ote_putback_serve(ctl->engine, &job->m);
    ote_mem_region_put(job->region);
    job->region = NULL;
    pthread_mutex_lock(&ctl->done_lock);
    job->next = ctl->done;
    ctl->done = job;
    pthread_cond_broadcast(&ctl->done_cond);
    pthread_mutex_unlock(&ctl->done_lock);
    (void)!write(ctl->done_fd, &one, sizeof(one));
    return NULL;
}

/*
 * PUTBACK (proto/putback.h): the range is checked here, as a checking
 * transport's target does, and answered at once when refused; else a
 * thread PUTs it back and the answer waits for it (the connection is not
 * read meanwhile).
 */
ote_status_t ote_ctl_handle_putback(ote_ctl_t *ctl, ctl_conn_t *c)
{
    ote_engine_h e = ctl->engine;
    putback_job_t *job = calloc(1, sizeof(*job));
    ote_buf_t out = {0};
    pthread_attr_t attr;
    pthread_t th;
    ote_status_t status, st;

    if (job == NULL)
        return OTE_ERR_NO_MEMORY;
    status = ote_ctl_putback_decode(c->payload, c->h.length, &job->m);
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
        pthread_mutex_lock(&ctl->done_lock);
        if (ctl->jobs >= CTL_PUTBACK_MAX)
            st = OTE_ERR_BUSY;
        else
            ctl->jobs++;
        pthread_mutex_unlock(&ctl->done_lock);
        if (st != OTE_OK)
            ote_mem_region_put(job->region);
    }
    if (st == OTE_OK) {
        job->ctl     = ctl;
        job->conn_id = c->id;
        job->seq     = c->h.seq;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&th, &attr, putback_main, job) != 0) {
            ote_mem_region_put(job->region);
            pthread_mutex_lock(&ctl->done_lock);
            ctl->jobs--;
            pthread_mutex_unlock(&ctl->done_lock);
            st = OTE_ERR_NO_MEMORY;
        }
        pthread_attr_destroy(&attr);
        if (st == OTE_OK) {
            c->waiting = true;
            ote_ctl_conn_set_events(ctl, c, EPOLLRDHUP);
            return OTE_OK;
        }
    }
    ote_debug("control peer %s: putback %#llx+%u refused: %s", c->peer,
              (unsigned long long)job->m.remote, job->m.length, ote_status_string(st));
    status = ote_ctl_putback_ack_encode(st, job->m.id, &out);
    if (status == OTE_OK)
        status = ote_ctl_reply(ctl, c, OTE_CTL_PUTBACK_ACK, out.data, out.len, NULL, 0);
    free(out.data);
    free(job);
    return status;
}

/* Answer the PUTBACKs that ended, on the connections still there. */
void ote_ctl_putback_answer(ote_ctl_t *ctl)
{
    putback_job_t *job, *next;
    uint64_t v;

    (void)!read(ctl->done_fd, &v, sizeof(v));
    pthread_mutex_lock(&ctl->done_lock);
    job       = ctl->done;
    ctl->done = NULL;
    pthread_mutex_unlock(&ctl->done_lock);
    for (; job != NULL; job = next) {
        ctl_conn_t *c;
        ote_buf_t out = {0};

        next = job->next;
        for (c = ctl->conns; c != NULL && c->id != job->conn_id; c = c->next)
            ;
        if (c != NULL && c->waiting) {
            c->waiting = false;
            c->h.seq   = job->seq;
            ote_ctl_conn_set_events(ctl, c, EPOLLIN);
            if (ote_ctl_putback_ack_encode(job->status, job->m.id, &out) != OTE_OK ||
                ote_ctl_reply(ctl, c, OTE_CTL_PUTBACK_ACK, out.data, out.len, NULL, 0) != OTE_OK)
                ote_ctl_conn_close(ctl, c);
            free(out.data);
        }
        pthread_mutex_lock(&ctl->done_lock);
        ctl->jobs--;
        pthread_cond_broadcast(&ctl->done_cond);
        pthread_mutex_unlock(&ctl->done_lock);
        free(job);
    }
}
