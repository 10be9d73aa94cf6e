/*
 * Batches and tasks. A task is cut into slices that workers post; the last
 * slice to end decides the task's final state. Counters are atomic so that
 * status queries never take a lock; waiters progress the engine while
 * answers come fast, then sleep on the batch's condition variable,
 * signalled once the batch drains.
 */
#include "base/dlist.h"
#include "base/log.h"
#include "base/util.h"
#include "batch.h"
#include "admission.h"
#include "batch_check.h"
#include "core/engine_facts.h"
#include "notify.h"
#include "core/segment/segment.h"
#include "core/segment/spray.h"
#include "core/worker/worker_wait.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define OTE_BATCH_MAX_CAPACITY (1u << 24)
/* Task arrays from this size get a mapping of their own (glibc's largest mmap threshold). */
#define OTE_BATCH_MAP_MIN      (32u << 20)
/* Requests per submit whose pre-checks fit on the stack. */
#define OTE_SUBMIT_STACK_REQS  64

/*
 * A spare whose array holds capacity tasks, taken off the spares
 * (batch_lock held) and set up as a new batch; NULL if none. Its tasks'
 * slices and its notifications went when it was kept (spare_keep).
 */
static ote_batch_h spare_take(ote_xfer_state_t *x, size_t capacity)
{
    ote_batch_h b, *p;

    for (p = &x->spares; (b = *p) != NULL; p = &b->next) {
        if (b->tasks_cap >= capacity)
            break;
    }
    if (b == NULL)
        return NULL;
    *p = b->next;
    x->num_spares--;
    b->capacity = capacity;
    atomic_store_explicit(&b->pending, 0, memory_order_relaxed);
    atomic_store_explicit(&b->refs, 1, memory_order_relaxed);
    atomic_store_explicit(&b->waiters, 0, memory_order_relaxed);
    b->released = false;
    b->tel      = (ote_obs_batch_t){0};
    return b;
}

ote_status_t ote_batch_create(ote_engine_h engine, size_t capacity, ote_batch_h *batch_p)
{
    ote_xfer_state_t *x;
    ote_batch_h b;

    if (engine == NULL || batch_p == NULL || capacity == 0 ||
        capacity > OTE_BATCH_MAX_CAPACITY)
        return OTE_ERR_INVALID_PARAM;
    x = ote_xfer_state(engine);
    /*
     * A small batch released before is taken again, its lock and condition
     * variable as they are: a batch of a few requests a call (a synchronous
     * caller's, a latency test's) otherwise paid two mallocs, two frees and
     * their initialization and destruction each time, more than its submit's
     * own bookkeeping.
     */
    if (capacity <= OTE_BATCH_SPARE_TASKS) {
        pthread_mutex_lock(&x->batch_lock);
        b = spare_take(x, capacity);
        if (b != NULL) {
            OTE_DLIST_PUSH_FRONT(x->batches, b);
            pthread_mutex_unlock(&x->batch_lock);
            *batch_p = b;
            return OTE_OK;
        }
        pthread_mutex_unlock(&x->batch_lock);
    }
    /*
     * malloc, not calloc: glibc's calloc does not take chunks from the
     * thread's cache and went through the arena every batch (about 400
     * instructions for a batch of one request). The fields are set by a
     * compound literal (zero but for these), which the compiler does not
     * turn back into calloc as it does malloc and a memset of the whole.
     */
    b = malloc(sizeof(*b));
    if (b == NULL)
        return OTE_ERR_NO_MEMORY;
    *b = (struct ote_batch){.engine = engine, .capacity = capacity, .tasks_cap = capacity};
    /*
     * Not zeroed: a task is read only below used, and task_prepare clears it
     * first. An array of OTE_BATCH_MAP_MIN or more gets its own mapping
     * with huge pages asked for: glibc's malloc serves one that large (past
     * its largest mmap threshold) from fresh 4 KiB pages every time, and
     * their first touch in the submit, a page fault each, was most of the
     * submit's cost per request from 262,144 requests up. Smaller arrays
     * stay malloc'd: malloc reuses their memory from one batch to the next.
     */
    if (capacity * sizeof(*b->tasks) >= OTE_BATCH_MAP_MIN) {
        /* Whole huge pages: a tail of 4 KiB pages would fault one by one. */
        size_t len = (capacity * sizeof(*b->tasks) + OTE_HUGE_ALIGN - 1) & ~(OTE_HUGE_ALIGN - 1);
        void *p    = ote_mmap_huge(len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1);

        b->tasks        = p == MAP_FAILED ? NULL : p;
        b->tasks_mapped = p == MAP_FAILED ? 0 : len;
    } else {
        b->tasks = malloc(capacity * sizeof(*b->tasks));
    }
    if (b->tasks == NULL) {
        free(b);
        return OTE_ERR_NO_MEMORY;
    }
    atomic_init(&b->refs, 1);
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->cond, NULL);
    pthread_mutex_lock(&x->batch_lock);
    OTE_DLIST_PUSH_FRONT(x->batches, b);
    pthread_mutex_unlock(&x->batch_lock);
    *batch_p = b;
    return OTE_OK;
}

