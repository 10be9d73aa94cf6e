/*
 * Notifications, the sender's side: small messages to a peer over the
 * control plane (the receiver's side is notify_recv.c).
 *
 * Delivery contract (ote.h): a notification whose send returned OK, or
 * whose batch notification status is OK, was queued exactly once by the
 * instance it was addressed to, in send order per sender and receiver.
 *
 * Sender: every notification carries the receiver's instance, this
 * engine's notification key (random, drawn at start and never published,
 * so no other peer can pass for this sender in the receiver's memory of
 * numbers) and a number from one counter per engine, taken when it joins
 * the lane of that receiver instance (one per instance, whatever segment
 * handle or thread sends), so the numbers in a lane only grow in lane
 * order. One thread at
 * a time (the lane's flusher: a sender whose messages wait) packs what
 * waits at the head of the lane, up to OTE_CTL_NOTIFY_BATCH_MAX
 * notifications or OTE_CTL_NOTIFY_BATCH_MAX_LEN bytes, into one
 * NOTIFY_BATCH frame; the answer says how many of its first ones the
 * receiver queued, and those end OK. The rest stay at the head: sent again
 * (the same numbers) while the backlog is full, until their
 * OTE_NOTIFY_TIMEOUT_MS passed (then BUSY, never queued); once more on a
 * fresh connection after a broken one; failed with any other status, and
 * with them every notification behind them in the lane that would go on
 * the same handle (all of the lane on PEER_RESTARTED): a peer that does
 * not answer costs one exchange, not one per frame. While a frame is in
 * flight, notifications sent on other handles to that instance, and those
 * of the batch notifier, join the lane and go in the next frame; a sender
 * on the handle of the frame in flight joins once its exchange ended (the
 * handle's lock is held through it).
 *
 * Notifications that follow a batch are sent by a dedicated thread once
 * every task of their call completed, so the data is in the peer's memory
 * before the message arrives; it takes every group that completed
 * meanwhile into the lanes at once, so they share frames, then hands each
 * lane to a pool of its own (NOTIFIER_THREADS) that flushes the lanes side
 * by side: a peer that does not answer delays no other peer's
 * notifications. A group's OTE_NOTIFY_TIMEOUT_MS starts when its lane's
 * flush starts.
 *
 * Each sender holds a reference on its segment handle until its call
 * returns (a group holds one until it ended), so a handle closed meanwhile
 * stays valid for the frames that go on it.
 */
#include "base/dlist.h"
#include "base/log.h"
#include "base/util.h"
#include "core/wire/ctl_msg.h"
#include "core/engine_facts.h"
#include "notify.h"
#include "xfer_def.h"
#include "core/segment/segment.h"
#include "proto/jobs.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How many a caller waits for on one lane. */
typedef struct {
    size_t pending;
} notify_waiter_t;

/* A notification in its lane, from its number to its end. */
typedef struct notify_item {
    ote_segment_h       seg;      /* the handle it was sent on: its connection */
    const uint8_t      *data;     /* the caller's or the group's, until it ended */
    size_t              length;
    uint64_t            seq;
    uint64_t            deadline; /* BUSY past this; NO_DEADLINE until its lane's turn */
    ote_status_t       *status_p; /* where its end goes */
    ote_status_t        status;   /* a batch's end */
    notify_waiter_t    *waiter;
    ote_notify_group_t *group;    /* a batch's notification: ended after the lane lock */
    struct notify_item *next;
} notify_item_t;

struct ote_notify_lane {
    uint64_t                instance;
    pthread_mutex_t         lock;
    pthread_cond_t          cond;     /* items ended, or the flusher's role free */
    notify_item_t          *head, *tail; /* waiting or in the frame in flight, by number */
    bool                    flushing; /* a thread sends this lane's frames */
    ote_ctl_notify_batch_t  frame;    /* the flusher's */
    long                    refs;     /* under engine lane_lock */
    struct ote_notify_lane *next;
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
    ote_proto_jobs_t   *pool; /* flushes the lanes of a round side by side */
};

/* ---- sender ---------------------------------------------------------------- */

#define NO_DEADLINE UINT64_MAX

