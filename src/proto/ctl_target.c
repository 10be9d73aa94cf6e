/*
 * The job pools of the protocols' target sides (ctl_target.h): a request
 * that blocks runs on a bounded pool of threads, its connection held; the
 * pool thread queues it as ended and wakes the listener, whose thread
 * answers it on the connection if that is still there.
 */
#include "ctl_target.h"

#include "base/dlist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ote_status_t ote_ctl_jobs_init(ote_ctl_jobs_t *q, const char *name, unsigned threads,
                               unsigned max, ote_ctl_job_answer_cb_t answer,
                               ote_ctl_job_release_cb_t release)
{
    memset(q, 0, sizeof(*q));
    q->name    = name;
    q->threads = threads > 0 ? threads : 1;
    q->max     = max > 0 ? max : 1;
    q->answer  = answer;
    q->release = release;
    q->peers   = calloc(q->max, sizeof(*q->peers));
    if (q->peers == NULL)
        return OTE_ERR_NO_MEMORY;
    pthread_mutex_init(&q->lock, NULL);
    return OTE_OK;
}

/* Lock held, fewer than max accepted: ip's slot, a free one taken for it if none. */
static ote_ctl_jobs_peer_t *peer_slot(ote_ctl_jobs_t *q, const char *ip)
{
    ote_ctl_jobs_peer_t *free_slot = NULL;

    for (unsigned i = 0; i < q->max; i++) {
        ote_ctl_jobs_peer_t *p = &q->peers[i];

        if (p->accepted == 0) {
            if (free_slot == NULL)
                free_slot = p;
        } else if (strcmp(p->ip, ip) == 0) {
            return p;
        }
    }
    snprintf(free_slot->ip, sizeof(free_slot->ip), "%s", ip);
    return free_slot;
}

static ote_status_t jobs_admit(ote_ctl_jobs_t *q, const char *ip, ote_ctl_jobs_peer_t **peer_p)
{
    ote_ctl_jobs_peer_t *p = NULL;
    ote_status_t st        = OTE_OK;

    pthread_mutex_lock(&q->lock);
    if (q->count >= q->max || q->stopping)
        st = OTE_ERR_BUSY;
    else if ((p = peer_slot(q, ip))->accepted >= OTE_CTL_JOBS_PEER_MAX(q->max))
        st = OTE_ERR_BUSY;
    else if (q->pool == NULL)
        st = ote_proto_jobs_create(q->name, q->threads, q->max, &q->pool);
    if (st == OTE_OK) {
        q->count++;
        p->accepted++;
        *peer_p = p;
    }
    pthread_mutex_unlock(&q->lock);
    return st;
}

static void jobs_done(ote_ctl_jobs_t *q, ote_ctl_jobs_peer_t *p)
{
    pthread_mutex_lock(&q->lock);
    q->count--;
    p->accepted--;
    pthread_mutex_unlock(&q->lock);
}

/*
 * Lock held: hand waiting jobs to the pool while a thread is free, taking
 * the peers in turn, each below its share of the threads. A job the pool
 * refuses (it cannot, with at most threads handed to it, but for a thread
 * it could not start) goes on *inline_p to run on the calling thread once
 * the lock is left.
 */
static void jobs_dispatch(ote_ctl_jobs_t *q, ote_ctl_job_t **inline_p)
{
    unsigned cap = OTE_CTL_JOBS_PEER_RUNNING(q->threads);

    while (!q->stopping && q->running < q->threads) {
        ote_ctl_jobs_peer_t *p = NULL;
        ote_ctl_job_t *job;

        for (unsigned i = 0; i < q->max && p == NULL; i++) {
            ote_ctl_jobs_peer_t *c = &q->peers[(q->turn + i) % q->max];

            if (c->head != NULL && c->running < cap) {
                p       = c;
                q->turn = (q->turn + i + 1) % q->max;
            }
        }
        if (p == NULL)
            return;
        job     = p->head;
        p->head = job->next;
        if (p->head == NULL)
            p->tail = NULL;
        q->running++;
        p->running++;
        if (ote_proto_jobs_submit(q->pool, &job->job) != OTE_OK) {
            job->next = *inline_p;
            *inline_p = job;
        }
    }
}

static void jobs_run_inline(ote_ctl_job_t *job)
{
    while (job != NULL) {
        ote_ctl_job_t *next = job->next;

        job->job.run(&job->job);
        job = next;
    }
}

