/*
 * What the control listener keeps for the protocols' target sides
 * (proto/ctl_target.h: the host's peer_seg_get, peer_seg_put, peer_xfer):
 * the segments to initiators, opened by the name a request carries and kept
 * open between requests (CTL_PEERS, least recently used evicted), shared
 * by PUTBACKs and FILE_IOs by rails; and the one transfer such a request
 * makes over one, a batch of one task waited for.
 */
#include "core/xfer/batch.h"
#include "ctl_int.h"
#include "core/segment/segment.h"

#include "base/log.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

static void peer_clear(ctl_peer_t *p)
{
    memset(p, 0, sizeof(*p));
}

ote_status_t ote_ctl_peer_seg_get(void *ctx, const char *name, uint64_t initiator,
                                  ote_segment_h *seg_p, int *slot_p)
{
    ote_ctl_t *ctl      = ctx;
    ote_engine_h e      = ctl->engine;
    ote_segment_h evict = NULL, seg = NULL;
    ctl_peer_t *p   = NULL;
    uint64_t instance   = 0;
    ote_status_t status;
    int slot = -1;

    /*
     * The peer names itself: an engine's name, never a local file's or an
     * export's (a file segment opened here would carry this engine's own
     * instance, and the bytes of the request would go into a file of this
     * host).
     */
    if (name[0] == '\0' || ote_segment_is_object_name(name) || ote_segment_is_export_name(name)) {
        ote_warn("control listener: a request names '%.64s' as its sender, no engine's name; "
                 "refused", name);
        return OTE_ERR_INVALID_PARAM;
    }
    pthread_mutex_lock(&ctl->peer_lock);
    for (;;) {
        for (int i = 0; i < CTL_PEERS; i++) {
            p = &ctl->peers[i];
            if ((p->opening || p->seg != NULL) && !p->stale &&
                strncmp(p->name, name, sizeof(p->name)) == 0)
                break;
            p = NULL;
        }
        if (p == NULL || !p->opening)
            break;
        pthread_cond_wait(&ctl->peer_cond, &ctl->peer_lock);
    }
    if (p != NULL && p->instance == initiator) {
        p->refs++;
        p->used_ns = ote_time_ns();
        *seg_p     = p->seg;
        *slot_p    = (int)(p - ctl->peers);
        pthread_mutex_unlock(&ctl->peer_lock);
        return OTE_OK;
    }
    if (p != NULL) {
        /* Another instance behind the name: its successor gets a segment of its own. */
        p->stale = true;
        if (p->refs == 0) {
            evict = p->seg;
            peer_clear(p);
        }
    }
    for (int i = 0; i < CTL_PEERS; i++) {
        ctl_peer_t *q = &ctl->peers[i];

        if (!q->opening && q->seg == NULL) {
            slot = i;
            break;
        }
        if (q->refs == 0 && !q->opening && evict == NULL &&
            (slot < 0 || q->used_ns < ctl->peers[slot].used_ns))
            slot = i;
    }
    if (slot >= 0) {
        p = &ctl->peers[slot];
        if (p->seg != NULL) {
            /* The least recently used one goes. */
            evict = p->seg;
        }
        peer_clear(p);
        snprintf(p->name, sizeof(p->name), "%s", name);
        p->opening = true;
        p->refs    = 1;
    }
    pthread_mutex_unlock(&ctl->peer_lock);
    if (evict != NULL)
        ote_segment_close(evict);

    status = ote_segment_open_internal(e, name, &seg);
    if (status == OTE_OK) {
        pthread_mutex_lock(&seg->lock);
        instance = seg->desc != NULL ? seg->desc->instance_id : 0;
        pthread_mutex_unlock(&seg->lock);
        /* Only into the instance that asked: a name now served by another is refused. */
        if (instance != initiator) {
            ote_warn("control listener: '%s' is not the instance that asked; refused", name);
            ote_segment_close(seg);
            seg    = NULL;
            status = OTE_ERR_PEER_RESTARTED;
        }
    } else {
        ote_warn("control listener: cannot open '%s' to serve its request: %s", name,
                 ote_status_string(status));
        if (status == OTE_ERR_NOT_FOUND)
            status = OTE_ERR_UNREACHABLE;
    }
    pthread_mutex_lock(&ctl->peer_lock);
    ctl->peer_opens++;
    if (slot >= 0) {
        p = &ctl->peers[slot];
        if (status == OTE_OK) {
            p->seg      = seg;
            p->instance = instance;
            p->opening  = false;
            p->used_ns  = ote_time_ns();
        } else {
            peer_clear(p);
        }
        pthread_cond_broadcast(&ctl->peer_cond);
    }
    pthread_mutex_unlock(&ctl->peer_lock);
    if (status == OTE_OK) {
        *seg_p  = seg;
        *slot_p = slot;
    }
    return status;
}