/* What b holds beyond its task array: the slices its tasks allocated, its notifications. */
static void batch_clear(ote_batch_h b)
{
    for (size_t i = 0, n = atomic_load(&b->used); i < n; i++) {
        if (b->tasks[i].slices != &b->tasks[i].inline_slice)
            free(b->tasks[i].slices);
    }
    OTE_LIST_FREE(b->groups, next);
}

/*
 * Keep b, whose last reference is gone, as a spare of its engine
 * (batch_lock held; it is off the batches list); false if it is not kept.
 */
static bool spare_keep(ote_xfer_state_t *x, ote_batch_h b)
{
    if (x->spares_closed || b->tasks_cap > OTE_BATCH_SPARE_TASKS ||
        x->num_spares >= OTE_BATCH_SPARES)
        return false;
    batch_clear(b); /* and no task left: a later free or clear finds nothing */
    atomic_store_explicit(&b->used, 0, memory_order_relaxed);
    b->released = true; /* a second release of the handle stays a no-op */
    b->next     = x->spares;
    x->spares   = b;
    x->num_spares++;
    return true;
}

static void batch_free(ote_batch_h b)
{
    batch_clear(b);
    pthread_mutex_destroy(&b->lock);
    pthread_cond_destroy(&b->cond);
    if (b->tasks_mapped != 0)
        munmap(b->tasks, b->tasks_mapped);
    else
        free(b->tasks);
    free(b);
}

static void batch_put(ote_batch_h b)
{
    ote_xfer_state_t *x;
    bool kept = false;

    if (atomic_fetch_sub(&b->refs, 1) != 1)
        return;
    if (b->tasks_cap <= OTE_BATCH_SPARE_TASKS) {
        x = ote_xfer_state(b->engine);
        pthread_mutex_lock(&x->batch_lock);
        kept = spare_keep(x, b);
        pthread_mutex_unlock(&x->batch_lock);
    }
    if (!kept)
        batch_free(b);
}

/*
 * Release b: off the engine's list of batches the user holds (a second
 * release finds it off), and the user's reference dropped. When that was
 * the last one (every task ended), a small batch becomes a spare under the
 * same lock.
 */
void ote_batch_release(ote_batch_h b)
{
    ote_xfer_state_t *x;
    bool listed, kept = false;

    if (b == NULL)
        return;
    x = ote_xfer_state(b->engine);
    pthread_mutex_lock(&x->batch_lock);
    listed = !b->released;
    if (listed) {
        b->released = true;
        OTE_DLIST_REMOVE(x->batches, b);
        /* Nothing else holds it: no task of it is left to drop a reference. */
        if (atomic_load(&b->refs) == 1 && (kept = spare_keep(x, b)))
            atomic_store(&b->refs, 0);
    }
    pthread_mutex_unlock(&x->batch_lock);
    if (listed && !kept)
        batch_put(b);
}

/* At engine destroy, after every task ended: release what the user holds, free the spares. */
void ote_batch_release_all(ote_engine_h e)
{
    ote_xfer_state_t *x = ote_xfer_state(e);
    ote_batch_h spares;

    pthread_mutex_lock(&x->batch_lock);
    x->spares_closed = true;
    pthread_mutex_unlock(&x->batch_lock);
    OTE_DLIST_DRAIN(&x->batch_lock, x->batches, ote_batch_h, ote_batch_release);
    pthread_mutex_lock(&x->batch_lock);
    spares           = x->spares;
    x->spares        = NULL;
    x->num_spares    = 0;
    pthread_mutex_unlock(&x->batch_lock);
    while (spares != NULL) {
        ote_batch_h b = spares;

        spares = b->next;
        batch_free(b);
    }
}

