/*
 * The decoded descriptor's region lookup (ote_desc_find_region,
 * ote_desc_regions_upto) over its packed index, against the plain search
 * of the region entries it replaces: boundaries, nested, adjacent and equal
 * regions, the first and the last, misses, across the index's blocks, and
 * lookups from several threads on one descriptor.
 */
#include "core/wire/desc.h"
#include "base/buf.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "desc_fixture.h"

/* Region i's access: read, write, both, in turn. */
static uint32_t access_rotating(size_t i)
{
    return (uint32_t)(i % 3 + 1);
}

/* A version 3 descriptor with these regions (no transports, mds or exports), decoded. */
static ote_desc_t *make_desc(const rg_t *r, size_t n)
{
    ote_desc_t *d = desc_fixture(r, n, 3, access_rotating);

    /* Sorted by address, then length; equal ranges in the order listed. */
    for (size_t i = 1; i < n; i++) {
        const ote_desc_region_t *p = &d->regions[i - 1], *q = &d->regions[i];

        assert_true(p->addr < q->addr || (p->addr == q->addr && p->length < q->length) ||
                    (p->addr == q->addr && p->length == q->length && p->order < q->order));
    }
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(d->regions[i].addr, r[d->regions[i].order].addr);
        assert_int_equal(d->regions[i].length, r[d->regions[i].order].length);
        assert_int_equal(d->regions[i].access, d->regions[i].order % 3 + 1);
    }
    assert_non_null(d->starts);
    assert_non_null(d->ends);
    assert_int_equal(d->num_tops, (n + OTE_DESC_TOP_STRIDE - 1) / OTE_DESC_TOP_STRIDE);
    return d;
}

/* The search the index replaces: over the region entries, as before it. */
static size_t ref_upto(const ote_desc_t *d, uint64_t addr)
{
    size_t k = 0;

    while (k < d->num_regions && d->regions[k].addr <= addr)
        k++;
    return k;
}

static const ote_desc_region_t *ref_find(const ote_desc_t *d, uint64_t addr, size_t len)
{
    size_t lo;

    if (len == 0 || addr + len < addr)
        return NULL;
    lo = ref_upto(d, addr);
    for (size_t i = lo; i-- > 0;) {
        const ote_desc_region_t *reg = &d->regions[i];

        if (reg->addr + reg->length >= addr + len)
            return reg;
        if (lo - i > 64)
            break;
    }
    return NULL;
}

/* Both agree at addr for these lengths; returns how many lengths found a region. */
static int check_at(const ote_desc_t *d, uint64_t addr)
{
    static const size_t lens[] = {1, 2, 63, 64, 4095, 4096, 4097, 8192, 1u << 20};
    int found = 0;

    assert_int_equal(ote_desc_regions_upto(d, addr), ref_upto(d, addr));
    for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
        const ote_desc_region_t *a = ote_desc_find_region(d, addr, lens[k]);

        assert_ptr_equal(a, ref_find(d, addr, lens[k]));
        found += a != NULL;
    }
    return found;
}

/* Every start, end, end - 1 and one past them, and the gaps. */
static void check_all_edges(const ote_desc_t *d)
{
    for (size_t i = 0; i < d->num_regions; i++) {
        uint64_t s = d->regions[i].addr, e = s + d->regions[i].length;

        check_at(d, s);
        check_at(d, s + 1);
        if (s > 0)
            check_at(d, s - 1);
        check_at(d, e - 1);
        check_at(d, e);
    }
    check_at(d, 0);
    check_at(d, UINT64_MAX);
}

