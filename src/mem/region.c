/*
 * Region table: the regions users registered, in a sorted interval index
 * (sidx.c) so that "which region covers [a, a+len)" is O(log n) and touches
 * few cache lines, under a read lock. Handles are validated through a
 * pointer set before they are touched, so a foreign handle, or one whose
 * region is gone, is an error code, not a use after free; but a handle is
 * the region's address, and once a later registration got that address
 * again, the old handle names the new region (as a pointer after free()
 * does). Registration and removal take the write lock; md registration
 * happens outside it, in the registration cache.
 */
#include "mem_int.h"

#include "base/log.h"
#include "base/util.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- table lock: many lookups, few writers ------------------------------- */

static unsigned rd_slot(void)
{
    static OTE_THREAD_LOCAL unsigned slot = UINT_MAX;
    static atomic_uint next;

    if (slot == UINT_MAX)
        slot = atomic_fetch_add_explicit(&next, 1, memory_order_relaxed) % TABLE_RD_SLOTS;
    return slot;
}

static void table_rdlock(ote_mem_table_t *t)
{
    atomic_long *c = &t->rd[rd_slot()].readers;

    for (;;) {
        /* Pairs with ote_mem_table_wrlock(): seq_cst on both sides, one sees the other. */
        atomic_fetch_add(c, 1);
        if (!atomic_load(&t->writing))
            return;
        atomic_fetch_sub(c, 1);
        while (atomic_load_explicit(&t->writing, memory_order_relaxed))
            sched_yield();
    }
}

static void table_rdunlock(ote_mem_table_t *t)
{
    atomic_fetch_sub_explicit(&t->rd[rd_slot()].readers, 1, memory_order_release);
}

void ote_mem_table_wrlock(ote_mem_table_t *t)
{
    pthread_mutex_lock(&t->wlock);
    atomic_store(&t->writing, true);
    for (unsigned i = 0; i < TABLE_RD_SLOTS; i++) {
        while (atomic_load(&t->rd[i].readers) != 0)
            sched_yield();
    }
}

void ote_mem_table_wrunlock(ote_mem_table_t *t)
{
    atomic_store_explicit(&t->writing, false, memory_order_release);
    pthread_mutex_unlock(&t->wlock);
}

#define REGION_OF(_node) ((ote_region_t *)((char *)(_node) - offsetof(ote_region_t, node)))

/* ---- handle set --------------------------------------------------------- */

static size_t handle_slot(const ote_mem_table_t *t, const ote_region_t *r)
{
    uint64_t h = (uint64_t)(uintptr_t)r * 0x9e3779b97f4a7c15ull;

    return (size_t)(h >> 32) & (t->handles_cap - 1);
}

static bool handle_find(const ote_mem_table_t *t, const ote_region_t *r, size_t *slot_p)
{
    size_t i;

    if (t->handles_cap == 0)
        return false;
    for (i = handle_slot(t, r); t->handles[i] != NULL; i = (i + 1) & (t->handles_cap - 1)) {
        if (t->handles[i] == r) {
            if (slot_p != NULL)
                *slot_p = i;
            return true;
        }
    }
    return false;
}

static void handle_put(ote_mem_table_t *t, ote_region_t *r)
{
    size_t i = handle_slot(t, r);

    while (t->handles[i] != NULL)
        i = (i + 1) & (t->handles_cap - 1);
    t->handles[i] = r;
    t->handles_count++;
}

/* ---- range set: the table's regions by (start, end) --------------------- */

/*
 * A slot holds what a registration of a range registered already compares
 * (start, end, access, owned), so that the lookup reads the slot's cache
 * line and not the region: 32 bytes, 32-byte aligned (handles_reserve).
 * access and owned do not change while the region is in the table.
 */
struct ote_range_slot {
    uint64_t      start, end;
    ote_region_t *r; /* NULL: empty */
    unsigned      access;
    bool          owned;
};

_Static_assert(sizeof(struct ote_range_slot) <= 32, "a range slot is one aligned 32-byte block");

