/*
 * Registration cache: hits for repeated and covered registrations, misses,
 * LRU eviction of unreferenced entries by count and by size, the cache off,
 * invalidation of unmapped memory (reported by hand, and through the
 * memory-event hooks with a real munmap).
 */
#include "fake_md.h"
#include "mem/mem_int.h"

#include <sys/mman.h>
#include <unistd.h>

#define RW (OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE)
#define R  OTE_ACCESS_REMOTE_READ

typedef struct {
    ote_mem_table_t *table;
    fake_md_t        md;
    long             counter;
} fixture_t;

static void fixture_init(fixture_t *f, bool enable, size_t max_size, long max_regions)
{
    ote_mem_table_params_t p = {.rcache_enable = enable, .rcache_max_size = max_size,
                                .rcache_max_regions = max_regions,
                                .rcache_manual_invalidate = true};

    memset(f, 0, sizeof(*f));
    fake_md_init(&f->md, "md", 0, &f->counter);
    assert_int_equal(ote_mem_table_create(&p, &f->table), OTE_OK);
    assert_int_equal(ote_mem_table_add_md(f->table, &f->md.md), OTE_OK);
}

static void fixture_fini(fixture_t *f)
{
    ote_mem_table_destroy(f->table);
    assert_int_equal(fake_md_live(&f->md), 0);
}

/* The cache kept nothing: no registration left at the md while the table lives; then fini. */
static void fixture_fini_empty(fixture_t *f)
{
    assert_int_equal(fake_md_live(&f->md), 0);
    fixture_fini(f);
}

static ote_region_t *reg1(fixture_t *f, uint64_t addr, size_t len, unsigned access)
{
    ote_mem_desc_t d = fake_desc(addr, len, access);
    ote_region_t *r;

    assert_int_equal(ote_mem_table_register(f->table, &d, 1, &r), OTE_OK);
    return r;
}

static void dereg(fixture_t *f, ote_region_t *r)
{
    assert_int_equal(ote_mem_table_deregister(f->table, r), OTE_OK);
}

/* [addr, addr + len) registered with RW and released at once: an unreferenced entry. */
static void use_once(fixture_t *f, uint64_t addr, size_t len)
{
    dereg(f, reg1(f, addr, len, RW));
}

/* count ranges of len bytes, step apart from FAKE_BASE, each used once in turn. */
static void use_each(fixture_t *f, int count, uint64_t step, size_t len)
{
    for (int i = 0; i < count; i++)
        use_once(f, FAKE_BASE + (uint64_t)i * step, len);
}

static ote_mem_rcache_stats_t stats(fixture_t *f)
{
    ote_mem_rcache_stats_t s;

    ote_mem_table_rcache_stats(f->table, &s);
    return s;
}

static void test_hit_after_deregister(void **state)
{
    fixture_t f;
    ote_region_t *r;
    ote_mem_rcache_stats_t s;

    fixture_init(&f, true, SIZE_MAX, 100);
    for (int i = 0; i < 5; i++) {
        r = reg1(&f, FAKE_BASE, 65536, RW);
        assert_non_null(r->memh[0]);
        dereg(&f, r);
        /* Left the table although its registration is kept. */
        assert_int_equal(ote_mem_table_count(f.table), 0);
    }
    s = stats(&f);
    assert_true(s.retains);
    assert_int_equal(s.misses, 1);
    assert_int_equal(s.hits, 4);
    assert_int_equal(s.entries, 1);
    assert_int_equal(s.unreferenced, 1);
    assert_int_equal(s.unreferenced_bytes, 65536);
    assert_int_equal(f.md.regs, 1);
    assert_int_equal(fake_md_live(&f.md), 1);
    fixture_fini(&f); /* destroying the table drops what the cache kept */
}

