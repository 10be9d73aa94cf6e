/*
 * Sorted interval index: the region table's lookup structure, laid out for
 * the cache. Entries are kept in (start, end, tie) order in leaves of up to
 * SIDX_LEAF entries; a top level holds, per leaf, its first start, its
 * largest end and the running maximum of those. A lookup is a binary search
 * over the top level (small, stays cached), one over the leaf's starts (a
 * few lines), then a look at the entry: a handful of cache misses at
 * 100,000 regions where a binary tree takes one per level.
 *
 * "Which entry covers [s, e)" walks left from the last entry starting at or
 * before s; running maxima of the ends (within a leaf, and across leaves)
 * stop the walk as soon as nothing further left can reach e, so disjoint
 * regions cost one step and nesting costs only what it must.
 */
#include "mem_int.h"

#include <stdlib.h>
#include <string.h>

#define SIDX_MERGE (SIDX_LEAF / 4)

typedef struct {
    uint64_t          end;
    uint64_t          pmax; /* max end of entries [0, this] of the leaf */
    ote_itree_node_t *node;
} sidx_ent_t;

struct ote_sidx_leaf {
    unsigned   n;
    uint64_t   start[SIDX_LEAF];
    sidx_ent_t ent[SIDX_LEAF];
};

static int sidx_key_cmp(const ote_itree_node_t *a, const ote_itree_node_t *b)
{
    if (a->start != b->start)
        return a->start < b->start ? -1 : 1;
    if (a->end != b->end)
        return a->end < b->end ? -1 : 1;
    if (a->tie != b->tie)
        return a->tie < b->tie ? -1 : 1;
    return 0;
}

void ote_sidx_init(ote_sidx_t *x)
{
    memset(x, 0, sizeof(*x));
}

void ote_sidx_fini(ote_sidx_t *x)
{
    for (size_t i = 0; i < x->nleaves; i++)
        free(x->leaves[i]);
    free(x->leaves);
    free(x->first);
    free(x->lmax);
    free(x->tpmax);
    memset(x, 0, sizeof(*x));
}

