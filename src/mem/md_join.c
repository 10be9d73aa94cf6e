/*
 * The memory domains of a region table, and a domain that joins a table
 * holding regions already (a transport whose device appears while the
 * engine runs, engine_join.c).
 *
 * A joining domain takes the table's md_lock for writing: registrations
 * wait for it (their md registrations and their link into the table happen
 * under the read side), while lookups, data-path references and
 * deregistrations go on. So the regions in the table when the join starts
 * are all there are to cover, and every registration after it covers the
 * new domain too. Each region is held (a data-path reference) while it gets
 * its handle, so one deregistered meanwhile is released only after the
 * join, with the handle: nothing leaks. The domain's index counts in the
 * table (num_mds, what descriptors publish) only once every region has its
 * handle.
 */
#include "mem_int.h"

#include "base/log.h"

#include <stdlib.h>

typedef struct {
    ote_region_t **regions;
    size_t         count, cap;
} join_snap_t;

static void snap_one(ote_region_t *r, void *arg)
{
    join_snap_t *s = arg;

    /* Registrations wait for the join: the table can only have shrunk. */
    if (s->count == s->cap)
        return;
    ote_mem_region_get(r);
    s->regions[s->count++] = r;
}

/* Register each region on md j (md grants access: a handle per region). */
static ote_status_t join_regions(ote_mem_table_t *t, ote_md_t *md, size_t j, join_snap_t *s)
{
    ote_status_t status = OTE_OK;
    size_t i;

    for (i = 0; i < s->count; i++) {
        ote_region_t *r = s->regions[i];

        if (!ote_mem_md_reaches(&t->params, md, r->mem_type))
            continue;
        status = md->ops->mem_reg(md, (void *)(uintptr_t)r->addr, r->length, r->access,
                                  &r->memh[j]);
        if (status != OTE_OK) {
            r->memh[j] = NULL;
            ote_error("memory domain %s cannot join: registering region %p+%zu failed: %s",
                      md->name, (void *)(uintptr_t)r->addr, r->length,
                      ote_status_string(status));
            break;
        }
    }
    if (status == OTE_OK)
        return OTE_OK;
    while (i-- > 0) {
        ote_region_t *r = s->regions[i];

        if (r->memh[j] != NULL) {
            md->ops->mem_dereg(md, r->memh[j]);
            r->memh[j] = NULL;
        }
    }
    return status;
}

/* md j shares handles through the cache: its entries join, regions take theirs. */
static ote_status_t join_cached(ote_mem_table_t *t, ote_md_t *md, size_t j, join_snap_t *s)
{
    ote_mem_reg_t **regs = calloc(s->count ? s->count : 1, sizeof(*regs));
    ote_status_t status;

    if (regs == NULL)
        return OTE_ERR_NO_MEMORY;
    for (size_t i = 0; i < s->count; i++)
        regs[i] = s->regions[i]->reg;
    status = ote_rcache_md_join(t->rcache, j, regs, s->count);
    free(regs);
    if (status != OTE_OK)
        return status;
    for (size_t i = 0; i < s->count; i++) {
        ote_region_t *r = s->regions[i];

        if (ote_mem_md_reaches(&t->params, md, r->mem_type))
            r->memh[j] = ote_rcache_memh(r->reg, j);
    }
    return OTE_OK;
}

ote_status_t ote_mem_table_add_md(ote_mem_table_t *t, ote_md_t *md)
{
    join_snap_t snap = {0};
    ote_status_t status;
    size_t j;

    if (t == NULL || md == NULL || md->ops == NULL || md->ops->mem_reg == NULL ||
        md->ops->mem_dereg == NULL || md->ops->rkey_pack == NULL)
        return OTE_ERR_INVALID_PARAM;
    pthread_rwlock_wrlock(&t->md_lock);
    j = t->num_mds;
    for (size_t i = 0; i < j; i++) {
        if (t->mds[i] == md) {
            pthread_rwlock_unlock(&t->md_lock);
            return OTE_ERR_EXISTS;
        }
    }
    if (j == OTE_MEM_MAX_MDS) {
        pthread_rwlock_unlock(&t->md_lock);
        return OTE_ERR_BUSY;
    }
    /* Set before any handle on it exists: releasing a region looks it up. */
    t->mds[j]    = md;
    snap.cap     = ote_mem_table_count(t);
    snap.regions = calloc(snap.cap ? snap.cap : 1, sizeof(*snap.regions));
    if (snap.regions == NULL) {
        status = OTE_ERR_NO_MEMORY;
        goto out;
    }
    ote_mem_table_visit(t, snap_one, &snap);
    if (md->flags & OTE_MD_FLAG_GRANTS_ACCESS)
        status = join_regions(t, md, j, &snap);
    else
        status = join_cached(t, md, j, &snap);
    if (status == OTE_OK) {
        ote_mem_table_wrlock(t);
        t->num_mds = j + 1;
        t->generation++; /* what is published changes: rkeys on md j */
        ote_mem_table_wrunlock(t);
        if (snap.count != 0)
            ote_debug("memory domain %s joined: %zu regions registered on it", md->name,
                      snap.count);
    }
    for (size_t i = 0; i < snap.count; i++)
        ote_mem_region_put(snap.regions[i]);
out:
    if (status != OTE_OK)
        t->mds[j] = NULL;
    free(snap.regions);
    pthread_rwlock_unlock(&t->md_lock);
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