static void test_covered_and_access(void **state)
{
    fixture_t f;
    ote_region_t *big, *sub, *sub_r, *other, *wider;
    ote_mem_rcache_stats_t s;

    fixture_init(&f, true, SIZE_MAX, 100);
    big = reg1(&f, FAKE_BASE, 1 << 20, R);
    /* Covered, same or lesser access: served by big's registration. */
    sub   = reg1(&f, FAKE_BASE + 4096, 8192, R);
    sub_r = reg1(&f, FAKE_BASE + 65536, 4096, 0);
    assert_ptr_not_equal(sub, big); /* its own region, bounds and access */
    assert_ptr_equal(sub->memh[0], big->memh[0]);
    assert_ptr_equal(sub_r->memh[0], big->memh[0]);
    assert_int_equal(sub->length, 8192);
    assert_int_equal(f.md.regs, 1);
    /* More access than the registration has: a registration of its own. */
    other = reg1(&f, FAKE_BASE + 4096, 8192, RW);
    assert_ptr_not_equal(other->memh[0], big->memh[0]);
    /* Not covered (runs past the end): its own registration. */
    wider = reg1(&f, FAKE_BASE + (1 << 20) - 4096, 8192, R);
    assert_ptr_not_equal(wider->memh[0], big->memh[0]);
    assert_int_equal(f.md.regs, 3);
    s = stats(&f);
    assert_int_equal(s.hits, 2);
    assert_int_equal(s.misses, 3);

    /* The covering registration outlives big while sub uses it. */
    dereg(&f, big);
    assert_true(fake_md_has(&f.md, FAKE_BASE, 1 << 20));
    s = stats(&f);
    assert_int_equal(s.unreferenced, 0);
    dereg(&f, sub);
    dereg(&f, sub_r);
    s = stats(&f);
    assert_int_equal(s.unreferenced, 1);
    dereg(&f, other);
    dereg(&f, wider);
    s = stats(&f);
    assert_int_equal(s.unreferenced, 3);
    assert_int_equal(s.entries, 3);
    fixture_fini(&f);
}

static void test_evict_by_count_lru(void **state)
{
    fixture_t f;
    ote_region_t *r;
    ote_mem_rcache_stats_t s;

    fixture_init(&f, true, SIZE_MAX, 4);
    /* Six ranges registered and released in order 0..5: keep 2..5. */
    use_each(&f, 6, 65536, 65536);
    s = stats(&f);
    assert_int_equal(s.unreferenced, 4);
    assert_int_equal(s.evictions, 2);
    assert_int_equal(fake_md_live(&f.md), 4);
    assert_false(fake_md_has(&f.md, FAKE_BASE, 65536));
    assert_false(fake_md_has(&f.md, FAKE_BASE + 65536, 65536));
    for (int i = 2; i < 6; i++)
        assert_true(fake_md_has(&f.md, FAKE_BASE + (uint64_t)i * 65536, 65536));

    /* Using 2 makes it the most recent: the next eviction takes 3. */
    use_once(&f, FAKE_BASE + 2 * 65536, 65536);
    use_once(&f, FAKE_BASE + 6 * 65536, 65536);
    assert_true(fake_md_has(&f.md, FAKE_BASE + 2 * 65536, 65536));
    assert_false(fake_md_has(&f.md, FAKE_BASE + 3 * 65536, 65536));
    s = stats(&f);
    assert_int_equal(s.evictions, 3);
    assert_int_equal(s.hits, 1);

    /* Referenced entries are never evicted, whatever the limit. */
    {
        ote_region_t *held[6];

        for (int i = 0; i < 6; i++)
            held[i] = reg1(&f, FAKE_BASE + (uint64_t)(10 + i) * 65536, 65536, RW);
        s = stats(&f);
        assert_int_equal(s.unreferenced, 4);
        assert_int_equal(fake_md_live(&f.md), 10);
        for (int i = 0; i < 6; i++)
            dereg(&f, held[i]);
        s = stats(&f);
        assert_int_equal(s.unreferenced, 4);
        assert_int_equal(fake_md_live(&f.md), 4);
    }
    r = reg1(&f, FAKE_BASE + 15 * 65536, 65536, RW); /* the most recent is still there */
    s = stats(&f);
    assert_int_equal(s.hits, 2);
    dereg(&f, r);
    fixture_fini(&f);
}

