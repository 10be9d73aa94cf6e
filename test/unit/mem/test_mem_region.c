/*
 * Region table rules: duplicates and refcounts, overlapping and nested
 * ranges, lookup results (OUT_OF_BOUNDS, ACCESS, NOT_REGISTERED), handle
 * validation, and the interval tree against a brute-force scan.
 */
#include "fake_md.h"

#define RW (OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE)
#define R  OTE_ACCESS_REMOTE_READ
#define W  OTE_ACCESS_REMOTE_WRITE

typedef struct {
    ote_mem_table_t *table;
    fake_md_t        md;
    long             counter;
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    ote_mem_table_params_t p = {.rcache_enable = true, .rcache_max_size = SIZE_MAX,
                                .rcache_max_regions = 1024, .rcache_manual_invalidate = true};

    assert_non_null(f);
    fake_md_init(&f->md, "fake", 0, &f->counter);
    assert_int_equal(ote_mem_table_create(&p, &f->table), OTE_OK);
    assert_int_equal(ote_mem_table_add_md(f->table, &f->md.md), OTE_OK);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;

    ote_mem_table_destroy(f->table);
    assert_int_equal(fake_md_live(&f->md), 0);
    free(f);
    return 0;
}

static ote_region_t *reg1(fixture_t *f, uint64_t addr, size_t len, unsigned access)
{
    ote_mem_desc_t d = fake_desc(addr, len, access);
    ote_region_t *r  = NULL;

    assert_int_equal(ote_mem_table_register(f->table, &d, 1, &r), OTE_OK);
    assert_non_null(r);
    return r;
}

static ote_status_t lookup(fixture_t *f, uint64_t addr, size_t len, unsigned access,
                           ote_region_t **r_p)
{
    ote_region_t *r = NULL;
    ote_status_t st = ote_mem_region_acquire(f->table, addr, len, access, &r);

    if (st == OTE_OK) {
        if (r_p != NULL)
            *r_p = r;
        ote_mem_region_put(r);
    }
    return st;
}

static void test_register_fields(void **state)
{
    fixture_t *f    = *state;
    ote_region_t *r = reg1(f, FAKE_BASE, 4096, RW);

    assert_int_equal(r->addr, FAKE_BASE);
    assert_int_equal(r->length, 4096);
    assert_int_equal(r->access, RW);
    assert_string_equal(r->location, "cpu:0");
    assert_int_equal(r->mem_type, OTE_MEM_TYPE_HOST);
    assert_non_null(r->memh[0]);
    assert_true(fake_md_has(&f->md, FAKE_BASE, 4096));
    assert_int_equal(ote_mem_table_count(f->table), 1);
    assert_int_equal(ote_mem_table_deregister(f->table, r), OTE_OK);
    assert_int_equal(ote_mem_table_count(f->table), 0);
}

static void test_duplicate_refcount(void **state)
{
    fixture_t *f = *state;
    ote_region_t *a, *b, *c, *got = NULL;
    uint64_t gen;

    a   = reg1(f, FAKE_BASE, 65536, RW);
    gen = ote_mem_table_generation(f->table);
    b   = reg1(f, FAKE_BASE, 65536, RW);
    assert_ptr_equal(a, b);
    assert_int_equal(a->refs, 2);
    assert_int_equal(f->md.regs, 1); /* no second md registration */
    assert_int_equal(ote_mem_table_generation(f->table), gen);
    assert_int_equal(ote_mem_table_count(f->table), 1);

    /* Same range, other access: a region of its own. */
    c = reg1(f, FAKE_BASE, 65536, R);
    assert_ptr_not_equal(a, c);
    assert_int_equal(ote_mem_table_count(f->table), 2);

    /* One deregistration drops one reference. */
    assert_int_equal(ote_mem_table_deregister(f->table, a), OTE_OK);
    assert_int_equal(lookup(f, FAKE_BASE + 100, 100, W, &got), OTE_OK);
    assert_ptr_equal(got, a);
    assert_int_equal(ote_mem_table_deregister(f->table, b), OTE_OK);
    assert_int_equal(lookup(f, FAKE_BASE + 100, 100, W, NULL), OTE_ERR_ACCESS);
    assert_int_equal(lookup(f, FAKE_BASE + 100, 100, R, &got), OTE_OK);
    assert_ptr_equal(got, c);
    /* A third deregistration of the gone region is an error, not a crash. */
    assert_int_equal(ote_mem_table_deregister(f->table, a), OTE_ERR_NOT_REGISTERED);
    assert_int_equal(ote_mem_table_deregister(f->table, c), OTE_OK);
    assert_int_equal(ote_mem_table_deregister(f->table, c), OTE_ERR_NOT_REGISTERED);
    assert_int_equal(ote_mem_table_count(f->table), 0);
}