static uint64_t range_tag(uint64_t start, uint64_t end)
{
    uint64_t h = start * 0x9e3779b97f4a7c15ull ^ end * 0xc2b2ae3d27d4eb4full;

    h ^= h >> 31;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 29;
    return h;
}

static size_t range_home(const ote_mem_table_t *t, uint64_t start, uint64_t end)
{
    return (size_t)(range_tag(start, end) >> 20) & (t->handles_cap - 1);
}

static void range_put(ote_mem_table_t *t, ote_region_t *r)
{
    size_t i = range_home(t, r->node.start, r->node.end);

    while (t->ranges[i].r != NULL)
        i = (i + 1) & (t->handles_cap - 1);
    t->ranges[i] = (struct ote_range_slot){.start = r->node.start, .end = r->node.end, .r = r,
                                           .access = r->access, .owned = r->owned};
}

static void range_remove(ote_mem_table_t *t, ote_region_t *r)
{
    size_t mask = t->handles_cap - 1, i, j;

    for (i = range_home(t, r->node.start, r->node.end); t->ranges[i].r != r; i = (i + 1) & mask) {
        if (t->ranges[i].r == NULL)
            return;
    }
    t->ranges[i] = (struct ote_range_slot){0};
    /* Backward shift, as for handles. */
    for (j = (i + 1) & mask; t->ranges[j].r != NULL; j = (j + 1) & mask) {
        size_t home = range_home(t, t->ranges[j].start, t->ranges[j].end);

        if (((j - home) & mask) >= ((j - i) & mask)) {
            t->ranges[i] = t->ranges[j];
            t->ranges[j] = (struct ote_range_slot){0};
            i            = j;
        }
    }
}

/* The user's region of the table over exactly [start, end) with that access (read lock). */
static ote_region_t *range_find(const ote_mem_table_t *t, uint64_t start, uint64_t end,
                                unsigned access)
{
    if (t->handles_cap == 0)
        return NULL;
    for (size_t i = range_home(t, start, end); t->ranges[i].r != NULL;
         i = (i + 1) & (t->handles_cap - 1)) {
        const struct ote_range_slot *s = &t->ranges[i];

        if (s->start == start && s->end == end && s->access == access && !s->owned)
            return s->r;
    }
    return NULL;
}

/* Under the write lock: room for extra more handles (and ranges) at half load. */
static ote_status_t handles_reserve(ote_mem_table_t *t, size_t extra)
{
    ote_region_t **old = t->handles;
    struct ote_range_slot *old_ranges = t->ranges;
    size_t old_cap     = t->handles_cap;
    size_t cap         = old_cap ? old_cap : 64;

    if (extra > SIZE_MAX / 4 - t->handles_count)
        return OTE_ERR_NO_MEMORY;
    while (cap < 2 * (t->handles_count + extra))
        cap *= 2;
    if (cap == old_cap)
        return OTE_OK;
    t->handles = calloc(cap, sizeof(*t->handles));
    t->ranges  = aligned_alloc(32, cap * sizeof(*t->ranges)); /* cap >= 64 */
    if (t->ranges != NULL)
        memset(t->ranges, 0, cap * sizeof(*t->ranges));
    if (t->handles == NULL || t->ranges == NULL) {
        free(t->handles);
        free(t->ranges);
        t->handles = old;
        t->ranges  = old_ranges;
        return OTE_ERR_NO_MEMORY;
    }
    t->handles_cap   = cap;
    t->handles_count = 0;
    for (size_t i = 0; i < old_cap; i++) {
        if (old[i] != NULL) {
            handle_put(t, old[i]);
            range_put(t, old[i]);
        }
    }
    free(old);
    free(old_ranges);
    return OTE_OK;
}

