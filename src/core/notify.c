/*
 * Notifications: small messages to a named peer over the control plane.
 * Each carries the sender's instance and a sequence number so that a
 * retried send is delivered once. Notifications that follow a batch are
 * sent by a dedicated thread once every task of the batch completed, so
 * the data is in the peer's memory before the message arrives.
 */
#include "ctl_msg.h"
#include "engine.h"
#include "log.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

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

static ote_status_t notify_send_seq(ote_engine_h e, ote_segment_h seg, uint64_t seq,
                                    const void *msg, size_t len)
{
    ote_ctl_notify_t n = {.sender_instance = e->instance_id, .seq = seq, .length = len,
                          .data = msg};
    ote_buf_t out      = {0};
    uint8_t *resp      = NULL;
    size_t resp_len;
    ote_status_t status, remote;

    snprintf(n.from, sizeof(n.from), "%s", e->name);
    status = ote_ctl_notify_encode(&n, &out);
    if (status != OTE_OK)
        goto out;
    /* One retry on a fresh connection: the sequence number makes it idempotent. */
    for (int attempt = 0; attempt < 2; attempt++) {
        status = ote_segment_ctl_request(seg, OTE_CTL_NOTIFY, out.data, out.len,
                                         OTE_CTL_NOTIFY_ACK, &resp, &resp_len);
        if (status != OTE_ERR_REMOTE_DISCONNECT)
            break;
    }
    if (status == OTE_OK) {
        status = ote_ctl_status_decode(resp, resp_len, &remote);
        if (status == OTE_OK)
            status = remote;
    }
out:
    free(resp);
    free(out.data);
    return status;
}

ote_status_t ote_notify_send_internal(ote_engine_h e, ote_segment_h seg, const void *msg,
                                      size_t len)
{
    uint64_t seq;

    pthread_mutex_lock(&seg->lock);
    seq = ++seg->notify_seq;
    pthread_mutex_unlock(&seg->lock);
    return notify_send_seq(e, seg, seq, msg, len);
}

ote_status_t ote_notify_send(ote_engine_h e, ote_segment_h seg, const void *msg, size_t len)
{
    if (e == NULL || seg == NULL || (msg == NULL && len) || len > OTE_NOTIFY_MAX ||
        seg->engine != e)
        return OTE_ERR_INVALID_PARAM;
    if (atomic_load(&seg->closed))
        return OTE_ERR_NOT_FOUND;
    return ote_notify_send_internal(e, seg, msg ? msg : "", len);
}

ote_status_t ote_engine_notif_push(ote_engine_h e, const ote_ctl_notify_t *n)
{
    ote_notif_t *slot;
    size_t idx = (size_t)(n->sender_instance % 256);
    ote_status_t status = OTE_OK;

    pthread_mutex_lock(&e->notif_lock);
    if (e->notif_seen[idx].sender == n->sender_instance && n->seq <= e->notif_seen[idx].seq) {
        /* A retry of a message already queued. */
        goto out;
    }
    if (e->notif_count >= (size_t)e->config.max_notif_backlog) {
        status = OTE_ERR_BUSY;
        goto out;
    }
    if (e->notif_count == e->notif_cap) {
        size_t ncap = e->notif_cap ? e->notif_cap * 2 : 64;
        ote_notif_t *nn = malloc(ncap * sizeof(*nn));

        if (nn == NULL) {
            status = OTE_ERR_NO_MEMORY;
            goto out;
        }
        for (size_t i = 0; i < e->notif_count; i++)
            nn[i] = e->notifs[(e->notif_head + i) % e->notif_cap];
        free(e->notifs);
        e->notifs     = nn;
        e->notif_cap  = ncap;
        e->notif_head = 0;
    }
    slot = &e->notifs[(e->notif_head + e->notif_count) % e->notif_cap];
    snprintf(slot->from, sizeof(slot->from), "%s", n->from);
    slot->length = n->length;
    memcpy(slot->data, n->data, n->length);
    e->notif_count++;
    e->notif_seen[idx].sender = n->sender_instance;
    e->notif_seen[idx].seq    = n->seq;
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
                     ? OTE_ERR_NOT_FOUND
                     : ote_notify_send_internal(nt->engine, g->segment, g->data, g->length);
        if (status != OTE_OK)
            ote_warn("notification to %s after its batch failed: %s", g->segment->name,
                     ote_status_string(status));
        ote_segment_put(g->segment);
        free(g);
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
    if (nt->count == nt->cap) {
        size_t ncap = nt->cap ? nt->cap * 2 : 16;
        ote_notify_group_t **q = malloc(ncap * sizeof(*q));

        if (q == NULL) {
            pthread_mutex_unlock(&nt->lock);
            ote_error("notification to %s dropped: out of memory", g->segment->name);
            ote_segment_put(g->segment);
            free(g);
            return;
        }
        for (size_t i = 0; i < nt->count; i++)
            q[i] = nt->q[(nt->head + i) % nt->cap];
        free(nt->q);
        nt->q    = q;
        nt->cap  = ncap;
        nt->head = 0;
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
    pthread_mutex_lock(&nt->lock);
    nt->stop = true;
    pthread_cond_signal(&nt->cond);
    pthread_mutex_unlock(&nt->lock);
    if (nt->started)
        pthread_join(nt->thread, NULL);
    free(nt->q);
    pthread_mutex_destroy(&nt->lock);
    pthread_cond_destroy(&nt->cond);
    free(nt);
}