/*
 * Registering a range again finds its region among many (the table's
 * range set, grown several times): adjacent ranges, equal starts with
 * other ends, the same range with other access; and after half of them are
 * gone (the set's removals), the others are still found, the gone ones
 * registered anew.
 */
static void test_duplicate_many(void **state)
{
    fixture_t *f = *state;
    size_t n     = 1500;
    ote_region_t **outer = calloc(n, sizeof(*outer)), **inner = calloc(n, sizeof(*inner));
    ote_region_t **ro = calloc(n, sizeof(*ro));
    uint64_t gen;
    long regs;

    for (size_t i = 0; i < n; i++) {
        uint64_t a = FAKE_BASE + i * 8192;

        outer[i] = reg1(f, a, 8192, RW);     /* adjacent to the next one */
        inner[i] = reg1(f, a, 4096, RW);     /* same start, other end */
        ro[i]    = reg1(f, a, 8192, R);      /* same range, other access */
        assert_ptr_not_equal(outer[i], inner[i]);
        assert_ptr_not_equal(outer[i], ro[i]);
    }
    assert_int_equal(ote_mem_table_count(f->table), 3 * n);
    gen  = ote_mem_table_generation(f->table);
    regs = f->md.regs;
    for (size_t k = 0; k < n; k++) {
        size_t i = (k * 7919) % n;
        uint64_t a = FAKE_BASE + i * 8192;

        assert_ptr_equal(reg1(f, a, 8192, RW), outer[i]);
        assert_ptr_equal(reg1(f, a, 4096, RW), inner[i]);
        assert_ptr_equal(reg1(f, a, 8192, R), ro[i]);
        assert_int_equal(outer[i]->refs, 2);
        assert_int_equal(ote_mem_table_deregister(f->table, outer[i]), OTE_OK);
        assert_int_equal(ote_mem_table_deregister(f->table, inner[i]), OTE_OK);
        assert_int_equal(ote_mem_table_deregister(f->table, ro[i]), OTE_OK);
    }
    assert_int_equal(ote_mem_table_generation(f->table), gen);
    assert_int_equal(f->md.regs, regs);
    assert_int_equal(ote_mem_table_count(f->table), 3 * n);
    /* Half of the outer ones go. */
    for (size_t i = 0; i < n; i += 2)
        assert_int_equal(ote_mem_table_deregister(f->table, outer[i]), OTE_OK);
    assert_int_equal(ote_mem_table_count(f->table), 3 * n - (n + 1) / 2);
    for (size_t i = 1; i < n; i += 2) {
        assert_ptr_equal(reg1(f, FAKE_BASE + i * 8192, 8192, RW), outer[i]);
        assert_int_equal(outer[i]->refs, 2);
        assert_int_equal(ote_mem_table_deregister(f->table, outer[i]), OTE_OK);
        assert_ptr_equal(reg1(f, FAKE_BASE + i * 8192, 4096, RW), inner[i]);
        assert_int_equal(ote_mem_table_deregister(f->table, inner[i]), OTE_OK);
    }
    assert_int_equal(ote_mem_table_count(f->table), 3 * n - (n + 1) / 2);
    /* A gone one registered again is a new region of the table. */
    gen = ote_mem_table_generation(f->table);
    outer[0] = reg1(f, FAKE_BASE, 8192, RW);
    assert_int_equal(outer[0]->refs, 1);
    assert_int_equal(ote_mem_table_count(f->table), 3 * n - (n + 1) / 2 + 1);
    assert_true(ote_mem_table_generation(f->table) != gen);
    assert_int_equal(ote_mem_table_deregister(f->table, outer[0]), OTE_OK);
    for (size_t i = 0; i < n; i++) {
        if (i % 2 == 1)
            assert_int_equal(ote_mem_table_deregister(f->table, outer[i]), OTE_OK);
        assert_int_equal(ote_mem_table_deregister(f->table, inner[i]), OTE_OK);
        assert_int_equal(ote_mem_table_deregister(f->table, ro[i]), OTE_OK);
    }
    assert_int_equal(ote_mem_table_count(f->table), 0);
    free(outer);
    free(inner);
    free(ro);
}