ote_status_t ote_ctl_jobs_start(ote_ctl_jobs_t *q, const ote_ctl_host_t *host,
                                ote_ctl_req_t *req, ote_ctl_job_t *job,
                                ote_proto_job_cb_t run)
{
    ote_ctl_jobs_peer_t *p = NULL;
    ote_status_t st        = jobs_admit(q, req->peer_ip != NULL ? req->peer_ip : "", &p);

    if (st != OTE_OK)
        return st;
    job->host    = host;
    job->jobs    = q;
    job->peer    = p;
    job->next    = NULL;
    job->job.run = run;
    /* Held before the job runs: the listener answers it only once this handler returned. */
    host->conn_hold(host->ctx, req->conn, &job->ticket);
    pthread_mutex_lock(&q->lock);
    if (p->head == NULL && p->running < OTE_CTL_JOBS_PEER_RUNNING(q->threads) &&
        q->running < q->threads) {
        q->running++;
        p->running++;
        st = ote_proto_jobs_submit(q->pool, &job->job);
        if (st != OTE_OK) {
            q->running--;
            p->running--;
        }
    } else {
        OTE_QUEUE_PUSH(p->head, p->tail, job, next);
    }
    pthread_mutex_unlock(&q->lock);
    if (st == OTE_OK)
        return OTE_OK;
    (void)host->conn_resume(host->ctx, &job->ticket);
    jobs_done(q, p);
    return st;
}

void ote_ctl_jobs_end(ote_ctl_job_t *job)
{
    ote_ctl_jobs_t *q          = job->jobs;
    const ote_ctl_host_t *host = job->host; /* job is the listener's once on q->done */
    ote_ctl_job_t *inl         = NULL;

    pthread_mutex_lock(&q->lock);
    q->running--;
    job->peer->running--;
    job->next = q->done;
    q->done   = job;
    jobs_dispatch(q, &inl);
    pthread_mutex_unlock(&q->lock);
    host->wake(host->ctx);
    jobs_run_inline(inl);
}

void ote_ctl_jobs_answer_all(const ote_ctl_host_t *host, void *state)
{
    ote_ctl_jobs_t *q = state;
    ote_ctl_job_t *job, *next;

    pthread_mutex_lock(&q->lock);
    job     = q->done;
    q->done = NULL;
    pthread_mutex_unlock(&q->lock);
    for (; job != NULL; job = next) {
        ote_ctl_conn_t *c = host->conn_resume(host->ctx, &job->ticket);

        ote_ctl_jobs_peer_t *p = job->peer;

        next = job->next;
        if (c != NULL && q->answer(host, c, job) != OTE_OK)
            host->conn_close(host->ctx, c);
        jobs_done(q, p);
        q->release(job);
    }
}

void ote_ctl_jobs_stop(const ote_ctl_host_t *host, void *state)
{
    ote_ctl_jobs_t *q     = state;
    ote_ctl_job_t *waiting = NULL;

    (void)host;
    /* Every accepted job runs to its end: those still waiting for a thread too. */
    pthread_mutex_lock(&q->lock);
    q->stopping = true;
    for (unsigned i = 0; i < q->max; i++) {
        ote_ctl_jobs_peer_t *p = &q->peers[i];

        while (p->head != NULL) {
            ote_ctl_job_t *job = p->head;

            p->head   = job->next;
            job->next = waiting;
            waiting   = job;
            q->running++;
            p->running++;
        }
        p->tail = NULL;
    }
    pthread_mutex_unlock(&q->lock);
    while (waiting != NULL) {
        ote_ctl_job_t *job = waiting;

        waiting = job->next;
        job->next = NULL;
        if (ote_proto_jobs_submit(q->pool, &job->job) != OTE_OK)
            job->job.run(&job->job);
    }
    ote_proto_jobs_destroy(q->pool);
    q->pool = NULL;
    pthread_mutex_lock(&q->lock);
    while (q->done != NULL) {
        ote_ctl_job_t *job = q->done;

        q->done = job->next;
        q->count--;
        job->peer->accepted--;
        pthread_mutex_unlock(&q->lock);
        q->release(job);
        pthread_mutex_lock(&q->lock);
    }
    pthread_mutex_unlock(&q->lock);
}

void ote_ctl_jobs_destroy(ote_ctl_jobs_t *q)
{
    if (q->peers == NULL)
        return; /* init failed */
    pthread_mutex_destroy(&q->lock);
    free(q->peers);
    q->peers = NULL;
}

unsigned ote_ctl_jobs_threads(ote_ctl_jobs_t *q)
{
    unsigned n;

    pthread_mutex_lock(&q->lock);
    n = q->pool != NULL ? ote_proto_jobs_threads(q->pool) : 0;
    pthread_mutex_unlock(&q->lock);
    return n;
}
