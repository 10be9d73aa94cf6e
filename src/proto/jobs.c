/* Bounded job pool (see jobs.h). */
#include "jobs.h"

#include "base/dlist.h"
#include "base/log.h"
#include "base/util.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

struct ote_proto_jobs {
    pthread_mutex_t  lock;
    pthread_cond_t   cond;
    ote_proto_job_t *head, *tail;
    size_t           queued, max_queued;
    unsigned         max_threads, nthreads, idle;
    bool             stop;
    char             name[12];
    pthread_t       *threads;
};

static void *jobs_main(void *arg)
{
    ote_proto_jobs_t *p = arg;

    pthread_mutex_lock(&p->lock);
    for (;;) {
        ote_proto_job_t *job = p->head;

        if (job == NULL) {
            if (p->stop)
                break;
            p->idle++;
            pthread_cond_wait(&p->cond, &p->lock);
            p->idle--;
            continue;
        }
        p->head = job->next;
        if (p->head == NULL)
            p->tail = NULL;
        p->queued--;
        pthread_mutex_unlock(&p->lock);
        job->run(job);
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

ote_status_t ote_proto_jobs_create(const char *name, unsigned max_threads, size_t max_queued,
                                   ote_proto_jobs_t **jobs_p)
{
    ote_proto_jobs_t *p = calloc(1, sizeof(*p));

    if (p == NULL)
        return OTE_ERR_NO_MEMORY;
    p->max_threads = max_threads > 0 ? max_threads : 1;
    p->max_queued  = max_queued > 0 ? max_queued : 1;
    p->threads     = calloc(p->max_threads, sizeof(*p->threads));
    if (p->threads == NULL) {
        free(p);
        return OTE_ERR_NO_MEMORY;
    }
    snprintf(p->name, sizeof(p->name), "%s", name);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    *jobs_p = p;
    return OTE_OK;
}

/* Lock held: one more thread when every started one is taken. */
static void jobs_grow(ote_proto_jobs_t *p)
{
    char tname[16];

    if (p->idle >= p->queued || p->nthreads == p->max_threads)
        return;
    if (pthread_create(&p->threads[p->nthreads], NULL, jobs_main, p) != 0) {
        ote_warn("%s: cannot start a thread (%u running)", p->name, p->nthreads);
        return;
    }
    snprintf(tname, sizeof(tname), "%s-%u", p->name, p->nthreads);
    pthread_setname_np(p->threads[p->nthreads], tname);
    p->nthreads++;
}

ote_status_t ote_proto_jobs_submit(ote_proto_jobs_t *p, ote_proto_job_t *job)
{
    ote_status_t status = OTE_OK;

    pthread_mutex_lock(&p->lock);
    if (p->stop) {
        status = OTE_ERR_CANCELED;
    } else if (p->queued >= p->max_queued) {
        status = OTE_ERR_BUSY;
    } else {
        OTE_QUEUE_PUSH(p->head, p->tail, job, next);
        p->queued++;
        jobs_grow(p);
        if (p->nthreads == 0) {
            /* Nothing would ever run it: take it back. */
            p->head = p->tail = NULL;
            p->queued = 0;
            status    = OTE_ERR_NO_MEMORY;
        } else {
            pthread_cond_signal(&p->cond);
        }
    }
    pthread_mutex_unlock(&p->lock);
    return status;
}

void ote_proto_jobs_destroy(ote_proto_jobs_t *p)
{
    if (p == NULL)
        return;
    ote_cond_stop(&p->lock, &p->cond, &p->stop);
    for (unsigned i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->cond);
    free(p->threads);
    free(p);
}

unsigned ote_proto_jobs_threads(ote_proto_jobs_t *p)
{
    unsigned n;

    pthread_mutex_lock(&p->lock);
    n = p->nthreads;
    pthread_mutex_unlock(&p->lock);
    return n;
}