/*
 * A user registration of the exact range of engine-owned memory is a
 * region of its own, never the owned one (the range set's slot tells them
 * apart without reading the region), and is found again as the duplicate.
 */
static void test_duplicate_not_owned(void **state)
{
    fixture_t *f = *state;
    ote_region_t *own, *a, *b;
    void *addr;

    assert_int_equal(ote_mem_table_alloc(f->table, 65536, NULL, RW, &addr, &own), OTE_OK);
    assert_true(own->owned);
    a = reg1(f, (uintptr_t)addr, 65536, RW);
    assert_ptr_not_equal(a, own);
    assert_false(a->owned);
    assert_int_equal(a->refs, 1);
    b = reg1(f, (uintptr_t)addr, 65536, RW);
    assert_ptr_equal(b, a);
    assert_int_equal(a->refs, 2);
    assert_int_equal(own->refs, 1);
    assert_int_equal(ote_mem_table_count(f->table), 2);
    assert_int_equal(ote_mem_table_deregister(f->table, a), OTE_OK);
    assert_int_equal(ote_mem_table_deregister(f->table, b), OTE_OK);
    assert_int_equal(ote_mem_table_free(f->table, own), OTE_OK);
    assert_int_equal(ote_mem_table_count(f->table), 0);
}

static void test_duplicate_in_one_batch(void **state)
{
    fixture_t *f = *state;
    ote_mem_desc_t d[3] = {fake_desc(FAKE_BASE, 8192, RW), fake_desc(FAKE_BASE, 8192, RW),
                           fake_desc(FAKE_BASE + 8192, 8192, RW)};
    ote_region_t *r[3];

    assert_int_equal(ote_mem_table_register(f->table, d, 3, r), OTE_OK);
    assert_ptr_equal(r[0], r[1]);
    assert_int_equal(r[0]->refs, 2);
    assert_ptr_not_equal(r[0], r[2]);
    assert_int_equal(ote_mem_table_count(f->table), 2);
    for (int i = 0; i < 3; i++)
        assert_int_equal(ote_mem_table_deregister(f->table, r[i]), OTE_OK);
    assert_int_equal(ote_mem_table_count(f->table), 0);
}

