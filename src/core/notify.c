/*
 * Notifications: small messages to a peer over the control plane.
 *
 * Delivery contract (ote.h): a notification whose send returned OK, or
 * whose batch notification status is OK, was queued exactly once by the
 * instance it was addressed to, in send order per sender and receiver.
 *
 * Sender: every notification carries the receiver's instance and a number
 * from one counter per engine. Notifications to one receiver instance go
 * one at a time through that instance's lane, whatever segment handle or
 * thread sends them, so the numbers one receiver sees from this engine only
 * grow. A send retried on a fresh connection keeps its number.
 *
 * Receiver: a number at or below the last one queued from that sender is a
 * retry and is acknowledged without being queued again; one addressed to
 * another instance is refused PEER_RESTARTED; a full backlog refuses BUSY
 * and queues nothing, and the sender sends again for OTE_NOTIFY_TIMEOUT_MS.
 *
 * Notifications that follow a batch are sent by a dedicated thread once
 * every task of their call completed, so the data is in the peer's memory
 * before the message arrives.
 */
#include "ctl_msg.h"
#include "engine.h"
#include "base/dlist.h"
#include "base/log.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Senders whose last sequence number a receiver remembers. */
#define NOTIF_SENDERS_MAX     4096
#define NOTIF_SENDERS_BUCKETS 1024

struct ote_notify_lane {
    uint64_t                instance;
    pthread_mutex_t         lock; /* held over one send: its number and its exchange */
    long                    refs; /* under engine lane_lock */
    struct ote_notify_lane *next;
};

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

struct ote_notifier {
    ote_engine_h        engine;
    pthread_t           thread;
    pthread_mutex_t     lock;
    pthread_cond_t      cond;
    bool                stop;
    bool                started;
    /* queue of groups whose tasks all completed */
    ote_notify_group_t **q;
    size_t              head, count, cap;
};

/* ---- sender ---------------------------------------------------------------- */

static struct ote_notify_lane *lane_get(ote_engine_h e, uint64_t instance)
{
    struct ote_notify_lane *l;

    pthread_mutex_lock(&e->lane_lock);
    for (l = e->lanes; l != NULL && l->instance != instance; l = l->next)
        ;
    if (l == NULL) {
        l = calloc(1, sizeof(*l));
        if (l != NULL) {
            l->instance = instance;
            pthread_mutex_init(&l->lock, NULL);
            l->next  = e->lanes;
            e->lanes = l;
        }
    }
    if (l != NULL)
        l->refs++;
    pthread_mutex_unlock(&e->lane_lock);
    return l;
}

static void lane_put(ote_engine_h e, struct ote_notify_lane *l)
{
    struct ote_notify_lane **pp;

    pthread_mutex_lock(&e->lane_lock);
    if (--l->refs > 0) {
        pthread_mutex_unlock(&e->lane_lock);
        return;
    }
    for (pp = &e->lanes; *pp != l; pp = &(*pp)->next)
        ;
    *pp = l->next;
    pthread_mutex_unlock(&e->lane_lock);
    pthread_mutex_destroy(&l->lock);
    free(l);
}

