/*
 * A segment's slices on their way to rails. Submitters and failed slices
 * append to the segment's backlog; whoever appends, and every slice that
 * ends, drains it: under the segment's spray lock each slice in turn gets
 * the rail that would finish it first (ote_proto_rail_pick) until that rail
 * is at its quota. Slices are then handed to the workers of their rails,
 * outside the lock. Because both appending and ending drain after they
 * changed what they change, no slice is left waiting while a rail has room.
 */
#include "engine.h"
#include "base/log.h"
#include "base/util.h"

#include <string.h>

typedef struct {
    ote_slice_t *head, *tail;
} chain_t;

static void chain_add(chain_t *c, ote_slice_t *s)
{
    s->next = NULL;
    if (c->tail)
        c->tail->next = s;
    else
        c->head = s;
    c->tail = s;
}

/* Why a slice no rail may carry ends: the segment's fate, else its own last error. */
static ote_status_t slice_orphan_status(ote_segment_h seg, const ote_slice_t *s)
{
    ote_status_t status;

    if (atomic_load(&seg->closed) || s->route->gen != atomic_load(&seg->rails_gen))
        return OTE_ERR_CANCELED;
    if (s->last_error != OTE_OK)
        return s->last_error;
    /* Never posted: why its rails are paused. */
    status = ote_proto_rails_last_error(&s->route->rails);
    return status != OTE_OK ? status : OTE_ERR_UNREACHABLE;
}

void ote_segment_spray(ote_segment_h seg, ote_slice_t *head, ote_slice_t *tail, bool direct)
{
    ote_engine_h e = seg->engine;
    chain_t chains[OTE_MAX_WORKERS];
    chain_t ended = {0};
    uint64_t now  = ote_time_ns();
    ote_slice_t *s;

    memset(chains, 0, sizeof(chains[0]) * e->num_workers);
    pthread_mutex_lock(&seg->spray_lock);
    if (head != NULL) {
        tail->next = NULL;
        if (seg->backlog_tail)
            seg->backlog_tail->next = head;
        else
            seg->backlog_head = head;
        seg->backlog_tail = tail;
    }
    while ((s = seg->backlog_head) != NULL) {
        ote_task_t *t = s->task;
        ote_status_t why = OTE_OK;
        ote_rail_t *r = NULL;

        if (!atomic_load(&t->cancel) && s->route->gen == atomic_load(&seg->rails_gen) &&
            !atomic_load(&seg->closed)) {
            r = ote_proto_rail_pick(&s->route->rails, s->length, now, &why);
            if (r == NULL && why == OTE_ERR_BUSY)
                break; /* its rail has room again when one of its slices ends */
        }
        seg->backlog_head = s->next;
        if (seg->backlog_head == NULL)
            seg->backlog_tail = NULL;
        if (r == NULL) {
            s->last_error = atomic_load(&t->cancel) ? OTE_ERR_CANCELED
                                                    : slice_orphan_status(seg, s);
            chain_add(&ended, s);
            continue;
        }
        ote_proto_slice_bind(s, r, now);
        chain_add(&chains[r->worker], s);
    }
    pthread_mutex_unlock(&seg->spray_lock);

    while ((s = ended.head) != NULL) {
        ended.head = s->next;
        ote_task_slice_end(s, s->last_error);
    }
    for (size_t w = 0; w < e->num_workers; w++) {
        if (chains[w].head == NULL)
            continue;
        if (direct)
            ote_worker_post(&e->workers[w], chains[w].head, chains[w].tail);
        else
            ote_worker_queue(&e->workers[w], chains[w].head, chains[w].tail);
    }
}

ote_status_t ote_segment_rails(ote_segment_h seg, ote_rail_info_t *out, size_t max,
                               size_t *count_p)
{
    uint64_t now = ote_time_ns();
    size_t n;

    if (seg == NULL || count_p == NULL || (out == NULL && max > 0))
        return OTE_ERR_INVALID_PARAM;
    pthread_mutex_lock(&seg->lock);
    n = seg->rail_set.num_rails;
    for (size_t i = 0; i < n && i < max; i++)
        ote_proto_rail_info(seg->rail_set.rails[i], now, &out[i]);
    pthread_mutex_unlock(&seg->lock);
    *count_p = n;
    return OTE_OK;
}
