/*
 * Notifications: the sender thread that follows batches (one lane per
 * receiver instance, notify_send.c) and the queue of received ones
 * (notify_recv.c).
 */
#ifndef OTE_CORE_NOTIFY_H
#define OTE_CORE_NOTIFY_H

#include "xfer_def.h"
#include "core/wire/ctl_msg.h"
#include "core/engine_facts.h"

/* notify_send.c: sender thread for notifications after batches */
ote_status_t ote_notifier_start(ote_engine_h engine, ote_notifier_t **n_p);
/* Sends what is queued (a group whose segment was closed before its turn ends CANCELED), then stops. */
void         ote_notifier_stop(ote_notifier_t *n);
/* Queue group, whose tasks all ended, to be sent; it ends through group->end. */
void         ote_notifier_queue(ote_notifier_t *n, ote_notify_group_t *group);
/* notify_recv.c: the receiver's memory of its senders' sequence numbers */
ote_status_t ote_notif_senders_create(struct ote_notif_senders **s_p);
void         ote_notif_senders_destroy(struct ote_notif_senders *s);

/* Queue a received notification; BUSY when the backlog is full. */
ote_status_t ote_engine_notif_push(ote_engine_h engine, const ote_ctl_notify_t *n);
/*
 * Queue the notifications of a NOTIFY_BATCH frame in order: *queued_p is
 * how many of the first ones are queued (now, or earlier: a retry);
 * OK when all are, else why the next one is not (BUSY, PEER_RESTARTED, NO_MEMORY).
 */
ote_status_t ote_engine_notif_push_batch(ote_engine_h engine, const ote_ctl_notify_batch_t *m,
                                         size_t *queued_p);

#endif
