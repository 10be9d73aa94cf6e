/*
 * Region table: an interval treap keyed by (addr, length, access), each
 * node carrying the largest end address in its subtree so that "which
 * region covers [a, a+len)" prunes whole subtrees. Lookups take a read lock;
 * registration and removal take the write lock.
 */
#include "mem.h"

#include "core/log.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rnode {
    ote_region_t *region;
    struct rnode *left, *right;
    uint32_t      prio;
    uint64_t      max_end;
} rnode_t;

struct ote_mem_table {
    pthread_rwlock_t       lock;
    rnode_t               *root;
    size_t                 count;
    uint64_t               generation;
    uint64_t               seq;
    uint32_t               rng;
    ote_md_t              *mds[OTE_MEM_MAX_MDS];
    size_t                 num_mds;
    ote_mem_table_params_t params;
};

static inline uint64_t region_end(const ote_region_t *r)
{
    return r->addr + r->length;
}

static int key_cmp(uint64_t addr, size_t length, unsigned access, const ote_region_t *r)
{
    if (addr != r->addr)
        return addr < r->addr ? -1 : 1;
    if (length != r->length)
        return length < r->length ? -1 : 1;
    if (access != r->access)
        return access < r->access ? -1 : 1;
    return 0;
}

static void node_update(rnode_t *n)
{
    uint64_t m = region_end(n->region);

    if (n->left && n->left->max_end > m)
        m = n->left->max_end;
    if (n->right && n->right->max_end > m)
        m = n->right->max_end;
    n->max_end = m;
}

static rnode_t *rotate_right(rnode_t *n)
{
    rnode_t *l = n->left;

    n->left  = l->right;
    l->right = n;
    node_update(n);
    node_update(l);
    return l;
}

static rnode_t *rotate_left(rnode_t *n)
{
    rnode_t *r = n->right;

    n->right = r->left;
    r->left  = n;
    node_update(n);
    node_update(r);
    return r;
}

static rnode_t *treap_insert(rnode_t *n, rnode_t *x)
{
    if (n == NULL)
        return x;
    if (key_cmp(x->region->addr, x->region->length, x->region->access, n->region) < 0) {
        n->left = treap_insert(n->left, x);
        if (n->left->prio > n->prio)
            n = rotate_right(n);
    } else {
        n->right = treap_insert(n->right, x);
        if (n->right->prio > n->prio)
            n = rotate_left(n);
    }
    node_update(n);
    return n;
}

static rnode_t *treap_remove(rnode_t *n, const ote_region_t *r, rnode_t **removed_p)
{
    int c;

    if (n == NULL)
        return NULL;
    c = key_cmp(r->addr, r->length, r->access, n->region);
    if (c < 0) {
        n->left = treap_remove(n->left, r, removed_p);
    } else if (c > 0) {
        n->right = treap_remove(n->right, r, removed_p);
    } else if (n->left == NULL || n->right == NULL) {
        rnode_t *child = n->left ? n->left : n->right;

        *removed_p = n;
        return child;
    } else if (n->left->prio > n->right->prio) {
        n        = rotate_right(n);
        n->right = treap_remove(n->right, r, removed_p);
    } else {
        n       = rotate_left(n);
        n->left = treap_remove(n->left, r, removed_p);
    }
    node_update(n);
    return n;
}

static rnode_t *treap_find(rnode_t *n, uint64_t addr, size_t length, unsigned access)
{
    while (n != NULL) {
        int c = key_cmp(addr, length, access, n->region);

        if (c == 0)
            return n;
        n = c < 0 ? n->left : n->right;
    }
    return NULL;
}

/*
 * Search regions with start <= a and end >= need_end. Returns a region with
 * every bit of access if one exists; else sets *other_p to any match.
 */
static ote_region_t *treap_cover(rnode_t *n, uint64_t a, uint64_t need_end, unsigned access,
                                 ote_region_t **other_p)
{
    ote_region_t *r;

    while (n != NULL && n->max_end >= need_end) {
        if (n->region->addr <= a) {
            if (region_end(n->region) >= need_end) {
                if ((n->region->access & access) == access)
                    return n->region;
                *other_p = n->region;
            }
            r = treap_cover(n->left, a, need_end, access, other_p);
            if (r != NULL)
                return r;
            n = n->right;
        } else {
            n = n->left;
        }
    }
    return NULL;
}

static uint32_t table_rand(ote_mem_table_t *t)
{
    /* xorshift32: priorities only need to be well spread. */
    uint32_t x = t->rng;

    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    t->rng = x;
    return x;
}