static void test_overlap_and_nested(void **state)
{
    fixture_t *f = *state;
    ote_region_t *outer, *inner, *right, *got = NULL;

    /* outer [0, 1M) rw; inner [256K, 512K) r only; right [768K, 1.5M) rw */
    outer = reg1(f, FAKE_BASE, 1 << 20, RW);
    inner = reg1(f, FAKE_BASE + (256 << 10), 256 << 10, R);
    right = reg1(f, FAKE_BASE + (768 << 10), 768 << 10, RW);
    assert_int_equal(ote_mem_table_count(f->table), 3);

    /* Inside the nested one: a lookup for write finds the outer region. */
    assert_int_equal(lookup(f, FAKE_BASE + (300 << 10), 4096, W, &got), OTE_OK);
    assert_ptr_equal(got, outer);
    assert_int_equal(lookup(f, FAKE_BASE + (300 << 10), 4096, R, &got), OTE_OK);
    assert_true(got == outer || got == inner);
    /* Across the overlap of outer and right: only right covers the end. */
    assert_int_equal(lookup(f, FAKE_BASE + (900 << 10), 256 << 10, RW, &got), OTE_OK);
    assert_ptr_equal(got, right);
    /* Starting in outer, ending past outer and inside right: right covers. */
    assert_int_equal(lookup(f, FAKE_BASE + (800 << 10), 512 << 10, 0, &got), OTE_OK);
    assert_ptr_equal(got, right);
    /* Starting before right, ending past outer: no one covers the whole. */
    assert_int_equal(lookup(f, FAKE_BASE + (700 << 10), 400 << 10, 0, NULL),
                     OTE_ERR_OUT_OF_BOUNDS);

    /* Outer gone: the nested region still answers for its own range. */
    assert_int_equal(ote_mem_table_deregister(f->table, outer), OTE_OK);
    assert_int_equal(lookup(f, FAKE_BASE + (300 << 10), 4096, R, &got), OTE_OK);
    assert_ptr_equal(got, inner);
    assert_int_equal(lookup(f, FAKE_BASE + (300 << 10), 4096, W, NULL), OTE_ERR_ACCESS);
    assert_int_equal(lookup(f, FAKE_BASE, 4096, 0, NULL), OTE_ERR_NOT_REGISTERED);
    assert_int_equal(lookup(f, FAKE_BASE + (500 << 10), 64 << 10, R, NULL),
                     OTE_ERR_OUT_OF_BOUNDS);
    assert_int_equal(ote_mem_table_deregister(f->table, inner), OTE_OK);
    assert_int_equal(ote_mem_table_deregister(f->table, right), OTE_OK);
}

static void test_straddle_two_regions(void **state)
{
    fixture_t *f = *state;
    ote_region_t *a = reg1(f, FAKE_BASE, 4096, RW);
    ote_region_t *b = reg1(f, FAKE_BASE + 4096, 4096, RW);

    /* Adjacent regions: a range across the seam is out of bounds. */
    assert_int_equal(lookup(f, FAKE_BASE + 4000, 200, RW, NULL), OTE_ERR_OUT_OF_BOUNDS);
    assert_int_equal(lookup(f, FAKE_BASE, 8192, 0, NULL), OTE_ERR_OUT_OF_BOUNDS);
    /* Exact edges of each are fine. */
    assert_int_equal(lookup(f, FAKE_BASE, 4096, RW, NULL), OTE_OK);
    assert_int_equal(lookup(f, FAKE_BASE + 4096, 4096, RW, NULL), OTE_OK);
    assert_int_equal(lookup(f, FAKE_BASE + 8191, 1, RW, NULL), OTE_OK);
    /* Past the last byte, and before the first. */
    assert_int_equal(lookup(f, FAKE_BASE + 8192, 1, 0, NULL), OTE_ERR_NOT_REGISTERED);
    assert_int_equal(lookup(f, FAKE_BASE - 1, 2, 0, NULL), OTE_ERR_NOT_REGISTERED);
    assert_int_equal(lookup(f, FAKE_BASE + 8191, 2, 0, NULL), OTE_ERR_OUT_OF_BOUNDS);
    /* Bad ranges. */
    assert_int_equal(lookup(f, FAKE_BASE, 0, 0, NULL), OTE_ERR_INVALID_PARAM);
    assert_int_equal(lookup(f, UINT64_MAX - 10, 100, 0, NULL), OTE_ERR_INVALID_PARAM);
    assert_int_equal(ote_mem_table_deregister(f->table, a), OTE_OK);
    assert_int_equal(ote_mem_table_deregister(f->table, b), OTE_OK);
}

