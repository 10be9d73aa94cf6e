/*
 * The page index of a peer's descriptor (core/segment/range_index.h), the
 * remote-range check's first step: ote_range_index_upto must give what
 * the descriptor's own search gives (ote_desc_regions_upto), and a count
 * of the regions that start at or below an address, for every address:
 * first and last byte of a region, one before and one past, adjacent
 * regions, several starts in one page, a region over many pages, nested
 * regions, random layouts. Then through an engine's own segment: the
 * checks a submit makes with it (first and last byte, a range over two
 * adjacent regions, a gap, a region deregistered and the descriptor read
 * again).
 */
#include "core/segment/range_index.h"
#include "base/buf.h"
#include "testlib.h"

#include <ote/ote.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "desc_fixture.h"

static uint32_t access_rw(size_t i)
{
    (void)i;
    return OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE;
}

/* A decoded descriptor with these regions (no transports, mds or exports). */
static ote_desc_t *make_desc(const rg_t *r, size_t n)
{
    return desc_fixture(r, n, OTE_DESC_VERSION, access_rw);
}

/* Regions of r starting at or below addr, counted one by one. */
static size_t count_upto(const rg_t *r, size_t n, uint64_t addr)
{
    size_t k = 0;

    for (size_t i = 0; i < n; i++)
        k += r[i].addr <= addr;
    return k;
}

static void expect_upto(const ote_range_index_t *idx, const ote_desc_t *d, const rg_t *r,
                        size_t n, uint64_t addr)
{
    size_t want = count_upto(r, n, addr);

    if (ote_range_index_upto(idx, d, addr) != want || ote_desc_regions_upto(d, addr) != want)
        fail_msg("at %#llx: index %zu, search %zu, regions starting at or below %zu",
                 (unsigned long long)addr, ote_range_index_upto(idx, d, addr),
                 ote_desc_regions_upto(d, addr), want);
}

/* Region i's first and last byte, one before and one past, and its page's ends. */
static void expect_edges_of(const ote_range_index_t *idx, const ote_desc_t *d, const rg_t *r,
                            size_t n, size_t i)
{
    uint64_t a = r[i].addr, e = r[i].addr + r[i].length;

    expect_upto(idx, d, r, n, a);
    expect_upto(idx, d, r, n, e - 1);
    if (e != 0)
        expect_upto(idx, d, r, n, e);
    if (a > 0)
        expect_upto(idx, d, r, n, a - 1);
    expect_upto(idx, d, r, n, a & ~4095ull);
    expect_upto(idx, d, r, n, a | 4095ull);
}

static void expect_edges(const ote_range_index_t *idx, const ote_desc_t *d, const rg_t *r,
                         size_t n)
{
    for (size_t i = 0; i < n; i++)
        expect_edges_of(idx, d, r, n, i);
}

static void test_edges(void **state)
{
    const uint64_t P = 4096, B = 0x7f0000000000ull;
    rg_t r[] = {
        {B, P},                 /* a page */
        {B + P, P},             /* adjacent to it */
        {B + 2 * P, 100},       /* three starts in one page */
        {B + 2 * P + 100, 28},
        {B + 2 * P + 4000, 96}, /* ends on the page's last byte */
        {B + 4 * P + 1, 64 * P}, /* over many pages where nothing starts */
        {B + 8 * P, 16},        /* nested in it */
        {0, 1},                 /* the lowest address */
        {UINT64_MAX - P, P},    /* the highest page but the last byte */
    };
    size_t n = sizeof(r) / sizeof(r[0]);
    ote_desc_t *d = make_desc(r, n);
    ote_range_index_t *idx = ote_range_index_build(d);

    (void)state;
    assert_non_null(idx);
    expect_edges(idx, d, r, n);
    /* nothing registered there, in a page without a start, below everything */
    expect_upto(idx, d, r, n, B + 3 * P);
    expect_upto(idx, d, r, n, B + 40 * P + 7);
    expect_upto(idx, d, r, n, B - 1);
    expect_upto(idx, d, r, n, UINT64_MAX);
    assert_int_equal(ote_range_index_upto(idx, d, B + 2 * P + 99), 3 + 1); /* {0,1} first */
    assert_int_equal(ote_range_index_upto(idx, d, B + 2 * P + 100), 5);
    ote_range_index_free(idx);
    ote_desc_free(d);
}