static void handle_remove(ote_mem_table_t *t, ote_region_t *r)
{
    size_t i, j, mask = t->handles_cap - 1;

    if (!handle_find(t, r, &i))
        return;
    t->handles[i] = NULL;
    t->handles_count--;
    /* Backward shift: move later members of the probe run into the hole. */
    for (j = (i + 1) & mask; t->handles[j] != NULL; j = (j + 1) & mask) {
        size_t home = handle_slot(t, t->handles[j]);

        if (((j - home) & mask) >= ((j - i) & mask)) {
            t->handles[i] = t->handles[j];
            t->handles[j] = NULL;
            i             = j;
        }
    }
}

/* ---- table lifetime ----------------------------------------------------- */

static void table_put(ote_mem_table_t *t)
{
    if (atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) != 1)
        return;
    ote_rcache_destroy(t->rcache);
    pthread_mutex_destroy(&t->wlock);
    pthread_rwlock_destroy(&t->md_lock);
    free(t->handles);
    free(t->ranges);
    ote_sidx_fini(&t->index);
    free(t);
}

ote_status_t ote_mem_table_create(const ote_mem_table_params_t *params,
                                  ote_mem_table_t **table_p)
{
    ote_mem_table_t *t;
    ote_status_t status;

    if (table_p == NULL)
        return OTE_ERR_INVALID_PARAM;
    /* Aligned so that every reader slot has its cache line. */
    t = aligned_alloc(64, (sizeof(*t) + 63) & ~(size_t)63);
    if (t == NULL)
        return OTE_ERR_NO_MEMORY;
    memset(t, 0, sizeof(*t));
    if (pthread_mutex_init(&t->wlock, NULL) != 0) {
        free(t);
        return OTE_ERR_NO_MEMORY;
    }
    if (pthread_rwlock_init(&t->md_lock, NULL) != 0) {
        pthread_mutex_destroy(&t->wlock);
        free(t);
        return OTE_ERR_NO_MEMORY;
    }
    ote_sidx_init(&t->index);
    if (params != NULL)
        t->params = *params;
    status = ote_rcache_create(&t->params, t->mds, &t->num_mds, &t->rcache);
    if (status != OTE_OK) {
        pthread_rwlock_destroy(&t->md_lock);
        pthread_mutex_destroy(&t->wlock);
        free(t);
        return status;
    }
    atomic_init(&t->refs, 1);
    *table_p = t;
    return OTE_OK;
}

/* ---- regions ------------------------------------------------------------ */

/* Release what region_prepare() took, once the region is out of the table. */
static void region_release(ote_region_t *r, bool discard)
{
    ote_mem_table_t *t = r->table;

    for (size_t i = 0; i < OTE_MEM_MAX_MDS; i++) { /* also an md joining now */
        if (r->memh[i] != NULL && (t->mds[i]->flags & OTE_MD_FLAG_GRANTS_ACCESS))
            t->mds[i]->ops->mem_dereg(t->mds[i], r->memh[i]);
    }
    ote_rcache_put(t->rcache, r->reg, discard);
    if (r->holder != NULL)
        ote_mem_region_put(r->holder);
    if (r->owned) {
        /* The cache must not serve this range's old registrations again. */
        ote_rcache_invalidate(t->rcache, (uintptr_t)r->owned_base, r->owned_length);
        ote_mem_owned_free(r->owned_kind, r->owned_base, r->owned_length);
    }
    free(r);
    table_put(t);
}

void ote_mem_region_get(ote_region_t *r)
{
    atomic_fetch_add_explicit(&r->life, 1, memory_order_relaxed);
}

void ote_mem_region_put(ote_region_t *r)
{
    if (atomic_fetch_sub_explicit(&r->life, 1, memory_order_acq_rel) == 1)
        region_release(r, r->discard_reg);
}

bool ote_mem_region_covers(const ote_region_t *r, uint64_t addr, size_t length, unsigned access)
{
    return length != 0 && addr >= r->addr && addr - r->addr <= r->length &&
           length <= r->length - (addr - r->addr) && (r->access & access) == access;
}

bool ote_mem_region_reacquire(ote_region_t *r, uint64_t addr, size_t length, unsigned access)
{
    if (!ote_mem_region_covers(r, addr, length, access) || !atomic_load(&r->in_table))
        return false;
    ote_mem_region_get(r);
    return true;
}

