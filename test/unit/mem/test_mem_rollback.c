/*
 * Batch registration is all or nothing: a failure injected into a memory
 * domain at every position of a batch leaves no region, no reference and
 * no md registration behind, with the cache on or off, with duplicates and
 * already-registered ranges in the batch, and with an md whose
 * registrations grant remote access (registered per region).
 */
#include "fake_md.h"

#define RW    (OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE)
#define NDESC 12

typedef struct {
    ote_mem_table_t *table;
    fake_md_t        a, b, grant;
    long             counter;
} fixture_t;

static void fixture_init(fixture_t *f, bool rcache)
{
    ote_mem_table_params_t p = {.rcache_enable = rcache, .rcache_max_size = SIZE_MAX,
                                .rcache_max_regions = 1024, .rcache_manual_invalidate = true};

    memset(f, 0, sizeof(*f));
    fake_md_init(&f->a, "a", 0, &f->counter);
    fake_md_init(&f->b, "b", 0, &f->counter);
    fake_md_init(&f->grant, "grant", OTE_MD_FLAG_GRANTS_ACCESS, &f->counter);
    assert_int_equal(ote_mem_table_create(&p, &f->table), OTE_OK);
    assert_int_equal(ote_mem_table_add_md(f->table, &f->a.md), OTE_OK);
    assert_int_equal(ote_mem_table_add_md(f->table, &f->b.md), OTE_OK);
    assert_int_equal(ote_mem_table_add_md(f->table, &f->grant.md), OTE_OK);
}

static void fixture_fini(fixture_t *f)
{
    ote_mem_table_destroy(f->table);
    assert_int_equal(fake_md_live(&f->a), 0);
    assert_int_equal(fake_md_live(&f->b), 0);
    assert_int_equal(fake_md_live(&f->grant), 0);
}

/* A batch of distinct ranges: every third overlaps the previous one. */
static void make_batch(ote_mem_desc_t *d, size_t n, uint64_t base)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t a = base + i * 65536 - (i % 3 == 2 ? 4096 : 0);

        d[i] = fake_desc(a, 65536, RW);
    }
}

/*
 * Fail the k-th mem_reg call for every k a batch makes; after each failure
 * the table and every md are exactly as before the call.
 */
static void fail_every_position(bool rcache)
{
    ote_mem_desc_t d[NDESC];
    ote_region_t *r[NDESC];
    long total;
    fixture_t f;

    fixture_init(&f, rcache);
    make_batch(d, NDESC, FAKE_BASE);

    /* A clean run counts the calls one batch makes. */
    f.counter = 0;
    assert_int_equal(ote_mem_table_register(f.table, d, NDESC, r), OTE_OK);
    total = f.counter;
    assert_int_equal(total, 3 * NDESC);
    for (size_t i = 0; i < NDESC; i++)
        assert_int_equal(ote_mem_table_deregister(f.table, r[i]), OTE_OK);
    fixture_fini(&f);

    for (long k = 1; k <= total; k++) {
        fixture_init(&f, rcache);
        f.a.fail_at = f.b.fail_at = f.grant.fail_at = k;
        memset(r, 0x5a, sizeof(r));
        assert_int_equal(ote_mem_table_register(f.table, d, NDESC, r), OTE_ERR_IO);
        /* Nothing from the call stays registered anywhere. */
        assert_int_equal(ote_mem_table_count(f.table), 0);
        assert_int_equal(fake_md_live(&f.a), 0);
        assert_int_equal(fake_md_live(&f.b), 0);
        assert_int_equal(fake_md_live(&f.grant), 0);
        for (size_t i = 0; i < NDESC; i++) {
            ote_region_t *got;

            assert_int_equal(ote_mem_region_acquire(f.table, (uintptr_t)d[i].addr, 1, 0, &got),
                             OTE_ERR_NOT_REGISTERED);
        }
        if (rcache) {
            ote_mem_rcache_stats_t s;

            ote_mem_table_rcache_stats(f.table, &s);
            assert_int_equal(s.entries, 0);
        }
        /* The same batch registers fine afterwards. */
        f.a.fail_at = f.b.fail_at = f.grant.fail_at = 0;
        assert_int_equal(ote_mem_table_register(f.table, d, NDESC, r), OTE_OK);
        assert_int_equal(ote_mem_table_count(f.table), NDESC);
        for (size_t i = 0; i < NDESC; i++)
            assert_int_equal(ote_mem_table_deregister(f.table, r[i]), OTE_OK);
        fixture_fini(&f);
    }
}

static void test_rollback_each_position_rcache(void **state)
{
    fail_every_position(true);
}

static void test_rollback_each_position_no_rcache(void **state)
{
    fail_every_position(false);
}

/*
 * A batch mixing ranges already registered (references taken), duplicates
 * inside the batch, and new ranges: a failure at any position restores
 * every refcount and leaves earlier registrations untouched.
 */
