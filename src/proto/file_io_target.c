/*
 * FILE_IO on this engine's exported files, target side (file_io_msg.h;
 * the initiator side is file_remote.c): the listener checks each request
 * at once (the target instance, the file still exported, the range within
 * the exported size, the access) and answers a refusal itself; an accepted
 * request does its pread or pwrite on a thread of the service's pool
 * (FILE_IO_THREADS), and the answer waits for it (the connection is not
 * read meanwhile). By rails the bytes go through a bounce buffer of this
 * engine's and over the segment core keeps open to the initiator
 * (host->peer_seg_get, shared with PUTBACK): a READ WRITEs what it read
 * into the initiator's memory, a WRITE READs it from there first.
 */
#include "ctl_target.h"
#include "file_io_msg.h"

#include "base/log.h"
#include "base/util.h"
#include "base/wire_util.h"

#include <stdlib.h>
#include <string.h>

/* FILE_IOs accepted at once per engine (running or queued; one peer address: its share,
 * ctl_target.h); more are answered BUSY. */
#define FILE_IO_MAX     64
/* Threads doing their I/O (pread/pwrite block): apart from the PUTBACK pool. */
#define FILE_IO_THREADS 4

/*
 * A bounce buffer of FILE_IOs by rails (OTE_CTL_FILE_IO_MAX_BYTES, engine
 * memory registered for local use only): one per pool thread, made on
 * first use, freed when the listener stops.
 */
typedef struct {
    void     *addr;
    ote_mem_h mem;
    bool      busy;
} file_bounce_t;

typedef struct {
    ote_ctl_jobs_t  jobs; /* first: the state the jobs' hooks take */
    pthread_mutex_t lock; /* bounce */
    file_bounce_t   bounce[FILE_IO_THREADS];
} file_io_target_t;

/* A FILE_IO served by a thread of the pool, and its answer. */
typedef struct {
    ote_ctl_job_t     base;    /* first */
    file_io_target_t *t;
    ote_ctl_file_io_t m;
    uint8_t          *payload; /* the request (m.data points into it) */
    ote_ctl_file_t   *file;    /* held until answered */
    uint64_t          arrived_ns; /* when the listener took the request */
    uint8_t          *buf;     /* READ not by rails: the bytes read */
    size_t            done;    /* READ: the bytes read (by rails: written to the initiator) */
    ote_status_t      status;
} file_io_job_t;

static void file_io_job_free(const ote_ctl_host_t *host, file_io_job_t *job)
{
    if (job->file != NULL)
        host->file_release(host->ctx, job->file);
    free(job->payload);
    free(job->buf);
    free(job);
}

/* A free bounce buffer, made on first use; BUSY if none (more jobs than threads). */
static ote_status_t bounce_get(const ote_ctl_host_t *host, file_io_target_t *t, int *slot_p,
                               uint8_t **buf_p)
{
    file_bounce_t *b = NULL;
    ote_status_t status = OTE_OK;

    pthread_mutex_lock(&t->lock);
    for (int i = 0; i < FILE_IO_THREADS && b == NULL; i++) {
        if (!t->bounce[i].busy)
            b = &t->bounce[i];
    }
    if (b != NULL)
        b->busy = true;
    pthread_mutex_unlock(&t->lock);
    if (b == NULL)
        return OTE_ERR_BUSY;
    if (b->addr == NULL)
        status = host->mem_alloc(host->ctx, OTE_CTL_FILE_IO_MAX_BYTES, &b->addr, &b->mem);
    if (status != OTE_OK) {
        b->addr = NULL;
        pthread_mutex_lock(&t->lock);
        b->busy = false;
        pthread_mutex_unlock(&t->lock);
        return status;
    }
    *slot_p = (int)(b - t->bounce);
    *buf_p  = b->addr;
    return OTE_OK;
}

static void bounce_put(file_io_target_t *t, int slot)
{
    pthread_mutex_lock(&t->lock);
    t->bounce[slot].busy = false;
    pthread_mutex_unlock(&t->lock);
}

/*
 * By rails: READ preads into a bounce buffer and WRITEs exactly the bytes
 * read (those before the end of the file too) into the initiator's
 * address; WRITE READs the initiator's range into it, then pwrites. The
 * transfers go over the segment to the initiator, opened by the name the
 * request carries and refused unless that name is the instance that
 * asked; the initiator's transports check the access of its region.
 */
