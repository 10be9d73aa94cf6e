/*
 * The job pools of the protocols' target sides (ctl_target.h): a request
 * that blocks runs on a bounded pool of threads, its connection held; the
 * pool thread queues it as ended and wakes the listener, whose thread
 * answers it on the connection if that is still there.
 */
#include "ctl_target.h"

#include <string.h>

void ote_ctl_jobs_init(ote_ctl_jobs_t *q, const char *name, unsigned threads, unsigned max,
                       ote_ctl_job_answer_cb_t answer, ote_ctl_job_release_cb_t release)
{
    memset(q, 0, sizeof(*q));
    q->name    = name;
    q->threads = threads;
    q->max     = max;
    q->answer  = answer;
    q->release = release;
    pthread_mutex_init(&q->lock, NULL);
}

static ote_status_t jobs_admit(ote_ctl_jobs_t *q)
{
    ote_status_t st = OTE_OK;

    pthread_mutex_lock(&q->lock);
    if (q->count >= q->max)
        st = OTE_ERR_BUSY;
    else if (q->pool == NULL)
        st = ote_proto_jobs_create(q->name, q->threads, q->max, &q->pool);
    if (st == OTE_OK)
        q->count++;
    pthread_mutex_unlock(&q->lock);
    return st;
}

static void jobs_done(ote_ctl_jobs_t *q)
{
    pthread_mutex_lock(&q->lock);
    q->count--;
    pthread_mutex_unlock(&q->lock);
}

ote_status_t ote_ctl_jobs_start(ote_ctl_jobs_t *q, const ote_ctl_host_t *host,
                                ote_ctl_req_t *req, ote_ctl_job_t *job,
                                ote_proto_job_cb_t run)
{
    ote_status_t st = jobs_admit(q);

    if (st != OTE_OK)
        return st;
    job->host    = host;
    job->jobs    = q;
    job->job.run = run;
    /* Held before the job runs: the listener answers it only once this handler returned. */
    host->conn_hold(host->ctx, req->conn, &job->ticket);
    st = ote_proto_jobs_submit(q->pool, &job->job);
    if (st == OTE_OK)
        return OTE_OK;
    (void)host->conn_resume(host->ctx, &job->ticket);
    jobs_done(q);
    return st;
}

void ote_ctl_jobs_end(ote_ctl_job_t *job)
{
    ote_ctl_jobs_t *q          = job->jobs;
    const ote_ctl_host_t *host = job->host; /* job is the listener's once on q->done */

    pthread_mutex_lock(&q->lock);
    job->next = q->done;
    q->done   = job;
    pthread_mutex_unlock(&q->lock);
    host->wake(host->ctx);
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

        next = job->next;
        if (c != NULL && q->answer(host, c, job) != OTE_OK)
            host->conn_close(host->ctx, c);
        jobs_done(q);
        q->release(job);
    }
}

void ote_ctl_jobs_stop(const ote_ctl_host_t *host, void *state)
{
    ote_ctl_jobs_t *q = state;

    (void)host;
    ote_proto_jobs_destroy(q->pool);
    q->pool = NULL;
    pthread_mutex_lock(&q->lock);
    while (q->done != NULL) {
        ote_ctl_job_t *job = q->done;

        q->done = job->next;
        q->count--;
        pthread_mutex_unlock(&q->lock);
        q->release(job);
        pthread_mutex_lock(&q->lock);
    }
    pthread_mutex_unlock(&q->lock);
}

void ote_ctl_jobs_destroy(ote_ctl_jobs_t *q)
{
    pthread_mutex_destroy(&q->lock);
}

unsigned ote_ctl_jobs_threads(ote_ctl_jobs_t *q)
{
    unsigned n;

    pthread_mutex_lock(&q->lock);
    n = q->pool != NULL ? ote_proto_jobs_threads(q->pool) : 0;
    pthread_mutex_unlock(&q->lock);
    return n;
}
