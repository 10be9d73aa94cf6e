/*
 * src/core/worker/: the workers, threads (or callers) that progress the
 * transports.
 *
 * Owns: its state in the engine (ote_worker_set_t), each worker's ifaces,
 * queue and progress (worker.c), its CPU binding (worker_bind.c), the
 * waits of callers that progress the workers themselves and the engine's
 * event fd (worker_wait.c, declared in worker_wait.h).
 *
 * May call: the engine's facts (core/engine_facts.h), proto and below; of the rooms above it
 * only a slice's end, reported to its task (worker.c -> xfer/batch.h: the
 * submit <-> completion circle).
 */
#ifndef OTE_CORE_WORKER_H
#define OTE_CORE_WORKER_H

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
    uint64_t         next_timeout;  /* next check of OTE_XFER_TIMEOUT_MS (under lock) */
    uint64_t         event_gap_ns;  /* recent interval between events (worker thread) */
    ote_worker_progress_t progress[OTE_WORKER_MAX_PROGRESS];
    pthread_mutex_t  progress_lock; /* registrations */
    ote_stage_worker_t *stage;      /* staging context (proto/stage.h), or NULL */
};

/* worker.c */
ote_status_t ote_worker_init(ote_engine_h engine, ote_worker_t *w, size_t index);
ote_status_t ote_worker_start(ote_worker_t *w);
/* worker_bind.c: bind a started worker thread (OTE_WORKER_CPUS, else near its NICs). */
void ote_worker_bind(ote_worker_t *w);
void         ote_worker_stop(ote_worker_t *w);
void         ote_worker_cleanup(ote_worker_t *w);
/*
 * An iface opened while the worker runs (a device that joined): its event fd
 * joins the worker's epoll and the iface its list, under the worker lock.
 */
ote_status_t ote_worker_iface_add(ote_worker_t *w, ote_tl_iface_t *iface);
/* Queue a chain of slices for posting; wakes the worker if it sleeps. */
void         ote_worker_post(ote_worker_t *w, ote_slice_t *head, ote_slice_t *tail);
/* Queue a chain of slices for posting by the worker only (callable from any worker). */
void         ote_worker_queue(ote_worker_t *w, ote_slice_t *head, ote_slice_t *tail);
/*
 * Run progress (and consult pending before sleeping) in every round of w,
 * as UCT's uct_worker_progress_register_safe: callable from any thread,
 * also from a progress callback. BUSY when OTE_WORKER_MAX_PROGRESS are
 * registered.
 */
ote_status_t ote_worker_progress_register(ote_worker_t *w, ote_proto_progress_cb_t progress,
                                          ote_proto_pending_cb_t pending, void *arg,
                                          int *id_p);
/*
 * The callback runs no more after the round in progress; unless the caller
 * holds w's lock (or the worker stopped), one may still be running.
 */
void         ote_worker_progress_unregister(ote_worker_t *w, int id);
/* How often a sleeping worker with tasks in flight wakes to check their timeouts. */
#define OTE_WORKER_TIMEOUT_CHECK_NS (100ull * 1000 * 1000)
/* One round of w (lock held): post what is queued, progress the ifaces, check timeouts when due. */
unsigned     ote_worker_round(ote_worker_t *w);
/* Between polling rounds that found nothing: pause the core, every few rounds yield it. */
void         ote_worker_pause(void);
/* Write w's wake-up fd. */
void         ote_worker_wake(ote_worker_t *w);
/*
 * After progress from a thread other than w's (lock held): post what its
 * rounds queued, and wake the worker thread for what is left.
 */
void         ote_worker_hand_back(ote_worker_t *w);
/*
 * Before sleeping: arm every iface; true when one still has work to
 * progress. *cap_ms_p bounds the sleep when an iface can only be polled.
 */
bool         ote_worker_arm(ote_worker_t *w, int *cap_ms_p);
#endif