/* Last index in [0, n) with a[i] <= v, or -1. */
static long last_le(const uint64_t *a, size_t n, uint64_t v)
{
    size_t lo = 0, hi = n;

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;

        if (a[mid] <= v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (long)lo - 1;
}

static void leaf_pmax_from(struct ote_sidx_leaf *l, unsigned from)
{
    uint64_t m = from > 0 ? l->ent[from - 1].pmax : 0;

    for (unsigned i = from; i < l->n; i++) {
        if (l->ent[i].end > m)
            m = l->ent[i].end;
        l->ent[i].pmax = m;
    }
}

/* Leaf li changed: refresh its summary and the running maxima after it. */
static void top_update(ote_sidx_t *x, size_t li)
{
    struct ote_sidx_leaf *l = x->leaves[li];

    x->first[li] = l->start[0];
    x->lmax[li]  = l->ent[l->n - 1].pmax;
    for (size_t k = li; k < x->nleaves; k++) {
        uint64_t m = x->lmax[k];

        if (k > 0 && x->tpmax[k - 1] > m)
            m = x->tpmax[k - 1];
        if (k > li && x->tpmax[k] == m)
            break; /* unchanged from here on */
        x->tpmax[k] = m;
    }
}

/* *array_p reallocated to cap elements of elem bytes; unchanged on failure. */
static ote_status_t grow(void *array_p, size_t cap, size_t elem)
{
    void *p = realloc(*(void **)array_p, cap * elem);

    if (p == NULL)
        return OTE_ERR_NO_MEMORY;
    *(void **)array_p = p;
    return OTE_OK;
}

static ote_status_t top_reserve(ote_sidx_t *x, size_t n)
{
    size_t cap = x->cap ? x->cap : 16;

    if (n <= x->cap)
        return OTE_OK;
    while (cap < n)
        cap *= 2;
    if (grow(&x->leaves, cap, sizeof(*x->leaves)) != OTE_OK ||
        grow(&x->first, cap, sizeof(*x->first)) != OTE_OK ||
        grow(&x->lmax, cap, sizeof(*x->lmax)) != OTE_OK ||
        grow(&x->tpmax, cap, sizeof(*x->tpmax)) != OTE_OK)
        return OTE_ERR_NO_MEMORY;
    x->cap   = cap;
    return OTE_OK;
}

/* Open a slot for a leaf at top index li (its arrays set by top_update). */
static void top_insert_slot(ote_sidx_t *x, size_t li, struct ote_sidx_leaf *l)
{
    size_t tail = x->nleaves - li;

    memmove(&x->leaves[li + 1], &x->leaves[li], tail * sizeof(*x->leaves));
    memmove(&x->first[li + 1], &x->first[li], tail * sizeof(*x->first));
    memmove(&x->lmax[li + 1], &x->lmax[li], tail * sizeof(*x->lmax));
    memmove(&x->tpmax[li + 1], &x->tpmax[li], tail * sizeof(*x->tpmax));
    x->leaves[li] = l;
    x->nleaves++;
}

static void top_remove_slot(ote_sidx_t *x, size_t li)
{
    size_t tail = x->nleaves - li - 1;

    memmove(&x->leaves[li], &x->leaves[li + 1], tail * sizeof(*x->leaves));
    memmove(&x->first[li], &x->first[li + 1], tail * sizeof(*x->first));
    memmove(&x->lmax[li], &x->lmax[li + 1], tail * sizeof(*x->lmax));
    memmove(&x->tpmax[li], &x->tpmax[li + 1], tail * sizeof(*x->tpmax));
    x->nleaves--;
}

/* Position of the first entry with key > node (leaf index, entry index). */
static void upper_bound(const ote_sidx_t *x, const ote_itree_node_t *node, size_t *li_p,
                        unsigned *ei_p)
{
    long li = last_le(x->first, x->nleaves, node->start);
    struct ote_sidx_leaf *l;
    unsigned i;

    if (li < 0) {
        *li_p = 0;
        *ei_p = 0;
        return;
    }
    /* Equal starts may spill into earlier leaves: walk back while needed. */
    while (li > 0 && x->first[li] == node->start &&
           sidx_key_cmp(node, x->leaves[li]->ent[0].node) < 0)
        li--;
    l = x->leaves[li];
    i = (unsigned)(last_le(l->start, l->n, node->start) + 1);
    while (i > 0 && sidx_key_cmp(node, l->ent[i - 1].node) < 0)
        i--;
    *li_p = (size_t)li;
    *ei_p = i;
}

ote_status_t ote_sidx_reserve(ote_sidx_t *x, size_t extra)
{
    /* A split adds a leaf per insert at worst. */
    return top_reserve(x, x->nleaves + extra + 1);
}

ote_status_t ote_sidx_insert(ote_sidx_t *x, ote_itree_node_t *node)
{
    struct ote_sidx_leaf *l;
    ote_status_t status;
    size_t li;
    unsigned ei;

    status = top_reserve(x, x->nleaves + 1);
    if (status != OTE_OK)
        return status;
    if (x->nleaves == 0) {
        l = calloc(1, sizeof(*l));
        if (l == NULL)
            return OTE_ERR_NO_MEMORY;
        top_insert_slot(x, 0, l);
        li = 0;
        ei = 0;
    } else {
        upper_bound(x, node, &li, &ei);
        l = x->leaves[li];
    }
    if (l->n == SIDX_LEAF) {
        /* Split: the upper half moves to a new leaf right after. */
        struct ote_sidx_leaf *r = calloc(1, sizeof(*r));
        unsigned half           = SIDX_LEAF / 2;

        if (r == NULL)
            return OTE_ERR_NO_MEMORY;
        r->n = SIDX_LEAF - half;
        memcpy(r->start, &l->start[half], r->n * sizeof(r->start[0]));
        memcpy(r->ent, &l->ent[half], r->n * sizeof(r->ent[0]));
        l->n = half;
        leaf_pmax_from(r, 0);
        top_insert_slot(x, li + 1, r);
        top_update(x, li + 1);
        if (ei > half) {
            li++;
            ei -= half;
            l = r;
        }
    }
    memmove(&l->start[ei + 1], &l->start[ei], (l->n - ei) * sizeof(l->start[0]));
    memmove(&l->ent[ei + 1], &l->ent[ei], (l->n - ei) * sizeof(l->ent[0]));
    l->start[ei]    = node->start;
    l->ent[ei].end  = node->end;
    l->ent[ei].node = node;
    l->n++;
    leaf_pmax_from(l, ei);
    top_update(x, li);
    x->count++;
    return OTE_OK;
}

void ote_sidx_remove(ote_sidx_t *x, ote_itree_node_t *node)
{
    struct ote_sidx_leaf *l;
    size_t li;
    unsigned ei;

    if (x->nleaves == 0)
        return;
    upper_bound(x, node, &li, &ei);
    /* The entry itself sits just before its upper bound. */
    if (ei == 0) {
        if (li == 0)
            return;
        li--;
        ei = x->leaves[li]->n;
    }
    l = x->leaves[li];
    if (l->ent[ei - 1].node != node)
        return;
    ei--;
    memmove(&l->start[ei], &l->start[ei + 1], (l->n - ei - 1) * sizeof(l->start[0]));
    memmove(&l->ent[ei], &l->ent[ei + 1], (l->n - ei - 1) * sizeof(l->ent[0]));
    l->n--;
    x->count--;
    if (l->n == 0) {
        free(l);
        top_remove_slot(x, li);
        if (li < x->nleaves)
            top_update(x, li);
        else if (li > 0)
            top_update(x, li - 1);
        return;
    }
    leaf_pmax_from(l, ei);
    /* Keep leaves reasonably full: merge a small one into a neighbour. */
    if (l->n < SIDX_MERGE) {
        if (li + 1 < x->nleaves && l->n + x->leaves[li + 1]->n <= SIDX_LEAF / 2) {
            struct ote_sidx_leaf *r = x->leaves[li + 1];

            memcpy(&l->start[l->n], r->start, r->n * sizeof(r->start[0]));
            memcpy(&l->ent[l->n], r->ent, r->n * sizeof(r->ent[0]));
            leaf_pmax_from(l, l->n);
            l->n += r->n;
            leaf_pmax_from(l, 0);
            free(r);
            top_remove_slot(x, li + 1);
        } else if (li > 0 && l->n + x->leaves[li - 1]->n <= SIDX_LEAF / 2) {
            struct ote_sidx_leaf *p = x->leaves[li - 1];

            memcpy(&p->start[p->n], l->start, l->n * sizeof(l->start[0]));
            memcpy(&p->ent[p->n], l->ent, l->n * sizeof(l->ent[0]));
            p->n += l->n;
            leaf_pmax_from(p, 0);
            free(l);
            top_remove_slot(x, li);
            li--;
        }
    }
    top_update(x, li);
}

ote_itree_node_t *ote_sidx_cover(const ote_sidx_t *x, uint64_t start, uint64_t end,
                                 ote_itree_pred_t pred, void *arg)
{
    long li = last_le(x->first, x->nleaves, start);

    for (; li >= 0 && x->tpmax[li] >= end; li--) {
        const struct ote_sidx_leaf *l = x->leaves[li];
        long i;

        if (x->lmax[li] < end)
            continue;
        i = last_le(l->start, l->n, start);
        for (; i >= 0 && l->ent[i].pmax >= end; i--) {
            if (l->ent[i].end >= end && (pred == NULL || pred(l->ent[i].node, arg)))
                return l->ent[i].node;
        }
    }
    return NULL;
}

ote_itree_node_t *ote_sidx_overlap(const ote_sidx_t *x, uint64_t start, uint64_t end,
                                   ote_itree_pred_t pred, void *arg)
{
    long li;

    if (end <= start)
        return NULL;
    /* Entries that start before end, walked left while one may end after start. */
    for (li = last_le(x->first, x->nleaves, end - 1); li >= 0 && x->tpmax[li] > start; li--) {
        const struct ote_sidx_leaf *l = x->leaves[li];
        long i;

        if (x->lmax[li] <= start)
            continue;
        for (i = last_le(l->start, l->n, end - 1); i >= 0 && l->ent[i].pmax > start; i--) {
            if (l->ent[i].end > start && (pred == NULL || pred(l->ent[i].node, arg)))
                return l->ent[i].node;
        }
    }
    return NULL;
}

ote_itree_node_t *ote_sidx_find_range(const ote_sidx_t *x, uint64_t start, uint64_t end,
                                      ote_itree_pred_t pred, void *arg)
{
    long li = last_le(x->first, x->nleaves, start);

    /* Equal ranges are adjacent; they may begin in an earlier leaf. */
    for (; li >= 0; li--) {
        const struct ote_sidx_leaf *l = x->leaves[li];
        long i                        = last_le(l->start, l->n, start);

        for (; i >= 0 && l->start[i] == start; i--) {
            if (l->ent[i].end == end && (pred == NULL || pred(l->ent[i].node, arg)))
                return l->ent[i].node;
        }
        if (i >= 0)
            break; /* reached an entry that starts earlier */
    }
    return NULL;
}

ote_itree_node_t *ote_sidx_first(const ote_sidx_t *x)
{
    return x->nleaves ? x->leaves[0]->ent[0].node : NULL;
}

void ote_sidx_visit(const ote_sidx_t *x, void (*cb)(ote_itree_node_t *node, void *arg),
                    void *arg)
{
    for (size_t li = 0; li < x->nleaves; li++) {
        for (unsigned i = 0; i < x->leaves[li]->n; i++)
            cb(x->leaves[li]->ent[i].node, arg);
    }
}
