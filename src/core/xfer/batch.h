/*
 * src/core/xfer/: transfers as the user submits them.
 *
 * Owns: its state in the engine (ote_xfer_state_t) and its objects, the
 * types in xfer_def.h; batches and their tasks (batch.c: submit, wait,
 * cancel, a task's slices and their ends; batch_telemetry.c), the checks
 * before a submit talks to the peer (batch_check.c, batch_check.h),
 * admission (admission.c, admission.h: bytes and tasks in flight) and
 * notifications: the sender's lanes and frames (notify_send.c) and the
 * receiver's backlog (notify_recv.c), declared in notify.h; the notifier
 * ends a group through group->end, never calling batch.c.
 *
 * May call: segment/ (a request's segment, its descriptor, its spray),
 * worker/ (waiting on the workers, worker_wait.h), obs/, meta/, wire/,
 * the engine's facts (core/engine_facts.h); proto and below. Called by the engine's files, ctl/ and, for a slice's
 * end only (ote_task_slice_done/_end: the submit <-> completion circle),
 * worker/worker.c and segment/spray.c.
 */
#ifndef OTE_CORE_BATCH_H
#define OTE_CORE_BATCH_H

#include "xfer_def.h"

/*
 * batch.c: a slice ended (worker thread, or a submitter posting directly):
 * a failure of its rail sends it to another rail of the same peer instance
 * (OTE_RETRY_COUNT), else it counts for its task.
 */
void ote_task_slice_done(ote_slice_t *slice, ote_status_t status);
/* batch.c: a slice ends for its task as it is, never posted again. */
void ote_task_slice_end(ote_slice_t *slice, ote_status_t status);

/* batch.c: a PUTBACK's WRITE (ote_peer_xfer): the initiator's registration alone checked. */
ote_status_t ote_batch_submit_putback(ote_batch_h b, const ote_xfer_req_t *req,
                                      size_t *first_task_p);
/* batch.c: a call's notification ended: OK (the peer queued it) or why not. */
void ote_batch_notify_end(ote_notify_group_t *group, ote_status_t status);
/* batch.c: release the batches the user still holds (engine destroy). */
void ote_batch_release_all(ote_engine_h engine);

#endif