ote_status_t ote_mem_table_create(const ote_mem_table_params_t *params,
                                  ote_mem_table_t **table_p)
{
    ote_mem_table_t *t = calloc(1, sizeof(*t));

    if (t == NULL)
        return OTE_ERR_NO_MEMORY;
    if (pthread_rwlock_init(&t->lock, NULL) != 0) {
        free(t);
        return OTE_ERR_NO_MEMORY;
    }
    t->rng = 0x9e3779b9u;
    if (params != NULL)
        t->params = *params;
    *table_p = t;
    return OTE_OK;
}

static void region_destroy(ote_region_t *r)
{
    ote_mem_table_t *t = r->table;

    for (size_t i = 0; i < t->num_mds; i++) {
        if (r->memh[i] != NULL)
            t->mds[i]->ops->mem_dereg(t->mds[i], r->memh[i]);
    }
    if (r->owned)
        ote_mem_host_free(r->owned_base, r->owned_length);
    free(r);
}

void ote_mem_region_get(ote_region_t *r)
{
    atomic_fetch_add_explicit(&r->life, 1, memory_order_relaxed);
}

void ote_mem_region_put(ote_region_t *r)
{
    if (atomic_fetch_sub_explicit(&r->life, 1, memory_order_acq_rel) == 1)
        region_destroy(r);
}

bool ote_mem_region_access_begin(ote_region_t *r)
{
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
    while (atomic_load_explicit(&r->accessors, memory_order_acquire) != 0)
        sched_yield();
}

static void treap_free_all(rnode_t *n, ote_region_t ***list_p)
{
    if (n == NULL)
        return;
    treap_free_all(n->left, list_p);
    treap_free_all(n->right, list_p);
    *(*list_p)++ = n->region;
    free(n);
}

void ote_mem_table_destroy(ote_mem_table_t *t)
{
    ote_region_t **list, **p;
    size_t n;

    if (t == NULL)
        return;
    pthread_rwlock_wrlock(&t->lock);
    n    = t->count;
    list = calloc(n ? n : 1, sizeof(*list));
    if (list != NULL) {
        p = list;
        treap_free_all(t->root, &p);
    }
    t->root  = NULL;
    t->count = 0;
    pthread_rwlock_unlock(&t->lock);
    for (size_t i = 0; list != NULL && i < n; i++) {
        atomic_store(&list[i]->in_table, false);
        region_wait_accessors(list[i]);
        ote_mem_region_put(list[i]);
    }
    free(list);
    pthread_rwlock_destroy(&t->lock);
    free(t);
}

ote_status_t ote_mem_table_add_md(ote_mem_table_t *t, ote_md_t *md)
{
    ote_status_t status = OTE_OK;

    pthread_rwlock_wrlock(&t->lock);
    if (t->count != 0 || t->num_mds == OTE_MEM_MAX_MDS)
        status = OTE_ERR_BUSY;
    else
        t->mds[t->num_mds++] = md;
    pthread_rwlock_unlock(&t->lock);
    return status;
}

size_t ote_mem_table_num_mds(const ote_mem_table_t *t)
{
    return t->num_mds;
}

ote_md_t *ote_mem_table_md(const ote_mem_table_t *t, size_t index)
{
    return index < t->num_mds ? t->mds[index] : NULL;
}

size_t ote_mem_table_count(ote_mem_table_t *t)
{
    size_t n;

    pthread_rwlock_rdlock(&t->lock);
    n = t->count;
    pthread_rwlock_unlock(&t->lock);
    return n;
}

uint64_t ote_mem_table_generation(ote_mem_table_t *t)
{
    uint64_t g;

    pthread_rwlock_rdlock(&t->lock);
    g = t->generation;
    pthread_rwlock_unlock(&t->lock);
    return g;
}

/* Register a new region on every memory domain that reaches it. */
static ote_status_t region_md_register(ote_mem_table_t *t, ote_region_t *r)
{
    ote_status_t status;
    size_t i;

    for (i = 0; i < t->num_mds; i++) {
        if (!(t->mds[i]->mem_types & r->mem_type))
            continue;
        status = t->mds[i]->ops->mem_reg(t->mds[i], (void *)(uintptr_t)r->addr, r->length,
                                         r->access, &r->memh[i]);
        if (status != OTE_OK) {
            ote_error("memory domain %s: registering %p+%zu failed: %s", t->mds[i]->name,
                      (void *)(uintptr_t)r->addr, r->length, ote_status_string(status));
            goto err;
        }
    }
    return OTE_OK;

err:
    while (i-- > 0) {
        if (r->memh[i] != NULL) {
            t->mds[i]->ops->mem_dereg(t->mds[i], r->memh[i]);
            r->memh[i] = NULL;
        }
    }
    return status;
}