static void test_access_flags(void **state)
{
    fixture_t *f = *state;
    ote_region_t *none = reg1(f, FAKE_BASE, 4096, 0);
    ote_region_t *ro   = reg1(f, FAKE_BASE + 4096, 4096, R);
    ote_region_t *wo   = reg1(f, FAKE_BASE + 8192, 4096, W);

    assert_int_equal(lookup(f, FAKE_BASE, 64, 0, NULL), OTE_OK);
    assert_int_equal(lookup(f, FAKE_BASE, 64, R, NULL), OTE_ERR_ACCESS);
    assert_int_equal(lookup(f, FAKE_BASE, 64, W, NULL), OTE_ERR_ACCESS);
    assert_int_equal(lookup(f, FAKE_BASE + 4096, 64, R, NULL), OTE_OK);
    assert_int_equal(lookup(f, FAKE_BASE + 4096, 64, W, NULL), OTE_ERR_ACCESS);
    assert_int_equal(lookup(f, FAKE_BASE + 4096, 64, RW, NULL), OTE_ERR_ACCESS);
    assert_int_equal(lookup(f, FAKE_BASE + 8192, 64, W, NULL), OTE_OK);
    assert_int_equal(lookup(f, FAKE_BASE + 8192, 64, R, NULL), OTE_ERR_ACCESS);
    assert_int_equal(ote_mem_table_deregister(f->table, none), OTE_OK);
    assert_int_equal(ote_mem_table_deregister(f->table, ro), OTE_OK);
    assert_int_equal(ote_mem_table_deregister(f->table, wo), OTE_OK);
}

static void test_bad_input(void **state)
{
    fixture_t *f = *state;
    ote_mem_desc_t d;
    ote_region_t *r = NULL, bogus;
    long regs       = f->md.regs;

    d = fake_desc(0, 4096, 0);
    assert_int_equal(ote_mem_table_register(f->table, &d, 1, &r), OTE_ERR_INVALID_PARAM);
    d = fake_desc(FAKE_BASE, 0, 0);
    assert_int_equal(ote_mem_table_register(f->table, &d, 1, &r), OTE_ERR_INVALID_PARAM);
    d = fake_desc(UINT64_MAX - 100, 4096, 0);
    assert_int_equal(ote_mem_table_register(f->table, &d, 1, &r), OTE_ERR_INVALID_PARAM);
    d = fake_desc(FAKE_BASE, 4096, 1u << 7);
    assert_int_equal(ote_mem_table_register(f->table, &d, 1, &r), OTE_ERR_INVALID_PARAM);
    d          = fake_desc(FAKE_BASE, 4096, 0);
    d.location = "cpu:99";
    assert_int_equal(ote_mem_table_register(f->table, &d, 1, &r), OTE_ERR_INVALID_PARAM);
    d.location = "gpu:1";
    assert_int_equal(ote_mem_table_register(f->table, &d, 1, &r), OTE_ERR_INVALID_PARAM);
    d.location = "cuda:0";
    assert_int_equal(ote_mem_table_register(f->table, &d, 1, &r), OTE_ERR_INVALID_PARAM);
    d = fake_desc(FAKE_BASE, 4096, 0);
    assert_int_equal(ote_mem_table_register(f->table, &d, 0, &r), OTE_ERR_INVALID_PARAM);
    assert_int_equal(ote_mem_table_register(f->table, NULL, 1, &r), OTE_ERR_INVALID_PARAM);
    assert_null(r);
    assert_int_equal(f->md.regs, regs);
    assert_int_equal(ote_mem_table_count(f->table), 0);

    /* Handles that were never registered here. */
    memset(&bogus, 0, sizeof(bogus));
    assert_int_equal(ote_mem_table_deregister(f->table, &bogus), OTE_ERR_NOT_REGISTERED);
    assert_int_equal(ote_mem_table_deregister(f->table, NULL), OTE_ERR_INVALID_PARAM);
    assert_int_equal(ote_mem_table_free(f->table, &bogus), OTE_ERR_NOT_REGISTERED);

    /* A user registration is not freed with _free. */
    r = reg1(f, FAKE_BASE, 4096, 0);
    assert_int_equal(ote_mem_table_free(f->table, r), OTE_ERR_INVALID_PARAM);
    assert_int_equal(ote_mem_table_deregister(f->table, r), OTE_OK);

    /* An md the table has already. */
    assert_int_equal(ote_mem_table_add_md(f->table, &f->md.md), OTE_ERR_EXISTS);
}