static void test_adjacent_many(void **state)
{
    /* Adjacent 4 KiB regions, a count that leaves a partial last block. */
    size_t n = 16 * 37 + 5;
    rg_t *r  = calloc(n, sizeof(*r));
    ote_desc_t *d;

    (void)state;
    for (size_t i = 0; i < n; i++)
        r[(i * 7) % n] = (rg_t){0x100000 + i * 4096, 4096}; /* listed out of order */
    d = make_desc(r, n);
    for (size_t i = 0; i < n; i++) {
        uint64_t s = 0x100000 + i * 4096;

        /* first and last byte of each region: that region; a range over two: none */
        assert_ptr_equal(ote_desc_find_region(d, s, 4096), &d->regions[i]);
        assert_ptr_equal(ote_desc_find_region(d, s + 4095, 1), &d->regions[i]);
        assert_null(ote_desc_find_region(d, s + 4095, 2));
        assert_int_equal(ote_desc_regions_upto(d, s), i + 1);
        assert_int_equal(ote_desc_start(d, i), s);
        assert_int_equal(ote_desc_end(d, i), s + 4096);
    }
    /* before the first, past the last: misses */
    assert_int_equal(ote_desc_regions_upto(d, 0x100000 - 1), 0);
    assert_null(ote_desc_find_region(d, 0x100000 - 1, 1));
    assert_null(ote_desc_find_region(d, 0x100000 + n * 4096, 1));
    assert_null(ote_desc_find_region(d, 0x100000 + n * 4096 - 1, 2));
    assert_int_equal(ote_desc_regions_upto(d, UINT64_MAX), n);
    /* empty and wrapping ranges */
    assert_null(ote_desc_find_region(d, 0x100000, 0));
    assert_null(ote_desc_find_region(d, UINT64_MAX, 2));
    check_all_edges(d);
    ote_desc_free(d);
    free(r);
}

static void test_nested_and_equal(void **state)
{
    /*
     * An outer region with nested ones, equal starts (a block boundary falls
     * among them), an inner one reaching the outer's end, gaps, and regions
     * at the top of the address space.
     */
    rg_t r[64];
    size_t n = 0;
    ote_desc_t *d;

    (void)state;
    r[n++] = (rg_t){0x10000, 0x10000};        /* outer [0x10000, 0x20000) */
    for (int i = 0; i < 20; i++)               /* equal starts, growing */
        r[n++] = (rg_t){0x11000, 0x100 * (uint64_t)(i + 1)};
    r[n++] = (rg_t){0x1f000, 0x1000};          /* inner, same end as outer */
    r[n++] = (rg_t){0x18000, 0x10};            /* tiny inner */
    r[n++] = (rg_t){0x30000, 0x1000};          /* after a gap */
    r[n++] = (rg_t){0x31000, 0x1000};          /* adjacent */
    r[n++] = (rg_t){UINT64_MAX - 0x1fff, 0x1000}; /* near the top (an end past it wraps) */
    r[n++] = (rg_t){0, 1};                     /* the first byte */
    r[n++] = (rg_t){0x18000, 0x10};            /* the tiny one again: listed later */
    d = make_desc(r, n);
    /* of two equal ranges, the one listed later is found (the last that covers) */
    assert_int_equal(ote_desc_find_region(d, 0x18000, 0x10)->order, n - 1);
    /* inside the tiny inner one: the last starting at or before, that covers */
    assert_int_equal(ote_desc_find_region(d, 0x18000, 0x10)->length, 0x10);
    /* past the tiny one's end: back to a covering region (the outer) */
    assert_int_equal(ote_desc_find_region(d, 0x18000, 0x11)->length, 0x10000);
    /* among equal starts: the largest that covers is found last-first */
    assert_int_equal(ote_desc_find_region(d, 0x11000, 0x1400)->addr, 0x11000);
    assert_int_equal(ote_desc_find_region(d, 0x11000, 0x1400)->length, 0x1400);
    assert_int_equal(ote_desc_find_region(d, 0x11000, 0x1401)->length, 0x10000);
    assert_int_equal(ote_desc_find_region(d, 0x1f000, 0x1000)->addr, 0x1f000);
    assert_int_equal(ote_desc_find_region(d, 0x10000, 0x10000)->addr, 0x10000);
    assert_null(ote_desc_find_region(d, 0x10000, 0x10001));
    assert_null(ote_desc_find_region(d, 0x20000, 1)); /* the gap */
    assert_null(ote_desc_find_region(d, 0x30000, 0x2001));
    assert_int_equal(ote_desc_find_region(d, UINT64_MAX - 0x1fff, 0x1000)->addr,
                     UINT64_MAX - 0x1fff);
    assert_int_equal(ote_desc_find_region(d, 0, 1)->length, 1);
    assert_null(ote_desc_find_region(d, 0, 2));
    check_all_edges(d);
    ote_desc_free(d);
}