static void test_evict_by_size(void **state)
{
    fixture_t f;
    ote_mem_rcache_stats_t s;

    /* 256 KiB of unreferenced registrations at most. */
    fixture_init(&f, true, 256 << 10, 1000);
    use_each(&f, 4, 1 << 20, 64 << 10);
    s = stats(&f);
    assert_int_equal(s.unreferenced, 4);
    assert_int_equal(s.unreferenced_bytes, 256 << 10);
    assert_int_equal(s.evictions, 0);
    /* 128 KiB more: the two oldest 64 KiB entries go. */
    use_once(&f, FAKE_BASE + 8 * (1 << 20), 128 << 10);
    s = stats(&f);
    assert_int_equal(s.evictions, 2);
    assert_int_equal(s.unreferenced, 3);
    assert_int_equal(s.unreferenced_bytes, 256 << 10);
    assert_false(fake_md_has(&f.md, FAKE_BASE, 64 << 10));
    assert_false(fake_md_has(&f.md, FAKE_BASE + (1 << 20), 64 << 10));
    assert_true(fake_md_has(&f.md, FAKE_BASE + 2 * (1 << 20), 64 << 10));
    /* One entry larger than the whole limit is not kept at all. */
    use_once(&f, FAKE_BASE + 16 * (1 << 20), 1 << 20);
    s = stats(&f);
    assert_int_equal(s.unreferenced_bytes, 0);
    fixture_fini_empty(&f);
}

static void test_disabled(void **state)
{
    fixture_t f;
    ote_region_t *a, *b;
    ote_mem_rcache_stats_t s;

    fixture_init(&f, false, SIZE_MAX, 100);
    use_each(&f, 3, 0, 65536); /* the same range three times */
    assert_int_equal(f.md.regs, 3);
    assert_int_equal(fake_md_live(&f.md), 0);
    /* Covered ranges register on their own too. */
    a = reg1(&f, FAKE_BASE, 65536, RW);
    b = reg1(&f, FAKE_BASE + 4096, 4096, RW);
    assert_ptr_not_equal(a->memh[0], b->memh[0]);
    assert_int_equal(f.md.regs, 5);
    /* Exact duplicates are still one region with two references. */
    assert_ptr_equal(reg1(&f, FAKE_BASE, 65536, RW), a);
    assert_int_equal(f.md.regs, 5);
    s = stats(&f);
    assert_false(s.retains);
    assert_int_equal(s.hits, 0);
    assert_int_equal(s.unreferenced, 0);
    dereg(&f, a);
    dereg(&f, a);
    dereg(&f, b);
    fixture_fini_empty(&f);
}

static void test_zero_limits_keep_nothing(void **state)
{
    fixture_t f;
    ote_region_t *a, *b;

    fixture_init(&f, true, SIZE_MAX, 0);
    a = reg1(&f, FAKE_BASE, 65536, RW);
    /* Still shared while in use... */
    b = reg1(&f, FAKE_BASE + 4096, 4096, RW);
    assert_ptr_equal(a->memh[0], b->memh[0]);
    dereg(&f, a);
    dereg(&f, b);
    /* ...but not kept. */
    fixture_fini_empty(&f);
}

static void test_invalidate(void **state)
{
    fixture_t f;
    ote_region_t *held, *r;
    ote_mem_rcache_stats_t s;

    fixture_init(&f, true, SIZE_MAX, 100);
    use_each(&f, 2, 1 << 20, 65536);
    held = reg1(&f, FAKE_BASE + (2 << 20), 65536, RW);
    assert_int_equal(fake_md_live(&f.md), 3);

    /* One page of the first and of the held one unmapped. */
    ote_mem_table_invalidate(f.table, FAKE_BASE + 8192, 4096);
    ote_mem_table_invalidate(f.table, FAKE_BASE + (2 << 20) + 65536 - 1, 1);
    s = stats(&f);
    assert_int_equal(s.invalidations, 2);
    assert_int_equal(s.unreferenced, 1);
    assert_false(fake_md_has(&f.md, FAKE_BASE, 65536));
    /* The held one stays registered while used, but is never reused... */
    assert_true(fake_md_has(&f.md, FAKE_BASE + (2 << 20), 65536));
    r = reg1(&f, FAKE_BASE + (2 << 20), 4096, RW);
    assert_ptr_not_equal(r->memh[0], held->memh[0]);
    dereg(&f, r);
    /* ...and goes with its last user. */
    dereg(&f, held);
    assert_false(fake_md_has(&f.md, FAKE_BASE + (2 << 20), 65536));
    /* A fresh registration of the first range registers again. */
    r = reg1(&f, FAKE_BASE, 65536, RW);
    s = stats(&f);
    assert_int_equal(s.misses, 5);
    dereg(&f, r);

    /* More reports than the queue holds: everything unreferenced goes. */
    for (int i = 0; i < 200; i++)
        ote_mem_table_invalidate(f.table, FAKE_BASE + (100ull << 20) + (uint64_t)i * 4096, 4096);
    s = stats(&f);
    assert_int_equal(s.unreferenced, 0);
    fixture_fini_empty(&f);
}