static ote_status_t region_new(ote_mem_table_t *t, const ote_mem_desc_t *d, ote_region_t **r_p)
{
    ote_region_t *r;
    ote_status_t status;
    unsigned loc_type;

    if (d->addr == NULL || d->length == 0 ||
        (uintptr_t)d->addr + d->length < (uintptr_t)d->addr ||
        (d->access & ~(unsigned)(OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE)))
        return OTE_ERR_INVALID_PARAM;
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return OTE_ERR_NO_MEMORY;
    r->addr   = (uintptr_t)d->addr;
    r->length = d->length;
    r->access = d->access;
    r->table  = t;
    if (d->location == NULL || strcmp(d->location, "*") == 0) {
        status = ote_mem_detect(d->addr, d->length, &r->mem_type, r->location,
                                sizeof(r->location));
    } else {
        status = ote_mem_location_parse(d->location, &loc_type);
        if (status == OTE_OK) {
            r->mem_type = loc_type;
            snprintf(r->location, sizeof(r->location), "%s", d->location);
        }
    }
    if (status != OTE_OK) {
        free(r);
        return status;
    }
    status = region_md_register(t, r);
    if (status != OTE_OK) {
        free(r);
        return status;
    }
    *r_p = r;
    return OTE_OK;
}

/* Under the write lock: link r into the tree. */
static ote_status_t table_link(ote_mem_table_t *t, ote_region_t *r)
{
    rnode_t *n = calloc(1, sizeof(*n));

    if (n == NULL)
        return OTE_ERR_NO_MEMORY;
    n->region = r;
    n->prio   = table_rand(t);
    n->max_end = region_end(r);
    r->seq      = ++t->seq;
    r->refs     = 1;
    atomic_store(&r->in_table, true);
    atomic_store(&r->life, 1);
    t->root = treap_insert(t->root, n);
    t->count++;
    t->generation++;
    return OTE_OK;
}

/* Under the write lock: unlink r; the caller drops the table's life ref. */
static void table_unlink(ote_mem_table_t *t, ote_region_t *r)
{
    rnode_t *removed = NULL;

    t->root = treap_remove(t->root, r, &removed);
    free(removed);
    atomic_store(&r->in_table, false);
    t->count--;
    t->generation++;
}

ote_status_t ote_mem_table_register(ote_mem_table_t *t, const ote_mem_desc_t *descs,
                                    size_t count, ote_region_t **regions_p)
{
    ote_region_t **fresh;
    bool *dup;
    ote_status_t status = OTE_OK;
    size_t i;

    if (descs == NULL || regions_p == NULL || count == 0)
        return OTE_ERR_INVALID_PARAM;
    fresh = calloc(count, sizeof(*fresh));
    dup   = calloc(count, sizeof(*dup));
    if (fresh == NULL || dup == NULL) {
        free(fresh);
        free(dup);
        return OTE_ERR_NO_MEMORY;
    }
    /*
     * Memory-domain registration is the slow part: do it outside the lock
     * for ranges not registered yet, then link everything in one critical
     * section. A range registered by another thread meanwhile wins; ours is
     * dropped.
     */
    for (i = 0; i < count; i++) {
        rnode_t *n;

        pthread_rwlock_rdlock(&t->lock);
        n = treap_find(t->root, (uintptr_t)descs[i].addr, descs[i].length, descs[i].access);
        pthread_rwlock_unlock(&t->lock);
        if (n != NULL)
            continue;
        status = region_new(t, &descs[i], &fresh[i]);
        if (status != OTE_OK)
            goto err;
    }

    pthread_rwlock_wrlock(&t->lock);
    for (i = 0; i < count; i++) {
        rnode_t *n = treap_find(t->root, (uintptr_t)descs[i].addr, descs[i].length,
                                descs[i].access);

        if (n != NULL) {
            n->region->refs++;
            regions_p[i] = n->region;
            dup[i]       = true;
            continue;
        }
        if (fresh[i] == NULL) {
            /* Was there at the first look and went away since: register now. */
            pthread_rwlock_unlock(&t->lock);
            status = region_new(t, &descs[i], &fresh[i]);
            pthread_rwlock_wrlock(&t->lock);
            if (status != OTE_OK)
                goto err_unwind_locked;
            i--; /* look again under the lock */
            continue;
        }
        status = table_link(t, fresh[i]);
        if (status != OTE_OK)
            goto err_unwind_locked;
        regions_p[i] = fresh[i];
        fresh[i]     = NULL;
    }
    pthread_rwlock_unlock(&t->lock);
    /* Regions prepared but not used (raced duplicates). */
    for (i = 0; i < count; i++) {
        if (fresh[i] != NULL)
            region_destroy(fresh[i]);
    }
    free(fresh);
    free(dup);
    return OTE_OK;

err_unwind_locked:
    /* Undo what this call linked or referenced: entries [0, i). */
    while (i-- > 0) {
        ote_region_t *r = regions_p[i];

        if (dup[i]) {
            r->refs--;
            if (r->refs == 0) {
                table_unlink(t, r);
                fresh[i] = r; /* drop its table reference after unlock */
            }
        } else {
            table_unlink(t, r);
            fresh[i] = r;
        }
        regions_p[i] = NULL;
    }
    pthread_rwlock_unlock(&t->lock);
    for (i = 0; i < count; i++) {
        if (fresh[i] != NULL) {
            if (fresh[i]->seq != 0)
                ote_mem_region_put(fresh[i]);
            else
                region_destroy(fresh[i]);
        }
    }
    free(fresh);
    free(dup);
    return status;
err:
    while (i-- > 0) {
        if (fresh[i] != NULL)
            region_destroy(fresh[i]);
    }
    free(fresh);
    free(dup);
    return status;
}