bool ote_mem_region_access_begin(ote_region_t *r)
{
    /* Pairs with region_wait_accessors(): one of the two sees the other. */
    atomic_fetch_add(&r->accessors, 1);
    if (!atomic_load(&r->in_table)) {
        atomic_fetch_sub(&r->accessors, 1);
        return false;
    }
    return true;
}

void ote_mem_region_access_end(ote_region_t *r)
{
    atomic_fetch_sub_explicit(&r->accessors, 1, memory_order_release);
}

/* Accesses are single non-blocking system calls: this wait is short. */
static void region_wait_accessors(ote_region_t *r)
{
    while (atomic_load(&r->accessors) != 0)
        sched_yield();
}

void ote_mem_region_access_wait(ote_region_t *r)
{
    region_wait_accessors(r);
}

static ote_status_t desc_check(const ote_mem_desc_t *d)
{
    unsigned type;

    if (d->addr == NULL || d->length == 0 ||
        (uintptr_t)d->addr + d->length < (uintptr_t)d->addr ||
        (d->access & ~(unsigned)(OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE))) {
        ote_error("memory registration %p+%zu access %#x: invalid range or access", d->addr,
                  d->length, d->access);
        return OTE_ERR_INVALID_PARAM;
    }
    if (d->location != NULL && strcmp(d->location, "*") != 0)
        return ote_mem_location_parse(d->location, &type);
    return OTE_OK;
}

/*
 * A region for d, registered on every md that reaches it (through the
 * cache, or per region for mds whose registration grants access), not yet
 * in the table. Slow: called without the table lock.
 */
static ote_status_t region_prepare(ote_mem_table_t *t, const ote_mem_desc_t *d, bool owned,
                                   ote_region_t **r_p)
{
    ote_region_t *r;
    ote_status_t status;
    size_t i;

    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return OTE_ERR_NO_MEMORY;
    r->addr   = (uintptr_t)d->addr;
    r->length = d->length;
    r->memfd  = -1;
    r->access = d->access;
    r->owned  = owned;
    r->table  = t;
    if (d->location == NULL || strcmp(d->location, "*") == 0) {
        status = ote_mem_detect(d->addr, d->length, &r->mem_type, r->location,
                                sizeof(r->location));
    } else {
        status = ote_mem_location_parse(d->location, &r->mem_type);
        snprintf(r->location, sizeof(r->location), "%s", d->location);
    }
    if (status != OTE_OK)
        goto err_free;
    if (r->mem_type == OTE_MEM_TYPE_CUDA && t->params.gpu_direct == OTE_MEM_GPU_DIRECT_YES) {
        bool direct = false;

        for (i = 0; i < t->num_mds; i++)
            direct |= (t->mds[i]->mem_types & OTE_MEM_TYPE_CUDA) &&
                      !(t->mds[i]->flags & OTE_MD_FLAG_DEVICE_NATIVE);
        if (!direct) {
            ote_error("registering %p+%zu (%s): OTE_MEM_GPU_DIRECT=y but no network memory domain "
                      "can register GPU memory", d->addr, d->length, r->location);
            status = OTE_ERR_UNSUPPORTED;
            goto err_free;
        }
    }
    status = ote_rcache_get(t->rcache, r->addr, r->length, r->mem_type, r->access, !owned,
                            &r->reg, &r->reg_fresh);
    if (status != OTE_OK)
        goto err_free;
    for (i = 0; i < t->num_mds; i++) {
        ote_md_t *md = t->mds[i];

        if (!ote_mem_md_reaches(&t->params, md, r->mem_type))
            continue;
        if (!(md->flags & OTE_MD_FLAG_GRANTS_ACCESS)) {
            r->memh[i] = ote_rcache_memh(r->reg, i);
            continue;
        }
        status = md->ops->mem_reg(md, d->addr, d->length, d->access, &r->memh[i]);
        if (status != OTE_OK) {
            ote_error("memory domain %s: registering %p+%zu failed: %s", md->name, d->addr,
                      d->length, ote_status_string(status));
            goto err_dereg;
        }
    }
    atomic_fetch_add(&t->refs, 1);
    *r_p = r;
    return OTE_OK;

err_dereg:
    while (i-- > 0) {
        if (r->memh[i] != NULL && (t->mds[i]->flags & OTE_MD_FLAG_GRANTS_ACCESS))
            t->mds[i]->ops->mem_dereg(t->mds[i], r->memh[i]);
    }
    ote_rcache_put(t->rcache, r->reg, r->reg_fresh);
err_free:
    free(r);
    return status;
}

