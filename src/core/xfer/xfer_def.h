/*
 * The objects of src/core/xfer/ (batch.h says what the room owns and may
 * call): the room's own state in the engine, batches, their tasks, the
 * notification of a submit call. Types only, so that every file of the
 * room, and the completion path below it, reads them without drawing an
 * arrow to batch.c.
 */
#ifndef OTE_CORE_XFER_DEF_H
#define OTE_CORE_XFER_DEF_H

#include "core/engine_facts.h"
#include "core/obs/obs.h"

#include <pthread.h>

/* Released batches of at most this many tasks kept per engine for reuse, and how many. */
#define OTE_BATCH_SPARE_TASKS 64
#define OTE_BATCH_SPARES      8

struct ote_notif_senders;
struct ote_notify_lane;

/*
 * What xfer/ owns of the engine (the engine embeds it; the engine's files
 * create and destroy it): admission, the batches the user holds, and the
 * notifications sent and received.
 */
struct ote_xfer_state {
    /* admission (admission.c): reserved at submit, given back as tasks end */
    atomic_size_t    inflight_bytes;
    atomic_long      inflight_tasks;
    atomic_int       admit_waiters; /* submitters sleeping on admit_cond */
    pthread_mutex_t  admit_lock;
    pthread_cond_t   admit_cond;    /* CLOCK_MONOTONIC */
    /* batches the user holds, released at destroy */
    pthread_mutex_t  batch_lock;
    struct ote_batch *batches;
    /* released small batches kept for the next ote_batch_create (batch_lock) */
    struct ote_batch *spares;
    size_t           num_spares;
    bool             spares_closed; /* the engine goes: batches freed, not kept */
    /* notifications sent (notify_send.c): one sequence counter; one lane per receiver instance */
    ote_notifier_t   *notifier;     /* the thread that sends them after batches */
    _Atomic uint64_t notify_seq;
    uint64_t         notify_key;    /* the sender key of its notifications: random, never published */
    pthread_mutex_t  lane_lock;
    struct ote_notify_lane *lanes;
    /* received notifications (notify_recv.c) */
    pthread_mutex_t  notif_lock;
    ote_notif_t     *notifs;
    size_t           notif_head, notif_count, notif_cap;
    struct ote_notif_senders *senders; /* last sequence per sender (under notif_lock) */
};

static inline ote_xfer_state_t *ote_xfer_state(ote_engine_h e)
{
    return ote_engine_facts(e)->xfer;
}

/*
 * The notification of one ote_batch_submit_notify() call: sent once every
 * task of the call completed. It counts as pending in its batch (and holds
 * a reference to it) until it ended; the batch frees it.
 */
typedef struct ote_notify_group {
    atomic_long              remaining;  /* tasks of the call not yet ended */
    _Atomic int              task_error; /* first error of a task that did not complete */
    _Atomic int              status;     /* INPROGRESS, then OK or why it was not delivered */
    ote_segment_h            segment;
    ote_batch_h              batch;
    /* How it ends, once sent or not (batch.c's ote_batch_notify_end): the notifier calls it. */
    void                   (*end)(struct ote_notify_group *group, ote_status_t status);
    struct ote_notify_group *next;       /* the batch's groups */
    size_t                   length;
    char                     data[];
} ote_notify_group_t;

struct ote_task {
    _Atomic int          state;        /* ote_task_state_t */
    ote_status_t         error;
    atomic_size_t        transferred;
    atomic_long          pending;      /* slices not yet ended */
    atomic_bool          cancel;
    _Atomic int          first_error;  /* ote_status_t of the first failed slice */
    size_t               length;
    size_t               num_slices;
    ote_slice_t         *slices;       /* inline_slice or allocated */
    ote_slice_t          inline_slice;
    ote_region_t        *local_region;
    ote_desc_t          *desc;         /* peer descriptor whose rkeys the slices use */
    ote_proto_route_t    route;        /* the rails its slices may take */
    ote_segment_h        segment;
    ote_batch_h          batch;
    ote_notify_group_t  *notify;
    ote_op_t             op;
    uint64_t             start_ns;     /* its submit call began (obs: latency) */
    _Atomic uint8_t      obs_tl;       /* obs: the transport its last slice ended on */
};

struct ote_batch {
    ote_engine_h     engine;
    size_t           capacity;
    atomic_size_t    used;          /* grows under lock; read without it */
    ote_task_t      *tasks;
    size_t           tasks_cap;     /* tasks the array holds (a spare's may exceed capacity) */
    size_t           tasks_mapped;  /* bytes of tasks' own mapping (ote_mmap_huge), 0: malloc'd */
    atomic_long      pending;       /* tasks not yet ended */
    atomic_long      refs;          /* user + one per pending task */
    pthread_mutex_t  lock;
    pthread_cond_t   cond;
    atomic_int       waiters;       /* threads on cond; raised under lock, read without */
    ote_notify_group_t *groups;     /* under lock; freed with the batch */
    bool             released;      /* the user released it (under engine batch_lock) */
    struct ote_batch *next, *prev;  /* batches the user still holds, or spares (engine batch_lock) */
    ote_obs_batch_t  tel;           /* ote_batch_telemetry (obs/) */
};

#endif
