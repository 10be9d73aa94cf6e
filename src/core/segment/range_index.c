/*
 * The page index of a decoded descriptor (range_index.h): an open-addressing
 * hash table from page number to the first region that starts in that page
 * (its place, start, end and access) and how many do (the regions are
 * sorted by address, so they follow each other), at most 3/4 full, its
 * slots aligned to their size so that none straddles two cache lines.
 */
#include "range_index.h"

#include <stdlib.h>
#include <string.h>

ote_range_index_t *ote_range_index_build(const ote_desc_t *d)
{
    size_t n = d->num_regions, pages = 0, cap = 2;
    unsigned bits = 1;
    ote_range_index_t *idx;

    if (n > UINT32_MAX)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || ote_desc_start(d, i) >> OTE_RANGE_INDEX_PAGE_SHIFT !=
                          ote_desc_start(d, i - 1) >> OTE_RANGE_INDEX_PAGE_SHIFT)
            pages++;
    }
    while (cap * 3 < pages * 4 + 4) {
        cap *= 2;
        bits++;
    }
    idx = malloc(sizeof(*idx));
    if (idx == NULL)
        return NULL;
    idx->slots = aligned_alloc(sizeof(*idx->slots), cap * sizeof(*idx->slots));
    if (idx->slots == NULL) {
        free(idx);
        return NULL;
    }
    memset(idx->slots, 0, cap * sizeof(*idx->slots));
    idx->mask  = cap - 1;
    idx->shift = 64 - bits;
    for (size_t i = 0; i < n;) {
        uint64_t page = ote_desc_start(d, i) >> OTE_RANGE_INDEX_PAGE_SHIFT;
        size_t j      = i + 1;
        uint64_t s;

        while (j < n && ote_desc_start(d, j) >> OTE_RANGE_INDEX_PAGE_SHIFT == page)
            j++;
        for (s = ote_range_index_slot(idx, page); idx->slots[s].count != 0; s = (s + 1) & idx->mask)
            ;
        idx->slots[s] = (ote_range_slot_t){.start = ote_desc_start(d, i), .end = ote_desc_end(d, i),
                                           .first = (uint32_t)i, .count = (uint32_t)(j - i),
                                           .access = d->regions[i].access};
        i = j;
    }
    return idx;
}

void ote_range_index_free(ote_range_index_t *idx)
{
    if (idx == NULL)
        return;
    free(idx->slots);
    free(idx);
}