/* The mds whose registration grants access keep nothing in the cache. */
static void test_granting_md_not_cached(void **state)
{
    fixture_t f;
    fake_md_t grant;
    ote_mem_table_params_t p = {.rcache_enable = true, .rcache_max_size = SIZE_MAX,
                                .rcache_max_regions = 100, .rcache_manual_invalidate = true};
    ote_region_t *a, *b;

    memset(&f, 0, sizeof(f));
    fake_md_init(&f.md, "md", 0, &f.counter);
    fake_md_init(&grant, "grant", OTE_MD_FLAG_GRANTS_ACCESS, &f.counter);
    assert_int_equal(ote_mem_table_create(&p, &f.table), OTE_OK);
    assert_int_equal(ote_mem_table_add_md(f.table, &f.md.md), OTE_OK);
    assert_int_equal(ote_mem_table_add_md(f.table, &grant.md), OTE_OK);
    a = reg1(&f, FAKE_BASE, 1 << 20, RW);
    b = reg1(&f, FAKE_BASE + 4096, 4096, R);
    /* Exactly each region's range and access on the granting md. */
    assert_true(fake_md_has(&grant, FAKE_BASE, 1 << 20));
    assert_true(fake_md_has(&grant, FAKE_BASE + 4096, 4096));
    assert_ptr_not_equal(a->memh[1], b->memh[1]);
    assert_int_equal(((fake_memh_t *)b->memh[1])->access, R);
    assert_ptr_equal(a->memh[0], b->memh[0]);
    dereg(&f, a);
    assert_false(fake_md_has(&grant, FAKE_BASE, 1 << 20));
    dereg(&f, b);
    assert_int_equal(fake_md_live(&grant), 0);
    assert_int_equal(fake_md_live(&f.md), 1);
    fixture_fini(&f);
    assert_int_equal(fake_md_live(&grant), 0);
}

/* Engine-owned memory is neither shared nor kept. */
static void test_owned_not_cached(void **state)
{
    fixture_t f;
    ote_region_t *own, *sub;
    void *addr;
    ote_mem_rcache_stats_t s;

    fixture_init(&f, true, SIZE_MAX, 100);
    assert_int_equal(ote_mem_table_alloc(f.table, 65536, NULL, RW, &addr, &own), OTE_OK);
    assert_true(own->owned);
    /* A user registration inside it does not borrow its registration. */
    sub = reg1(&f, (uintptr_t)addr + 4096, 4096, RW);
    assert_ptr_not_equal(sub->memh[0], own->memh[0]);
    /* Not freed from under a registration that lies inside it. */
    assert_int_equal(ote_mem_table_free(f.table, own), OTE_ERR_BUSY);
    dereg(&f, sub);
    assert_int_equal(ote_mem_table_deregister(f.table, own), OTE_ERR_INVALID_PARAM);
    assert_int_equal(ote_mem_table_free(f.table, own), OTE_OK);
    assert_int_equal(ote_mem_table_free(f.table, own), OTE_ERR_NOT_REGISTERED);
    /* Freeing unmapped it: the cached user registration inside is gone too. */
    s = stats(&f);
    assert_int_equal(s.unreferenced, 0);
    fixture_fini_empty(&f);
}