ote_status_t ote_mem_table_register_owned(ote_mem_table_t *t, void *addr, size_t length,
                                          const char *location, unsigned access,
                                          ote_region_t **region_p)
{
    ote_mem_desc_t d = {.addr = addr, .length = length, .location = location, .access = access};
    ote_region_t *r;
    ote_status_t status;

    status = region_new(t, &d, &r);
    if (status != OTE_OK)
        return status;
    pthread_rwlock_wrlock(&t->lock);
    status = table_link(t, r);
    pthread_rwlock_unlock(&t->lock);
    if (status != OTE_OK) {
        region_destroy(r);
        return status;
    }
    *region_p = r;
    return OTE_OK;
}

ote_status_t ote_mem_table_deregister(ote_mem_table_t *t, ote_region_t *r)
{
    bool last = false;

    if (r == NULL || r->table != t)
        return OTE_ERR_INVALID_PARAM;
    pthread_rwlock_wrlock(&t->lock);
    if (!atomic_load(&r->in_table) || treap_find(t->root, r->addr, r->length, r->access) == NULL ||
        treap_find(t->root, r->addr, r->length, r->access)->region != r) {
        pthread_rwlock_unlock(&t->lock);
        return OTE_ERR_NOT_REGISTERED;
    }
    if (--r->refs == 0) {
        table_unlink(t, r);
        last = true;
    }
    pthread_rwlock_unlock(&t->lock);
    if (last) {
        region_wait_accessors(r);
        ote_mem_region_put(r);
    }
    return OTE_OK;
}

ote_status_t ote_mem_region_acquire(ote_mem_table_t *t, uint64_t addr, size_t length,
                                    unsigned access, ote_region_t **region_p)
{
    ote_region_t *r, *other = NULL;
    ote_status_t status;

    if (length == 0 || addr + length < addr)
        return OTE_ERR_INVALID_PARAM;
    pthread_rwlock_rdlock(&t->lock);
    r = treap_cover(t->root, addr, addr + length, access, &other);
    if (r != NULL) {
        ote_mem_region_get(r);
        status = OTE_OK;
    } else if (other != NULL) {
        status = OTE_ERR_ACCESS;
    } else {
        ote_region_t *unused = NULL;

        /* Does any region hold the first byte? Then the range runs past it. */
        status = treap_cover(t->root, addr, addr + 1, 0, &unused) != NULL
                     ? OTE_ERR_OUT_OF_BOUNDS
                     : OTE_ERR_NOT_REGISTERED;
    }
    pthread_rwlock_unlock(&t->lock);
    if (status == OTE_OK)
        *region_p = r;
    return status;
}

static void treap_visit(rnode_t *n, ote_mem_visit_cb_t cb, void *arg)
{
    if (n == NULL)
        return;
    treap_visit(n->left, cb, arg);
    cb(n->region, arg);
    treap_visit(n->right, cb, arg);
}

void ote_mem_table_visit(ote_mem_table_t *t, ote_mem_visit_cb_t cb, void *arg)
{
    pthread_rwlock_rdlock(&t->lock);
    treap_visit(t->root, cb, arg);
    pthread_rwlock_unlock(&t->lock);
}