/* Something the batch waits for (a task, a notification) ended. */
static void batch_pending_done(ote_batch_h b)
{
    /*
     * A waiter raises waiters before it reads pending, and this reads
     * waiters after pending fell (both sequentially consistent): either it
     * sees pending at 0 and does not sleep, or this sees it and wakes it
     * under the lock it sleeps with. No lock when nobody sleeps.
     */
    if (atomic_fetch_sub(&b->pending, 1) == 1 && atomic_load(&b->waiters) != 0) {
        pthread_mutex_lock(&b->lock);
        pthread_cond_broadcast(&b->cond);
        pthread_mutex_unlock(&b->lock);
    }
}

void ote_batch_notify_end(ote_notify_group_t *g, ote_status_t status)
{
    ote_batch_h b = g->batch;

    ote_obs_notify_sent(ote_engine_facts(b->engine)->obs, status);
    atomic_store(&g->status, status);
    ote_segment_put(g->segment);
    batch_pending_done(b);
    ote_engine_signal_event(b->engine);
    batch_put(b);
}

static void notify_group_task_done(ote_engine_h engine, ote_notify_group_t *g, ote_status_t err)
{
    int expected = OTE_OK;
    ote_notifier_t *nt;

    if (err != OTE_OK)
        atomic_compare_exchange_strong(&g->task_error, &expected, err);
    if (atomic_fetch_sub(&g->remaining, 1) != 1)
        return;
    err = (ote_status_t)atomic_load(&g->task_error);
    if (err != OTE_OK) {
        ote_debug("notification to %s not sent: a task of its call did not complete (%s)",
                  g->segment->name, ote_status_string(err));
        ote_batch_notify_end(g, err);
        return;
    }
    nt = ote_xfer_state(engine)->notifier;
    if (nt == NULL) {
        /* The engine is going: its notifier has stopped. */
        ote_batch_notify_end(g, OTE_ERR_CANCELED);
        return;
    }
    ote_notifier_queue(nt, g);
}

static void task_finalize(ote_task_t *t)
{
    ote_batch_h b        = t->batch;
    ote_engine_h engine  = b->engine;
    ote_status_t err     = (ote_status_t)atomic_load(&t->first_error);
    ote_task_state_t state;

    /*
     * A canceled task that did not complete ends CANCELED, whatever ended
     * its last posted slices (a timeout, a lost peer): the cancel asked for
     * exactly that end. One whose slices all landed stays COMPLETED.
     */
    if (err != OTE_OK && atomic_load(&t->cancel))
        err = OTE_ERR_CANCELED;
    if (err == OTE_OK)
        state = OTE_TASK_COMPLETED;
    else if (err == OTE_ERR_CANCELED)
        state = OTE_TASK_CANCELED;
    else if (err == OTE_ERR_TIMEOUT)
        state = OTE_TASK_TIMEOUT;
    else
        state = OTE_TASK_FAILED;
    t->error = err;
    if (t->local_region != NULL) {
        ote_mem_region_put(t->local_region);
        t->local_region = NULL;
    }
    if (t->desc != NULL) {
        ote_segment_desc_put(t->desc);
        t->desc = NULL;
    }
    if (err == OTE_ERR_PEER_RESTARTED)
        ote_segment_mark_stale(t->segment);
    ote_obs_task_end(ote_engine_facts(engine)->obs, &t->batch->tel, t->op == OTE_OP_WRITE,
                     atomic_load_explicit(&t->obs_tl, memory_order_relaxed), t->start_ns, t->length,
                     atomic_load_explicit(&t->transferred, memory_order_relaxed), err);
    ote_admission_release(engine, 1, t->length);
    if (t->notify != NULL)
        notify_group_task_done(engine, t->notify, err);
    ote_segment_put(t->segment);
    atomic_store_explicit(&t->state, state, memory_order_release);
    batch_pending_done(b);
    ote_engine_signal_event(engine);
    batch_put(b);
}

/* The slice counts for its task; the last one finalizes it. */
static void task_slice_count(ote_slice_t *s, ote_status_t status)
{
    ote_task_t *t = s->task;

    if (status == OTE_OK) {
        atomic_fetch_add_explicit(&t->transferred, s->length, memory_order_relaxed);
    } else {
        int expected = OTE_OK;

        /* What landed before the error (a READ that met the end of a file). */
        if (s->comp.transferred > 0 && s->comp.transferred < s->length)
            atomic_fetch_add_explicit(&t->transferred, s->comp.transferred,
                                      memory_order_relaxed);
        atomic_compare_exchange_strong(&t->first_error, &expected, status);
    }
    if (atomic_fetch_sub_explicit(&t->pending, 1, memory_order_acq_rel) == 1)
        task_finalize(t);
}

