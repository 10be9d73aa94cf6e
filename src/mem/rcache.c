/*
 * Registration cache: memory-domain registrations (entries) indexed by
 * address range, shared by every region they cover, and kept after their
 * last region went away so that registering the same memory again costs a
 * tree lookup instead of an md registration (page pinning on RDMA mds).
 *
 * Unreferenced entries sit on an LRU list bounded by OTE_RCACHE_MAX_REGIONS
 * and OTE_RCACHE_MAX_SIZE. A kept registration must never outlive the
 * mapping it was made for (a new mapping at the same address would be
 * served stale pages), so entries are kept only while unmapped memory is
 * reported: through UCX's memory-event hooks (munmap, mremap, brk, ...) or,
 * with rcache_manual_invalidate, by the caller. Reports are queued without
 * locks that a thread inside munmap could be holding, and applied before
 * the next lookup.
 */
#include "mem_int.h"

#include "base/dlist.h"
#include "base/log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_UCX
#include <ucm/api/ucm.h>
#include <ucs/type/status.h>
#endif

#define RCACHE_INV_QUEUE 64

struct ote_mem_reg {
    ote_itree_node_t    node;      /* in rc->tree while indexed          */
    unsigned            mem_type;
    unsigned            access;
    long                users;     /* regions using it; under rc->lock   */
    bool                indexed;   /* findable by later registrations     */
    bool                stale;     /* memory unmapped: never reuse        */
    bool                joining;   /* taken by ote_rcache_md_join          */
    struct ote_mem_reg *lru_prev, *lru_next;
    void               *memh[OTE_MEM_MAX_MDS];
};

struct ote_rcache {
    pthread_mutex_t       lock;
    ote_itree_t           tree;
    ote_mem_table_params_t params;
    ote_md_t *const      *mds;
    const size_t         *num_mds;
    bool                  enable;   /* share and index entries (when it hears of unmaps) */
    bool                  retains;  /* keep unreferenced entries         */
    bool                  hooked;   /* memory-event handler installed    */
    size_t                max_size;
    size_t                max_regions;
    uint64_t              seq;
    /* LRU of unreferenced entries: head is the least recently used. */
    ote_mem_reg_t        *lru_head, *lru_tail;
    /* Counters as ote_rcache_stats reports them (but retains, above). */
    ote_mem_rcache_stats_t stats;
    /* Unmapped ranges reported, not yet applied. */
    pthread_spinlock_t    inv_lock;
    atomic_bool           inv_pending;
    unsigned              inv_count;
    bool                  inv_overflow;
    uint64_t              inv_addr[RCACHE_INV_QUEUE];
    uint64_t              inv_len[RCACHE_INV_QUEUE];
};

static inline uint64_t reg_bytes(const ote_mem_reg_t *g)
{
    return g->node.end - g->node.start;
}

static void rcache_lru_unlink(ote_rcache_t *rc, ote_mem_reg_t *g)
{
    OTE_DLIST2_REMOVE(rc->lru_head, rc->lru_tail, g, lru_prev, lru_next);
    g->lru_prev = g->lru_next = NULL;
    rc->stats.unreferenced--;
    rc->stats.unreferenced_bytes -= reg_bytes(g);
}

static void lru_push_tail(ote_rcache_t *rc, ote_mem_reg_t *g)
{
    OTE_DLIST2_PUSH_BACK(rc->lru_head, rc->lru_tail, g, lru_prev, lru_next);
    rc->stats.unreferenced++;
    rc->stats.unreferenced_bytes += reg_bytes(g);
}

static void reg_dereg(ote_rcache_t *rc, ote_mem_reg_t *g)
{
    /* Every slot: an md joining now may have given the entry a handle. */
    for (size_t i = 0; i < OTE_MEM_MAX_MDS; i++) {
        if (g->memh[i] != NULL)
            rc->mds[i]->ops->mem_dereg(rc->mds[i], g->memh[i]);
    }
    free(g);
}

/* Destroy a chain linked through lru_next; outside rc->lock. */
static void reg_destroy_chain(ote_rcache_t *rc, ote_mem_reg_t *chain)
{
    while (chain != NULL) {
        ote_mem_reg_t *next = chain->lru_next;

        reg_dereg(rc, chain);
        chain = next;
    }
}

/* Under rc->lock: take g out of the tree and LRU, onto *chain_p. */
static void reg_retire(ote_rcache_t *rc, ote_mem_reg_t *g, ote_mem_reg_t **chain_p)
{
    if (g->indexed) {
        ote_itree_remove(&rc->tree, &g->node);
        g->indexed = false;
    }
    if (g->users == 0) {
        rcache_lru_unlink(rc, g);
        rc->stats.entries--;
        g->lru_next = *chain_p;
        *chain_p    = g;
    } else {
        /* Still used: dropped by its last put. */
        g->stale = true;
    }
}