static ote_status_t file_io_rails(file_io_job_t *job)
{
    const ote_ctl_host_t *host = job->base.host;
    bool wr                    = job->m.op == OTE_CTL_FILE_IO_WRITE;
    ote_status_t status, xs = OTE_OK;
    ote_segment_h seg;
    uint8_t *buf;
    int slot, b;

    status = bounce_get(host, job->t, &b, &buf);
    if (status != OTE_OK)
        return status;
    status = host->peer_seg_get(host->ctx, job->m.name, job->m.initiator, &seg, &slot);
    if (status != OTE_OK) {
        bounce_put(job->t, b);
        return status;
    }
    if (wr) {
        xs = host->peer_xfer(host->ctx, seg, OTE_OP_READ, buf, job->m.local, job->m.length,
                             false);
        status = xs != OTE_OK ? xs
                              : host->file_io(job->file, true, job->m.offset, job->m.length,
                                              buf, NULL, &job->done);
    } else {
        status = host->file_io(job->file, false, job->m.offset, job->m.length, NULL, buf,
                               &job->done);
        if (job->done > 0)
            xs = host->peer_xfer(host->ctx, seg, OTE_OP_WRITE, buf, job->m.local, job->done,
                                 false);
        if (xs != OTE_OK) {
            status    = xs;
            job->done = 0;
        }
    }
    /* A segment whose transfer failed is closed by its last user. */
    host->peer_seg_put(host->ctx, seg, slot, xs);
    bounce_put(job->t, b);
    return status;
}

static void file_io_run(ote_proto_job_t *pj)
{
    file_io_job_t *job         = (file_io_job_t *)pj;
    const ote_ctl_host_t *host = job->base.host;
    bool wr                    = job->m.op == OTE_CTL_FILE_IO_WRITE;

    /*
     * Queued (or this process stopped) for over a transfer timeout: the
     * initiator may have given up and used its memory, or its file range,
     * again. No I/O then: its wait (core/segment/segment_export.c) counts
     * on the I/O starting within that time.
     */
    if (ote_time_ns() - job->arrived_ns > (uint64_t)host->xfer_timeout_ms * 1000000ull) {
        job->status = OTE_ERR_TIMEOUT;
        job->done   = 0;
        ote_ctl_jobs_end(&job->base);
        return;
    }
    if (job->m.rails)
        job->status = file_io_rails(job);
    else if (!wr && (job->buf = malloc(job->m.length)) == NULL)
        job->status = OTE_ERR_NO_MEMORY;
    else
        job->status = host->file_io(job->file, wr, job->m.offset, job->m.length, job->m.data,
                                    job->buf, &job->done);
    /* The answer counts the bytes a READ delivered. */
    if (wr)
        job->done = 0;
    ote_ctl_jobs_end(&job->base);
}

static ote_status_t file_io_reply(const ote_ctl_host_t *host, ote_ctl_conn_t *c, bool rails,
                                  ote_status_t st, const uint8_t *data, size_t len)
{
    ote_buf_t out = {0};
    ote_status_t status;

    /* By rails the count alone; else the header, the bytes following straight from data. */
    if (rails) {
        status = ote_ctl_file_io_rails_ack_encode(st, (uint32_t)len, &out);
        data   = NULL;
        len    = 0;
    } else {
        status = ote_ctl_file_io_ack_encode(st, NULL, 0, &out);
        if (status == OTE_OK && len > 0)
            ote_put_u32(out.data + 4, (uint32_t)len);
    }
    if (status == OTE_OK)
        status = host->reply(host->ctx, c, OTE_CTL_FILE_IO_ACK, out.data, out.len, data, len);
    free(out.data);
    return status;
}