static uint64_t notify_timeout_ns(ote_engine_h e)
{
    return (uint64_t)ote_engine_facts(e)->config.notify_timeout_ms * 1000000ull;
}

static struct ote_notify_lane *lane_get(ote_engine_h e, uint64_t instance)
{
    struct ote_notify_lane *l;

    pthread_mutex_lock(&ote_xfer_state(e)->lane_lock);
    for (l = ote_xfer_state(e)->lanes; l != NULL && l->instance != instance; l = l->next)
        ;
    if (l == NULL) {
        l = calloc(1, sizeof(*l));
        if (l != NULL) {
            l->instance = instance;
            pthread_mutex_init(&l->lock, NULL);
            pthread_cond_init(&l->cond, NULL);
            l->next                  = ote_xfer_state(e)->lanes;
            ote_xfer_state(e)->lanes = l;
        }
    }
    if (l != NULL)
        l->refs++;
    pthread_mutex_unlock(&ote_xfer_state(e)->lane_lock);
    return l;
}

static void lane_put(ote_engine_h e, struct ote_notify_lane *l)
{
    struct ote_notify_lane **pp;

    pthread_mutex_lock(&ote_xfer_state(e)->lane_lock);
    if (--l->refs > 0) {
        pthread_mutex_unlock(&ote_xfer_state(e)->lane_lock);
        return;
    }
    for (pp = &ote_xfer_state(e)->lanes; *pp != l; pp = &(*pp)->next)
        ;
    *pp = l->next;
    pthread_mutex_unlock(&ote_xfer_state(e)->lane_lock);
    pthread_mutex_destroy(&l->lock);
    pthread_cond_destroy(&l->cond);
    free(l);
}

/* Under the lane lock: it takes the next number of this engine. */
static void lane_append(ote_engine_h e, struct ote_notify_lane *l, notify_item_t *it)
{
    it->seq = atomic_fetch_add(&ote_xfer_state(e)->notify_seq, 1) + 1;
    OTE_QUEUE_PUSH(l->head, l->tail, it, next);
}

/*
 * Under the lane lock: the head item ended with status. A batch's goes on
 * *ended, to be ended once the lane lock is let go.
 */
static void lane_end_head(struct ote_notify_lane *l, ote_status_t status, notify_item_t **ended)
{
    notify_item_t *it = l->head;

    l->head = it->next;
    if (l->head == NULL)
        l->tail = NULL;
    if (it->status_p != NULL)
        *it->status_p = status;
    it->waiter->pending--;
    if (it->group != NULL) {
        it->next = *ended;
        *ended   = it;
    }
}

static void groups_end(ote_engine_h e, notify_item_t *ended)
{
    (void)e;
    while (ended != NULL) {
        notify_item_t *it = ended;
        ote_status_t st   = *it->status_p;

        ended = it->next;
        if (st != OTE_OK)
            ote_info("notification to %s after its tasks completed not delivered: %s",
                     it->group->segment->name, ote_status_string(st));
        it->group->end(it->group, st);
        free(it);
    }
}

/*
 * A PEER_RESTARTED answer from the lane's instance makes seg stale only
 * while seg is still bound to that instance (a reopen may have moved it on).
 */
static void mark_stale_if_bound(ote_segment_h seg, uint64_t instance)
{
    bool bound;

    pthread_mutex_lock(&seg->lock);
    bound = seg->desc != NULL && seg->desc->instance_id == instance;
    pthread_mutex_unlock(&seg->lock);
    if (bound)
        ote_segment_mark_stale(seg);
}

