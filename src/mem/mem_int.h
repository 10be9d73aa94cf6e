/*
 * Private to src/mem: the interval treap both the region table and the
 * registration cache index by, and the registration cache itself.
 */
#ifndef OTE_MEM_MEM_INT_H
#define OTE_MEM_MEM_INT_H

#include "mem.h"

#include <pthread.h>

/* ---- interval treap (itree.c) ------------------------------------------- */

/*
 * Nodes are ordered by (start, end, tie) and carry the largest end of their
 * subtree, so "which node covers [s, e)" prunes whole subtrees: O(log n)
 * expected when ranges do not nest deeply. Not thread-safe: callers lock.
 */
typedef struct {
    ote_itree_node_t *root;
    size_t            count;
    uint32_t          rng;
} ote_itree_t;

/* true: the node is the one wanted. */
typedef bool (*ote_itree_pred_t)(ote_itree_node_t *node, void *arg);

void              ote_itree_init(ote_itree_t *tree);
/* start, end and tie of node must be set; tie unique among equal ranges. */
void              ote_itree_insert(ote_itree_t *tree, ote_itree_node_t *node);
void              ote_itree_remove(ote_itree_t *tree, ote_itree_node_t *node);
/* A node with exactly [start, end) that pred accepts (pred NULL: any). */
ote_itree_node_t *ote_itree_find_range(const ote_itree_t *tree, uint64_t start, uint64_t end,
                                       ote_itree_pred_t pred, void *arg);
/* A node with node.start <= start and node.end >= end that pred accepts. */
ote_itree_node_t *ote_itree_cover(const ote_itree_t *tree, uint64_t start, uint64_t end,
                                  ote_itree_pred_t pred, void *arg);
/* Any node overlapping [start, end). */
ote_itree_node_t *ote_itree_overlap(const ote_itree_t *tree, uint64_t start, uint64_t end);
/* In order; cb must not change the tree. */
void              ote_itree_visit(const ote_itree_t *tree,
                                  void (*cb)(ote_itree_node_t *node, void *arg), void *arg);

/* ---- sorted interval index (sidx.c) -------------------------------------- */

/*
 * The region table's index: the same queries as the treap, laid out so that
 * a lookup among 100,000 ranges touches a handful of cache lines. Nodes use
 * start, end and tie only. Not thread-safe: callers lock.
 */
#define SIDX_LEAF 32

typedef struct {
    struct ote_sidx_leaf **leaves;
    uint64_t              *first; /* per leaf: its first start             */
    uint64_t              *lmax;  /* per leaf: its largest end             */
    uint64_t              *tpmax; /* per leaf: largest end up to this leaf */
    size_t                 nleaves, cap;
    size_t                 count;
} ote_sidx_t;

void              ote_sidx_init(ote_sidx_t *index);
void              ote_sidx_fini(ote_sidx_t *index);
/* Room so that the next extra inserts cannot fail for the top level. */
ote_status_t      ote_sidx_reserve(ote_sidx_t *index, size_t extra);
ote_status_t      ote_sidx_insert(ote_sidx_t *index, ote_itree_node_t *node);
void              ote_sidx_remove(ote_sidx_t *index, ote_itree_node_t *node);
ote_itree_node_t *ote_sidx_find_range(const ote_sidx_t *index, uint64_t start, uint64_t end,
                                      ote_itree_pred_t pred, void *arg);
ote_itree_node_t *ote_sidx_cover(const ote_sidx_t *index, uint64_t start, uint64_t end,
                                 ote_itree_pred_t pred, void *arg);
/* An entry overlapping [start, end) that pred accepts. */
ote_itree_node_t *ote_sidx_overlap(const ote_sidx_t *index, uint64_t start, uint64_t end,
                                   ote_itree_pred_t pred, void *arg);
ote_itree_node_t *ote_sidx_first(const ote_sidx_t *index);
void              ote_sidx_visit(const ote_sidx_t *index,
                                 void (*cb)(ote_itree_node_t *node, void *arg), void *arg);

/* ---- registration cache (rcache.c) -------------------------------------- */

typedef struct ote_rcache ote_rcache_t;

/*
 * mds/num_mds point at the table's md list; it grows under the table's
 * md_lock (ote_mem_table_add_md), and entries are registered holding it.
 */