/* Many regions in one page (the index halves before it steps), and none at all. */
static void test_dense_and_empty(void **state)
{
    enum { N = 1000 };
    rg_t *r = calloc(N, sizeof(*r));
    ote_desc_t *d, *e;
    ote_range_index_t *idx;

    (void)state;
    assert_non_null(r);
    for (size_t i = 0; i < N; i++)
        r[i] = (rg_t){0x100000 + i * 4, 4}; /* 1,024 per page */
    d   = make_desc(r, N);
    idx = ote_range_index_build(d);
    assert_non_null(idx);
    for (uint64_t a = 0x100000 - 8; a < 0x100000 + N * 4 + 8; a++)
        expect_upto(idx, d, r, N, a);
    ote_range_index_free(idx);
    ote_desc_free(d);

    e   = make_desc(NULL, 0);
    idx = ote_range_index_build(e);
    assert_non_null(idx);
    assert_int_equal(ote_range_index_upto(idx, e, 0), 0);
    assert_int_equal(ote_range_index_upto(idx, e, 0x100000), 0);
    ote_range_index_free(idx);
    ote_desc_free(e);
    free(r);
}

/* Random layouts: small and large regions, packed and spread, some equal and overlapping. */
static void test_random(void **state)
{
    enum { N = 20000 };
    rg_t *r = calloc(N, sizeof(*r));
    uint64_t seed = 12345;

    (void)state;
    assert_non_null(r);
    for (int round = 0; round < 3; round++) {
        ote_desc_t *d;
        ote_range_index_t *idx;
        uint64_t at = 0x10000000;

        for (size_t i = 0; i < N; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            switch ((seed >> 33) % 4) {
            case 0: at += 4096; r[i] = (rg_t){at, 4096}; break;           /* packed pages */
            case 1: at += (seed >> 40) % 300 + 1; r[i] = (rg_t){at, 64}; break; /* small */
            case 2: at += (seed >> 20) % (1u << 24); r[i] = (rg_t){at, 1u << 20}; break;
            default: r[i] = i > 0 ? r[i - 1] : (rg_t){at, 8}; break;     /* equal */
            }
        }
        d   = make_desc(r, N);
        idx = ote_range_index_build(d);
        assert_non_null(idx);
        /* Edges of a sample (count_upto is linear), then random addresses. */
        for (size_t i = (size_t)round; i < N; i += 97)
            expect_edges_of(idx, d, r, N, i);
        for (int k = 0; k < 2000; k++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            expect_upto(idx, d, r, N, 0x10000000 + (seed >> 20) % (at - 0x10000000 + (1u << 21)));
        }
        ote_range_index_free(idx);
        ote_desc_free(d);
    }
    free(r);
}

/*
 * Through an engine's own segment over tcp: three page regions, two of
 * them adjacent, a gap page between the second and the third. A task's
 * end tells the check's verdict.
 */
static ote_task_status_t one_write(ote_engine_h e, ote_segment_h seg, void *local, uint64_t addr,
                                   size_t len)
{
    ote_task_status_t st;

    /* Submitted, and every task ended (failed ones too) within 10 s. */
    assert_int_equal(ote_test_xfer(e, seg, OTE_OP_WRITE, local, addr, len, 10000, &st), OTE_OK);
    return st;
}

#define EXPECT_DONE(_st, _len)                                                               \
    do {                                                                                     \
        ote_task_status_t s_ = (_st);                                                        \
        assert_int_equal(s_.state, OTE_TASK_COMPLETED);                                      \
        assert_int_equal(s_.transferred, (_len));                                            \
    } while (0)
#define EXPECT_FAILED(_st, _err)                                                             \
    do {                                                                                     \
        ote_task_status_t s_ = (_st);                                                        \
        assert_int_equal(s_.state, OTE_TASK_FAILED);                                         \
        assert_int_equal(s_.error, (_err));                                                  \
        assert_int_equal(s_.transferred, 0);                                                 \
    } while (0)