/* One NOTIFY_BATCH exchange: the receiver's status and how many it queued. */
static ote_status_t notify_exchange(ote_segment_h seg, const ote_buf_t *out, size_t *queued_p)
{
    uint8_t *resp = NULL;
    size_t resp_len;
    ote_status_t status, remote;

    *queued_p = 0;
    status = ote_segment_ctl_request(seg, OTE_CTL_NOTIFY_BATCH, out->data, out->len,
                                     OTE_CTL_NOTIFY_BATCH_ACK, &resp, &resp_len);
    if (status == OTE_OK) {
        status = ote_ctl_notify_batch_ack_decode(resp, resp_len, &remote, queued_p);
        if (status == OTE_OK)
            status = ote_segment_ctl_refused(seg, remote);
        else
            ote_warn("segment '%s': malformed NOTIFY_BATCH_ACK", seg->name);
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
 * The lane's flusher, lane lock held (and let go over each exchange):
 * sends frames from the head of the lane until w's items all ended.
 */
static void lane_flush(ote_engine_h e, struct ote_notify_lane *l, notify_waiter_t *w)
{
    ote_ctl_notify_batch_t *m = &l->frame;
    int reconnects            = 0;
    long backoff_ms           = 1;

    while (w->pending > 0) {
        notify_item_t *it, *ended = NULL;
        ote_segment_h seg = l->head->seg;
        size_t bytes      = OTE_CTL_NOTIFY_BATCH_HDR_LEN, queued = 0, n = 0;
        ote_buf_t out     = {0};
        ote_status_t status;

        /* What waits at the head, sent on one handle's connection. */
        for (it = l->head; it != NULL && n < OTE_CTL_NOTIFY_BATCH_MAX && it->seg == seg;
             it = it->next) {
            if (bytes + OTE_CTL_NOTIFY_ITEM_HDR_LEN + it->length > OTE_CTL_NOTIFY_BATCH_MAX_LEN)
                break;
            bytes += OTE_CTL_NOTIFY_ITEM_HDR_LEN + it->length;
            m->items[n++] = (ote_ctl_notify_item_t){.seq = it->seq, .length = it->length,
                                                    .data = it->data};
        }
        m->count           = n;
        m->sender_key      = ote_xfer_state(e)->notify_key;
        m->target_instance = l->instance;
        snprintf(m->from, sizeof(m->from), "%s", ote_engine_facts(e)->name);
        pthread_mutex_unlock(&l->lock);
        status = ote_ctl_notify_batch_encode(m, &out);
        if (status == OTE_OK)
            status = notify_exchange(seg, &out, &queued);
        free(out.data);
        if (status == OTE_OK && queued != n)
            status = OTE_ERR_PROTOCOL; /* all queued, it said, but not as many */
        if (queued > n) {
            ote_warn("segment '%s': NOTIFY_BATCH_ACK says %zu queued of %zu", seg->name, queued,
                     n);
            queued = 0;
            status = OTE_ERR_PROTOCOL;
        }
        if (status == OTE_ERR_PEER_RESTARTED)
            mark_stale_if_bound(seg, l->instance);
        pthread_mutex_lock(&l->lock);
        for (size_t i = 0; i < queued; i++)
            lane_end_head(l, OTE_OK, &ended);
        n -= queued;
        if (status == OTE_OK || (queued > 0 && status != OTE_ERR_BUSY)) {
            reconnects = 0;
            backoff_ms = 1;
            if (status != OTE_OK) {
                /* Why the next was not queued: it and the rest of the frame end with it. */
                while (n-- > 0)
                    lane_end_head(l, status, &ended);
            }
        } else if (status == OTE_ERR_REMOTE_DISCONNECT && reconnects++ == 0) {
            /* Once more, on a fresh connection: the same numbers, queued once. */
        } else if (status == OTE_ERR_BUSY) {
            uint64_t now = ote_time_ns();
            bool progress = queued > 0;

            /* The backlog is full: those past their time end BUSY, never queued. */
            reconnects = 0;
            while (n > 0 && l->head->deadline <= now) {
                lane_end_head(l, OTE_ERR_BUSY, &ended);
                n--;
                progress = true;
            }
            if (progress) {
                backoff_ms = 1;
            } else {
                pthread_mutex_unlock(&l->lock);
                sleep_ms(backoff_ms);
                pthread_mutex_lock(&l->lock);
                if (backoff_ms < 16)
                    backoff_ms *= 2;
            }
        } else {
            reconnects = 0;
            while (n-- > 0)
                lane_end_head(l, status, &ended);
            /* What would go next on this handle (to this instance) fails alike. */
            while (l->head != NULL && (l->head->seg == seg || status == OTE_ERR_PEER_RESTARTED))
                lane_end_head(l, status, &ended);
        }
        pthread_cond_broadcast(&l->cond);
        if (ended != NULL) {
            pthread_mutex_unlock(&l->lock);
            groups_end(e, ended);
            pthread_mutex_lock(&l->lock);
        }
    }
}

/* Lane lock held: until w's items ended, as the flusher or waiting for it. */
static void lane_wait(ote_engine_h e, struct ote_notify_lane *l, notify_waiter_t *w)
{
    while (w->pending > 0) {
        if (!l->flushing) {
            l->flushing = true;
            lane_flush(e, l, w);
            l->flushing = false;
            /* Whoever waits behind us takes the role. */
            pthread_cond_broadcast(&l->cond);
        } else {
            pthread_cond_wait(&l->cond, &l->lock);
        }
    }
}

/* The receiver instance seg is bound to; PEER_RESTARTED once it is stale. */
static ote_status_t seg_instance(ote_segment_h seg, uint64_t *instance_p)
{
    if (atomic_load(&seg->stale))
        return OTE_ERR_PEER_RESTARTED;
    pthread_mutex_lock(&seg->lock);
    *instance_p = seg->desc->instance_id;
    pthread_mutex_unlock(&seg->lock);
    return OTE_OK;
}

/*
 * Send count notifications to the instance seg is bound to, in order, and
 * wait until each ended: statuses[i] is message i's.
 */
static ote_status_t notify_send(ote_engine_h e, ote_segment_h seg, const ote_notify_msg_t *msgs,
                                size_t count, ote_status_t *statuses)
{
    notify_item_t one, *items = count == 1 ? &one : calloc(count, sizeof(*items));
    notify_waiter_t w = {.pending = count};
    struct ote_notify_lane *lane = NULL;
    ote_status_t status = items != NULL ? OTE_OK : OTE_ERR_NO_MEMORY;
    uint64_t instance, deadline;

    if (status == OTE_OK)
        status = seg_instance(seg, &instance);
    if (status == OTE_OK && (lane = lane_get(e, instance)) == NULL)
        status = OTE_ERR_NO_MEMORY;
    if (status != OTE_OK) {
        for (size_t i = 0; i < count; i++)
            statuses[i] = status;
        if (items != &one)
            free(items);
        return status;
    }
    ote_segment_get(seg); /* the items' handle, whoever closes it meanwhile */
    pthread_mutex_lock(&lane->lock);
    /* Taken under the lane lock: deadlines grow in lane order, as the numbers do. */
    deadline = ote_time_ns() + notify_timeout_ns(e);
    for (size_t i = 0; i < count; i++) {
        items[i] = (notify_item_t){.seg = seg, .data = msgs[i].data ? msgs[i].data : "",
                                   .length = msgs[i].length, .deadline = deadline,
                                   .status_p = &statuses[i], .waiter = &w};
        lane_append(e, lane, &items[i]);
    }
    lane_wait(e, lane, &w);
    pthread_mutex_unlock(&lane->lock);
    lane_put(e, lane);
    ote_segment_put(seg);
    if (items != &one)
        free(items);
    for (size_t i = 0; i < count; i++) {
        if (statuses[i] != OTE_OK)
            return statuses[i];
    }
    return OTE_OK;
}

static ote_status_t notify_check(ote_engine_h e, ote_segment_h seg)
{
    if (atomic_load(&seg->closed))
        return OTE_ERR_NOT_FOUND;
    if (seg->file != NULL) {
        ote_error("segment '%s': a file segment has no peer to notify", seg->name);
        return OTE_ERR_UNSUPPORTED;
    }
    (void)e;
    return OTE_OK;
}

ote_status_t ote_notify_send(ote_engine_h e, ote_segment_h seg, const void *msg, size_t len)
{
    ote_notify_msg_t m = {.data = msg, .length = len};
    ote_status_t status;

    if (e == NULL || seg == NULL || (msg == NULL && len) || len > OTE_NOTIFY_MAX ||
        seg->engine != e)
        return OTE_ERR_INVALID_PARAM;
    status = notify_check(e, seg);
    if (status != OTE_OK)
        return status;
    notify_send(e, seg, &m, 1, &status);
    ote_obs_notify_sent(ote_engine_facts(e)->obs, status);
    return status;
}

static bool notify_msg_bad(const ote_notify_msg_t *m)
{
    return (m->data == NULL && m->length) || m->length > OTE_NOTIFY_MAX;
}

ote_status_t ote_notify_send_many(ote_engine_h e, ote_segment_h seg, const ote_notify_msg_t *msgs,
                                  size_t count, ote_status_t *statuses)
{
    ote_status_t status, *st = statuses;
    bool bad = false;

    if (e == NULL || seg == NULL || (count && msgs == NULL) || seg->engine != e)
        return OTE_ERR_INVALID_PARAM;
    for (size_t i = 0; i < count; i++)
        bad = bad || notify_msg_bad(&msgs[i]);
    if (bad) {
        /* Checked before any is sent, as a batch's requests: the call fails whole. */
        for (size_t i = 0; statuses != NULL && i < count; i++)
            statuses[i] = notify_msg_bad(&msgs[i]) ? OTE_ERR_INVALID_PARAM : OTE_ERR_CANCELED;
        return OTE_ERR_INVALID_PARAM;
    }
    if (count == 0)
        return OTE_OK;
    status = notify_check(e, seg);
    if (status != OTE_OK) {
        for (size_t i = 0; statuses != NULL && i < count; i++)
            statuses[i] = status;
        return status;
    }
    if (st == NULL && (st = malloc(count * sizeof(*st))) == NULL)
        return OTE_ERR_NO_MEMORY;
    status = notify_send(e, seg, msgs, count, st);
    for (size_t i = 0; i < count; i++)
        ote_obs_notify_sent(ote_engine_facts(e)->obs, st[i]);
    if (st != statuses)
        free(st);
    return status;
}

/* ---- notifications after batches ------------------------------------------- */

/* The lanes one notifier round put groups into. */
#define NOTIFIER_LANES 16
/* Threads that flush them side by side (ote-notify-N): a peer that does not answer holds one. */
#define NOTIFIER_THREADS 8
/* Lane flushes waiting for one of them; past it the notifier flushes the lane itself. */
#define NOTIFIER_QUEUED 4096

/* One round's groups in one lane, and the job that flushes them there. */
typedef struct {
    ote_proto_job_t         job; /* first: the pool's entry */
    ote_engine_h            engine;
    struct ote_notify_lane *lane;
    notify_waiter_t         w;
} notifier_lane_t;

/* Put g into the lane of its segment's instance (one of *lanes); ends it when it cannot. */
static void notifier_post(ote_engine_h e, ote_notify_group_t *g, notifier_lane_t **lanes,
                          size_t *num_p)
{
    notify_item_t *it;
    uint64_t instance;
    ote_status_t status;
    size_t k;

    status = atomic_load(&g->segment->closed) ? OTE_ERR_CANCELED
                                              : seg_instance(g->segment, &instance);
    for (k = 0; status == OTE_OK && k < *num_p && lanes[k]->lane->instance != instance; k++)
        ;
    if (status == OTE_OK && k == *num_p) {
        notifier_lane_t *nl       = calloc(1, sizeof(*nl));
        struct ote_notify_lane *l = nl != NULL ? lane_get(e, instance) : NULL;

        if (l == NULL) {
            free(nl);
            status = OTE_ERR_NO_MEMORY;
        } else {
            *nl               = (notifier_lane_t){.engine = e, .lane = l};
            lanes[(*num_p)++] = nl;
        }
    }
    it = status == OTE_OK ? calloc(1, sizeof(*it)) : NULL;
    if (status == OTE_OK && it == NULL)
        status = OTE_ERR_NO_MEMORY;
    if (status != OTE_OK) {
        ote_info("notification to %s after its tasks completed not delivered: %s",
                 g->segment->name, ote_status_string(status));
        g->end(g, status);
        return;
    }
    *it          = (notify_item_t){.seg    = g->segment,
                                   .data   = (const uint8_t *)g->data,
                                   .length = g->length,
                                   .group  = g,
                                   .waiter = &lanes[k]->w,
                                   .deadline = NO_DEADLINE};
    it->status_p = &it->status;
    pthread_mutex_lock(&lanes[k]->lane->lock);
    lanes[k]->w.pending++;
    lane_append(e, lanes[k]->lane, it);
    pthread_mutex_unlock(&lanes[k]->lane->lock);
}

/*
 * A pool thread (or the notifier): send what one round put into one lane,
 * then let it go. The groups' time to wait out a full backlog starts now.
 */
static void notifier_lane_flush(ote_proto_job_t *job)
{
    notifier_lane_t *nl       = (notifier_lane_t *)job;
    struct ote_notify_lane *l = nl->lane;
    uint64_t deadline;

    pthread_mutex_lock(&l->lock);
    deadline = ote_time_ns() + notify_timeout_ns(nl->engine);
    for (notify_item_t *it = l->head; it != NULL; it = it->next) {
        if (it->waiter == &nl->w && it->deadline == NO_DEADLINE)
            it->deadline = deadline;
    }
    lane_wait(nl->engine, l, &nl->w);
    pthread_mutex_unlock(&l->lock);
    lane_put(nl->engine, l);
    free(nl);
}

/*
 * The lanes of this round, each flushed by a job of the notifier's pool:
 * side by side, so that a peer that does not answer (up to two exchanges
 * of OTE_CONNECT_TIMEOUT_MS, or OTE_NOTIFY_TIMEOUT_MS of a full backlog)
 * delays no other peer's notifications. Lane order holds whoever flushes.
 */
static void notifier_flush(ote_notifier_t *nt, notifier_lane_t **lanes, size_t *num_p)
{
    for (size_t k = 0; k < *num_p; k++) {
        lanes[k]->job.run = notifier_lane_flush;
        if (ote_proto_jobs_submit(nt->pool, &lanes[k]->job) != OTE_OK)
            notifier_lane_flush(&lanes[k]->job);
        lanes[k] = NULL;
    }
    *num_p = 0;
}

static void *notifier_main(void *arg)
{
    ote_notifier_t *nt = arg;
    notifier_lane_t *lanes[NOTIFIER_LANES];
    size_t num_lanes = 0;

    pthread_mutex_lock(&nt->lock);
    for (;;) {
        while (nt->count == 0 && !nt->stop)
            pthread_cond_wait(&nt->cond, &nt->lock);
        if (nt->count == 0)
            break;
        /* Every group that completed meanwhile: they share the lanes' frames. */
        while (nt->count > 0 && num_lanes < NOTIFIER_LANES) {
            ote_notify_group_t *g = nt->q[nt->head];

            nt->head = (nt->head + 1) % nt->cap;
            nt->count--;
            pthread_mutex_unlock(&nt->lock);
            notifier_post(nt->engine, g, lanes, &num_lanes);
            pthread_mutex_lock(&nt->lock);
        }
        pthread_mutex_unlock(&nt->lock);
        notifier_flush(nt, lanes, &num_lanes);
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
    if (ote_proto_jobs_create("ote-notify", NOTIFIER_THREADS, NOTIFIER_QUEUED, &nt->pool) !=
        OTE_OK) {
        free(nt);
        return OTE_ERR_NO_MEMORY;
    }
    pthread_mutex_init(&nt->lock, NULL);
    pthread_cond_init(&nt->cond, NULL);
    if (pthread_create(&nt->thread, NULL, notifier_main, nt) != 0) {
        ote_proto_jobs_destroy(nt->pool);
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
    pthread_mutex_lock(&nt->lock);
    if (nt->count == nt->cap &&
        ote_ring_grow((void **)&nt->q, &nt->cap, &nt->head, nt->count, sizeof(*nt->q), 16) !=
            OTE_OK) {
        pthread_mutex_unlock(&nt->lock);
        ote_error("notification to %s not sent: out of memory", g->segment->name);
        g->end(g, OTE_ERR_NO_MEMORY);
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
    /* The lane flushes still queued run, each to its end. */
    ote_proto_jobs_destroy(nt->pool);
    free(nt->q);
    pthread_mutex_destroy(&nt->lock);
    pthread_cond_destroy(&nt->cond);
    free(nt);
}
