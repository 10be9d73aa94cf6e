/*
 * The waits of callers that progress the workers themselves, and the
 * engine's event fd (worker_wait.c): what xfer/ calls to wait for its
 * tasks and to wake the user.
 */
#ifndef OTE_CORE_WORKER_WAIT_H
#define OTE_CORE_WORKER_WAIT_H

#include "worker.h"

/* Progress w from the calling thread if its worker is idle; false if busy. */
bool         ote_worker_try_progress(ote_worker_t *w);
/*
 * Progress the engine's workers from the calling thread until *pending is
 * 0 (true) or deadline_ns (CLOCK_MONOTONIC ns, 0: none) passes or, with
 * worker threads, the polling budget runs out (false: sleep, the worker
 * threads progress). Without worker threads it sleeps on the workers'
 * event fds between rounds instead of giving up.
 */
bool         ote_engine_poll_wait(ote_engine_h engine, atomic_long *pending,
                                  uint64_t deadline_ns);
/* A wait took ns: the budget of the next ones follows it. */
void         ote_engine_wait_note(ote_engine_h engine, uint64_t ns);
/* Wake the user waiting on the engine's event fd (ote_engine_event_fd), if one was asked for. */
void         ote_engine_signal_event(ote_engine_h engine);

#endif
