/*
 * The page index of a peer's descriptor (core/segment/range_index.h), the
 * remote-range check's first step: ote_range_index_upto must give what
 * the descriptor's own search gives (ote_desc_regions_upto), and a count
 * of the regions that start at or below an address, for every address:
 * first and last byte of a region, one before and one past, adjacent
 * regions, several starts in one page, a region over many pages, nested
 * regions, random layouts. ote_range_index_check must give the verdict and
 * region of the rule it states, on plain region entries: hand-made cases
 * and 100,000 regions with mixed access. Then through an engine's own segment: the
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

/* Access of region i in the check tests: none, READ, WRITE or both, mixed. */
static uint32_t access_mixed(size_t i)
{
    static const uint32_t a[4] = {OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE,
                                  OTE_ACCESS_REMOTE_READ, OTE_ACCESS_REMOTE_WRITE, 0};

    return a[(i * 7 + i / 5) % 4];
}

/*
 * The check's rule on the plain region entries (not the descriptor's
 * starts and ends, nor the page index): the 64 last
 * regions (in the descriptor's order) starting at or below addr, nearest
 * first; the first covering the range with the access is the answer.
 */
static ote_status_t ref_check(const ote_desc_t *d, uint64_t addr, size_t len, unsigned access,
                              const ote_desc_region_t **reg_p)
{
    ote_status_t best = OTE_ERR_NOT_REGISTERED;
    size_t lo = 0, hi = d->num_regions;

    while (lo < hi) { /* regions[..lo) start at or below addr, regions[hi..) above */
        size_t mid = lo + (hi - lo) / 2;

        if (d->regions[mid].addr <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t k = 0; k < 64 && k < lo; k++) {
        const ote_desc_region_t *g = &d->regions[lo - 1 - k];

        if (addr < g->addr || addr - g->addr >= g->length)
            continue;
        if (g->length - (addr - g->addr) < len) {
            if (best == OTE_ERR_NOT_REGISTERED)
                best = OTE_ERR_OUT_OF_BOUNDS;
            continue;
        }
        if ((g->access & access) == access) {
            *reg_p = g;
            return OTE_OK;
        }
        best = OTE_ERR_ACCESS;
    }
    return best;
}

/* Access of region i of test_check_cases (they are encoded in address order). */
static const uint32_t *case_access;

static uint32_t access_case(size_t i)
{
    return case_access[i];
}

static const unsigned check_access[] = {0, OTE_ACCESS_REMOTE_READ, OTE_ACCESS_REMOTE_WRITE,
                                        OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE};

/* The index's check, the search's (no index) and the reference agree at [addr, addr+len). */
static void expect_verdict(const ote_range_index_t *idx, const ote_desc_t *d, uint64_t addr,
                         size_t len)
{
    for (size_t a = 0; a < 4; a++) {
        ote_range_hit_t hi = {0}, hs = {0};
        const ote_desc_region_t *rr = NULL, *ri, *rs;
        ote_status_t si = ote_range_index_check(idx, d, addr, len, check_access[a], &hi);
        ote_status_t ss = ote_range_index_check(NULL, d, addr, len, check_access[a], &hs);
        ote_status_t sr = ref_check(d, addr, len, check_access[a], &rr);

        ri = hi.reg;
        rs = hs.reg;
        /* A region found comes with its own range and access. */
        if (ri != NULL && (hi.start != ri->addr || hi.end != ri->addr + ri->length ||
                           hi.access != ri->access))
            fail_msg("%#llx+%zu: the index's hit does not describe region %zd",
                     (unsigned long long)addr, len, ri - d->regions);
        if (rs != NULL && (hs.start != rs->addr || hs.end != rs->addr + rs->length ||
                           hs.access != rs->access))
            fail_msg("%#llx+%zu: the search's hit does not describe region %zd",
                     (unsigned long long)addr, len, rs - d->regions);
        if (si != sr || ss != sr || ri != rr || rs != rr)
            fail_msg("%#llx+%zu access %u: index %s (region %zd), search %s (%zd), "
                     "reference %s (%zd)",
                     (unsigned long long)addr, len, check_access[a], ote_status_string(si),
                     ri ? ri - d->regions : -1, ote_status_string(ss), rs ? rs - d->regions : -1,
                     ote_status_string(sr), rr ? rr - d->regions : -1);
    }
}

/* Around region i: its first and last byte, one before, one past, whole and one more. */
static void expect_verdict_edges(const ote_range_index_t *idx, const ote_desc_t *d, size_t i)
{
    uint64_t a = d->regions[i].addr, n = d->regions[i].length;

    expect_verdict(idx, d, a, 1);
    expect_verdict(idx, d, a, n);
    expect_verdict(idx, d, a, n + 1);
    expect_verdict(idx, d, a + n - 1, 1);
    expect_verdict(idx, d, a + n - 1, 2);
    expect_verdict(idx, d, a + n, 1);
    if (a > 0)
        expect_verdict(idx, d, a - 1, 1);
    if (a > 0)
        expect_verdict(idx, d, a - 1, 2);
}

/* The verdicts of the check on a hand-made layout, then against the reference. */
static void test_check_cases(void **state)
{
    const uint64_t P = 4096, B = 0x7f0000000000ull;
    const unsigned R = OTE_ACCESS_REMOTE_READ, W = OTE_ACCESS_REMOTE_WRITE;
    rg_t r[] = {
        {B, P},                  /* 0: RW, alone in its page */
        {B + P, P},              /* 1: R, adjacent */
        {B + 2 * P, 16 * P},     /* 2: W, over pages where nothing starts */
        {B + 3 * P + 256, 512},  /* 3: none, nested in 2, alone in its page */
        {B + 6 * P + 2048, 64},  /* 4: RW, nested in 2, starts mid-page */
        {B + 32 * P, 100},       /* 5: R and the next: two in one page */
        {B + 32 * P + 100, 28},  /* 6: W */
    };
    size_t n = sizeof(r) / sizeof(r[0]);
    uint32_t acc[] = {R | W, R, W, 0, R | W, R, W};
    ote_desc_t *d;
    ote_range_index_t *idx;
    ote_range_hit_t g;

    (void)state;
    case_access = acc;
    d = desc_fixture(r, n, OTE_DESC_VERSION, access_case);
    idx = ote_range_index_build(d);
    assert_non_null(idx);
#define CHECK(_addr, _len, _acc, _want, _reg)                                               \
    do {                                                                                     \
        g = (ote_range_hit_t){0};                                                            \
        assert_int_equal(ote_range_index_check(idx, d, (_addr), (_len), (_acc), &g), (_want)); \
        if ((_want) == OTE_OK)                                                               \
            assert_ptr_equal(g.reg, &d->regions[_reg]);                                      \
        expect_verdict(idx, d, (_addr), (_len));                                               \
    } while (0)
    CHECK(B, P, W, OTE_OK, 0);                        /* whole region from its slot */
    CHECK(B + P - 1, 1, R | W, OTE_OK, 0);            /* last byte */
    CHECK(B + P - 1, 2, R, OTE_ERR_OUT_OF_BOUNDS, 0); /* into the adjacent one */
    CHECK(B + P, 8, W, OTE_ERR_ACCESS, 0);            /* no WRITE on 1 */
    CHECK(B + P, 8, R, OTE_OK, 1);
    CHECK(B + 3 * P + 256, 8, W, OTE_OK, 2);          /* 3 lacks it, 2 holds it */
    CHECK(B + 3 * P + 256, 8, R, OTE_ERR_ACCESS, 0);  /* neither reads */
    CHECK(B + 3 * P + 700, 200, W, OTE_OK, 2);        /* past 3's end, inside 2 */
    CHECK(B + 6 * P + 100, 8, W, OTE_OK, 2);          /* in 4's page below 4 */
    CHECK(B + 6 * P + 2048, 64, R, OTE_OK, 4);
    CHECK(B + 6 * P + 2048, 65, R, OTE_ERR_ACCESS, 0); /* past 4: 2 covers, no READ */
    CHECK(B + 18 * P - 1, 2, W, OTE_ERR_OUT_OF_BOUNDS, 0);
    CHECK(B + 18 * P, 1, 0, OTE_ERR_NOT_REGISTERED, 0);
    CHECK(B + 32 * P + 99, 2, R, OTE_ERR_OUT_OF_BOUNDS, 0);
    CHECK(B + 32 * P + 100, 28, W, OTE_OK, 6);
    CHECK(B + 32 * P + 100, 28, R, OTE_ERR_ACCESS, 0);
    CHECK(B - 1, 1, 0, OTE_ERR_NOT_REGISTERED, 0);
#undef CHECK
    for (size_t i = 0; i < n; i++)
        expect_verdict_edges(idx, d, i);
    ote_range_index_free(idx);
    ote_desc_free(d);
}

/*
 * Many regions (100,000 pages, or mixed layouts with small, large, equal
 * and nested ones) with mixed access: the check through the index gives
 * the reference's verdict and region at every edge of a sample and at
 * random ranges.
 */
static void test_check_many(void **state)
{
    enum { N = 100000 };
    rg_t *r = calloc(N, sizeof(*r));
    uint64_t seed = 777;

    (void)state;
    assert_non_null(r);
    for (int round = 0; round < 4; round++) {
        ote_desc_t *d;
        ote_range_index_t *idx;
        uint64_t at = 0x10000000;
        size_t n = round == 0 ? N : N / 10;

        for (size_t i = 0; i < n; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            if (round == 0) { /* adjacent pages, as the scale benchmark registers */
                r[i] = (rg_t){at + i * 4096, 4096};
                continue;
            }
            switch ((seed >> 33) % 5) {
            case 0: at += 4096; r[i] = (rg_t){at, 4096}; break;
            case 1: at += (seed >> 40) % 300 + 1; r[i] = (rg_t){at, 64}; break;
            case 2: at += (seed >> 20) % (1u << 16); r[i] = (rg_t){at, 1u << 18}; break;
            case 3: r[i] = i > 0 ? r[i - 1] : (rg_t){at, 8}; break;       /* equal */
            default: at += 8192; r[i] = (rg_t){at, (seed >> 44) % 9000 + 1}; break;
            }
        }
        d   = desc_fixture(r, n, OTE_DESC_VERSION, access_mixed);
        idx = ote_range_index_build(d);
        assert_non_null(idx);
        for (size_t i = (size_t)round; i < n; i += round == 0 ? 997 : 61)
            expect_verdict_edges(idx, d, i);
        for (int k = 0; k < 3000; k++) {
            uint64_t span = d->regions[n - 1].addr + d->regions[n - 1].length - 0x10000000;

            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            expect_verdict(idx, d, 0x10000000 - 4096 + (seed >> 16) % (span + 8192),
                         (size_t)((seed >> 8) % 5000) + 1);
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
        cmocka_unit_test(test_check_cases),
        cmocka_unit_test(test_check_many),
        cmocka_unit_test(test_segment_checks),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