ote_status_t ote_rcache_create(const ote_mem_table_params_t *params, ote_md_t *const *mds,
                               const size_t *num_mds, ote_rcache_t **rc_p);
/* Every entry must have been put. */
void         ote_rcache_destroy(ote_rcache_t *rc);
/* Drop every unreferenced entry now and keep none from here on. */
void         ote_rcache_flush(ote_rcache_t *rc);

/*
 * An entry covering [addr, addr+length) registered for at least access on
 * every md that reaches mem_type and lacks OTE_MD_FLAG_GRANTS_ACCESS: an
 * existing one (hit) or a new one (miss: registered now). shared: the entry
 * may serve other registrations (false for engine-owned memory). *fresh_p:
 * this call created the entry.
 */
ote_status_t ote_rcache_get(ote_rcache_t *rc, uint64_t addr, size_t length, unsigned mem_type,
                            unsigned access, bool shared, ote_mem_reg_t **reg_p, bool *fresh_p);
/*
 * Release one use. The last use keeps the entry cached unless discard is
 * set (undoing a failed registration), the cache does not retain, or its
 * memory was unmapped.
 */
void         ote_rcache_put(ote_rcache_t *rc, ote_mem_reg_t *reg, bool discard);
/* The entry's handle for md index i (NULL if none). */
void        *ote_rcache_memh(const ote_mem_reg_t *reg, size_t i);
void         ote_rcache_invalidate(ote_rcache_t *rc, uint64_t addr, size_t length);
void         ote_rcache_stats(ote_rcache_t *rc, ote_mem_rcache_stats_t *stats_p);
/*
 * Md index j, not yet counted in num_mds, joins: every entry the cache
 * indexes, and each of extra (entries the caller holds a use of), gets a
 * handle on it where it reaches the entry's memory. All or nothing: on
 * error no handle made on it remains. Callers hold the md_lock for writing.
 */
ote_status_t ote_rcache_md_join(ote_rcache_t *rc, size_t j, ote_mem_reg_t *const *extra,
                                size_t nextra);

/* ---- region table internals (region.c, md_join.c) ----------------------- */

/*
 * Reader slots of the table lock: a lookup increments the counter of its
 * thread's slot, on a cache line of its own, so concurrent lookups do not
 * bounce one shared line the way a pthread rwlock's reader count does.
 */
#define TABLE_RD_SLOTS 16

typedef struct {
    _Alignas(64) atomic_long readers;
} rd_slot_t;

struct ote_mem_table {
    rd_slot_t              rd[TABLE_RD_SLOTS];
    _Alignas(64) atomic_bool writing;
    pthread_mutex_t        wlock;
    ote_sidx_t             index;
    uint64_t               generation;
    uint64_t               seq;
    /*
     * mds[0, num_mds) are the table's; num_mds changes under the write
     * lock. md_lock: held for reading by every registration, from its md
     * registrations until its region is linked, and for writing by
     * ote_mem_table_add_md(), so that a domain joining a table that holds
     * regions sees every region, and every later registration sees it.
     */
    ote_md_t              *mds[OTE_MEM_MAX_MDS];
    size_t                 num_mds;
    pthread_rwlock_t       md_lock;
    ote_mem_table_params_t params;
    ote_rcache_t          *rcache;
    atomic_long            refs;       /* owner + one per region struct     */
    /* Handles in the table: open addressing, linear probing. */
    ote_region_t         **handles;
    size_t                 handles_cap; /* power of two                     */
    size_t                 handles_count;
    /*
     * The same regions by their range (start, end): a registration of a
     * range registered already finds it in one probe run (one or two cache
     * lines; a slot holds the range, access and owned of its region, so
     * the region itself is read only for its reference count), where the
     * index takes a few lines per level. handles_cap slots, linear
     * probing, home from a hash of the range (region.c).
     */
    struct ote_range_slot *ranges;
};

void ote_mem_table_wrlock(ote_mem_table_t *t);
void ote_mem_table_wrunlock(ote_mem_table_t *t);

/*
 * export.c: every peer that mapped r unmaps it (or loses its connection)
 * before this returns; engine memory that was exported is detached.
 */
void ote_mem_region_revoke_exports(ote_region_t *r);

#endif