static ote_status_t file_io_handle(const ote_ctl_host_t *host, void *state, ote_ctl_req_t *req)
{
    file_io_target_t *t = state;
    file_io_job_t *job  = calloc(1, sizeof(*job));
    ote_status_t status, st;

    status = job != NULL ? ote_ctl_file_io_decode(req->payload, req->length, &job->m)
                         : OTE_ERR_NO_MEMORY;
    if (status != OTE_OK) {
        free(job);
        return status;
    }
    job->t          = t;
    job->arrived_ns = ote_time_ns();
    if (job->m.target != host->instance_id)
        st = OTE_ERR_NOT_FOUND;
    else
        st = host->file_acquire(host->ctx, job->m.file_id, &job->file);
    if (st == OTE_OK)
        st = host->file_check(job->file, job->m.op == OTE_CTL_FILE_IO_WRITE, job->m.offset,
                              job->m.length);
    if (st == OTE_OK && host->conn_peer_closed(host->ctx, req->conn)) {
        /*
         * The initiator gave up before we read its request (this process was
         * stopped, or the listener behind): it may use its memory or its
         * file range again. No I/O, and the connection goes.
         */
        ote_debug("control peer %s: file %s %#llx+%u: the initiator closed the connection "
                  "first; dropped", req->peer, job->m.op == OTE_CTL_FILE_IO_WRITE ? "write" : "read",
                  (unsigned long long)job->m.offset, job->m.length);
        file_io_job_free(host, job);
        return OTE_ERR_REMOTE_DISCONNECT;
    }
    if (st == OTE_OK) {
        /* The request's bytes go with the job: the listener does not free them. */
        job->payload = req->payload;
        req->payload = NULL;
        st = ote_ctl_jobs_start(&t->jobs, host, req, &job->base, file_io_run);
        if (st == OTE_OK)
            return OTE_OK;
        req->payload = job->payload;
        job->payload = NULL;
    }
    ote_debug("control peer %s: file %s %#llx+%u of %016llx%s refused: %s", req->peer,
              job->m.op == OTE_CTL_FILE_IO_WRITE ? "write" : "read",
              (unsigned long long)job->m.offset, job->m.length,
              (unsigned long long)job->m.file_id, job->m.rails ? " by rails" : "",
              ote_status_string(st));
    status = file_io_reply(host, req->conn, job->m.rails, st, NULL, 0);
    file_io_job_free(host, job);
    return status;
}

static ote_status_t file_io_answer(const ote_ctl_host_t *host, ote_ctl_conn_t *c,
                                   ote_ctl_job_t *base)
{
    file_io_job_t *job = (file_io_job_t *)base;

    return file_io_reply(host, c, job->m.rails, job->status, job->buf, job->done);
}

static void file_io_release(ote_ctl_job_t *base)
{
    file_io_job_free(base->host, (file_io_job_t *)base);
}

static ote_status_t file_io_create(const ote_ctl_host_t *host, void **state_p)
{
    file_io_target_t *t = calloc(1, sizeof(*t));

    (void)host;
    if (t == NULL)
        return OTE_ERR_NO_MEMORY;
    if (ote_ctl_jobs_init(&t->jobs, "ote-fileio", FILE_IO_THREADS, FILE_IO_MAX, file_io_answer,
                          file_io_release) != OTE_OK) {
        free(t);
        return OTE_ERR_NO_MEMORY;
    }
    pthread_mutex_init(&t->lock, NULL);
    *state_p = t;
    return OTE_OK;
}

static void file_io_stop(const ote_ctl_host_t *host, void *state)
{
    file_io_target_t *t = state;

    /* Every accepted FILE_IO runs to its end (one pread or pwrite). */
    ote_ctl_jobs_stop(host, &t->jobs);
    pthread_mutex_lock(&t->lock);
    for (int i = 0; i < FILE_IO_THREADS; i++) {
        file_bounce_t *b = &t->bounce[i];

        if (b->addr != NULL) {
            pthread_mutex_unlock(&t->lock);
            host->mem_free(host->ctx, b->mem);
            pthread_mutex_lock(&t->lock);
        }
        memset(b, 0, sizeof(*b));
    }
    pthread_mutex_unlock(&t->lock);
}

static void file_io_destroy(const ote_ctl_host_t *host, void *state)
{
    file_io_target_t *t = state;

    (void)host;
    ote_ctl_jobs_destroy(&t->jobs);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

OTE_CTL_ONE_REQUEST_SERVICE(file_io, OTE_CTL_FILE_IO, OTE_CTL_FILE_IO_MAX_LEN,
                            OTE_CTL_FILE_IO_ACK, file_io_handle, .create = file_io_create,
                            .answer = ote_ctl_jobs_answer_all, .stop = file_io_stop,
                            .destroy = file_io_destroy);