void ote_ctl_peer_seg_put(void *ctx, ote_segment_h seg, int slot, ote_status_t status)
{
    ote_ctl_t *ctl          = ctx;
    ote_segment_h close_seg = slot < 0 ? seg : NULL;

    if (slot >= 0) {
        ctl_peer_t *p = &ctl->peers[slot];

        pthread_mutex_lock(&ctl->peer_lock);
        if (status != OTE_OK)
            p->stale = true;
        if (--p->refs == 0 && p->stale) {
            close_seg = p->seg;
            peer_clear(p);
        }
        pthread_mutex_unlock(&ctl->peer_lock);
    }
    if (close_seg != NULL)
        ote_segment_close(close_seg);
}

void ote_ctl_peers_close(ote_ctl_t *ctl)
{
    for (int i = 0; i < CTL_PEERS; i++) {
        if (ctl->peers[i].seg != NULL)
            ote_segment_close(ctl->peers[i].seg);
        peer_clear(&ctl->peers[i]);
    }
}

/* After a cancel: wait for the task's end, however long its posted slices take. */
static ote_status_t peer_xfer_wait_end(ote_engine_h e, ote_batch_h b)
{
    uint64_t start = ote_time_ns();
    bool warned    = false;
    ote_status_t status;

    while ((status = ote_batch_wait(b, 1000)) == OTE_ERR_TIMEOUT) {
        if (!warned &&
            ote_time_ns() - start >
                2ull * (uint64_t)ote_engine_facts(e)->config.xfer_timeout_ms * 1000000ull) {
            ote_warn("a transfer for a peer's request has not ended %ld ms after its cancel",
                     2 * ote_engine_facts(e)->config.xfer_timeout_ms);
            warned = true;
        }
    }
    return status;
}

ote_status_t ote_peer_xfer(ote_engine_h e, ote_segment_h seg, ote_op_t op, void *local,
                           uint64_t remote, size_t length, bool putback)
{
    ote_xfer_req_t req = {.op = op, .local_addr = local, .remote_addr = remote,
                          .length = length, .segment = seg};
    ote_task_status_t st;
    ote_batch_h b;
    size_t first;
    ote_status_t status;

    status = ote_batch_create(e, 1, &b);
    if (status != OTE_OK)
        return status;
    status = putback ? ote_batch_submit_putback(b, &req, &first)
                     : ote_batch_submit(b, &req, 1, &first);
    if (status == OTE_OK)
        status = ote_batch_wait(b, (int)ote_engine_facts(e)->config.xfer_timeout_ms);
    if (status == OTE_ERR_TIMEOUT) {
        /*
         * Never answer while the task lives: a slice retried or still
         * queued would post its bytes into the initiator's range after the
         * initiator was told, and after its task ended there. The cancel
         * withdraws what is queued and stops retries; what is posted ends
         * by its completion or its own OTE_XFER_TIMEOUT_MS.
         */
        (void)ote_batch_cancel(b, first);
        status = peer_xfer_wait_end(e, b);
    }
    if (status == OTE_OK)
        status = ote_batch_task_status(b, first, &st);
    if (status == OTE_OK && st.state != OTE_TASK_COMPLETED)
        status = st.error != OTE_OK && st.error != OTE_ERR_CANCELED ? st.error : OTE_ERR_TIMEOUT;
    ote_batch_release(b);
    /* The range is the initiator's own memory: the answer says so from its side. */
    if (status == OTE_ERR_REMOTE_NOT_REGISTERED)
        status = OTE_ERR_NOT_REGISTERED;
    return status;
}

uint64_t ote_engine_peer_rail_bytes(ote_engine_h e, const char *tl)
{
    ote_ctl_t *ctl = ote_engine_facts(e)->ctl;
    uint64_t bytes = 0;

    pthread_mutex_lock(&ctl->peer_lock);
    for (int i = 0; i < CTL_PEERS; i++) {
        ote_rail_info_t info[OTE_PROTO_MAX_RAILS];
        size_t n = 0;

        if (ctl->peers[i].seg == NULL ||
            ote_segment_rails(ctl->peers[i].seg, info, OTE_PROTO_MAX_RAILS, &n) != OTE_OK)
            continue;
        for (size_t k = 0; k < n && k < OTE_PROTO_MAX_RAILS; k++) {
            if (strcmp(info[k].transport, tl) == 0)
                bytes += info[k].bytes;
        }
    }
    pthread_mutex_unlock(&ctl->peer_lock);
    return bytes;
}