/* Under rc->lock: apply reported unmaps. */
static void rcache_apply_invalidations(ote_rcache_t *rc, ote_mem_reg_t **chain_p)
{
    uint64_t addr[RCACHE_INV_QUEUE], len[RCACHE_INV_QUEUE];
    unsigned n;
    bool all;

    if (!atomic_load_explicit(&rc->inv_pending, memory_order_acquire))
        return;
    pthread_spin_lock(&rc->inv_lock);
    n   = rc->inv_count;
    all = rc->inv_overflow;
    memcpy(addr, rc->inv_addr, n * sizeof(addr[0]));
    memcpy(len, rc->inv_len, n * sizeof(len[0]));
    rc->inv_count    = 0;
    rc->inv_overflow = false;
    atomic_store_explicit(&rc->inv_pending, false, memory_order_relaxed);
    pthread_spin_unlock(&rc->inv_lock);

    if (all) {
        /* The queue overflowed: forget every entry rather than guess. */
        addr[0] = 0;
        len[0]  = UINT64_MAX;
        n       = 1;
    }
    for (unsigned k = 0; k < n; k++) {
        uint64_t end = len[k] > UINT64_MAX - addr[k] ? UINT64_MAX : addr[k] + len[k];
        ote_itree_node_t *node;

        while ((node = ote_itree_overlap(&rc->tree, addr[k], end)) != NULL) {
            ote_mem_reg_t *g = (ote_mem_reg_t *)((char *)node - offsetof(ote_mem_reg_t, node));

            reg_retire(rc, g, chain_p);
            rc->stats.invalidations++;
        }
    }
}

/* Under rc->lock: evict from the LRU head until within the limits. */
static void rcache_evict(ote_rcache_t *rc, ote_mem_reg_t **chain_p)
{
    while (rc->lru_head != NULL &&
           (rc->stats.unreferenced > rc->max_regions ||
            rc->stats.unreferenced_bytes > rc->max_size)) {
        reg_retire(rc, rc->lru_head, chain_p);
        rc->stats.evictions++;
    }
}

void ote_rcache_invalidate(ote_rcache_t *rc, uint64_t addr, size_t length)
{
    if (length == 0)
        return;
    pthread_spin_lock(&rc->inv_lock);
    if (rc->inv_count < RCACHE_INV_QUEUE) {
        rc->inv_addr[rc->inv_count] = addr;
        rc->inv_len[rc->inv_count]  = length;
        rc->inv_count++;
    } else {
        rc->inv_overflow = true;
    }
    atomic_store_explicit(&rc->inv_pending, true, memory_order_release);
    pthread_spin_unlock(&rc->inv_lock);
}

#ifdef HAVE_UCX
/* Runs inside munmap and friends, in any thread: only queue the range. */
static void rcache_vm_unmapped(ucm_event_type_t type, ucm_event_t *event, void *arg)
{
    if (type == UCM_EVENT_VM_UNMAPPED)
        ote_rcache_invalidate(arg, (uintptr_t)event->vm_unmapped.address,
                              event->vm_unmapped.size);
}
#endif

ote_status_t ote_rcache_create(const ote_mem_table_params_t *params, ote_md_t *const *mds,
                               const size_t *num_mds, ote_rcache_t **rc_p)
{
    ote_rcache_t *rc = calloc(1, sizeof(*rc));

    if (rc == NULL)
        return OTE_ERR_NO_MEMORY;
    if (pthread_mutex_init(&rc->lock, NULL) != 0)
        goto err_free;
    if (pthread_spin_init(&rc->inv_lock, PTHREAD_PROCESS_PRIVATE) != 0)
        goto err_mutex;
    ote_itree_init(&rc->tree);
    rc->mds     = mds;
    rc->num_mds = num_mds;
    rc->params  = *params;
    rc->enable  = params->rcache_enable;
    rc->max_size    = params->rcache_max_size;
    rc->max_regions = params->rcache_max_regions > 0 ? (size_t)params->rcache_max_regions : 0;
    /*
     * Sharing an entry, even among regions in use, needs word of unmaps:
     * a region inside a deregistered one keeps that one's entry alive, and
     * memory mapped anew beside it must not find those old pages.
     */
    if (rc->enable && !params->rcache_manual_invalidate) {
#ifdef HAVE_UCX
        ucs_status_t us =
            ucm_set_event_handler(UCM_EVENT_VM_UNMAPPED, 1000, rcache_vm_unmapped, rc);

        rc->hooked = us == UCS_OK;
        if (!rc->hooked)
            ote_debug("registration cache: UCX memory events: %s", ucs_status_string(us));
#endif
        if (!rc->hooked) {
            ote_debug("registration cache: no memory-event hooks; every region registers "
                      "on its own, nothing is shared or kept");
            rc->enable = false;
        }
    }
    rc->retains = rc->enable && rc->max_regions > 0 && rc->max_size > 0;
    *rc_p = rc;
    return OTE_OK;

err_mutex:
    pthread_mutex_destroy(&rc->lock);
err_free:
    free(rc);
    return OTE_ERR_NO_MEMORY;
}

