/*
 * The objects of src/core/worker/ (worker.h says what the room owns and
 * may call): its state in the engine and a worker. Types only, so that
 * the files that read a worker's fields (its lock, its ifaces, its
 * staging context) depend on none of worker.c's functions, which report
 * slices' ends up to xfer/ (the submit <-> completion circle).
 */
#ifndef OTE_CORE_WORKER_DEF_H
#define OTE_CORE_WORKER_DEF_H

#include "core/engine_facts.h"

#include <pthread.h>

/*
 * What worker/ owns of the engine besides the workers themselves (the
 * engine embeds it): the waits of callers that progress the workers.
 */
struct ote_worker_set {
    int              event_fd;      /* ote_engine_event_fd, -1 until created */
    atomic_bool      event_fd_used;
    int              poll_epfd;     /* every worker's epoll fd: waits without worker threads */
    _Atomic uint64_t wait_ns;       /* recent time ote_batch_wait() took (its polling budget) */
};

static inline ote_worker_set_t *ote_worker_set(ote_engine_h e)
{
    return ote_engine_facts(e)->wset;
}

/* Protocol progress registered on a worker (ote_worker_progress_register). */
#define OTE_WORKER_MAX_PROGRESS 8

typedef struct {
    _Atomic(ote_proto_progress_cb_t) progress; /* NULL: free slot */
    ote_proto_pending_cb_t           pending;
    void                            *arg;
} ote_worker_progress_t;

struct ote_worker {
    ote_engine_h     engine;
    size_t           index;
    pthread_t        thread;
    bool             started;
    pthread_mutex_t  lock;        /* held while progressing; ep setup takes it */
    int              epfd;
    int              wake_fd;
    ote_tl_iface_t  *ifaces[OTE_MAX_IFACES];
    /* Grows while the engine runs (a device joins): read the count, then the entries. */
    _Atomic size_t   num_ifaces;
    pthread_mutex_t  qlock;
    ote_slice_t     *qhead, *qtail;
    atomic_bool      queued;      /* qhead != NULL: written under qlock, read without */
    atomic_bool      sleeping;
    atomic_bool      idle_sleep;  /* asleep with no timer: nothing was in flight */
    _Atomic uint64_t active_ns;   /* last time progress handled events */
    atomic_bool      stop;
    /*
     * Threads in ote_batch_wait() that progress this worker themselves. While
     * there are some, the worker thread leaves the events that wake it to
     * them (it counts each time in missed), so that an answer wakes one
     * thread, not two.
     */
    atomic_int       callers;
    _Atomic uint64_t missed;
    /*
     * The worker thread waits on its wake-up fd alone while callers
     * progress it (worker_park): a caller that stops polling before its
     * task ended wakes it; one whose task ended does not, and the thread
     * sees it gone within the park interval.
     */
    atomic_bool      parked;
    atomic_bool      handoff;     /* a caller stopped polling before its task ended */
    /*
     * Threads in ote_worker_lock_out(): a worker thread that polls lets go
     * of the lock for them after its round, where a plain unlock and lock
     * again would keep it (a thread woken from the mutex finds it taken).
     */
    atomic_uint      lock_wanted;
    uint64_t         next_timeout;  /* next check of OTE_XFER_TIMEOUT_MS (under lock) */
    uint64_t         round_ns;      /* when the last round began (under lock) */
    uint64_t         event_gap_ns;  /* recent interval between events (worker thread) */
    ote_worker_progress_t progress[OTE_WORKER_MAX_PROGRESS];
    pthread_mutex_t  progress_lock; /* registrations */
    ote_stage_worker_t *stage;      /* staging context (proto/stage.h), or NULL */
};

/*
 * Take w's lock from a thread that is not w's worker thread and runs no
 * round of w (ep setup and teardown): a worker thread that polls without
 * pause (device copies under way) lets go of it after its round.
 */
static inline void ote_worker_lock_out(ote_worker_t *w)
{
    atomic_fetch_add(&w->lock_wanted, 1);
    pthread_mutex_lock(&w->lock);
    atomic_fetch_sub(&w->lock_wanted, 1);
}

#endif
