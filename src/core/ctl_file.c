/*
 * FILE_IO on exported files (fexport.h, proto/file_io_msg.h): the listener
 * checks each request at once (the target instance, the file still
 * exported, the range within the exported size, the access) and answers
 * a refusal itself; an accepted request does its pread or pwrite on a
 * thread of the listener's file pool (CTL_FILE_IO_THREADS), and the answer
 * waits for it (the connection is not read meanwhile). By rails the bytes
 * go through a bounce buffer of this engine's and over the segment the
 * listener keeps open to the initiator (ctl_proto.c): a READ WRITEs what
 * it read into the initiator's memory, a WRITE READs it from there first.
 */
#include "ctl_int.h"

#include "base/log.h"
#include "base/wire_util.h"

#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

static void file_io_job_free(ote_ctl_t *ctl, file_io_job_t *job)
{
    if (job->file != NULL)
        ote_fexport_release(&ctl->engine->fexports, job->file);
    free(job->payload);
    free(job->buf);
    free(job);
}

/* A free bounce buffer, made on first use; BUSY if none (more jobs than threads). */
static ote_status_t bounce_get(ote_ctl_t *ctl, int *slot_p, uint8_t **buf_p)
{
    file_bounce_t *b = NULL;
    ote_status_t status = OTE_OK;

    pthread_mutex_lock(&ctl->done_lock);
    for (int i = 0; i < CTL_FILE_IO_THREADS && b == NULL; i++) {
        if (!ctl->bounce[i].busy)
            b = &ctl->bounce[i];
    }
    if (b != NULL)
        b->busy = true;
    pthread_mutex_unlock(&ctl->done_lock);
    if (b == NULL)
        return OTE_ERR_BUSY;
    /* Local use only: peers reach it through no access flag of its own. */
    if (b->addr == NULL)
        status = ote_mem_alloc(ctl->engine, OTE_CTL_FILE_IO_MAX_BYTES, NULL, 0, &b->addr,
                               &b->mem);
    if (status != OTE_OK) {
        b->addr = NULL;
        pthread_mutex_lock(&ctl->done_lock);
        b->busy = false;
        pthread_mutex_unlock(&ctl->done_lock);
        return status;
    }
    *slot_p = (int)(b - ctl->bounce);
    *buf_p  = b->addr;
    return OTE_OK;
}

static void bounce_put(ote_ctl_t *ctl, int slot)
{
    pthread_mutex_lock(&ctl->done_lock);
    ctl->bounce[slot].busy = false;
    pthread_mutex_unlock(&ctl->done_lock);
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
    ote_ctl_t *ctl = job->base.ctl;
    ote_engine_h e = ctl->engine;
    bool wr        = job->m.op == OTE_CTL_FILE_IO_WRITE;
    ote_status_t status, xs = OTE_OK;
    ote_segment_h seg;
    uint8_t *buf;
    int slot, b;

    status = bounce_get(ctl, &b, &buf);
    if (status != OTE_OK)
        return status;
    status = ote_ctl_peer_seg_get(ctl, job->m.name, job->m.initiator, &seg, &slot);
    if (status != OTE_OK) {
        bounce_put(ctl, b);
        return status;
    }
    if (wr) {
        xs = ote_peer_xfer(e, seg, OTE_OP_READ, buf, job->m.local, job->m.length, false);
        status = xs != OTE_OK ? xs
                              : ote_fexport_io(job->file, true, job->m.offset, job->m.length,
                                               buf, NULL, &job->done);
    } else {
        status = ote_fexport_io(job->file, false, job->m.offset, job->m.length, NULL, buf,
                                &job->done);
        if (job->done > 0)
            xs = ote_peer_xfer(e, seg, OTE_OP_WRITE, buf, job->m.local, job->done, false);
        if (xs != OTE_OK) {
            status    = xs;
            job->done = 0;
        }
    }
    /* A segment whose transfer failed is closed by its last user. */
    ote_ctl_peer_seg_put(ctl, seg, slot, xs);
    bounce_put(ctl, b);
    return status;
}

static void file_io_main(ote_proto_job_t *pj)
{
    file_io_job_t *job = (file_io_job_t *)pj;
    ote_ctl_t *ctl     = job->base.ctl;
    bool wr            = job->m.op == OTE_CTL_FILE_IO_WRITE;

    if (job->m.rails)
        job->status = file_io_rails(job);
    else if (!wr && (job->buf = malloc(job->m.length)) == NULL)
        job->status = OTE_ERR_NO_MEMORY;
    else
        job->status = ote_fexport_io(job->file, wr, job->m.offset, job->m.length,
                                     job->m.data, job->buf, &job->done);
    /* The answer counts the bytes a READ delivered. */
    if (wr)
        job->done = 0;
    ote_ctl_job_end(ctl, &ctl->file_done, &job->base);
}