void ote_rcache_flush(ote_rcache_t *rc)
{
    ote_mem_reg_t *chain = NULL;

    pthread_mutex_lock(&rc->lock);
    rc->retains = false;
    while (rc->lru_head != NULL)
        reg_retire(rc, rc->lru_head, &chain);
    pthread_mutex_unlock(&rc->lock);
    reg_destroy_chain(rc, chain);
}

void ote_rcache_destroy(ote_rcache_t *rc)
{
    if (rc == NULL)
        return;
#ifdef HAVE_UCX
    if (rc->hooked)
        ucm_unset_event_handler(UCM_EVENT_VM_UNMAPPED, rcache_vm_unmapped, rc);
#endif
    ote_rcache_flush(rc);
    if (rc->stats.entries != 0)
        ote_warn("registration cache: %zu registrations still in use at destroy",
                 rc->stats.entries);
    pthread_spin_destroy(&rc->inv_lock);
    pthread_mutex_destroy(&rc->lock);
    free(rc);
}

typedef struct {
    unsigned mem_type;
    unsigned access;
} reg_match_t;

static bool reg_match(ote_itree_node_t *node, void *arg)
{
    const ote_mem_reg_t *g = (const ote_mem_reg_t *)((char *)node - offsetof(ote_mem_reg_t, node));
    const reg_match_t *m   = arg;

    return g->mem_type == m->mem_type && (g->access & m->access) == m->access;
}

/* Register a new entry on every md that reaches it; outside rc->lock. */
static ote_status_t reg_new(ote_rcache_t *rc, uint64_t addr, size_t length, unsigned mem_type,
                            unsigned access, ote_mem_reg_t **reg_p)
{
    ote_mem_reg_t *g = calloc(1, sizeof(*g));
    ote_status_t status;
    size_t i;

    if (g == NULL)
        return OTE_ERR_NO_MEMORY;
    g->node.start = addr;
    g->node.end   = addr + length;
    g->mem_type   = mem_type;
    g->access     = access;
    for (i = 0; i < *rc->num_mds; i++) {
        ote_md_t *md = rc->mds[i];

        if (!ote_mem_md_reaches(&rc->params, md, mem_type) ||
            (md->flags & OTE_MD_FLAG_GRANTS_ACCESS))
            continue;
        status = md->ops->mem_reg(md, (void *)(uintptr_t)addr, length, access, &g->memh[i]);
        if (status != OTE_OK) {
            ote_error("memory domain %s: registering %p+%zu failed: %s", md->name,
                      (void *)(uintptr_t)addr, length, ote_status_string(status));
            goto err;
        }
    }
    *reg_p = g;
    return OTE_OK;

err:
    while (i-- > 0) {
        if (g->memh[i] != NULL)
            rc->mds[i]->ops->mem_dereg(rc->mds[i], g->memh[i]);
    }
    free(g);
    return status;
}

ote_status_t ote_rcache_get(ote_rcache_t *rc, uint64_t addr, size_t length, unsigned mem_type,
                            unsigned access, bool shared, ote_mem_reg_t **reg_p, bool *fresh_p)
{
    reg_match_t match    = {.mem_type = mem_type, .access = access};
    ote_mem_reg_t *chain = NULL, *g = NULL;
    ote_status_t status;

    shared = shared && rc->enable;
    if (shared) {
        ote_itree_node_t *node;

        pthread_mutex_lock(&rc->lock);
        rcache_apply_invalidations(rc, &chain);
        node = ote_itree_cover(&rc->tree, addr, addr + length, reg_match, &match);
        if (node != NULL) {
            g = (ote_mem_reg_t *)((char *)node - offsetof(ote_mem_reg_t, node));
            if (g->users++ == 0)
                rcache_lru_unlink(rc, g);
            rc->stats.hits++;
        }
        pthread_mutex_unlock(&rc->lock);
        reg_destroy_chain(rc, chain);
        if (g != NULL) {
            *reg_p   = g;
            *fresh_p = false;
            return OTE_OK;
        }
    }

    /* Miss: md registration is the slow part, done without the lock. */
    status = reg_new(rc, addr, length, mem_type, access, &g);
    if (status != OTE_OK)
        return status;
    pthread_mutex_lock(&rc->lock);
    g->users = 1;
    rc->stats.entries++;
    rc->stats.misses++;
    if (shared) {
        g->node.tie = ++rc->seq;
        ote_itree_insert(&rc->tree, &g->node);
        g->indexed = true;
    }
    pthread_mutex_unlock(&rc->lock);
    *reg_p   = g;
    *fresh_p = true;
    return OTE_OK;
}