void ote_task_slice_end(ote_slice_t *s, ote_status_t status)
{
    ote_task_t *t = s->task;
    bool bound    = s->rail != NULL;

    ote_obs_slice_end(ote_engine_facts(t->batch->engine)->obs, s, s->rail, status, false,
                      &t->obs_tl);
    (void)ote_proto_slice_end(s, status, ote_time_ns());
    /* Its room on the rail is free: slices waiting may go (the task holds the segment). */
    if (bound)
        ote_segment_spray(t->segment, NULL, NULL, false);
    task_slice_count(s, status);
}

void ote_task_slice_done(ote_slice_t *s, ote_status_t status)
{
    ote_task_t *t   = s->task;
    ote_rail_t *from = s->rail;
    bool again;

    /*
     * A rail failure: another rail of the same instance may carry it (the
     * route's rails all lead to it; a WRITE may land twice, which one-sided
     * semantics allow). Never after a cancel or once the segment closed.
     */
    again = ote_proto_slice_end(s, status, ote_round_time_ns()) &&
            s->retries < (unsigned)ote_engine_facts(t->batch->engine)->config.retry_count &&
            !atomic_load(&t->cancel) && !atomic_load(&t->segment->closed);
    ote_obs_slice_end(ote_engine_facts(t->batch->engine)->obs, s, from, status, again, &t->obs_tl);
    if (again) {
        s->retries++;
        ote_proto_slice_retried(from);
        ote_debug("slice %#llx+%zu failed on %s/%s (%s): posted again (%u)",
                  (unsigned long long)s->remote, s->length, from->iface->resource.tl_name,
                  from->iface->resource.dev_name, ote_status_string(status), s->retries);
        ote_segment_spray(t->segment, s, s, false);
        return;
    }
    if (from != NULL)
        ote_segment_spray(t->segment, NULL, NULL, false);
    task_slice_count(s, status);
}

static void slice_complete_cb(ote_tl_completion_t *comp, ote_status_t status)
{
    ote_task_slice_done((ote_slice_t *)comp, status);
}

typedef struct {
    ote_slice_t *head, *tail;
} slice_chain_t;

static ote_notify_group_t *notify_group_new(ote_batch_h b, const ote_xfer_req_t *reqs,
                                            size_t count, const void *msg, size_t msg_len)
{
    ote_notify_group_t *g = malloc(sizeof(*g) + msg_len);

    if (g == NULL)
        return NULL;
    atomic_init(&g->remaining, (long)count);
    atomic_init(&g->task_error, OTE_OK);
    atomic_init(&g->status, OTE_INPROGRESS);
    g->segment = reqs[0].segment;
    g->batch   = b;
    g->end     = ote_batch_notify_end;
    g->next    = NULL;
    g->length  = msg_len;
    memcpy(g->data, msg, msg_len);
    return g;
}

/* Drop what task_prepare took. */
static void task_unprepare(ote_task_t *t)
{
    if (t->desc != NULL)
        ote_segment_desc_put(t->desc);
    if (t->local_region != NULL)
        ote_mem_region_put(t->local_region);
    if (t->slices != NULL)
        ote_proto_plan_release(t->slices, &t->inline_slice);
    memset(t, 0, sizeof(*t));
}

/*
 * What preparing one request leaves for the next of the same submission:
 * the local region it took (the next range in it takes another reference
 * without a table lookup). The rails its plan chose stay in the segment
 * (seg->plan_memo, valid for one generation of the rails) for every
 * submission after it.
 */
typedef struct {
    ote_region_t            *local_region;
    const ote_desc_t        *desc; /* the descriptor rreg is in */
    const ote_desc_region_t *rreg; /* the peer's region of the last request */
    ote_proto_remote_t       remote;
    uint64_t                 begin_ns; /* the submit call began (obs) */
} submit_ctx_t;

/* Region k of d covers [addr, addr+len) and is the one ote_desc_find_region gives. */
static bool region_is_found(const ote_desc_t *d, size_t k, uint64_t addr, size_t len)
{
    const ote_desc_region_t *rreg = &d->regions[k];

    return addr >= rreg->addr && len <= rreg->length && addr - rreg->addr <= rreg->length - len &&
           (k + 1 == d->num_regions || ote_desc_start(d, k + 1) > addr);
}

