/*
 * src/core/worker/: the workers, threads (or callers) that progress the
 * transports.
 *
 * Owns: its state in the engine (ote_worker_set_t) and struct ote_worker,
 * the types in worker_def.h; each worker's ifaces, queue and progress
 * (worker.c), its CPU binding (worker_bind.c), the
 * waits of callers that progress the workers themselves and the engine's
 * event fd (worker_wait.c, declared in worker_wait.h).
 *
 * May call: the engine's facts (core/engine_facts.h), proto and below; of the rooms above it
 * only a slice's end, reported to its task (worker.c -> xfer/batch.h: the
 * submit <-> completion circle).
 */
#ifndef OTE_CORE_WORKER_H
#define OTE_CORE_WORKER_H

#include "worker_def.h"

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
