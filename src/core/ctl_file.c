/*
 * FILE_IO on exported files (fexport.h, proto/file_io_msg.h): the listener
 * checks each request at once (the target instance, the file still
 * exported, the range within the exported size, the access) and answers
 * a refusal itself; an accepted request does its pread or pwrite on a
 * thread of the listener's file pool (CTL_FILE_IO_THREADS), and the answer
 * waits for it (the connection is not read meanwhile).
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

static void file_io_main(ote_proto_job_t *pj)
{
    file_io_job_t *job = (file_io_job_t *)pj;
    ote_ctl_t *ctl     = job->ctl;
    bool wr            = job->m.op == OTE_CTL_FILE_IO_WRITE;
    uint64_t one       = 1;

    if (!wr && (job->buf = malloc(job->m.length)) == NULL)
        job->status = OTE_ERR_NO_MEMORY;
    else
        job->status = ote_fexport_io(job->file, wr, job->m.offset, job->m.length,
                                     job->m.data, job->buf, &job->done);
    if (wr)
        job->done = 0;
    pthread_mutex_lock(&ctl->done_lock);
    job->next      = ctl->file_done;
    ctl->file_done = job;
    pthread_mutex_unlock(&ctl->done_lock);
    (void)!write(ctl->done_fd, &one, sizeof(one));
}

static ote_status_t file_io_reply(ote_ctl_t *ctl, ctl_conn_t *c, ote_status_t st,
                                  const uint8_t *data, size_t len)
{
    ote_buf_t out = {0};
    ote_status_t status;

    /* The header only: the bytes follow straight from data. */
    status = ote_ctl_file_io_ack_encode(st, NULL, 0, &out);
    if (status == OTE_OK && len > 0)
        ote_put_u32(out.data + 4, (uint32_t)len);
    if (status == OTE_OK)
        status = ote_ctl_reply(ctl, c, OTE_CTL_FILE_IO_ACK, out.data, out.len, data, len);
    free(out.data);
    return status;
}

ote_status_t ote_ctl_handle_file_io(ote_ctl_t *ctl, ctl_conn_t *c)
{
    ote_engine_h e      = ctl->engine;
    file_io_job_t *job  = calloc(1, sizeof(*job));
    ote_status_t status, st;

    if (job == NULL)
        return OTE_ERR_NO_MEMORY;
    status = ote_ctl_file_io_decode(c->payload, c->h.length, &job->m);
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
        pthread_mutex_lock(&ctl->done_lock);
        if (ctl->file_jobs >= CTL_FILE_IO_MAX)
            st = OTE_ERR_BUSY;
        else if (ctl->file_pool == NULL)
            st = ote_proto_jobs_create("ote-fileio", CTL_FILE_IO_THREADS, CTL_FILE_IO_MAX,
                                       &ctl->file_pool);
        if (st == OTE_OK)
            ctl->file_jobs++;
        pthread_mutex_unlock(&ctl->done_lock);
    }
    if (st == OTE_OK) {
        /* The request's bytes go with the job: the listener does not free them. */
        job->payload = c->payload;
        c->payload   = NULL;
        job->ctl     = ctl;
        job->conn_id = c->id;
        job->seq     = c->h.seq;
        job->job.run = file_io_main;
        st           = ote_proto_jobs_submit(ctl->file_pool, &job->job);
        if (st == OTE_OK) {
            c->waiting = true;
            ote_ctl_conn_set_events(ctl, c, EPOLLRDHUP);
            return OTE_OK;
        }
        c->payload   = job->payload;
        job->payload = NULL;
        pthread_mutex_lock(&ctl->done_lock);
        ctl->file_jobs--;
        pthread_mutex_unlock(&ctl->done_lock);
    }
    ote_debug("control peer %s: file %s %#llx+%u of %016llx refused: %s", c->peer,
              job->m.op == OTE_CTL_FILE_IO_WRITE ? "write" : "read",
              (unsigned long long)job->m.offset, job->m.length,
              (unsigned long long)job->m.file_id, ote_status_string(st));
    file_io_job_free(ctl, job);
    return file_io_reply(ctl, c, st, NULL, 0);
}

void ote_ctl_file_io_answer(ote_ctl_t *ctl)
{
    file_io_job_t *job, *next;

    pthread_mutex_lock(&ctl->done_lock);
    job            = ctl->file_done;
    ctl->file_done = NULL;
    pthread_mutex_unlock(&ctl->done_lock);
    for (; job != NULL; job = next) {
        ctl_conn_t *c;

        next = job->next;
        for (c = ctl->conns; c != NULL && c->id != job->conn_id; c = c->next)
            ;
        if (c != NULL && c->waiting) {
            c->waiting = false;
            c->h.seq   = job->seq;
            ote_ctl_conn_set_events(ctl, c, EPOLLIN);
            if (file_io_reply(ctl, c, job->status, job->buf, job->done) != OTE_OK)
                ote_ctl_conn_close(ctl, c);
        }
        pthread_mutex_lock(&ctl->done_lock);
        ctl->file_jobs--;
        pthread_mutex_unlock(&ctl->done_lock);
        file_io_job_free(ctl, job);
    }
}

void ote_ctl_file_io_stop(ote_ctl_t *ctl)
{
    /* Every accepted FILE_IO runs to its end (one pread or pwrite). */
    ote_proto_jobs_destroy(ctl->file_pool);
    ctl->file_pool = NULL;
    pthread_mutex_lock(&ctl->done_lock);
    while (ctl->file_done != NULL) {
        file_io_job_t *job = ctl->file_done;

        ctl->file_done = job->next;
        ctl->file_jobs--;
        pthread_mutex_unlock(&ctl->done_lock);
        file_io_job_free(ctl, job);
        pthread_mutex_lock(&ctl->done_lock);
    }
    pthread_mutex_unlock(&ctl->done_lock);
}