/*
 * Whether hint, the region the peer checks found in the descriptor they
 * read, is an entry of d: compared as numbers, since that descriptor may
 * be gone (a refresh since); *k_p its index.
 */
static bool hint_in(const ote_desc_t *d, const ote_desc_region_t *hint, size_t *k_p)
{
    uintptr_t h = (uintptr_t)hint, base = (uintptr_t)d->regions;

    if (hint == NULL || h < base || (h - base) / sizeof(*hint) >= d->num_regions ||
        (h - base) % sizeof(*hint) != 0)
        return false;
    *k_p = (h - base) / sizeof(*hint);
    return true;
}

/*
 * The peer's region that ote_desc_find_region gives for [addr, addr+len)
 * (seg->lock held), without the search when the last request's, or the
 * one the peer checks found (hint), is in the descriptor held now, covers
 * the range and no region of the descriptor starts between it and addr
 * (the search would find that one first).
 */
static const ote_desc_region_t *remote_region(ote_segment_h seg, uint64_t addr, size_t len,
                                              const ote_desc_region_t *hint, submit_ctx_t *ctx)
{
    const ote_desc_t *d           = seg->desc;
    const ote_desc_region_t *rreg = ctx->rreg;
    size_t k;

    if (d == NULL)
        return NULL;
    if (ctx->desc == d && rreg != NULL && region_is_found(d, (size_t)(rreg - d->regions), addr, len))
        return rreg;
    if (hint_in(d, hint, &k) && region_is_found(d, k, addr, len))
        rreg = &d->regions[k];
    else
        rreg = ote_desc_find_region(d, addr, len);
    if (rreg != NULL) {
        ctx->desc   = d;
        ctx->rreg   = rreg;
        ctx->remote = (ote_proto_remote_t){
            .published = true,
            .mem_type  = rreg->location != NULL && strncmp(rreg->location, "cuda", 4) == 0
                             ? OTE_MEM_TYPE_CUDA
                             : OTE_MEM_TYPE_HOST,
            .rkeys     = rreg->rkeys,
            .num_rkeys = rreg->num_rkeys};
    }
    return rreg;
}

/*
 * Prepare task t for request r (batch lock held): the local range, and the
 * protocol's plan of its slices. A request refused by the peer checks ends
 * FAILED at once with no slice. On an error t is left empty.
 */
