/*
 * A segment's slices on their way to rails. Submitters and failed slices
 * append to the segment's backlog; whoever appends, and every slice that
 * ends, drains it: under the segment's spray lock each slice in turn gets
 * the rail that would finish it first (ote_proto_rail_pick) until that rail
 * is at its quota. Slices are then handed to the workers of their rails,
 * outside the lock. Because both appending and ending drain after they
 * changed what they change, no slice is left waiting while a rail has room.
 * An ending slice whose segment has no backlog skips the lock: the
 * appender sets backlog_any before it looks at the rails' room, the ending
 * slice frees its room before it reads backlog_any (both sequentially
 * consistent), so one of the two sees the other.
 */
#include "base/dlist.h"
#include "base/log.h"
#include "base/util.h"
#include "core/xfer/batch.h"
#include "core/engine_facts.h"
#include "spray.h"
#include "core/worker/worker.h"

#include <string.h>

typedef struct {
    ote_slice_t *head, *tail;
} chain_t;

static void chain_add(chain_t *c, ote_slice_t *s)
{
    OTE_QUEUE_PUSH(c->head, c->tail, s, next);
}

/*
 * Why a slice no rail may carry ends: the segment's fate, else its own last
 * error. Its rails reached both memories when it was planned: a slice never
 * posted ends with why they are paused (REMOTE_DISCONNECT or TIMEOUT for a
 * peer that stopped answering), never UNREACHABLE for that.
 */
static ote_status_t slice_orphan_status(ote_segment_h seg, const ote_slice_t *s)
{
    if (atomic_load(&seg->closed) || s->route->gen != atomic_load(&seg->rails_gen))
        return OTE_ERR_CANCELED;
    if (s->last_error != OTE_OK)
        return s->last_error;
    return ote_proto_rails_idle_status(&s->route->rails);
}

void ote_segment_spray(ote_segment_h seg, ote_slice_t *head, ote_slice_t *tail, bool direct)
{
    ote_engine_h e = seg->engine;
    chain_t chains[OTE_MAX_WORKERS];
    chain_t ended = {0};
    uint64_t now;
    ote_slice_t *s;

    if (head == NULL && !atomic_load(&seg->backlog_any))
        return;
    now = ote_time_ns();
    memset(chains, 0, sizeof(chains[0]) * ote_engine_facts(e)->num_workers);
    pthread_mutex_lock(&seg->spray_lock);
    if (head != NULL) {
        OTE_QUEUE_PUSH_CHAIN(seg->backlog_head, seg->backlog_tail, head, tail, next);
        atomic_store(&seg->backlog_any, true);
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
    atomic_store(&seg->backlog_any, seg->backlog_head != NULL);
    pthread_mutex_unlock(&seg->spray_lock);

    while ((s = ended.head) != NULL) {
        ended.head = s->next;
        ote_task_slice_end(s, s->last_error);
    }
    for (size_t w = 0; w < ote_engine_facts(e)->num_workers; w++) {
        if (chains[w].head == NULL)
            continue;
        if (direct)
            ote_worker_post(&ote_engine_facts(e)->workers[w], chains[w].head, chains[w].tail);
        else
            ote_worker_queue(&ote_engine_facts(e)->workers[w], chains[w].head, chains[w].tail);
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

/* Lower is better: ACTIVE, PROBING, COOLING, CLOSED. */
static int rail_state_rank(ote_rail_state_t st)
{
    switch (st) {
    case OTE_RAIL_ACTIVE:
        return 0;
    case OTE_RAIL_PROBING:
        return 1;
    case OTE_RAIL_COOLING:
        return 2;
    default:
        return 3;
    }
}

/* Add one segment's rail r into the engine-wide entry a (same transport and device). */
static void rail_info_add(ote_rail_info_t *a, const ote_rail_info_t *r)
{
    int ra = rail_state_rank(a->state), rr = rail_state_rank(r->state);

    a->bytes += r->bytes;
    a->slices += r->slices;
    a->retries += r->retries;
    a->errors += r->errors;
    a->inflight_bytes += r->inflight_bytes;
    a->bandwidth += r->bandwidth;
    if (rr < ra) {
        a->state       = r->state;
        a->cooldown_ms = r->cooldown_ms;
    } else if (rr == ra && r->state == OTE_RAIL_COOLING && r->cooldown_ms < a->cooldown_ms) {
        a->cooldown_ms = r->cooldown_ms;
    }
}

ote_status_t ote_engine_rails(ote_engine_h e, ote_rail_info_t *out, size_t max,
                              size_t *count_p)
{
    ote_rail_info_t one[OTE_PROTO_MAX_RAILS], *all = NULL;
    size_t n = 0, cap = 0;
    ote_status_t status = OTE_OK;

    if (e == NULL || count_p == NULL || (out == NULL && max > 0))
        return OTE_ERR_INVALID_PARAM;
    pthread_mutex_lock(&ote_segment_table(e)->seg_lock);
    for (ote_segment_h seg = ote_segment_table(e)->segments; seg != NULL && status == OTE_OK;
         seg = seg->next) {
        size_t k = 0;

        (void)ote_segment_rails(seg, one, OTE_PROTO_MAX_RAILS, &k);
        for (size_t i = 0; i < k && i < OTE_PROTO_MAX_RAILS; i++) {
            size_t j = 0;

            while (j < n && (strcmp(all[j].transport, one[i].transport) != 0 ||
                             strcmp(all[j].device, one[i].device) != 0))
                j++;
            if (j < n) {
                rail_info_add(&all[j], &one[i]);
                continue;
            }
            if (n == cap) {
                ote_rail_info_t *grown = realloc(all, (cap ? 2 * cap : 8) * sizeof(*all));

                if (grown == NULL) {
                    status = OTE_ERR_NO_MEMORY;
                    break;
                }
                all = grown;
                cap = cap ? 2 * cap : 8;
            }
            all[n++] = one[i];
        }
    }
    pthread_mutex_unlock(&ote_segment_table(e)->seg_lock);
    if (status == OTE_OK) {
        if (n > 0 && max > 0)
            memcpy(out, all, (n < max ? n : max) * sizeof(*all));
        *count_p = n;
    }
    free(all);
    return status;
}
