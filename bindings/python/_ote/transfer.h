/*
 * orbitte.Transfer's object, shared by the two files of the type:
 * transfer_build.c makes it (Engine.transfer: the requests gathered from
 * columns and indices, merged, checked), transfer.c posts and polls it and
 * reports its state and figures.
 */
#ifndef ORBITTE_OTE_TRANSFER_H
#define ORBITTE_OTE_TRANSFER_H

#include "module.h"

#pragma GCC visibility push(hidden)

typedef struct {
    PyObject_HEAD
    EngineObject          *engine;
    ote_xfer_req_t        *reqs;
    size_t                 count;
    size_t                 merged;     /* requests merged into their predecessor */
    uint64_t               bytes;
    ote_segment_h          seg;        /* the segment reqs name (NULL: none yet) */
    ote_batch_h            batch;      /* of the latest post; NULL before the first */
    size_t                 cap;        /* its capacity */
    size_t                 next;       /* its tasks used so far */
    uint64_t               posts;      /* posts submitted, all batches */
    size_t                 first;      /* the latest post's first task */
    size_t                 ended;      /* its tasks first..first+ended known ended */
    int                    has_notify;
    int                    busy;       /* calls using the batch with the GIL released */
    int                    state;      /* -1 never posted (or the post failed), else ote_task_state_t */
    ote_status_t           error;      /* FAILED: the first failed task's error, or the notification's */
    ote_status_t           notify_error;
    ote_batch_telemetry_t  base;       /* the batch's figures before the latest post */
    uint64_t               batch_t0;   /* monotonic ns before the batch's first submit */
    uint64_t               post_t0;    /* monotonic ns before the latest post */
    uint64_t               xfer_ns;    /* the latest post, once it ended */
} TransferObject;


#pragma GCC visibility pop

#endif