static ote_status_t task_prepare(ote_batch_h b, ote_task_t *t, const ote_xfer_req_t *r,
                                 ote_status_t refused, const ote_desc_region_t *hint,
                                 ote_notify_group_t *group, submit_ctx_t *ctx)
{
    ote_engine_h e    = b->engine;
    ote_segment_h seg = r->segment;
    ote_proto_remote_t remote = {.mem_type = OTE_MEM_TYPE_HOST};
    const ote_desc_region_t *rreg;
    ote_proto_req_t req;
    ote_status_t status;
    size_t n = 0;

    memset(t, 0, sizeof(*t));
    if (seg->engine != e)
        return OTE_ERR_INVALID_PARAM;
    if (atomic_load(&seg->closed))
        return OTE_ERR_NOT_FOUND;
    if (atomic_load(&seg->stale))
        return OTE_ERR_PEER_RESTARTED;
    if (ctx->local_region != NULL &&
        ote_mem_region_reacquire(ctx->local_region, (uintptr_t)r->local_addr, r->length, 0)) {
        t->local_region = ctx->local_region;
        status          = OTE_OK;
    } else {
        status = ote_mem_region_acquire(ote_engine_facts(e)->regions, (uintptr_t)r->local_addr,
                                        r->length, 0, &t->local_region);
    }
    if (status != OTE_OK) {
        ote_debug("submit: local range %p+%zu: %s", r->local_addr, r->length,
                  ote_status_string(status));
        return status;
    }
    if (refused == OTE_OK) {
        req = (ote_proto_req_t){.op = r->op, .local = r->local_addr,
                                .local_region = t->local_region, .remote = r->remote_addr,
                                .length = r->length};
        pthread_mutex_lock(&seg->lock);
        rreg = remote_region(seg, r->remote_addr, r->length, hint, ctx);
        if (rreg != NULL)
            remote = ctx->remote;
        else if (seg->file == NULL && seg->export_name[0] == '\0')
            refused = OTE_ERR_REMOTE_NOT_REGISTERED; /* a re-read since the checks dropped it */
        t->route.gen       = atomic_load(&seg->rails_gen);
        t->route.rails_gen = &seg->rails_gen;
        if (seg->plan_memo_gen != t->route.gen)
            seg->plan_memo.valid = false;
        seg->plan_memo_gen = t->route.gen;
        if (refused == OTE_OK)
            status = ote_proto_plan(&seg->rail_set, &req, &remote,
                                    ote_engine_facts(e)->config.slice_size, &seg->plan_memo,
                                    &t->route,
                                    &t->inline_slice, &t->slices, &n);
        if (refused == OTE_OK && status == OTE_OK && rreg != NULL) {
            /* The slices point at its rkeys: a refresh must not free it under them. */
            t->desc = seg->desc;
            atomic_fetch_add(&t->desc->refs, 1);
            /* A peer's keys are that instance's: never posted on rails rebuilt for another. */
            if (seg->file == NULL) {
                t->route.instance       = t->desc->instance_id;
                t->route.rails_instance = &seg->rails_instance;
            }
        }
        pthread_mutex_unlock(&seg->lock);
        if (status != OTE_OK) {
            ote_debug("submit: %s %#llx+%zu on %s (%s memory from %s memory): %s",
                      r->op == OTE_OP_WRITE ? "WRITE" : "READ",
                      (unsigned long long)r->remote_addr, r->length, seg->name,
                      remote.mem_type == OTE_MEM_TYPE_CUDA ? "cuda" : "host",
                      t->local_region->mem_type == OTE_MEM_TYPE_CUDA ? "cuda" : "host",
                      ote_status_string(status));
            task_unprepare(t);
            return status;
        }
        for (size_t k = 0; k < n; k++) {
            t->slices[k].comp.func   = slice_complete_cb;
            t->slices[k].comp.cancel = &t->cancel;
            t->slices[k].task        = t;
            t->slices[k].cancel      = &t->cancel;
        }
    }
    ctx->local_region = t->local_region;
    t->num_slices = n;
    t->length     = r->length;
    t->segment    = seg;
    t->batch      = b;
    t->notify     = group;
    t->op         = r->op;
    t->start_ns   = ctx->begin_ns;
    atomic_init(&t->obs_tl, OTE_OBS_TL_NONE);
    atomic_init(&t->pending, (long)n);
    atomic_init(&t->state, OTE_TASK_PENDING);
    atomic_init(&t->first_error, refused);
    return OTE_OK;
}

/*
 * Hand the slices of tasks [first, first+count) to their segments, which
 * spray them over their rails: one hand-over per run of tasks to one segment.
 */
static void submit_post(ote_batch_h b, size_t first, size_t count)
{
    slice_chain_t ch = {0};
    ote_segment_h seg = NULL;
    size_t run_end    = 0;

    for (size_t i = 0; i < count; i++) {
        ote_task_t *t = &b->tasks[first + i];

        if (i == run_end) {
            /* A run of tasks to one segment: a reference for each, at once. */
            while (++run_end < count && b->tasks[first + run_end].segment == t->segment)
                ;
            ote_segment_get_many(t->segment, run_end - i);
        }
        if (t->num_slices == 0) {
            task_finalize(t);
            continue;
        }
        if (seg != t->segment && ch.head != NULL) {
            ote_segment_spray(seg, ch.head, ch.tail, true);
            ch.head = ch.tail = NULL;
        }
        seg = t->segment;
        for (size_t k = 0; k < t->num_slices; k++) {
            ote_slice_t *s = &t->slices[k];

            OTE_QUEUE_PUSH(ch.head, ch.tail, s, next);
        }
    }
    if (ch.head != NULL)
        ote_segment_spray(seg, ch.head, ch.tail, true);
}

/*
 * Validate, check with the peer, admit, prepare every task under the batch
 * lock (nothing is posted until all are ready), then post. On any error
 * nothing of the call stays: one unwind path.
 */
