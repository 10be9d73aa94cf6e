/*
 * Notifications, the receiver's side: the backlog of received
 * notifications and each sender's last sequence number, by the sender's
 * key (the sender's side is notify_send.c).
 *
 * A number at or below the last one queued from that sender is a retry and
 * counts as queued without being queued again; one addressed to another
 * instance is refused PEER_RESTARTED; a full backlog refuses BUSY and
 * queues nothing more of the frame.
 */
#include "base/dlist.h"
#include "base/log.h"
#include "base/util.h"
#include "core/wire/ctl_msg.h"
#include "core/engine_facts.h"
#include "notify.h"
#include "core/worker/worker_wait.h"

#include <stdlib.h>
#include <string.h>

/* Senders whose last sequence number a receiver remembers. */
#define NOTIF_SENDERS_MAX     4096
#define NOTIF_SENDERS_BUCKETS 1024

typedef struct notif_sender {
    uint64_t             sender, seq;
    struct notif_sender *hnext;              /* bucket chain */
    struct notif_sender *newer, *older;      /* by last message */
} notif_sender_t;

struct ote_notif_senders {
    notif_sender_t *bucket[NOTIF_SENDERS_BUCKETS];
    notif_sender_t *newest, *oldest;
    size_t          count;
};

/* ---- receiver -------------------------------------------------------------- */

ote_status_t ote_notif_senders_create(struct ote_notif_senders **s_p)
{
    *s_p = calloc(1, sizeof(**s_p));
    return *s_p != NULL ? OTE_OK : OTE_ERR_NO_MEMORY;
}

void ote_notif_senders_destroy(struct ote_notif_senders *s)
{
    if (s == NULL)
        return;
    while (s->newest != NULL) {
        notif_sender_t *x = s->newest;

        s->newest = x->older;
        free(x);
    }
    free(s);
}

static size_t sender_bucket(uint64_t sender)
{
    return (size_t)((sender * 0x9e3779b97f4a7c15ull) >> 54) % NOTIF_SENDERS_BUCKETS;
}

static notif_sender_t *sender_find(struct ote_notif_senders *s, uint64_t sender)
{
    notif_sender_t *x = s->bucket[sender_bucket(sender)];

    while (x != NULL && x->sender != sender)
        x = x->hnext;
    return x;
}

static void sender_unlink_age(struct ote_notif_senders *s, notif_sender_t *x)
{
    OTE_DLIST2_REMOVE(s->newest, s->oldest, x, newer, older);
}

static void sender_make_newest(struct ote_notif_senders *s, notif_sender_t *x)
{
    OTE_DLIST2_PUSH_FRONT(s->newest, s->oldest, x, newer, older);
}

/* Forget the sender heard from longest ago. */
static void sender_evict_oldest(struct ote_notif_senders *s)
{
    notif_sender_t *x = s->oldest, **pp;

    sender_unlink_age(s, x);
    for (pp = &s->bucket[sender_bucket(x->sender)]; *pp != x; pp = &(*pp)->hnext)
        ;
    *pp = x->hnext;
    s->count--;
    free(x);
}

/* Remember seq as the last queued from sender. */
static ote_status_t sender_record(struct ote_notif_senders *s, notif_sender_t *x, uint64_t sender,
                                  uint64_t seq)
{
    if (x == NULL) {
        size_t b;

        if (s->count == NOTIF_SENDERS_MAX)
            sender_evict_oldest(s);
        x = calloc(1, sizeof(*x));
        if (x == NULL)
            return OTE_ERR_NO_MEMORY;
        b            = sender_bucket(sender);
        x->sender    = sender;
        x->hnext     = s->bucket[b];
        s->bucket[b] = x;
        s->count++;
    } else {
        sender_unlink_age(s, x);
    }
    x->seq = seq;
    sender_make_newest(s, x);
    return OTE_OK;
}

/*
 * Under notif_lock: queue one notification numbered seq from sender, or
 * count it queued when it was (a retry); BUSY when the backlog is full.
 */
