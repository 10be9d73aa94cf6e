/*
 * A peer's exported file as a segment, initiator side: a remote file rail
 * whose ep sends each slice as a FILE_IO control request to the peer's
 * listener (WRITE: the bytes in the request; READ: the bytes in the
 * answer), on a thread of the engine's protocol pool (jobs.h), so that the
 * blocking round trip never holds a worker. The target checks the range
 * against the exported size and the export's access, then does the I/O
 * on its file (core/ctl_file.c). Slices are at most
 * OTE_CTL_FILE_IO_MAX_BYTES: the rail's max_msg cuts requests into them.
 */
#ifndef OTE_PROTO_FILE_REMOTE_H
#define OTE_PROTO_FILE_REMOTE_H

#include "file_io_msg.h"
#include "jobs.h"
#include "proto.h"

/* The remote file rail's transport name (ote_segment_rails, logs). */
#define OTE_FILE_REMOTE_TL_NAME "file_remote"

typedef struct {
    /* Send FILE_IO (req, len) to the peer and wait for its FILE_IO_ACK. */
    ote_status_t (*ctl)(void *arg, const void *req, size_t len, uint8_t **resp_p,
                        size_t *resp_len_p);
    void             *ctl_arg;
    pthread_mutex_t  *worker_lock; /* held around the slice's completion */
    ote_proto_jobs_t *jobs;        /* the engine's pool the requests wait on */
    uint64_t          initiator, target; /* engine instances */
    uint64_t          file_id;     /* the export entry in the peer's descriptor */
    size_t            max_bytes;   /* bytes per request, 1..OTE_CTL_FILE_IO_MAX_BYTES */
} ote_file_remote_hooks_t;

/* Fill rail as a remote file rail of worker (host memory on this side). */
ote_status_t ote_proto_file_remote_rail_init(ote_rail_t *rail, size_t worker,
                                             const ote_file_remote_hooks_t *hooks);

#endif