static void test_segment_checks(void **state)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uint8_t *buf = aligned_alloc(page, 4 * page), *local = aligned_alloc(page, 2 * page);
    ote_engine_h e;
    ote_mem_desc_t d[4];
    ote_mem_h m[4];
    ote_segment_h seg;
    uint64_t a;

    (void)state;
    setenv("OTE_TLS", "tcp", 1);
    setenv("OTE_DESC_REREAD_INTERVAL_MS", "1", 1);
    e = ote_test_engine("127.0.0.1:0");
    assert_non_null(buf);
    assert_non_null(local);
    memset(buf, 0, 4 * page);
    memset(local, 0x5a, 2 * page);
    a = (uint64_t)(uintptr_t)buf;
    d[0] = (ote_mem_desc_t){.addr = local, .length = 2 * page};
    for (int i = 1; i < 4; i++) /* pages 0, 1 and 3 of buf */
        d[i] = (ote_mem_desc_t){.addr = buf + (size_t)(i == 3 ? 3 : i - 1) * page, .length = page,
                                .access = OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE};
    for (int i = 0; i < 4; i++)
        assert_int_equal(ote_mem_register(e, &d[i], 1, &m[i]), OTE_OK);
    assert_int_equal(ote_segment_open(e, ote_engine_name(e), &seg), OTE_OK);

    EXPECT_DONE(one_write(e, seg, local, a, 1), 1);                      /* first byte */
    EXPECT_DONE(one_write(e, seg, local, a + page - 1, 1), 1);           /* last byte */
    EXPECT_DONE(one_write(e, seg, local, a + page, page), page);         /* the adjacent one */
    EXPECT_FAILED(one_write(e, seg, local, a + page - 1, 2), OTE_ERR_OUT_OF_BOUNDS);
    EXPECT_FAILED(one_write(e, seg, local, a + 2 * page, 1), OTE_ERR_REMOTE_NOT_REGISTERED);
    EXPECT_FAILED(one_write(e, seg, local, a + 2 * page - 1, 2), OTE_ERR_OUT_OF_BOUNDS);
    EXPECT_DONE(one_write(e, seg, local, a + 4 * page - 1, 1), 1);       /* last of the third */
    EXPECT_FAILED(one_write(e, seg, local, a + 4 * page, 1), OTE_ERR_REMOTE_NOT_REGISTERED);
    EXPECT_FAILED(one_write(e, seg, local, a + 3 * page, page + 1), OTE_ERR_OUT_OF_BOUNDS);
    assert_int_equal(buf[0], 0x5a);
    assert_int_equal(buf[page - 1], 0x5a);
    assert_int_equal(buf[2 * page - 1], 0x5a);
    assert_int_equal(buf[4 * page - 1], 0x5a);
    assert_int_equal(buf[2 * page], 0);

    /* The second goes; the descriptor read again has no region there. */
    assert_int_equal(ote_mem_deregister(e, m[2]), OTE_OK);
    assert_int_equal(ote_segment_refresh(seg), OTE_OK);
    memset(local, 0x33, 2 * page);
    EXPECT_FAILED(one_write(e, seg, local, a + page, 1), OTE_ERR_REMOTE_NOT_REGISTERED);
    EXPECT_FAILED(one_write(e, seg, local, a + 2 * page - 1, 1), OTE_ERR_REMOTE_NOT_REGISTERED);
    EXPECT_DONE(one_write(e, seg, local, a + page - 1, 1), 1);
    EXPECT_DONE(one_write(e, seg, local, a + 3 * page, 1), 1);
    assert_int_equal(buf[page - 1], 0x33);
    assert_int_equal(buf[page], 0x5a); /* as the earlier write left it */
    assert_int_equal(buf[3 * page], 0x33);

    /* It comes back: found again, after the re-read the missing range makes. */
    assert_int_equal(ote_mem_register(e, &d[2], 1, &m[2]), OTE_OK);
    EXPECT_DONE(one_write(e, seg, local, a + 2 * page - 1, 1), 1);
    assert_int_equal(buf[2 * page - 1], 0x33);

    assert_int_equal(ote_segment_close(seg), OTE_OK);
    for (int i = 0; i < 4; i++)
        assert_int_equal(ote_mem_deregister(e, m[i]), OTE_OK);
    ote_engine_destroy(e);
    unsetenv("OTE_TLS");
    unsetenv("OTE_DESC_REREAD_INTERVAL_MS");
    free(buf);
    free(local);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_dense_and_empty),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_segment_checks),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