static ote_status_t file_io_reply(ote_ctl_t *ctl, ctl_conn_t *c, bool rails, ote_status_t st,
                                  const uint8_t *data, size_t len)
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
        status = ote_ctl_reply(ctl, c, OTE_CTL_FILE_IO_ACK, out.data, out.len, data, len);
    free(out.data);
    return status;
}

static ote_status_t file_io_handle(ote_ctl_t *ctl, ctl_conn_t *c)
{
    ote_engine_h e      = ctl->engine;
    file_io_job_t *job  = calloc(1, sizeof(*job));
    ote_status_t status, st;

    status = job != NULL ? ote_ctl_file_io_decode(c->payload, c->h.length, &job->m)
                         : OTE_ERR_NO_MEMORY;
    if (status != OTE_OK) {
        free(job);
        return status;
    }
    if (job->m.target != e->instance_id)
        st = OTE_ERR_NOT_FOUND;
    else
        st = ote_fexport_acquire(&e->fexports, job->m.file_id, &job->file);
    if (st == OTE_OK)
        st = ote_fexport_check(job->file, job->m.op == OTE_CTL_FILE_IO_WRITE, job->m.offset,
                               job->m.length);
    if (st == OTE_OK) {
        /* The request's bytes go with the job: the listener does not free them. */
        job->payload = c->payload;
        c->payload   = NULL;
        st = ote_ctl_job_start(ctl, c, &ctl->file_pool, &ctl->file_jobs, "ote-fileio",
                               CTL_FILE_IO_THREADS, CTL_FILE_IO_MAX, &job->base, file_io_main);
        if (st == OTE_OK)
            return OTE_OK;
        c->payload   = job->payload;
        job->payload = NULL;
    }
    ote_debug("control peer %s: file %s %#llx+%u of %016llx%s refused: %s", c->peer,
              job->m.op == OTE_CTL_FILE_IO_WRITE ? "write" : "read",
              (unsigned long long)job->m.offset, job->m.length,
              (unsigned long long)job->m.file_id, job->m.rails ? " by rails" : "",
              ote_status_string(st));
    status = file_io_reply(ctl, c, job->m.rails, st, NULL, 0);
    file_io_job_free(ctl, job);
    return status;
}

static ote_status_t file_io_answer(ote_ctl_t *ctl, ctl_conn_t *c, ctl_job_t *base)
{
    file_io_job_t *job = (file_io_job_t *)base;

    return file_io_reply(ctl, c, job->m.rails, job->status, job->buf, job->done);
}

static void file_io_release(ote_ctl_t *ctl, ctl_job_t *base)
{
    file_io_job_free(ctl, (file_io_job_t *)base);
}

static void file_io_answer_all(ote_ctl_t *ctl)
{
    ote_ctl_job_answer_all(ctl, &ctl->file_done, &ctl->file_jobs, file_io_answer,
                           file_io_release);
}

static void file_io_stop(ote_ctl_t *ctl)
{
    /* Every accepted FILE_IO runs to its end (one pread or pwrite). */
    ote_proto_jobs_destroy(ctl->file_pool);
    ctl->file_pool = NULL;
    ote_ctl_job_drop_all(ctl, &ctl->file_done, &ctl->file_jobs, file_io_release);
    pthread_mutex_lock(&ctl->done_lock);
    for (int i = 0; i < CTL_FILE_IO_THREADS; i++) {
        file_bounce_t *b = &ctl->bounce[i];

        if (b->addr != NULL) {
            pthread_mutex_unlock(&ctl->done_lock);
            ote_mem_free(ctl->engine, b->mem);
            pthread_mutex_lock(&ctl->done_lock);
        }
        memset(b, 0, sizeof(*b));
    }
    pthread_mutex_unlock(&ctl->done_lock);
}

static const ote_ctl_handler_t file_io_handlers[] = {
    {.type = OTE_CTL_FILE_IO, .refuse_type = OTE_CTL_AUTH_DONE, .handle = file_io_handle},
};

const ote_ctl_service_t ote_ctl_file_io_service = {
    .name         = "file_io",
    .handlers     = file_io_handlers,
    .num_handlers = sizeof(file_io_handlers) / sizeof(file_io_handlers[0]),
    .answer       = file_io_answer_all,
    .stop         = file_io_stop,
};