static void collect(ote_region_t *r, void *arg)
{
    uint64_t *last = arg;

    assert_true(r->addr >= *last);
    *last = r->addr;
}

static void test_visit_in_order(void **state)
{
    fixture_t *f = *state;
    ote_region_t *r[64];
    uint64_t last = 0;

    for (int i = 0; i < 64; i++)
        r[i] = reg1(f, FAKE_BASE + (uint64_t)((i * 37) % 64) * 4096, 4096, 0);
    ote_mem_table_visit(f->table, collect, &last);
    assert_int_equal(last, FAKE_BASE + 63 * 4096);
    for (int i = 0; i < 64; i++)
        assert_int_equal(ote_mem_table_deregister(f->table, r[i]), OTE_OK);
}

/* Random ranges, including nested and overlapping ones, against a scan. */
static uint64_t rnd_state = 88172645463325252ull;

static uint64_t rnd(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state;
}

static ote_status_t brute(ote_region_t **live, size_t n, uint64_t a, uint64_t len,
                          unsigned access)
{
    bool first = false, cover = false;

    for (size_t i = 0; i < n; i++) {
        ote_region_t *r = live[i];

        if (r == NULL)
            continue;
        if (r->addr <= a && a < r->addr + r->length)
            first = true;
        if (r->addr <= a && a + len <= r->addr + r->length) {
            if ((r->access & access) == access)
                return OTE_OK;
            cover = true;
        }
    }
    return cover ? OTE_ERR_ACCESS : first ? OTE_ERR_OUT_OF_BOUNDS : OTE_ERR_NOT_REGISTERED;
}

/*
 * starts: 0 for starts anywhere, else the number of distinct start
 * addresses (many equal starts spill across leaves of the index).
 */
static void tree_against_scan(fixture_t *f, unsigned starts)
{
    enum { N = 1500, SPAN = 1 << 22 };
    static ote_region_t *live[N];

    memset(live, 0, sizeof(live));
    for (int round = 0; round < 20000; round++) {
        size_t i = rnd() % N;

        if (live[i] == NULL) {
            uint64_t a   = FAKE_BASE + (starts ? (rnd() % starts) * 4096 : rnd() % SPAN);
            uint64_t len = 1 + rnd() % (rnd() % 4 == 0 ? 65536 : 2048);

            unsigned acc       = (unsigned)(rnd() % 4);
            ote_region_t *same = NULL;

            for (size_t k = 0; k < N; k++) {
                if (live[k] != NULL && live[k]->addr == a && live[k]->length == len &&
                    live[k]->access == acc)
                    same = live[k];
            }
            live[i] = reg1(f, a, len, acc);
            /* The same range and access is found again, not registered twice. */
            assert_true(same == NULL ? live[i]->refs == 1 : live[i] == same);
            /* A duplicate would share the handle: keep one owner per range. */
            if (live[i]->refs > 1) {
                assert_int_equal(ote_mem_table_deregister(f->table, live[i]), OTE_OK);
                live[i] = NULL;
            }
        } else if (rnd() % 3 == 0) {
            assert_int_equal(ote_mem_table_deregister(f->table, live[i]), OTE_OK);
            live[i] = NULL;
        }
        for (int q = 0; q < 4; q++) {
            uint64_t a     = FAKE_BASE + rnd() % (starts ? starts * 4096 + 8192 : SPAN);
            uint64_t len   = 1 + rnd() % 4096;
            unsigned acc   = (unsigned)(rnd() % 4);
            ote_region_t *got = NULL;
            ote_status_t st   = lookup(f, a, len, acc, &got);

            assert_int_equal(st, brute(live, N, a, len, acc));
            if (st == OTE_OK) {
                assert_true(got->addr <= a && a + len <= got->addr + got->length);
                assert_int_equal(got->access & acc, acc);
            }
        }
    }
    for (size_t i = 0; i < N; i++) {
        if (live[i] != NULL)
            assert_int_equal(ote_mem_table_deregister(f->table, live[i]), OTE_OK);
    }
    assert_int_equal(ote_mem_table_count(f->table), 0);
}

