/*
 * A page index over a peer's decoded descriptor (wire/desc.h): which of
 * its regions (sorted by address) start in each 4 KiB page that holds a
 * region start, in a hash table, so that the remote-range check of a
 * request (xfer/batch_check.c) finds its place among 100,000 regions with
 * one probe instead of a binary search. An address in a page where no
 * region starts (inside a large region, or in no region) is found by the
 * descriptor's own search. The index holds no reference to the descriptor;
 * the segment keeps it for one (seg->range_index, under seg->lock) and
 * builds it again when the segment adopts another.
 */
#ifndef OTE_CORE_RANGE_INDEX_H
#define OTE_CORE_RANGE_INDEX_H

#include "core/wire/desc.h"

#include <stddef.h>
#include <stdint.h>

#define OTE_RANGE_INDEX_PAGE_SHIFT 12

typedef struct {
    uint64_t page;  /* addr >> OTE_RANGE_INDEX_PAGE_SHIFT */
    uint32_t first; /* the first region starting in it */
    uint32_t count; /* regions starting in it; 0: an empty slot */
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

/*
 * ote_desc_regions_upto(d, addr) (how many of d's regions start at or below
 * addr), d being the descriptor idx was built from. Inline: it is the
 * check's step per request.
 */
static inline size_t ote_range_index_upto(const ote_range_index_t *idx, const ote_desc_t *d,
                                          uint64_t addr)
{
    uint64_t page = addr >> OTE_RANGE_INDEX_PAGE_SHIFT;

    for (uint64_t s = ote_range_index_slot(idx, page);; s = (s + 1) & idx->mask) {
        const ote_range_slot_t *e = &idx->slots[s];
        size_t i, end;

        if (e->count == 0)
            break;
        if (e->page != page)
            continue;
        /*
         * Every region before first starts in an earlier page, every one
         * after the page's last in a later one: count those of the page
         * at or below addr.
         */
        i   = e->first;
        end = i + e->count;
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
    /* No region starts in addr's page. */
    return ote_desc_regions_upto(d, addr);
}

#endif