static void test_random_against_reference(void **state)
{
    uint32_t x = 12345;
    size_t n = 3000;
    rg_t *r = calloc(n, sizeof(*r));
    ote_desc_t *d;

    (void)state;
    /* Random lengths and overlaps in a small space: nesting deeper than 64 too. */
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        r[i].addr = x % 200000;
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        r[i].length = 1 + x % (i % 10 == 0 ? 50000 : 300);
    }
    d = make_desc(r, n);
    check_all_edges(d);
    for (int k = 0; k < 100000; k++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        check_at(d, x % 260000);
    }
    ote_desc_free(d);
    free(r);
}

static void test_one_and_none(void **state)
{
    rg_t one = {0x5000, 0x1000};
    ote_desc_t *d = make_desc(&one, 1);
    ote_desc_t *e = make_desc(NULL, 0);

    (void)state;
    assert_ptr_equal(ote_desc_find_region(d, 0x5000, 0x1000), &d->regions[0]);
    assert_null(ote_desc_find_region(d, 0x4fff, 1));
    assert_null(ote_desc_find_region(d, 0x6000, 1));
    assert_int_equal(ote_desc_regions_upto(d, 0x4fff), 0);
    assert_int_equal(ote_desc_regions_upto(d, 0x5000), 1);
    assert_null(ote_desc_find_region(e, 0x5000, 1));
    assert_int_equal(ote_desc_regions_upto(e, 0x5000), 0);
    ote_desc_free(d);
    ote_desc_free(e);
}

/* A descriptor made without the index (one region, as for an exported file): same answers. */
static void test_without_index(void **state)
{
    ote_desc_t *d = calloc(1, sizeof(*d));

    (void)state;
    d->regions     = calloc(1, sizeof(*d->regions));
    d->num_regions = 1;
    d->regions[0]  = (ote_desc_region_t){.addr = 0, .length = 100, .access = 1};
    assert_ptr_equal(ote_desc_find_region(d, 0, 100), &d->regions[0]);
    assert_null(ote_desc_find_region(d, 1, 100));
    assert_int_equal(ote_desc_regions_upto(d, 99), 1);
    assert_int_equal(ote_desc_end(d, 0), 100);
    ote_desc_free(d);
}

typedef struct {
    const ote_desc_t *d;
    size_t            n;
    uint32_t          seed;
    size_t            wrong;
} lookers_t;

static void *looker(void *arg)
{
    lookers_t *l = arg;
    uint32_t x   = l->seed;

    for (int k = 0; k < 200000; k++) {
        size_t i;
        uint64_t s;

        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        i = x % l->n;
        s = 0x100000 + (uint64_t)i * 8192;
        /* regions of 4 KiB every 8 KiB: a hit in each, a miss in each gap */
        if (ote_desc_find_region(l->d, s + (x >> 20) % 4096, 1) != &l->d->regions[i] ||
            ote_desc_find_region(l->d, s + 4096 + (x >> 20) % 4096, 1) != NULL)
            l->wrong++;
    }
    return NULL;
}

/* Several threads look up in one descriptor (submitters on one segment): it is read only. */
static void test_concurrent_lookups(void **state)
{
    size_t n = 20000;
    rg_t *r  = calloc(n, sizeof(*r));
    pthread_t th[4];
    lookers_t l[4];
    ote_desc_t *d;

    (void)state;
    for (size_t i = 0; i < n; i++)
        r[i] = (rg_t){0x100000 + i * 8192, 4096};
    d = make_desc(r, n);
    for (int t = 0; t < 4; t++) {
        l[t] = (lookers_t){.d = d, .n = n, .seed = 77u + (uint32_t)t * 1000u};
        assert_int_equal(pthread_create(&th[t], NULL, looker, &l[t]), 0);
    }
    for (int t = 0; t < 4; t++) {
        pthread_join(th[t], NULL);
        assert_int_equal(l[t].wrong, 0);
    }
    ote_desc_free(d);
    free(r);
}