static ote_status_t batch_submit(ote_batch_h b, const ote_xfer_req_t *reqs, size_t count,
                                 const void *msg, size_t msg_len, bool putback,
                                 size_t *first_task_p)
{
    ote_engine_h e = b->engine;
    ote_notify_group_t *group = NULL;
    ote_status_t refused_stack[OTE_SUBMIT_STACK_REQS], *refused = refused_stack;
    const ote_desc_region_t *found_stack[OTE_SUBMIT_STACK_REQS], **found = found_stack;
    size_t bytes = 0, first = 0, ready = 0;
    bool admitted = false, locked = false;
    submit_ctx_t ctx;
    ote_status_t status;

    if (first_task_p == NULL)
        return OTE_ERR_INVALID_PARAM;
    ctx.begin_ns = ote_time_ns();
    status = ote_batch_submit_validate(reqs, count, msg, msg_len, &bytes);
    if (status != OTE_OK)
        return status;
    if (msg != NULL && (group = notify_group_new(b, reqs, count, msg, msg_len)) == NULL)
        return OTE_ERR_NO_MEMORY;
    if (count > OTE_SUBMIT_STACK_REQS &&
        ((refused = malloc(count * sizeof(*refused))) == NULL ||
         (found = malloc(count * sizeof(*found))) == NULL)) {
        status = OTE_ERR_NO_MEMORY;
        goto out;
    }
    ote_batch_peer_checks(e, reqs, count, putback, refused, found);

    /* Admission first (it may wait), then the batch's room under its lock. */
    status = ote_admission_reserve(e, count, bytes);
    if (status != OTE_OK) {
        ote_obs_admission_rejected(ote_engine_facts(e)->obs);
        goto out;
    }
    admitted = true;
    pthread_mutex_lock(&b->lock);
    locked = true;
    first = atomic_load_explicit(&b->used, memory_order_relaxed);
    if (first + count > b->capacity) {
        status = OTE_ERR_BUSY;
        goto out;
    }
    ctx.local_region = NULL;
    ctx.desc         = NULL;
    ctx.rreg         = NULL;
    for (ready = 0; ready < count; ready++) {
        status = task_prepare(b, &b->tasks[first + ready], &reqs[ready], refused[ready],
                              found[ready], group, &ctx);
        if (status != OTE_OK)
            goto out;
    }
    /* Readers of statuses see the prepared tasks with the count (batch_task). */
    atomic_store_explicit(&b->used, first + count, memory_order_release);
    /* The notification is waited for as the tasks are, and holds the batch too. */
    atomic_fetch_add(&b->pending, (long)count + (group != NULL));
    atomic_fetch_add(&b->refs, (long)count + (group != NULL));
    if (group != NULL) {
        group->next = b->groups;
        b->groups   = group;
        ote_segment_get(group->segment);
        group = NULL; /* the batch's now */
    }
    pthread_mutex_unlock(&b->lock);
    locked = false;
    ote_obs_batch_posting(&b->tel, ctx.begin_ns, count); /* before any task can end */
    submit_post(b, first, count);
    *first_task_p = first;

out:
    if (status != OTE_OK) {
        while (ready-- > 0)
            task_unprepare(&b->tasks[first + ready]);
    }
    if (locked)
        pthread_mutex_unlock(&b->lock);
    if (admitted && status != OTE_OK)
        ote_admission_release(e, count, bytes);
    free(group);
    if (refused != refused_stack)
        free(refused);
    if (found != found_stack)
        free(found);
    ote_obs_batch_submitted(&b->tel, ctx.begin_ns);
    return status;
}

ote_status_t ote_batch_submit(ote_batch_h b, const ote_xfer_req_t *reqs, size_t count,
                              size_t *first_task_p)
{
    if (b == NULL)
        return OTE_ERR_INVALID_PARAM;
    return batch_submit(b, reqs, count, NULL, 0, false, first_task_p);
}

ote_status_t ote_batch_submit_putback(ote_batch_h b, const ote_xfer_req_t *req,
                                      size_t *first_task_p)
{
    if (b == NULL || req == NULL || req->op != OTE_OP_WRITE)
        return OTE_ERR_INVALID_PARAM;
    return batch_submit(b, req, 1, NULL, 0, true, first_task_p);
}

ote_status_t ote_batch_submit_notify(ote_batch_h b, const ote_xfer_req_t *reqs, size_t count,
                                     const void *msg, size_t msg_len, size_t *first_task_p)
{
    if (b == NULL || (msg == NULL && msg_len != 0))
        return OTE_ERR_INVALID_PARAM;
    return batch_submit(b, reqs, count, msg ? msg : "", msg_len, false, first_task_p);
}

/* Task task of b once submitted, or NULL. */
static ote_task_t *batch_task(ote_batch_h b, size_t task)
{
    size_t used = atomic_load_explicit(&b->used, memory_order_acquire);

    return task < used ? &b->tasks[task] : NULL;
}