static bool node_owned(ote_itree_node_t *node, void *arg)
{
    (void)arg;
    return REGION_OF(node)->owned;
}

/*
 * Under the write lock, with a handle slot reserved: r enters the table; a
 * region inside engine-owned memory holds that memory's region.
 */
static ote_status_t table_link(ote_mem_table_t *t, ote_region_t *r)
{
    ote_itree_node_t *owner;
    ote_status_t status;

    r->node.start = r->addr;
    r->node.end   = r->addr + r->length;
    r->node.tie   = t->seq + 1;
    status        = ote_sidx_insert(&t->index, &r->node);
    if (status != OTE_OK)
        return status;
    owner = r->owned ? NULL
                     : ote_sidx_cover(&t->index, r->node.start, r->node.end, node_owned, NULL);
    if (owner != NULL) {
        r->holder = REGION_OF(owner);
        ote_mem_region_get(r->holder);
    }
    r->seq  = ++t->seq;
    r->refs = 1;
    atomic_init(&r->life, 1);
    atomic_init(&r->accessors, 0);
    atomic_store(&r->in_table, true);
    handle_put(t, r);
    range_put(t, r);
    t->generation++;
    return OTE_OK;
}

/* Under the write lock: r leaves the table; the caller drops its life ref. */
static void table_unlink(ote_mem_table_t *t, ote_region_t *r)
{
    ote_sidx_remove(&t->index, &r->node);
    handle_remove(t, r);
    range_remove(t, r);
    atomic_store(&r->in_table, false);
    t->generation++;
}

/* After table_unlink(): no access is in progress once this returns. */
static void region_retire(ote_region_t *r)
{
    region_wait_accessors(r);
    ote_mem_region_revoke_exports(r);
    ote_mem_region_put(r);
}

/* The user's region over exactly d's range with d's access (at most one: see register). */
static ote_region_t *table_find_dup(ote_mem_table_t *t, const ote_mem_desc_t *d)
{
    return range_find(t, (uintptr_t)d->addr, (uintptr_t)d->addr + d->length, d->access);
}

typedef struct {
    ote_region_t *region;
    bool          linked; /* by this call; else a reference taken */
} undo_t;

