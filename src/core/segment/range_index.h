/*
 * A page index over a peer's decoded descriptor (wire/desc.h): which of
 * its regions (sorted by address) start in each 4 KiB page that holds a
 * region start, in a hash table, so that the remote-range check of a
 * request (xfer/batch_check.c, ote_range_index_check) finds its place
 * among 100,000 regions with one probe instead of a binary search. A slot
 * also holds the start, end and access of the first region of its page:
 * where that is the page's only region (one region per page or more), a
 * request inside it is checked from the slot alone, one cache line, not
 * the descriptor's starts, ends and region entry (four lines that do not
 * stay in the cache when requests are spread over 100,000 regions). An
 * address in a page where no region starts (inside a large region, or in
 * no region) is found by the descriptor's own search. The index holds no
 * reference to the descriptor; the segment keeps it for one
 * (seg->range_index, under seg->lock) and builds it again when the
 * segment adopts another.
 */
#ifndef OTE_CORE_RANGE_INDEX_H
#define OTE_CORE_RANGE_INDEX_H

#include "core/wire/desc.h"

#include <stddef.h>
#include <stdint.h>

#define OTE_RANGE_INDEX_PAGE_SHIFT 12

/* 32 bytes, 32-byte aligned: a probe reads one cache line. */
typedef struct {
    uint64_t start;  /* the page's first region's; page: start >> OTE_RANGE_INDEX_PAGE_SHIFT */
    uint64_t end;    /* its addr + length */
    uint32_t first;  /* its place in the descriptor */
    uint32_t count;  /* regions starting in the page; 0: an empty slot */
    uint32_t access; /* its access */
    uint32_t unused;
} ote_range_slot_t;

/* An open-addressing hash table, at most 3/4 full (range_index.c builds it). */
typedef struct ote_range_index {
    ote_range_slot_t *slots;
    uint64_t          mask;  /* slots - 1, a power of two less one */
    unsigned          shift; /* 64 - log2(slots) */
} ote_range_index_t;

/*
 * The index of d's regions; NULL when out of memory or d has more regions
 * than it counts (2^32 - 1). d must stay as it is while the index is used.
 */
ote_range_index_t *ote_range_index_build(const ote_desc_t *d);
void               ote_range_index_free(ote_range_index_t *idx);

static inline uint64_t ote_range_index_slot(const ote_range_index_t *idx, uint64_t page)
{
    /* Fibonacci hashing: the high bits of the product. */
    return (page * 0x9e3779b97f4a7c15ull) >> idx->shift;
}

/* The slot of addr's page, or NULL when no region starts in that page. */
static inline const ote_range_slot_t *ote_range_index_probe(const ote_range_index_t *idx,
                                                            uint64_t addr)
{
    uint64_t page = addr >> OTE_RANGE_INDEX_PAGE_SHIFT;

    for (uint64_t s = ote_range_index_slot(idx, page);; s = (s + 1) & idx->mask) {
        const ote_range_slot_t *e = &idx->slots[s];

        if (e->count == 0)
            return NULL;
        if (e->start >> OTE_RANGE_INDEX_PAGE_SHIFT == page)
            return e;
    }
}

/* ote_desc_regions_upto(d, addr) where e is addr's page's slot (not NULL). */
static inline size_t ote_range_index_upto_in(const ote_range_slot_t *e, const ote_desc_t *d,
                                             uint64_t addr)
{
    /*
     * Every region before first starts in an earlier page, every one after
     * the page's last in a later one: count those of the page at or below
     * addr.
     */
    size_t i = e->first, end = i + e->count;

    if (e->start > addr)
        return i;
    while (end - i > 8) { /* many small regions in one page: halve first */
        size_t mid = i + (end - i) / 2;

        if (ote_desc_start(d, mid) <= addr)
            i = mid + 1;
        else
            end = mid;
    }
    while (i < end && ote_desc_start(d, i) <= addr)
        i++;
    return i;
}

/*
 * ote_desc_regions_upto(d, addr) (how many of d's regions start at or below
 * addr), d being the descriptor idx was built from.
 */
static inline size_t ote_range_index_upto(const ote_range_index_t *idx, const ote_desc_t *d,
                                          uint64_t addr)
{
    const ote_range_slot_t *e = ote_range_index_probe(idx, addr);

    return e != NULL ? ote_range_index_upto_in(e, d, addr) : ote_desc_regions_upto(d, addr);
}

/*
 * A region the check found, with its range and access: what a shortcut for
 * the next request compares without reading the region's entry.
 */
typedef struct {
    const ote_desc_region_t *reg; /* NULL: none */
    uint64_t                 start, end;
    unsigned                 access;
} ote_range_hit_t;

/*
 * What d says of [addr, addr + len) for an access (OTE_ACCESS_REMOTE_*
 * bits, 0: any): OK when a region covers it with the access (*hit: that
 * region, its start, end and access; untouched otherwise), else the status
 * a checking target would answer: OTE_ERR_ACCESS where a region covers it
 * without the access, OTE_ERR_OUT_OF_BOUNDS where one holds addr but ends
 * before addr + len, OTE_ERR_NOT_REGISTERED where none holds addr. The
 * regions looked at are the 64 last ones starting at or below addr, the
 * nearest first. idx: d's page index, or NULL (the descriptor's search);
 * both give the same.
 * Inline: it is the check's step per request.
 */
static inline ote_status_t ote_range_index_check(const ote_range_index_t *idx,
                                                 const ote_desc_t *d, uint64_t addr, size_t len,
                                                 unsigned access, ote_range_hit_t *hit)
{
    ote_status_t best = OTE_ERR_NOT_REGISTERED;
    size_t lo;

    if (idx != NULL) {
        const ote_range_slot_t *e = ote_range_index_probe(idx, addr);

        /*
         * The page's only region starts at or below addr: it is the
         * nearest, and the answer when it covers the range with the access.
         */
        if (e != NULL && e->count == 1 && addr - e->start < e->end - e->start &&
            e->end - addr >= len && (e->access & access) == access) {
            *hit = (ote_range_hit_t){.reg = &d->regions[e->first], .start = e->start,
                                     .end = e->end, .access = e->access};
            return OTE_OK;
        }
        lo = e != NULL ? ote_range_index_upto_in(e, d, addr) : ote_desc_regions_upto(d, addr);
    } else {
        lo = ote_desc_regions_upto(d, addr);
    }
    /* Starts and ends from the descriptor's index; a region's entry only when it covers. */
    for (size_t i = lo; i-- > 0 && lo - i <= 64;) {
        uint64_t start = ote_desc_start(d, i), end = ote_desc_end(d, i);

        if (addr - start >= end - start)
            continue;
        if (end - addr < len) {
            if (best == OTE_ERR_NOT_REGISTERED)
                best = OTE_ERR_OUT_OF_BOUNDS;
            continue;
        }
        if ((d->regions[i].access & access) == access) {
            *hit = (ote_range_hit_t){.reg = &d->regions[i], .start = start, .end = end,
                                     .access = d->regions[i].access};
            return OTE_OK;
        }
        best = OTE_ERR_ACCESS;
    }
    return best;
}

#endif
