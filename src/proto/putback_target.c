/*
 * READ over put-only transports, target side (putback.h): the listener
 * checks the range against the region table for OTE_ACCESS_REMOTE_READ, as
 * a checking transport's target does, and answers a refusal at once; else
 * a thread of the service's pool (OTE_PUTBACK_TARGET_THREADS) PUTs the range back
 * into the initiator's destination over the segment core keeps open to the
 * initiator (host->peer_seg_get), and the answer waits for it (the
 * connection is not read meanwhile).
 */
#include "ctl_target.h"
#include "putback.h"

#include "base/log.h"

#include <stdlib.h>

/* A PUTBACK served by a thread of the pool, and its answer. */
typedef struct {
    ote_ctl_job_t     base;   /* first */
    ote_ctl_putback_t m;
    ote_region_t     *region; /* the checked range's, held until served */
    ote_status_t      status;
} putback_job_t;

/* The initiator's range is its own memory: the answer says so from its side. */
static ote_status_t putback_serve(const ote_ctl_host_t *host, const ote_ctl_putback_t *m)
{
    ote_segment_h seg;
    ote_status_t status;
    int slot;

    status = host->peer_seg_get(host->ctx, m->name, m->initiator, &seg, &slot);
    if (status != OTE_OK)
        return status;
    status = host->peer_xfer(host->ctx, seg, OTE_OP_WRITE, (void *)(uintptr_t)m->remote,
                             m->local, m->length, true);
    host->peer_seg_put(host->ctx, seg, slot, status);
    if (status != OTE_OK)
        ote_debug("putback: %#llx+%u to '%s' at %#llx: %s", (unsigned long long)m->remote,
                  m->length, m->name, (unsigned long long)m->local, ote_status_string(status));
    return status;
}

static void putback_job_run(ote_proto_job_t *pj)
{
    putback_job_t *job = (putback_job_t *)pj;

    job->status = putback_serve(job->base.host, &job->m);
    ote_mem_region_put(job->region);
    job->region = NULL;
    ote_ctl_jobs_end(&job->base);
}

static ote_status_t putback_answer(const ote_ctl_host_t *host, ote_ctl_conn_t *c,
                                   ote_ctl_job_t *base)
{
    putback_job_t *job = (putback_job_t *)base;
    ote_buf_t out      = {0};
    ote_status_t status;

    status = ote_ctl_putback_ack_encode(job->status, job->m.id, &out);
    if (status == OTE_OK)
        status = host->reply(host->ctx, c, OTE_CTL_PUTBACK_ACK, out.data, out.len, NULL, 0);
    free(out.data);
    return status;
}

static void putback_release(ote_ctl_job_t *job)
{
    free(job);
}

static ote_status_t putback_handle(const ote_ctl_host_t *host, void *state, ote_ctl_req_t *req)
{
    putback_job_t *job = calloc(1, sizeof(*job));
    ote_status_t status, st;

    status = job != NULL ? ote_ctl_putback_decode(req->payload, req->length, &job->m)
                         : OTE_ERR_NO_MEMORY;
    if (status != OTE_OK) {
        free(job);
        return status;
    }
    if (job->m.target != host->instance_id)
        st = OTE_ERR_NOT_FOUND;
    else
        st = ote_mem_region_acquire(host->regions, job->m.remote, job->m.length,
                                    OTE_ACCESS_REMOTE_READ, &job->region);
    if (st == OTE_OK) {
        st = ote_ctl_jobs_start(state, host, req, &job->base, putback_job_run);
        if (st == OTE_OK)
            return OTE_OK;
        ote_mem_region_put(job->region);
    }
    ote_debug("control peer %s: putback %#llx+%u refused: %s", req->peer,
              (unsigned long long)job->m.remote, job->m.length, ote_status_string(st));
    job->status = st;
    status      = putback_answer(host, req->conn, &job->base);
    free(job);
    return status;
}

static ote_status_t putback_create(const ote_ctl_host_t *host, void **state_p)
{
    ote_ctl_jobs_t *jobs = calloc(1, sizeof(*jobs));

    (void)host;
    if (jobs == NULL)
        return OTE_ERR_NO_MEMORY;
    if (ote_ctl_jobs_init(jobs, "ote-putback", OTE_PUTBACK_TARGET_THREADS,
                          OTE_PUTBACK_TARGET_MAX, putback_answer, putback_release) != OTE_OK) {
        free(jobs);
        return OTE_ERR_NO_MEMORY;
    }
    *state_p = jobs;
    return OTE_OK;
}

static void putback_destroy(const ote_ctl_host_t *host, void *state)
{
    (void)host;
    ote_ctl_jobs_destroy(state);
    free(state);
}

unsigned ote_proto_putback_target_threads(void *state)
{
    return state != NULL ? ote_ctl_jobs_threads(state) : 0;
}

/* Every accepted PUTBACK runs to its end at stop (bounded by the transfer timeout). */
OTE_CTL_ONE_REQUEST_SERVICE(putback, OTE_CTL_PUTBACK, OTE_CTL_PUTBACK_MAX_LEN,
                            OTE_CTL_PUTBACK_ACK, putback_handle, .create = putback_create,
                            .answer = ote_ctl_jobs_answer_all, .stop = ote_ctl_jobs_stop,
                            .destroy = putback_destroy);