ote_status_t ote_mem_table_register(ote_mem_table_t *t, const ote_mem_desc_t *descs,
                                    size_t count, ote_region_t **regions_p)
{
    ote_region_t **fresh;
    undo_t *undo;
    ote_status_t status = OTE_OK;
    size_t i, nundo = 0;

    if (t == NULL || descs == NULL || regions_p == NULL || count == 0)
        return OTE_ERR_INVALID_PARAM;
    for (i = 0; i < count; i++) {
        status = desc_check(&descs[i]);
        if (status != OTE_OK)
            return status;
    }
    pthread_rwlock_rdlock(&t->md_lock); /* no md joins until the regions are linked */
    fresh = calloc(count, sizeof(*fresh));
    undo  = calloc(count, sizeof(*undo));
    if (fresh == NULL || undo == NULL) {
        status = OTE_ERR_NO_MEMORY;
        goto out;
    }
    /*
     * Register on the mds outside the lock for ranges not registered yet,
     * then link everything in one critical section. A range another thread
     * registered meanwhile wins; what we prepared for it is released.
     */
    for (i = 0; i < count; i++) {
        ote_region_t *dup;

        table_rdlock(t);
        dup = table_find_dup(t, &descs[i]);
        table_rdunlock(t);
        if (dup != NULL)
            continue;
        status = region_prepare(t, &descs[i], false, &fresh[i]);
        if (status != OTE_OK)
            goto out;
    }

    ote_mem_table_wrlock(t);
    status = handles_reserve(t, count);
    if (status != OTE_OK)
        goto err_unwind_locked;
    for (i = 0; i < count; i++) {
        ote_region_t *dup = table_find_dup(t, &descs[i]);

        if (dup != NULL) {
            dup->refs++;
            regions_p[i]  = dup;
            undo[nundo++] = (undo_t){.region = dup, .linked = false};
            continue;
        }
        if (fresh[i] == NULL) {
            /* Was there at the first look and went away since. */
            ote_mem_table_wrunlock(t);
            status = region_prepare(t, &descs[i], false, &fresh[i]);
            ote_mem_table_wrlock(t);
            if (status == OTE_OK)
                status = handles_reserve(t, count - i);
            if (status != OTE_OK)
                goto err_unwind_locked;
            i--; /* look again under the lock */
            continue;
        }
        status = table_link(t, fresh[i]);
        if (status != OTE_OK)
            goto err_unwind_locked;
        regions_p[i]  = fresh[i];
        undo[nundo++] = (undo_t){.region = fresh[i], .linked = true};
        fresh[i]      = NULL;
    }
    ote_mem_table_wrunlock(t);
    status = OTE_OK;
    goto out;

err_unwind_locked:
    /* Drop every reference this call took; unlink what it linked. */
    for (size_t k = nundo; k-- > 0;) {
        ote_region_t *r = undo[k].region;

        if (--r->refs == 0) {
            table_unlink(t, r);
            /*
             * Registrations made for this call are undone, not cached: every
             * region it linked discards, for the one that drops a shared
             * entry last may be one that found it made by another of the call.
             */
            r->discard_reg = undo[k].linked;
        } else {
            undo[k].region = NULL;
        }
    }
    ote_mem_table_wrunlock(t);
    for (size_t k = 0; k < nundo; k++) {
        if (undo[k].region != NULL)
            region_retire(undo[k].region);
    }
    for (i = 0; i < count; i++)
        regions_p[i] = NULL;
out:
    /* Prepared and not linked: on a failure none of their registrations stays cached. */
    for (i = 0; fresh != NULL && i < count; i++) {
        if (fresh[i] != NULL)
            region_release(fresh[i], status != OTE_OK || fresh[i]->reg_fresh);
    }
    free(fresh);
    free(undo);
    pthread_rwlock_unlock(&t->md_lock);
    return status;
}

/* Write-lock t to release r: its region, engine-owned (owned) or the user's; else why not. */
static ote_status_t table_wrlock_release(ote_mem_table_t *t, ote_region_t *r, bool owned)
{
    const char *what = owned ? "freeing" : "deregistering";
    bool found;

    if (t == NULL || r == NULL)
        return OTE_ERR_INVALID_PARAM;
    ote_mem_table_wrlock(t);
    found = handle_find(t, r, NULL);
    if (found && r->owned == owned)
        return OTE_OK;
    ote_mem_table_wrunlock(t);
    if (!found) {
        ote_error("%s %p: not %s", what, (void *)r,
                  owned ? "engine-owned memory of this engine" : "a registered region");
        return OTE_ERR_NOT_REGISTERED;
    }
    ote_error("%s %p: %s is released with %s", what, (void *)r,
              owned ? "memory the user registered" : "engine-owned memory",
              owned ? "ote_mem_deregister" : "ote_mem_free");
    return OTE_ERR_INVALID_PARAM;
}

ote_status_t ote_mem_table_deregister(ote_mem_table_t *t, ote_region_t *r)
{
    ote_status_t status = table_wrlock_release(t, r, false);
    bool last = false;

    if (status != OTE_OK)
        return status;
    if (--r->refs == 0) {
        table_unlink(t, r);
        last = true;
    }
    ote_mem_table_wrunlock(t);
    if (last)
        region_retire(r);
    return OTE_OK;
}