void ote_rcache_put(ote_rcache_t *rc, ote_mem_reg_t *g, bool discard)
{
    ote_mem_reg_t *chain = NULL;

    pthread_mutex_lock(&rc->lock);
    if (--g->users == 0) {
        /* GPU memory is not kept: cudaFree is no unmap the hooks hear of. */
        if (!discard && rc->retains && g->indexed && !g->stale &&
            g->mem_type == OTE_MEM_TYPE_HOST) {
            lru_push_tail(rc, g);
            rcache_evict(rc, &chain);
        } else {
            if (g->indexed) {
                ote_itree_remove(&rc->tree, &g->node);
                g->indexed = false;
            }
            rc->stats.entries--;
            g->lru_next = chain;
            chain       = g;
        }
    }
    pthread_mutex_unlock(&rc->lock);
    reg_destroy_chain(rc, chain);
}

void *ote_rcache_memh(const ote_mem_reg_t *g, size_t i)
{
    return g->memh[i];
}

void ote_rcache_stats(ote_rcache_t *rc, ote_mem_rcache_stats_t *s)
{
    ote_mem_reg_t *chain = NULL;

    pthread_mutex_lock(&rc->lock);
    rcache_apply_invalidations(rc, &chain);
    *s         = rc->stats;
    s->retains = rc->retains;
    pthread_mutex_unlock(&rc->lock);
    reg_destroy_chain(rc, chain);
}

/* Under rc->lock: take a use of g for the join (once). */
static void join_take(ote_rcache_t *rc, ote_mem_reg_t *g, ote_mem_reg_t **taken, size_t *n)
{
    if (g->joining)
        return;
    g->joining = true;
    if (g->users++ == 0)
        rcache_lru_unlink(rc, g);
    taken[(*n)++] = g;
}

typedef struct {
    ote_rcache_t   *rc;
    ote_mem_reg_t **taken;
    size_t          n;
} join_visit_t;

static void join_visit(ote_itree_node_t *node, void *arg)
{
    join_visit_t *v = arg;

    join_take(v->rc, (ote_mem_reg_t *)((char *)node - offsetof(ote_mem_reg_t, node)),
              v->taken, &v->n);
}

ote_status_t ote_rcache_md_join(ote_rcache_t *rc, size_t j, ote_mem_reg_t *const *extra,
                                size_t nextra)
{
    ote_md_t *md         = rc->mds[j];
    ote_mem_reg_t *chain = NULL;
    ote_status_t status  = OTE_OK;
    join_visit_t v       = {.rc = rc};
    size_t i;

    pthread_mutex_lock(&rc->lock);
    rcache_apply_invalidations(rc, &chain);
    v.taken = calloc(rc->tree.count + nextra + 1, sizeof(*v.taken));
    if (v.taken == NULL) {
        pthread_mutex_unlock(&rc->lock);
        reg_destroy_chain(rc, chain);
        return OTE_ERR_NO_MEMORY;
    }
    /* Indexed entries may serve later registrations: each needs a handle. */
    ote_itree_visit(&rc->tree, join_visit, &v);
    for (i = 0; i < nextra; i++)
        join_take(rc, extra[i], v.taken, &v.n);
    pthread_mutex_unlock(&rc->lock);
    reg_destroy_chain(rc, chain);

    /* Our uses keep every taken entry alive: register without the lock. */
    for (i = 0; i < v.n; i++) {
        ote_mem_reg_t *g = v.taken[i];

        if (!ote_mem_md_reaches(&rc->params, md, g->mem_type))
            continue;
        status = md->ops->mem_reg(md, (void *)(uintptr_t)g->node.start, reg_bytes(g), g->access,
                                  &g->memh[j]);
        if (status != OTE_OK) {
            g->memh[j] = NULL;
            ote_error("memory domain %s cannot join: registering cached %p+%zu failed: %s",
                      md->name, (void *)(uintptr_t)g->node.start, (size_t)reg_bytes(g),
                      ote_status_string(status));
            break;
        }
    }
    if (status != OTE_OK) {
        while (i-- > 0) {
            ote_mem_reg_t *g = v.taken[i];

            if (g->memh[j] != NULL) {
                md->ops->mem_dereg(md, g->memh[j]);
                g->memh[j] = NULL;
            }
        }
    }
    pthread_mutex_lock(&rc->lock);
    for (i = 0; i < v.n; i++)
        v.taken[i]->joining = false;
    pthread_mutex_unlock(&rc->lock);
    for (i = 0; i < v.n; i++)
        ote_rcache_put(rc, v.taken[i], false);
    free(v.taken);
    return status;
}