/*
 * The decoded entries are small (48 bytes on 64-bit hosts): rkeys lie in
 * the descriptor's one array, each region's own, and a location the
 * regions share is one string; out of order, with 0 to 2 rkeys each.
 */
static void test_compact_entries(void **state)
{
    enum { N = 1000 };
    ote_buf_t b = {0};
    ote_desc_t *d = NULL;
    size_t keys = 0;

    (void)state;
    if (sizeof(void *) == 8)
        assert_true(sizeof(ote_desc_region_t) <= 48);
    ote_buf_put_u32(&b, OTE_DESC_MAGIC);
    ote_buf_put_u16(&b, 3);
    ote_buf_put_u16(&b, 0);
    ote_buf_put_u64(&b, 43);
    ote_buf_put_str8(&b, "cmp");
    ote_buf_put_str8(&b, "host");
    ote_buf_put_str8(&b, "127.0.0.1:1");
    ote_buf_put_u16(&b, 0); /* transports */
    ote_buf_put_u16(&b, 2); /* mds */
    ote_buf_put_str8(&b, "md0");
    ote_buf_put_str8(&b, "md1");
    ote_buf_put_u32(&b, N);
    for (size_t i = 0; i < N; i++) {
        char key[16];

        ote_buf_put_u64(&b, (uint64_t)(N - i) << 16); /* descending: sorted on decode */
        ote_buf_put_u64(&b, 4096);
        ote_buf_put_u32(&b, 3);
        ote_buf_put_str8(&b, i % 10 == 9 ? "cuda:1" : "cpu:0");
        ote_buf_put_u8(&b, (uint8_t)(i % 3));
        for (size_t k = 0; k < i % 3; k++) {
            int len = snprintf(key, sizeof(key), "k%zu.%zu", i, k);

            ote_buf_put_u8(&b, (uint8_t)k);
            ote_buf_put_u16(&b, (uint16_t)len);
            ote_buf_put(&b, key, (size_t)len);
            keys++;
        }
    }
    ote_buf_put_u32(&b, 0); /* exports */
    assert_false(b.failed);
    assert_int_equal(ote_desc_decode(b.data, b.len, &d), OTE_OK);
    free(b.data);
    assert_int_equal(d->num_regions, N);
    assert_int_equal(d->num_rkeys, keys);
    for (size_t i = 0; i < N; i++) {
        const ote_desc_region_t *r = &d->regions[i];
        size_t o = r->order;

        assert_true(r->addr == (uint64_t)(N - o) << 16);
        assert_string_equal(r->location, o % 10 == 9 ? "cuda:1" : "cpu:0");
        /* One string per location here. */
        assert_ptr_equal(r->location, o % 10 == 9 ? d->regions[N - 10].location
                                                  : d->regions[N - 1].location);
        assert_int_equal(r->num_rkeys, o % 3);
        for (size_t k = 0; k < r->num_rkeys; k++) {
            char want[16];

            snprintf(want, sizeof(want), "k%zu.%zu", o, k);
            assert_true(r->rkeys + k >= d->rkeys && r->rkeys + k < d->rkeys + d->num_rkeys);
            assert_int_equal(r->rkeys[k].md_index, k);
            assert_int_equal(r->rkeys[k].length, strlen(want));
            assert_memory_equal(r->rkeys[k].data, want, strlen(want));
        }
    }
    ote_desc_free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adjacent_many),     cmocka_unit_test(test_nested_and_equal),
        cmocka_unit_test(test_random_against_reference), cmocka_unit_test(test_one_and_none),
        cmocka_unit_test(test_without_index),     cmocka_unit_test(test_concurrent_lookups),
        cmocka_unit_test(test_compact_entries),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