ote_status_t ote_mem_table_alloc(ote_mem_table_t *t, size_t length, const char *location,
                                 unsigned access, void **addr_p, ote_region_t **region_p)
{
    ote_mem_desc_t d = {.length = length, .location = location, .access = access};
    unsigned type    = OTE_MEM_TYPE_HOST;
    int kind         = OTE_MEM_OWNED_HOST;
    size_t alloc_len;
    ote_region_t *r;
    ote_status_t status;

    if (t == NULL || length == 0 || addr_p == NULL || region_p == NULL)
        return OTE_ERR_INVALID_PARAM;
    status = ote_mem_owned_alloc(location, length, &d.addr, &alloc_len, &kind, &type);
    if (status != OTE_OK)
        return status;
    /* Pinned memory near a GPU is host memory: its node is detected. */
    if (kind == OTE_MEM_OWNED_CUDA_HOST)
        d.location = NULL;
    status = desc_check(&d);
    pthread_rwlock_rdlock(&t->md_lock);
    if (status == OTE_OK)
        status = region_prepare(t, &d, true, &r);
    if (status != OTE_OK) {
        pthread_rwlock_unlock(&t->md_lock);
        ote_mem_owned_free(kind, d.addr, alloc_len);
        return status;
    }
    r->owned_kind   = kind;
    r->owned_base   = d.addr;
    r->owned_length = alloc_len;
    r->memfd        = kind == OTE_MEM_OWNED_HOST ? ote_mem_host_memfd(d.addr) : -1;
    ote_mem_table_wrlock(t);
    status = handles_reserve(t, 1);
    if (status == OTE_OK)
        status = table_link(t, r);
    ote_mem_table_wrunlock(t);
    pthread_rwlock_unlock(&t->md_lock);
    if (status != OTE_OK) {
        region_release(r, true); /* also frees the memory */
        return status;
    }
    *addr_p   = d.addr;
    *region_p = r;
    return OTE_OK;
}

static bool not_this(ote_itree_node_t *node, void *arg)
{
    return REGION_OF(node) != arg;
}

ote_status_t ote_mem_table_free(ote_mem_table_t *t, ote_region_t *r)
{
    ote_status_t status = table_wrlock_release(t, r, true);

    if (status != OTE_OK)
        return status;
    /* Unmapping it under another registration would leave that one dangling. */
    if (ote_sidx_overlap(&t->index, r->addr, r->addr + r->length, not_this, r) != NULL) {
        ote_mem_table_wrunlock(t);
        ote_error("freeing %p: other registrations lie inside it; deregister them first",
                  (void *)r);
        return OTE_ERR_BUSY;
    }
    r->refs = 0;
    table_unlink(t, r);
    ote_mem_table_wrunlock(t);
    region_retire(r);
    return OTE_OK;
}

void ote_mem_table_destroy(ote_mem_table_t *t)
{
    if (t == NULL)
        return;
    for (;;) {
        ote_region_t *r = NULL;

        ote_mem_table_wrlock(t);
        if (t->index.count != 0) {
            r       = REGION_OF(ote_sidx_first(&t->index));
            r->refs = 0;
            table_unlink(t, r);
        }
        ote_mem_table_wrunlock(t);
        if (r == NULL)
            break;
        region_retire(r);
    }
    /* Before the engine closes its mds: registrations kept for reuse go. */
    ote_rcache_flush(t->rcache);
    if (atomic_load(&t->refs) > 1)
        ote_warn("memory table destroyed while %ld regions are still in use",
                 atomic_load(&t->refs) - 1);
    table_put(t);
}

size_t ote_mem_table_count(ote_mem_table_t *t)
{
    size_t n;

    table_rdlock(t);
    n = t->index.count;
    table_rdunlock(t);
    return n;
}

