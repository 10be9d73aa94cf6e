/*
 * A segment descriptor with the given regions and nothing else (no
 * transports, memory domains or exports), encoded by hand as a peer would
 * send it and decoded: the fixture of the descriptor's region index tests
 * (test_desc_index.c) and of the remote-range check's page index
 * (test_range_index.c). Include after <cmocka.h>.
 */
#ifndef OTE_TEST_DESC_FIXTURE_H
#define OTE_TEST_DESC_FIXTURE_H

#include "base/buf.h"
#include "core/wire/desc.h"

#include <stdint.h>
#include <stdlib.h>

typedef struct {
    uint64_t addr, length;
} rg_t;

/* Regions r[0..n) of version version, region i with access(i); decoded, n regions checked. */
static inline ote_desc_t *desc_fixture(const rg_t *r, size_t n, uint16_t version,
                                       uint32_t (*access)(size_t i))
{
    ote_buf_t b = {0};
    ote_desc_t *d = NULL;

    ote_buf_put_u32(&b, OTE_DESC_MAGIC);
    ote_buf_put_u16(&b, version);
    ote_buf_put_u16(&b, 0);
    ote_buf_put_u64(&b, 42);
    ote_buf_put_str8(&b, "idx");
    ote_buf_put_str8(&b, "host");
    ote_buf_put_str8(&b, "127.0.0.1:1");
    ote_buf_put_u16(&b, 0); /* transports */
    ote_buf_put_u16(&b, 0); /* mds */
    ote_buf_put_u32(&b, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        ote_buf_put_u64(&b, r[i].addr);
        ote_buf_put_u64(&b, r[i].length);
        ote_buf_put_u32(&b, access(i));
        ote_buf_put_str8(&b, "cpu:0");
        ote_buf_put_u8(&b, 0); /* no rkeys */
    }
    ote_buf_put_u32(&b, 0); /* exports */
    if (version >= 4)
        ote_buf_put_u16(&b, 0); /* transports it runs */
    assert_false(b.failed);
    assert_int_equal(ote_desc_decode(b.data, b.len, &d), OTE_OK);
    free(b.data);
    assert_int_equal(d->num_regions, n);
    return d;
}

#endif