static void test_tree_against_scan(void **state)
{
    tree_against_scan(*state, 0);
}

static void test_tree_equal_starts(void **state)
{
    tree_against_scan(*state, 8);
}

/* The index on its own: every query against a scan, inserts and removals. */
static void test_sidx_against_scan(void **state)
{
    enum { N = 3000 };
    static ote_itree_node_t nodes[N];
    static bool in[N];
    ote_sidx_t x;
    uint64_t tie = 0;

    ote_sidx_init(&x);
    memset(in, 0, sizeof(in));
    for (int round = 0; round < 40000; round++) {
        size_t i = rnd() % N;

        if (!in[i]) {
            nodes[i].start = rnd() % (1 << 20);
            nodes[i].end   = nodes[i].start + 1 + rnd() % (rnd() % 8 == 0 ? 100000 : 3000);
            nodes[i].tie   = ++tie;
            assert_int_equal(ote_sidx_insert(&x, &nodes[i]), OTE_OK);
            in[i] = true;
        } else if (rnd() % 2 == 0) {
            ote_sidx_remove(&x, &nodes[i]);
            in[i] = false;
        }
        if (round % 4 != 0)
            continue;
        {
            uint64_t s0 = rnd() % (1 << 20), e0 = s0 + 1 + rnd() % 5000;
            bool want_cover = false, want_overlap = false;
            ote_itree_node_t *c = ote_sidx_cover(&x, s0, e0, NULL, NULL);
            ote_itree_node_t *o = ote_sidx_overlap(&x, s0, e0, NULL, NULL);
            size_t count = 0;

            for (size_t k = 0; k < N; k++) {
                if (!in[k])
                    continue;
                count++;
                want_cover |= nodes[k].start <= s0 && nodes[k].end >= e0;
                want_overlap |= nodes[k].start < e0 && nodes[k].end > s0;
            }
            assert_int_equal(x.count, count);
            assert_int_equal(c != NULL, want_cover);
            if (c != NULL)
                assert_true(c->start <= s0 && c->end >= e0);
            assert_int_equal(o != NULL, want_overlap);
            if (o != NULL)
                assert_true(o->start < e0 && o->end > s0);
            if (in[i]) {
                ote_itree_node_t *fr = ote_sidx_find_range(&x, nodes[i].start, nodes[i].end,
                                                           NULL, NULL);

                assert_non_null(fr);
                assert_true(fr->start == nodes[i].start && fr->end == nodes[i].end);
            }
        }
    }
    for (size_t k = 0; k < N; k++) {
        if (in[k])
            ote_sidx_remove(&x, &nodes[k]);
    }
    assert_int_equal(x.count, 0);
    assert_int_equal(x.nleaves, 0);
    ote_sidx_fini(&x);
}

static void test_destroy_releases_everything(void **state)
{
    fixture_t *f = *state;

    for (int i = 0; i < 10; i++)
        reg1(f, FAKE_BASE + (uint64_t)i * 8192, 4096, RW);
    /* teardown destroys the table and checks the md holds nothing. */
    assert_int_equal(fake_md_live(&f->md), 10);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_register_fields, setup, teardown),
        cmocka_unit_test_setup_teardown(test_duplicate_refcount, setup, teardown),
        cmocka_unit_test_setup_teardown(test_duplicate_not_owned, setup, teardown),
        cmocka_unit_test_setup_teardown(test_duplicate_in_one_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_duplicate_many, setup, teardown),
        cmocka_unit_test_setup_teardown(test_overlap_and_nested, setup, teardown),
        cmocka_unit_test_setup_teardown(test_straddle_two_regions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_access_flags, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_input, setup, teardown),
        cmocka_unit_test_setup_teardown(test_visit_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tree_against_scan, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tree_equal_starts, setup, teardown),
        cmocka_unit_test(test_sidx_against_scan),
        cmocka_unit_test_setup_teardown(test_destroy_releases_everything, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