uint64_t ote_mem_table_generation(ote_mem_table_t *t)
{
    uint64_t g;

    table_rdlock(t);
    g = t->generation;
    table_rdunlock(t);
    return g;
}

typedef struct {
    unsigned      access;
    ote_region_t *other; /* covers, lacks the access */
} cover_match_t;

static bool cover_match(ote_itree_node_t *node, void *arg)
{
    ote_region_t *r   = REGION_OF(node);
    cover_match_t *m  = arg;

    if ((r->access & m->access) == m->access)
        return true;
    m->other = r;
    return false;
}

ote_status_t ote_mem_region_acquire(ote_mem_table_t *t, uint64_t addr, size_t length,
                                    unsigned access, ote_region_t **region_p)
{
    cover_match_t m = {.access = access};
    ote_itree_node_t *n;
    ote_status_t status;

    if (t == NULL || region_p == NULL || length == 0 || addr + length < addr)
        return OTE_ERR_INVALID_PARAM;
    table_rdlock(t);
    n = ote_sidx_cover(&t->index, addr, addr + length, cover_match, &m);
    if (n != NULL) {
        ote_mem_region_get(REGION_OF(n));
        status = OTE_OK;
    } else if (m.other != NULL) {
        status = OTE_ERR_ACCESS;
    } else {
        /* Does any region hold the first byte? Then the range runs past it. */
        status = ote_sidx_cover(&t->index, addr, addr + 1, NULL, NULL) != NULL
                     ? OTE_ERR_OUT_OF_BOUNDS
                     : OTE_ERR_NOT_REGISTERED;
    }
    table_rdunlock(t);
    if (status == OTE_OK)
        *region_p = REGION_OF(n);
    return status;
}

typedef struct {
    ote_mem_visit_cb_t cb;
    void              *arg;
} visit_ctx_t;

static void visit_one(ote_itree_node_t *node, void *arg)
{
    visit_ctx_t *ctx = arg;

    ctx->cb(REGION_OF(node), ctx->arg);
}

void ote_mem_table_visit(ote_mem_table_t *t, ote_mem_visit_cb_t cb, void *arg)
{
    visit_ctx_t ctx = {.cb = cb, .arg = arg};

    table_rdlock(t);
    ote_sidx_visit(&t->index, visit_one, &ctx);
    table_rdunlock(t);
}

typedef struct {
    ote_region_t **regions;
    size_t         count;
} collect_ctx_t;

static void collect_one(ote_itree_node_t *node, void *arg)
{
    collect_ctx_t *ctx = arg;

    ctx->regions[ctx->count++] = REGION_OF(node);
}

static int region_seq_cmp(const void *a, const void *b)
{
    const ote_region_t *x = *(ote_region_t *const *)a, *y = *(ote_region_t *const *)b;

    return x->seq < y->seq ? -1 : (x->seq > y->seq);
}

ote_status_t ote_mem_table_visit_ordered(ote_mem_table_t *t, ote_mem_visit_cb_t cb, void *arg)
{
    collect_ctx_t ctx = {0};

    table_rdlock(t);
    ctx.regions = malloc((t->index.count ? t->index.count : 1) * sizeof(*ctx.regions));
    if (ctx.regions == NULL) {
        table_rdunlock(t);
        return OTE_ERR_NO_MEMORY;
    }
    ote_sidx_visit(&t->index, collect_one, &ctx);
    qsort(ctx.regions, ctx.count, sizeof(*ctx.regions), region_seq_cmp);
    for (size_t i = 0; i < ctx.count; i++)
        cb(ctx.regions[i], arg);
    table_rdunlock(t);
    free(ctx.regions);
    return OTE_OK;
}

void ote_mem_table_rcache_stats(ote_mem_table_t *t, ote_mem_rcache_stats_t *stats_p)
{
    memset(stats_p, 0, sizeof(*stats_p));
    ote_rcache_stats(t->rcache, stats_p);
}

void ote_mem_table_invalidate(ote_mem_table_t *t, uint64_t addr, size_t length)
{
    ote_rcache_invalidate(t->rcache, addr, length);
}
