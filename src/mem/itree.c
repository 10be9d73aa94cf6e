/* Interval treap: ordered by (start, end, tie), augmented with max_end. */
#include "mem_int.h"

#include <stddef.h>

static int itree_key_cmp(uint64_t start, uint64_t end, uint64_t tie, const ote_itree_node_t *n)
{
    if (start != n->start)
        return start < n->start ? -1 : 1;
    if (end != n->end)
        return end < n->end ? -1 : 1;
    if (tie != n->tie)
        return tie < n->tie ? -1 : 1;
    return 0;
}

static void node_update(ote_itree_node_t *n)
{
    uint64_t m = n->end;

    if (n->left != NULL && n->left->max_end > m)
        m = n->left->max_end;
    if (n->right != NULL && n->right->max_end > m)
        m = n->right->max_end;
    n->max_end = m;
}

/* n's left or right child rotated up into its place (a right or left rotation); the new root. */
static ote_itree_node_t *rotate_up(ote_itree_node_t *n, bool right_child)
{
    ote_itree_node_t **up_p = right_child ? &n->right : &n->left;
    ote_itree_node_t *up    = *up_p;
    ote_itree_node_t **in_p = right_child ? &up->left : &up->right;

    *up_p = *in_p;
    *in_p = n;
    node_update(n);
    node_update(up);
    return up;
}

static ote_itree_node_t *insert(ote_itree_node_t *n, ote_itree_node_t *x)
{
    if (n == NULL)
        return x;
    if (itree_key_cmp(x->start, x->end, x->tie, n) < 0) {
        n->left = insert(n->left, x);
        if (n->left->prio > n->prio)
            n = rotate_up(n, false);
    } else {
        n->right = insert(n->right, x);
        if (n->right->prio > n->prio)
            n = rotate_up(n, true);
    }
    node_update(n);
    return n;
}

static ote_itree_node_t *remove_node(ote_itree_node_t *n, const ote_itree_node_t *x,
                                     bool *found_p)
{
    int c;

    if (n == NULL)
        return NULL;
    c = itree_key_cmp(x->start, x->end, x->tie, n);
    if (c < 0) {
        n->left = remove_node(n->left, x, found_p);
    } else if (c > 0) {
        n->right = remove_node(n->right, x, found_p);
    } else if (n->left == NULL || n->right == NULL) {
        *found_p = true;
        return n->left != NULL ? n->left : n->right;
    } else if (n->left->prio > n->right->prio) {
        n        = rotate_up(n, false);
        n->right = remove_node(n->right, x, found_p);
    } else {
        n       = rotate_up(n, true);
        n->left = remove_node(n->left, x, found_p);
    }
    node_update(n);
    return n;
}

void ote_itree_init(ote_itree_t *t)
{
    t->root  = NULL;
    t->count = 0;
    t->rng   = 0x9e3779b9u;
}

void ote_itree_insert(ote_itree_t *t, ote_itree_node_t *x)
{
    /* xorshift32: priorities only need to be well spread. */
    uint32_t r = t->rng;

    r ^= r << 13;
    r ^= r >> 17;
    r ^= r << 5;
    t->rng     = r;
    x->prio    = r;
    x->left    = NULL;
    x->right   = NULL;
    x->max_end = x->end;
    t->root    = insert(t->root, x);
    t->count++;
}

void ote_itree_remove(ote_itree_t *t, ote_itree_node_t *x)
{
    bool found = false;

    t->root = remove_node(t->root, x, &found);
    if (found)
        t->count--;
    x->left = x->right = NULL;
}

static ote_itree_node_t *find_range(ote_itree_node_t *n, uint64_t start, uint64_t end,
                                    ote_itree_pred_t pred, void *arg)
{
    while (n != NULL) {
        ote_itree_node_t *r;

        if (start != n->start || end != n->end) {
            n = (start < n->start || (start == n->start && end < n->end)) ? n->left : n->right;
            continue;
        }
        /* Equal ranges differ by tie only: they may sit on both sides. */
        if (pred == NULL || pred(n, arg))
            return n;
        r = find_range(n->left, start, end, pred, arg);
        if (r != NULL)
            return r;
        n = n->right;
    }
    return NULL;
}

ote_itree_node_t *ote_itree_find_range(const ote_itree_t *t, uint64_t start, uint64_t end,
                                       ote_itree_pred_t pred, void *arg)
{
    return find_range(t->root, start, end, pred, arg);
}

static ote_itree_node_t *cover(ote_itree_node_t *n, uint64_t start, uint64_t end,
                               ote_itree_pred_t pred, void *arg)
{
    while (n != NULL && n->max_end >= end) {
        if (n->start <= start) {
            ote_itree_node_t *r;

            if (n->end >= end && (pred == NULL || pred(n, arg)))
                return n;
            /* The left subtree starts no later; max_end prunes it. */
            r = cover(n->left, start, end, pred, arg);
            if (r != NULL)
                return r;
            n = n->right;
        } else {
            /* n and its right subtree start after start: none covers. */
            n = n->left;
        }
    }
    return NULL;
}

ote_itree_node_t *ote_itree_cover(const ote_itree_t *t, uint64_t start, uint64_t end,
                                  ote_itree_pred_t pred, void *arg)
{
    return cover(t->root, start, end, pred, arg);
}

static ote_itree_node_t *overlap(ote_itree_node_t *n, uint64_t start, uint64_t end)
{
    while (n != NULL && n->max_end > start) {
        ote_itree_node_t *r;

        if (n->start < end && n->end > start)
            return n;
        r = overlap(n->left, start, end);
        if (r != NULL)
            return r;
        if (n->start >= end)
            return NULL; /* the right subtree starts even later */
        n = n->right;
    }
    return NULL;
}

ote_itree_node_t *ote_itree_overlap(const ote_itree_t *t, uint64_t start, uint64_t end)
{
    return overlap(t->root, start, end);
}

static void visit(ote_itree_node_t *n, void (*cb)(ote_itree_node_t *, void *), void *arg)
{
    while (n != NULL) {
        visit(n->left, cb, arg);
        cb(n, arg);
        n = n->right;
    }
}

void ote_itree_visit(const ote_itree_t *t, void (*cb)(ote_itree_node_t *, void *), void *arg)
{
    visit(t->root, cb, arg);
}
