/*
 * A bounded pool of threads for protocol steps that block on a peer (a
 * control request and its answer): remote staging slices, PUTBACK and
 * FILE_IO requests on the initiator and on the target (ctl_ep.h, the
 * control listener's pools). At most max_threads threads, started
 * as work arrives and kept until the pool is destroyed; at most max_queued
 * jobs wait for one, more are refused with OTE_ERR_BUSY (never dropped).
 */
#ifndef OTE_PROTO_JOBS_H
#define OTE_PROTO_JOBS_H

#include <ote/ote.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The engine's pool for initiator-side requests (remote staging, PUTBACK, a peer's file). */
#define OTE_PROTO_JOBS_THREADS 8
#define OTE_PROTO_JOBS_QUEUED  4096

typedef struct ote_proto_job ote_proto_job_t;

/* Runs on a pool thread, exactly once per accepted job; may free the job. */
typedef void (*ote_proto_job_cb_t)(ote_proto_job_t *job);

/* Embedded in the caller's request: the pool allocates nothing per job. */
struct ote_proto_job {
    ote_proto_job_cb_t run;
    ote_proto_job_t   *next;
};

typedef struct ote_proto_jobs ote_proto_jobs_t;

/*
 * What a protocol that asks the peer's control plane (remote staging,
 * PUTBACK, a peer's exported file) needs from core, each in its own hooks.
 */
typedef struct {
    /* Send a request (req, len) to the peer and wait for its answer. */
    ote_status_t (*ctl)(void *arg, const void *req, size_t len, uint8_t **resp_p,
                        size_t *resp_len_p);
    void             *ctl_arg;
    pthread_mutex_t  *worker_lock;     /* held around a slice's completion */
    ote_proto_jobs_t *jobs;            /* the engine's pool the requests wait on */
    uint64_t          initiator, target; /* engine instances */
    /* The rail's iface, held by each request in flight (ctl_ep.h); NULL: none to hold. */
    struct ote_proto_ctl_iface *iface_ref;
} ote_proto_ctl_hooks_t;

/* name names the threads ("<name>-N", at most 10 characters). */
ote_status_t ote_proto_jobs_create(const char *name, unsigned max_threads, size_t max_queued,
                                   ote_proto_jobs_t **jobs_p);
/*
 * Queue job (job->run set by the caller). OK: it will run. BUSY: max_queued
 * jobs wait already; NO_MEMORY: no thread could be started. On an error
 * the job never runs.
 */
ote_status_t ote_proto_jobs_submit(ote_proto_jobs_t *jobs, ote_proto_job_t *job);
/* Runs every job still queued, then joins the threads. */
void         ote_proto_jobs_destroy(ote_proto_jobs_t *jobs);
/* Threads started so far (never more than max_threads). */
unsigned     ote_proto_jobs_threads(ote_proto_jobs_t *jobs);

#endif