static ote_status_t notif_queue(ote_engine_h e, uint64_t sender, uint64_t seq, const char *from,
                                const uint8_t *data, size_t length)
{
    notif_sender_t *known = sender_find(ote_xfer_state(e)->senders, sender);
    ote_notif_t *slot;
    ote_status_t status;

    if (known != NULL && seq <= known->seq)
        return OTE_OK; /* a retry of a message already queued */
    if (ote_xfer_state(e)->notif_count >= (size_t)ote_engine_facts(e)->config.max_notif_backlog)
        return OTE_ERR_BUSY;
    if (ote_xfer_state(e)->notif_count == ote_xfer_state(e)->notif_cap) {
        status = ote_ring_grow((void **)&ote_xfer_state(e)->notifs, &ote_xfer_state(e)->notif_cap,
                               &ote_xfer_state(e)->notif_head, ote_xfer_state(e)->notif_count,
                               sizeof(*ote_xfer_state(e)->notifs), 64);
        if (status != OTE_OK)
            return status;
    }
    status = sender_record(ote_xfer_state(e)->senders, known, sender, seq);
    if (status != OTE_OK)
        return status;
    slot = &ote_xfer_state(e)
                ->notifs[(ote_xfer_state(e)->notif_head + ote_xfer_state(e)->notif_count) %
                         ote_xfer_state(e)->notif_cap];
    snprintf(slot->from, sizeof(slot->from), "%s", from);
    slot->length = length;
    memcpy(slot->data, data, length);
    ote_xfer_state(e)->notif_count++;
    ote_obs_notify_received(ote_engine_facts(e)->obs);
    return OTE_OK;
}

static bool notif_for_us(ote_engine_h e, const char *from, uint64_t target)
{
    if (target == ote_engine_facts(e)->instance_id)
        return true;
    ote_debug("notification from %s for instance %016llx refused: this is %016llx", from,
              (unsigned long long)target, (unsigned long long)ote_engine_facts(e)->instance_id);
    return false;
}

ote_status_t ote_engine_notif_push(ote_engine_h e, const ote_ctl_notify_t *n)
{
    ote_status_t status;
    size_t before;
    bool added;

    if (!notif_for_us(e, n->from, n->target_instance))
        return OTE_ERR_PEER_RESTARTED;
    pthread_mutex_lock(&ote_xfer_state(e)->notif_lock);
    before = ote_xfer_state(e)->notif_count;
    status = notif_queue(e, n->sender_key, n->seq, n->from, n->data, n->length);
    added  = ote_xfer_state(e)->notif_count != before;
    pthread_mutex_unlock(&ote_xfer_state(e)->notif_lock);
    if (added)
        ote_engine_signal_event(e);
    return status;
}

ote_status_t ote_engine_notif_push_batch(ote_engine_h e, const ote_ctl_notify_batch_t *m,
                                         size_t *queued_p)
{
    ote_status_t status = OTE_OK;
    size_t i, added = 0;

    *queued_p = 0;
    if (!notif_for_us(e, m->from, m->target_instance))
        return OTE_ERR_PEER_RESTARTED;
    pthread_mutex_lock(&ote_xfer_state(e)->notif_lock);
    for (i = 0; i < m->count && status == OTE_OK; i++) {
        size_t before = ote_xfer_state(e)->notif_count;

        status = notif_queue(e, m->sender_key, m->items[i].seq, m->from, m->items[i].data,
                             m->items[i].length);
        added += ote_xfer_state(e)->notif_count - before;
    }
    pthread_mutex_unlock(&ote_xfer_state(e)->notif_lock);
    *queued_p = status == OTE_OK ? i : i - 1;
    if (added > 0)
        ote_engine_signal_event(e);
    return status;
}

ote_status_t ote_notify_recv(ote_engine_h e, ote_notif_t *notifs, size_t max, size_t *count_p)
{
    size_t n = 0;

    if (e == NULL || count_p == NULL || (max && notifs == NULL))
        return OTE_ERR_INVALID_PARAM;
    pthread_mutex_lock(&ote_xfer_state(e)->notif_lock);
    while (n < max && ote_xfer_state(e)->notif_count > 0) {
        notifs[n++] = ote_xfer_state(e)->notifs[ote_xfer_state(e)->notif_head];
        ote_xfer_state(e)->notif_head =
            (ote_xfer_state(e)->notif_head + 1) % ote_xfer_state(e)->notif_cap;
        ote_xfer_state(e)->notif_count--;
    }
    pthread_mutex_unlock(&ote_xfer_state(e)->notif_lock);
    *count_p = n;
    return OTE_OK;
}