/* One NOTIFY exchange and the receiver's answer. */
static ote_status_t notify_exchange(ote_segment_h seg, const ote_buf_t *out)
{
    uint8_t *resp = NULL;
    size_t resp_len;
    ote_status_t status, remote;

    status = ote_segment_ctl_request(seg, OTE_CTL_NOTIFY, out->data, out->len,
                                     OTE_CTL_NOTIFY_ACK, &resp, &resp_len);
    if (status == OTE_OK) {
        status = ote_ctl_status_decode(resp, resp_len, &remote);
        if (status == OTE_OK)
            status = ote_segment_ctl_refused(seg, remote);
    }
    free(resp);
    return status;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/*
 * Send one notification to the instance seg is bound to. Waits for room in
 * a full backlog up to OTE_NOTIFY_TIMEOUT_MS; retries once on a fresh
 * connection after a broken one (the same number: delivered once).
 */
static ote_status_t notify_send(ote_engine_h e, ote_segment_h seg, const void *msg, size_t len)
{
    ote_ctl_notify_t n = {.sender_instance = e->instance_id, .length = len, .data = msg};
    uint64_t deadline  = ote_time_ns() + (uint64_t)e->config.notify_timeout_ms * 1000000ull;
    struct ote_notify_lane *lane;
    ote_buf_t out = {0};
    ote_status_t status;
    long backoff_ms = 1;

    if (atomic_load(&seg->stale))
        return OTE_ERR_PEER_RESTARTED;
    pthread_mutex_lock(&seg->lock);
    n.target_instance = seg->desc->instance_id;
    pthread_mutex_unlock(&seg->lock);
    snprintf(n.from, sizeof(n.from), "%s", e->name);
    lane = lane_get(e, n.target_instance);
    if (lane == NULL)
        return OTE_ERR_NO_MEMORY;
    pthread_mutex_lock(&lane->lock);
    n.seq  = atomic_fetch_add(&e->notify_seq, 1) + 1;
    status = ote_ctl_notify_encode(&n, &out);
    for (int reconnects = 0; status == OTE_OK;) {
        status = notify_exchange(seg, &out);
        if (status == OTE_ERR_REMOTE_DISCONNECT && reconnects++ == 0) {
            status = OTE_OK; /* once more, on a fresh connection */
            continue;
        }
        if (status != OTE_ERR_BUSY || ote_time_ns() >= deadline)
            break;
        /* The receiver's backlog is full: nothing was queued; wait for room. */
        sleep_ms(backoff_ms);
        if (backoff_ms < 16)
            backoff_ms *= 2;
        status = OTE_OK;
    }
    pthread_mutex_unlock(&lane->lock);
    lane_put(e, lane);
    free(out.data);
    if (status == OTE_ERR_PEER_RESTARTED)
        ote_segment_mark_stale(seg);
    return status;
}

ote_status_t ote_notify_send(ote_engine_h e, ote_segment_h seg, const void *msg, size_t len)
{
    ote_status_t status;

    if (e == NULL || seg == NULL || (msg == NULL && len) || len > OTE_NOTIFY_MAX ||
        seg->engine != e)
        return OTE_ERR_INVALID_PARAM;
    if (atomic_load(&seg->closed))
        return OTE_ERR_NOT_FOUND;
    if (seg->file != NULL) {
        ote_error("segment '%s': a file segment has no peer to notify", seg->name);
        return OTE_ERR_UNSUPPORTED;
    }
    status = notify_send(e, seg, msg ? msg : "", len);
    ote_obs_notify_sent(e->obs, status);
    return status;
}

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

ote_status_t ote_engine_notif_push(ote_engine_h e, const ote_ctl_notify_t *n)
{
    ote_notif_t *slot;
    notif_sender_t *known;
    ote_status_t status = OTE_OK;

    if (n->target_instance != e->instance_id) {
        ote_debug("notification from %s for instance %016llx refused: this is %016llx", n->from,
                  (unsigned long long)n->target_instance, (unsigned long long)e->instance_id);
        return OTE_ERR_PEER_RESTARTED;
    }
    pthread_mutex_lock(&e->notif_lock);
    known = sender_find(e->senders, n->sender_instance);
    if (known != NULL && n->seq <= known->seq) {
        /* A retry of a message already queued. */
        goto out;
    }
    if (e->notif_count >= (size_t)e->config.max_notif_backlog) {
        status = OTE_ERR_BUSY;
        goto out;
    }
    if (e->notif_count == e->notif_cap) {
        status = ote_ring_grow((void **)&e->notifs, &e->notif_cap, &e->notif_head,
                               e->notif_count, sizeof(*e->notifs), 64);
        if (status != OTE_OK)
            goto out;
    }
    status = sender_record(e->senders, known, n->sender_instance, n->seq);
    if (status != OTE_OK)
        goto out;
    slot = &e->notifs[(e->notif_head + e->notif_count) % e->notif_cap];
    snprintf(slot->from, sizeof(slot->from), "%s", n->from);
    slot->length = n->length;
    memcpy(slot->data, n->data, n->length);
    e->notif_count++;
    ote_obs_notify_received(e->obs);
out:
    pthread_mutex_unlock(&e->notif_lock);
    if (status == OTE_OK)
        ote_engine_signal_event(e);
    return status;
}

ote_status_t ote_notify_recv(ote_engine_h e, ote_notif_t *notifs, size_t max, size_t *count_p)
{
    size_t n = 0;

    if (e == NULL || count_p == NULL || (max && notifs == NULL))
        return OTE_ERR_INVALID_PARAM;
    pthread_mutex_lock(&e->notif_lock);
    while (n < max && e->notif_count > 0) {
        notifs[n++]   = e->notifs[e->notif_head];
        e->notif_head = (e->notif_head + 1) % e->notif_cap;
        e->notif_count--;
    }
    pthread_mutex_unlock(&e->notif_lock);
    *count_p = n;
    return OTE_OK;
}

/* ---- notifications after batches ------------------------------------------- */

static void *notifier_main(void *arg)
{
    ote_notifier_t *nt = arg;

    pthread_mutex_lock(&nt->lock);
    for (;;) {
        ote_notify_group_t *g;
        ote_status_t status;

        while (nt->count == 0 && !nt->stop)
            pthread_cond_wait(&nt->cond, &nt->lock);
        if (nt->count == 0)
            break;
        g        = nt->q[nt->head];
        nt->head = (nt->head + 1) % nt->cap;
        nt->count--;
        pthread_mutex_unlock(&nt->lock);
        status = atomic_load(&g->segment->closed)
                     ? OTE_ERR_CANCELED
                     : notify_send(nt->engine, g->segment, g->data, g->length);
        if (status != OTE_OK)
            ote_info("notification to %s after its tasks completed not delivered: %s",
                     g->segment->name, ote_status_string(status));
        ote_batch_notify_end(g, status);
        pthread_mutex_lock(&nt->lock);
    }
    pthread_mutex_unlock(&nt->lock);
    return NULL;
}

ote_status_t ote_notifier_start(ote_engine_h e, ote_notifier_t **n_p)
{
    ote_notifier_t *nt = calloc(1, sizeof(*nt));

    if (nt == NULL)
        return OTE_ERR_NO_MEMORY;
    nt->engine = e;
    pthread_mutex_init(&nt->lock, NULL);
    pthread_cond_init(&nt->cond, NULL);
    if (pthread_create(&nt->thread, NULL, notifier_main, nt) != 0) {
        pthread_mutex_destroy(&nt->lock);
        pthread_cond_destroy(&nt->cond);
        free(nt);
        return OTE_ERR_NO_MEMORY;
    }
    nt->started = true;
    *n_p        = nt;
    return OTE_OK;
}

void ote_notifier_queue(ote_notifier_t *nt, ote_notify_group_t *g)
{
    if (nt == NULL) {
        /* The engine is going: its notifier has stopped. */
        ote_batch_notify_end(g, OTE_ERR_CANCELED);
        return;
    }
    pthread_mutex_lock(&nt->lock);
    if (nt->count == nt->cap &&
        ote_ring_grow((void **)&nt->q, &nt->cap, &nt->head, nt->count, sizeof(*nt->q), 16) !=
            OTE_OK) {
        pthread_mutex_unlock(&nt->lock);
        ote_error("notification to %s not sent: out of memory", g->segment->name);
        ote_batch_notify_end(g, OTE_ERR_NO_MEMORY);
        return;
    }
    nt->q[(nt->head + nt->count) % nt->cap] = g;
    nt->count++;
    pthread_cond_signal(&nt->cond);
    pthread_mutex_unlock(&nt->lock);
}

void ote_notifier_stop(ote_notifier_t *nt)
{
    if (nt == NULL)
        return;
    ote_cond_stop(&nt->lock, &nt->cond, &nt->stop);
    if (nt->started)
        pthread_join(nt->thread, NULL);
    free(nt->q);
    pthread_mutex_destroy(&nt->lock);
    pthread_cond_destroy(&nt->cond);
    free(nt);
}