/* Real unmaps reach the cache through the memory-event hooks. */
static void test_munmap_hook(void **state)
{
    ote_mem_table_params_t p = {.rcache_enable = true, .rcache_max_size = SIZE_MAX,
                                .rcache_max_regions = 100};
    size_t len = 1 << 20;
    ote_mem_rcache_stats_t s;
    ote_region_t *r;
    fixture_t f;
    void *buf;
    ote_mem_desc_t d;

    memset(&f, 0, sizeof(f));
    fake_md_init(&f.md, "md", 0, &f.counter);
    assert_int_equal(ote_mem_table_create(&p, &f.table), OTE_OK);
    assert_int_equal(ote_mem_table_add_md(f.table, &f.md.md), OTE_OK);
    s = stats(&f);
    if (!s.retains) {
        fixture_fini(&f);
        skip(); /* built without UCX memory events */
    }
    buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(buf != MAP_FAILED);
    d = (ote_mem_desc_t){.addr = buf, .length = len, .access = RW};
    assert_int_equal(ote_mem_table_register(f.table, &d, 1, &r), OTE_OK);
    dereg(&f, r);
    s = stats(&f);
    assert_int_equal(s.unreferenced, 1);
    assert_int_equal(munmap((char *)buf + 65536, 65536), 0);
    s = stats(&f);
    assert_int_equal(s.unreferenced, 0);
    assert_true(s.invalidations >= 1);
    assert_int_equal(fake_md_live(&f.md), 0);
    munmap(buf, len);
    fixture_fini(&f);
}

/*
 * GPU memory is not kept after its last user: the cache hears of munmap,
 * not of cudaFree, so a kept entry could outlive its allocation and be
 * found again for a new one at the same address. Host memory is kept.
 */
static void test_gpu_not_kept(void **state)
{
    ote_mem_table_params_t p = {.rcache_enable = true, .rcache_max_size = SIZE_MAX,
                                .rcache_max_regions = 100, .rcache_manual_invalidate = true};
    ote_mem_rcache_stats_t s;
    ote_mem_reg_t *a, *b;
    ote_rcache_t *rc;
    fake_md_t md;
    ote_md_t *mds[1] = {&md.md};
    size_t num_mds = 1;
    long counter = 0;
    bool fresh;

    (void)state;
    fake_md_init(&md, "md", 0, &counter);
    md.md.mem_types = OTE_MEM_TYPE_HOST | OTE_MEM_TYPE_CUDA;
    assert_int_equal(ote_rcache_create(&p, mds, &num_mds, &rc), OTE_OK);
    assert_int_equal(ote_rcache_get(rc, FAKE_BASE, 65536, OTE_MEM_TYPE_CUDA, RW, true, &a, &fresh),
                     OTE_OK);
    /* Shared while in use... */
    assert_int_equal(ote_rcache_get(rc, FAKE_BASE + 4096, 4096, OTE_MEM_TYPE_CUDA, RW, true, &b,
                                    &fresh),
                     OTE_OK);
    assert_ptr_equal(a, b);
    assert_false(fresh);
    ote_rcache_put(rc, a, false);
    ote_rcache_put(rc, b, false);
    /* ...not kept. */
    ote_rcache_stats(rc, &s);
    assert_int_equal(s.unreferenced, 0);
    assert_int_equal(fake_md_live(&md), 0);
    /* Host memory is. */
    assert_int_equal(ote_rcache_get(rc, FAKE_BASE, 65536, OTE_MEM_TYPE_HOST, RW, true, &a, &fresh),
                     OTE_OK);
    ote_rcache_put(rc, a, false);
    ote_rcache_stats(rc, &s);
    assert_int_equal(s.unreferenced, 1);
    ote_rcache_destroy(rc);
    assert_int_equal(fake_md_live(&md), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_not_kept),
        cmocka_unit_test(test_hit_after_deregister),
        cmocka_unit_test(test_covered_and_access),
        cmocka_unit_test(test_evict_by_count_lru),
        cmocka_unit_test(test_evict_by_size),
        cmocka_unit_test(test_disabled),
        cmocka_unit_test(test_zero_limits_keep_nothing),
        cmocka_unit_test(test_invalidate),
        cmocka_unit_test(test_granting_md_not_cached),
        cmocka_unit_test(test_owned_not_cached),
        cmocka_unit_test(test_munmap_hook),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