ote_status_t ote_batch_task_status(ote_batch_h b, size_t task, ote_task_status_t *st)
{
    ote_task_t *t;

    if (b == NULL || st == NULL || (t = batch_task(b, task)) == NULL)
        return OTE_ERR_INVALID_PARAM;
    st->state = (ote_task_state_t)atomic_load_explicit(&t->state, memory_order_acquire);
    st->error = st->state == OTE_TASK_PENDING ? OTE_OK : t->error;
    st->transferred = atomic_load_explicit(&t->transferred, memory_order_relaxed);
    return OTE_OK;
}

ote_status_t ote_batch_notify_status(ote_batch_h b, size_t task, ote_status_t *status_p)
{
    ote_notify_group_t *g;
    ote_task_t *t;

    if (b == NULL || status_p == NULL || (t = batch_task(b, task)) == NULL ||
        (g = t->notify) == NULL)
        return OTE_ERR_INVALID_PARAM;
    *status_p = (ote_status_t)atomic_load(&g->status);
    return OTE_OK;
}

ote_status_t ote_batch_status(ote_batch_h b, ote_task_status_t *st)
{
    size_t used;
    bool pending = false;
    ote_status_t first_err = OTE_OK;
    ote_task_state_t worst = OTE_TASK_COMPLETED;

    if (b == NULL || st == NULL)
        return OTE_ERR_INVALID_PARAM;
    used = atomic_load_explicit(&b->used, memory_order_acquire);
    st->transferred = 0;
    for (size_t i = 0; i < used; i++) {
        ote_task_t *t = &b->tasks[i];
        ote_task_state_t s =
            (ote_task_state_t)atomic_load_explicit(&t->state, memory_order_acquire);

        st->transferred += atomic_load_explicit(&t->transferred, memory_order_relaxed);
        if (s == OTE_TASK_PENDING) {
            pending = true;
        } else if (s != OTE_TASK_COMPLETED && worst == OTE_TASK_COMPLETED) {
            worst     = s;
            first_err = t->error;
        }
    }
    if (pending) {
        st->state = OTE_TASK_PENDING;
        st->error = OTE_OK;
    } else {
        /* Any task that did not complete makes the batch FAILED. */
        st->state = worst == OTE_TASK_COMPLETED ? OTE_TASK_COMPLETED : OTE_TASK_FAILED;
        st->error = first_err;
    }
    return OTE_OK;
}

/*
 * The waiting thread progresses the engine itself while answers come fast
 * (ote_engine_poll_wait), which saves a wake-up of a worker thread and one
 * of this thread per answer; once they do not, it sleeps on the batch's
 * condition variable and the worker threads progress.
 */
ote_status_t ote_batch_wait(ote_batch_h b, int timeout_ms)
{
    uint64_t start, deadline = 0;
    struct timespec ts;
    int rc = 0;

    if (b == NULL)
        return OTE_ERR_INVALID_PARAM;
    if (atomic_load(&b->pending) == 0)
        return OTE_OK;
    start = ote_time_ns();
    if (timeout_ms >= 0)
        deadline = start + (uint64_t)timeout_ms * 1000000ull;
    if (!ote_engine_poll_wait(b->engine, &b->pending, deadline) &&
        (deadline == 0 || ote_time_ns() < deadline)) {
        if (timeout_ms >= 0) {
            ts = ote_clock_after(CLOCK_REALTIME, deadline - ote_time_ns());
        }
        pthread_mutex_lock(&b->lock);
        atomic_fetch_add(&b->waiters, 1); /* before pending is read (batch_pending_done) */
        while (atomic_load(&b->pending) != 0 && rc != ETIMEDOUT) {
            if (timeout_ms >= 0)
                rc = pthread_cond_timedwait(&b->cond, &b->lock, &ts);
            else
                pthread_cond_wait(&b->cond, &b->lock);
        }
        atomic_fetch_sub(&b->waiters, 1);
        pthread_mutex_unlock(&b->lock);
    }
    if (atomic_load(&b->pending) != 0)
        return OTE_ERR_TIMEOUT;
    ote_engine_wait_note(b->engine, ote_time_ns() - start);
    return OTE_OK;
}

ote_status_t ote_batch_cancel(ote_batch_h b, size_t task)
{
    ote_task_t *t;

    if (b == NULL || (t = batch_task(b, task)) == NULL)
        return OTE_ERR_INVALID_PARAM;
    /* Slices still queued are withdrawn when a worker dequeues them. */
    atomic_store(&t->cancel, true);
    return OTE_OK;
}