static void mixed_batch(bool rcache)
{
    ote_mem_desc_t pre[2], d[8];
    ote_region_t *p[2], *r[8];
    long regs_a, regs_grant;

    for (long k = 1; k <= 12; k++) {
        fixture_t f;
        bool ok = false;

        fixture_init(&f, rcache);
        pre[0] = fake_desc(FAKE_BASE, 65536, RW);
        pre[1] = fake_desc(FAKE_BASE + (1 << 20), 65536, RW);
        assert_int_equal(ote_mem_table_register(f.table, pre, 2, p), OTE_OK);
        regs_a     = fake_md_live(&f.a);
        regs_grant = fake_md_live(&f.grant);

        d[0] = pre[0];                                      /* existing: reference */
        d[1] = fake_desc(FAKE_BASE + (2 << 20), 4096, RW);  /* new                 */
        d[2] = d[1];                                        /* duplicate in batch  */
        d[3] = fake_desc(FAKE_BASE + 4096, 8192, RW);       /* nested in pre[0]    */
        d[4] = pre[1];                                      /* existing: reference */
        d[5] = fake_desc(FAKE_BASE + (3 << 20), 4096, 0);   /* new                 */
        d[6] = fake_desc(FAKE_BASE + (3 << 20), 4096, RW);  /* same range, other access */
        d[7] = fake_desc(FAKE_BASE + (4 << 20), 4096, RW);  /* new                 */

        f.counter   = 0;
        f.a.fail_at = f.b.fail_at = f.grant.fail_at = k;
        if (ote_mem_table_register(f.table, d, 8, r) == OTE_OK) {
            /* k beyond the calls this batch makes: undo by hand. */
            ok = true;
            assert_true(f.counter < k);
            for (int i = 0; i < 8; i++)
                assert_int_equal(ote_mem_table_deregister(f.table, r[i]), OTE_OK);
        }
        assert_int_equal(ote_mem_table_count(f.table), 2);
        assert_int_equal(p[0]->refs, 1);
        assert_int_equal(p[1]->refs, 1);
        if (!rcache) {
            assert_int_equal(fake_md_live(&f.a), regs_a);
        } else {
            ote_mem_rcache_stats_t s;

            /* Only after a success may unreferenced entries be cached. */
            ote_mem_table_rcache_stats(f.table, &s);
            if (!ok && s.unreferenced != 0)
                fail_msg("a batch failing at md call %ld left %zu cached registrations", k,
                         (size_t)s.unreferenced);
            assert_int_equal(fake_md_live(&f.a), regs_a + (long)s.unreferenced);
        }
        assert_int_equal(fake_md_live(&f.grant), regs_grant);
        assert_true(fake_md_has(&f.a, FAKE_BASE, 65536));
        assert_true(fake_md_has(&f.grant, FAKE_BASE + (1 << 20), 65536));
        assert_int_equal(ote_mem_table_deregister(f.table, p[0]), OTE_OK);
        assert_int_equal(ote_mem_table_deregister(f.table, p[1]), OTE_OK);
        fixture_fini(&f);
    }
}

static void test_rollback_mixed_rcache(void **state)
{
    mixed_batch(true);
}

static void test_rollback_mixed_no_rcache(void **state)
{
    mixed_batch(false);
}

/* 1000 descriptors, the 900th fails: none of the 1000 stays registered. */
static void test_rollback_900_of_1000(void **state)
{
    enum { N = 1000 };
    ote_mem_desc_t *d = calloc(N, sizeof(*d));
    ote_region_t **r  = calloc(N, sizeof(*r));
    fixture_t f;

    assert_non_null(d);
    assert_non_null(r);
    fixture_init(&f, true);
    for (size_t i = 0; i < N; i++)
        d[i] = fake_desc(FAKE_BASE + i * 65536, 65536, RW);
    /* Three mds, in order a, b, grant per descriptor: fail b of the 900th. */
    f.b.fail_at = 3 * 899 + 2;
    assert_int_equal(ote_mem_table_register(f.table, d, N, r), OTE_ERR_IO);
    assert_int_equal(ote_mem_table_count(f.table), 0);
    assert_int_equal(fake_md_live(&f.a), 0);
    assert_int_equal(fake_md_live(&f.b), 0);
    assert_int_equal(fake_md_live(&f.grant), 0);
    assert_int_equal(f.a.regs, 900);
    assert_int_equal(f.b.regs, 899);
    fixture_fini(&f);
    free(d);
    free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rollback_each_position_rcache),
        cmocka_unit_test(test_rollback_each_position_no_rcache),
        cmocka_unit_test(test_rollback_mixed_rcache),
        cmocka_unit_test(test_rollback_mixed_no_rcache),
        cmocka_unit_test(test_rollback_900_of_1000),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
