/*
 * A memory domain joins a region table that holds regions already: every
 * region (and every registration the cache keeps) gets a handle on it,
 * lookups, deregistrations and registrations from other threads go on
 * meanwhile, a registration that fails on it fails the join and leaves no
 * handle on it, and registrations afterwards cover it. For an md whose
 * handles the cache shares and for one whose registrations grant access
 * (a handle per region), with the cache on and off.
 */
#include "fake_md.h"

#include "base/buf.h"
#include "core/wire/desc.h"

#include <stdatomic.h>

#define RW       (OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE)
#define NREGIONS 512
#define SPAN     65536

typedef struct {
    ote_mem_table_t *table;
    fake_md_t        a, b;
    long             counter;
    ote_region_t    *r[NREGIONS];
} fixture_t;

static void fixture_init(fixture_t *f, bool rcache, unsigned b_flags)
{
    ote_mem_table_params_t p = {.rcache_enable = rcache, .rcache_max_size = SIZE_MAX,
                                .rcache_max_regions = 4096, .rcache_manual_invalidate = true};

    memset(f, 0, sizeof(*f));
    fake_md_init(&f->a, "a", 0, &f->counter);
    fake_md_init(&f->b, "b", b_flags, &f->counter);
    assert_int_equal(ote_mem_table_create(&p, &f->table), OTE_OK);
    assert_int_equal(ote_mem_table_add_md(f->table, &f->a.md), OTE_OK);
}

static void fixture_fini(fixture_t *f)
{
    ote_mem_table_destroy(f->table);
    assert_int_equal(fake_md_live(&f->a), 0);
    assert_int_equal(fake_md_live(&f->b), 0);
    pthread_mutex_destroy(&f->a.lock);
    pthread_mutex_destroy(&f->b.lock);
}

static uint64_t region_addr(size_t i)
{
    return FAKE_BASE + (uint64_t)i * SPAN;
}

static ote_region_t *reg1(fixture_t *f, uint64_t addr, size_t length)
{
    ote_mem_desc_t d = fake_desc(addr, length, RW);
    ote_region_t *r  = NULL;

    assert_int_equal(ote_mem_table_register(f->table, &d, 1, &r), OTE_OK);
    return r;
}

static void register_all(fixture_t *f)
{
    for (size_t i = 0; i < NREGIONS; i++)
        f->r[i] = reg1(f, region_addr(i), SPAN);
}

/* The handle a region has on md index 1 is b's and covers the region. */
static void check_on_b(ote_region_t *r, void *arg)
{
    fixture_t *f   = arg;
    fake_memh_t *h = r->memh[1];

    assert_non_null(h);
    assert_int_equal(h->magic, FAKE_MEMH_MAGIC);
    assert_ptr_equal(h->md, &f->b);
    assert_true(h->addr <= r->addr && h->addr + h->length >= r->addr + r->length);
    assert_non_null(r->memh[0]);
}

static void check_none_on_b(ote_region_t *r, void *arg)
{
    assert_null(r->memh[1]);
}

/* Regions, then b; cached registrations of gone regions get one too. */
static void join_covers(bool rcache, unsigned b_flags)
{
    fixture_t f;
    ote_region_t *r;

    fixture_init(&f, rcache, b_flags);
    register_all(&f);
    /* Every fourth goes: with the cache on its registration stays cached. */
    for (size_t i = 0; i < NREGIONS; i += 4)
        assert_int_equal(ote_mem_table_deregister(f.table, f.r[i]), OTE_OK);
    assert_int_equal(ote_mem_table_add_md(f.table, &f.b.md), OTE_OK);
    assert_int_equal(ote_mem_table_num_mds(f.table), 2);
    assert_ptr_equal(ote_mem_table_md(f.table, 1), &f.b.md);
    ote_mem_table_visit(f.table, check_on_b, &f);
    if (b_flags & OTE_MD_FLAG_GRANTS_ACCESS) {
        /* Exactly the regions in the table, nothing for cached entries. */
        assert_int_equal(fake_md_live(&f.b), NREGIONS - NREGIONS / 4);
    } else {
        /* The cache's entries, kept ones included. */
        assert_int_equal(fake_md_live(&f.b), fake_md_live(&f.a));
    }

    /* A range registered again (a cache hit when the cache keeps it), and a new one. */
    r = reg1(&f, region_addr(0), SPAN);
    check_on_b(r, &f);
    r = reg1(&f, region_addr(NREGIONS + 1), SPAN);
    check_on_b(r, &f);
    /* Inside a registered range: served by its entry. */
    r = reg1(&f, region_addr(1) + 4096, 4096);
    check_on_b(r, &f);
    ote_mem_table_visit(f.table, check_on_b, &f);
    fixture_fini(&f);
}

static void test_join_cached(void **state)
{
    join_covers(true, 0);
}

static void test_join_cached_nocache(void **state)
{
    join_covers(false, 0);
}

static void test_join_grants(void **state)
{
    join_covers(true, OTE_MD_FLAG_GRANTS_ACCESS);
}

/* The k-th registration on b fails, for k over every region: nothing of b remains. */
static void join_fails(bool rcache, unsigned b_flags)
{
    fixture_t f;
    static const long at[] = {1, 2, NREGIONS / 2, NREGIONS - 1, NREGIONS};
    ote_region_t *r;
    long live_a;

    fixture_init(&f, rcache, b_flags);
    register_all(&f);
    live_a = fake_md_live(&f.a);

    for (size_t k = 0; k < sizeof(at) / sizeof(at[0]); k++) {
        f.b.fail_at = f.counter + at[k];
        assert_int_equal(ote_mem_table_add_md(f.table, &f.b.md), OTE_ERR_IO);
        assert_int_equal(fake_md_live(&f.b), 0);
        assert_int_equal(fake_md_live(&f.a), live_a);
        assert_int_equal(ote_mem_table_num_mds(f.table), 1);
        assert_null(ote_mem_table_md(f.table, 1));
        ote_mem_table_visit(f.table, check_none_on_b, NULL);
    }
    /* Later registrations do not reach b, and b can still join. */
    f.b.fail_at = 0;
    r           = reg1(&f, region_addr(NREGIONS + 1), SPAN);
    assert_null(r->memh[1]);
    assert_int_equal(ote_mem_table_add_md(f.table, &f.b.md), OTE_OK);
    ote_mem_table_visit(f.table, check_on_b, &f);
    assert_int_equal(ote_mem_table_add_md(f.table, &f.b.md), OTE_ERR_EXISTS);
    fixture_fini(&f);
}

static void test_fail_cached(void **state)
{
    join_fails(true, 0);
}

static void test_fail_grants(void **state)
{
    join_fails(false, OTE_MD_FLAG_GRANTS_ACCESS);
}

/* ---- with other threads ------------------------------------------------- */

typedef struct {
    fixture_t  *f;
    atomic_bool stop;
    atomic_long lookups, deregs, regs;
} race_t;

/* Odd regions stay: each is found, covering, every time. */
static void *lookup_thread(void *arg)
{
    race_t *x  = arg;
    unsigned i = 1;

    while (!atomic_load(&x->stop)) {
        ote_region_t *r = NULL;
        uint64_t addr   = region_addr(i) + 128;

        if (ote_mem_region_acquire(x->f->table, addr, 256, RW, &r) != OTE_OK ||
            r != x->f->r[i])
            abort();
        ote_mem_region_put(r);
        atomic_fetch_add(&x->lookups, 1);
        i = (i + 2) % NREGIONS;
    }
    return NULL;
}

/* Even regions go while b joins. */
static void *dereg_thread(void *arg)
{
    race_t *x = arg;

    for (size_t i = 0; i < NREGIONS; i += 2) {
        if (ote_mem_table_deregister(x->f->table, x->f->r[i]) != OTE_OK)
            abort();
        atomic_fetch_add(&x->deregs, 1);
    }
    return NULL;
}

/* New ranges register meanwhile (they wait for the join or come before it). */
static void *reg_thread(void *arg)
{
    race_t *x = arg;

    for (size_t i = 0; i < 64; i++) {
        ote_mem_desc_t d = fake_desc(region_addr(NREGIONS + 8 + i), SPAN, RW);
        ote_region_t *r;

        if (ote_mem_table_register(x->f->table, &d, 1, &r) != OTE_OK)
            abort();
        atomic_fetch_add(&x->regs, 1);
    }
    return NULL;
}

static void join_races(bool rcache, unsigned b_flags)
{
    fixture_t f;
    race_t x = {.f = &f};
    pthread_t look, dereg, reg;

    fixture_init(&f, rcache, b_flags);
    register_all(&f);
    assert_int_equal(pthread_create(&look, NULL, lookup_thread, &x), 0);
    while (atomic_load(&x.lookups) == 0)
        sched_yield();
    assert_int_equal(pthread_create(&dereg, NULL, dereg_thread, &x), 0);
    assert_int_equal(pthread_create(&reg, NULL, reg_thread, &x), 0);
    assert_int_equal(ote_mem_table_add_md(f.table, &f.b.md), OTE_OK);
    assert_int_equal(pthread_join(dereg, NULL), 0);
    assert_int_equal(pthread_join(reg, NULL), 0);
    atomic_store(&x.stop, true);
    assert_int_equal(pthread_join(look, NULL), 0);

    assert_int_equal(ote_mem_table_count(f.table), NREGIONS / 2 + 64);
    ote_mem_table_visit(f.table, check_on_b, &f);
    /* Deregistered regions let go of theirs: b holds exactly what is used or cached. */
    if (b_flags & OTE_MD_FLAG_GRANTS_ACCESS || !rcache)
        assert_int_equal(fake_md_live(&f.b), NREGIONS / 2 + 64);
    fixture_fini(&f);
}

static void test_race_cached(void **state)
{
    join_races(true, 0);
}

static void test_race_nocache(void **state)
{
    join_races(false, 0);
}

static void test_race_grants(void **state)
{
    join_races(true, OTE_MD_FLAG_GRANTS_ACCESS);
}

/*
 * Deregistrations from inside the join: b's mem_reg deregisters every third
 * region halfway through, some it has registered on b already, some not
 * yet. They leave the table at once and release their handles on b after
 * the join let go of them: b holds exactly what the table (or the cache)
 * still holds.
 */
static fixture_t *hook_fixture;
static long       hook_calls;

static ote_status_t hook_mem_reg(ote_md_t *md, void *addr, size_t length, unsigned access,
                                 void **memh_p)
{
    if (++hook_calls == NREGIONS / 2) {
        for (size_t i = 0; i < NREGIONS; i += 3)
            assert_int_equal(ote_mem_table_deregister(hook_fixture->table, hook_fixture->r[i]),
                             OTE_OK);
    }
    return fake_mem_reg(md, addr, length, access, memh_p);
}

static const ote_md_ops_t hook_ops = {
    .mem_reg   = hook_mem_reg,
    .mem_dereg = fake_mem_dereg,
    .rkey_pack = fake_rkey_pack,
};

static void dereg_inside(bool rcache, unsigned b_flags)
{
    size_t left = NREGIONS - (NREGIONS + 2) / 3;
    fixture_t f;

    fixture_init(&f, rcache, b_flags);
    f.b.md.ops   = &hook_ops;
    hook_fixture = &f;
    hook_calls   = 0;
    register_all(&f);
    assert_int_equal(ote_mem_table_add_md(f.table, &f.b.md), OTE_OK);
    assert_true(hook_calls >= NREGIONS / 2);
    assert_int_equal(ote_mem_table_count(f.table), left);
    ote_mem_table_visit(f.table, check_on_b, &f);
    if (rcache && !(b_flags & OTE_MD_FLAG_GRANTS_ACCESS))
        assert_int_equal(fake_md_live(&f.b), fake_md_live(&f.a));
    else
        assert_int_equal(fake_md_live(&f.b), left);
    fixture_fini(&f);
}

static void test_dereg_inside(void **state)
{
    dereg_inside(true, 0);
    dereg_inside(false, 0);
    dereg_inside(true, OTE_MD_FLAG_GRANTS_ACCESS);
}

/*
 * What an engine publishes after b joined: every region carries b's rkey
 * once the descriptor lists b, and nothing of it before (a descriptor
 * built while the engine has not listed b yet stays decodable).
 */
static ote_desc_t *desc_of(fixture_t *f, size_t num_mds)
{
    ote_desc_t *in = calloc(1, sizeof(*in)), *out = NULL;
    ote_buf_t buf  = {0};

    assert_non_null(in);
    snprintf(in->name, sizeof(in->name), "10.0.0.1:1234");
    in->num_mds = num_mds;
    snprintf(in->mds[0], sizeof(in->mds[0]), "a");
    snprintf(in->mds[1], sizeof(in->mds[1]), "b");
    assert_int_equal(ote_desc_encode(in, f->table, &buf), OTE_OK);
    assert_int_equal(ote_desc_decode(buf.data, buf.len, &out), OTE_OK);
    free(buf.data);
    free(in);
    return out;
}

static void test_desc_rkeys(void **state)
{
    fixture_t f;
    ote_desc_t *d;

    fixture_init(&f, true, OTE_MD_FLAG_GRANTS_ACCESS);
    for (size_t i = 0; i < 8; i++)
        f.r[i] = reg1(&f, region_addr(i), SPAN);
    assert_int_equal(ote_mem_table_add_md(f.table, &f.b.md), OTE_OK);
    for (size_t num_mds = 1; num_mds <= 2; num_mds++) {
        d = desc_of(&f, num_mds);
        assert_int_equal(d->num_regions, 8);
        for (size_t i = 0; i < 8; i++) {
            const ote_desc_region_t *r = ote_desc_find_region(d, region_addr(i), SPAN);
            uint64_t key[2];

            assert_non_null(r);
            assert_int_equal(r->num_rkeys, num_mds);
            assert_int_equal(r->rkeys[0].md_index, 0);
            if (num_mds == 1)
                continue;
            /* b's rkey (fake_rkey_pack: its handle's range) for exactly this region. */
            assert_int_equal(r->rkeys[1].md_index, 1);
            assert_int_equal(r->rkeys[1].length, sizeof(key));
            memcpy(key, r->rkeys[1].data, sizeof(key));
            assert_true(key[0] == region_addr(i) && key[1] == SPAN);
        }
        ote_desc_free(d);
    }
    fixture_fini(&f);
}

/* An empty table, and a full one. */
static void test_limits(void **state)
{
    fake_md_t extra[OTE_MEM_MAX_MDS];
    fixture_t f;
    size_t i;

    fixture_init(&f, true, 0);
    for (i = 1; i < OTE_MEM_MAX_MDS; i++) {
        fake_md_init(&extra[i], "x", 0, &f.counter);
        assert_int_equal(ote_mem_table_add_md(f.table, &extra[i].md), OTE_OK);
    }
    assert_int_equal(ote_mem_table_add_md(f.table, &f.b.md), OTE_ERR_BUSY);
    assert_int_equal(ote_mem_table_add_md(f.table, NULL), OTE_ERR_INVALID_PARAM);
    fixture_fini(&f);
    for (i = 1; i < OTE_MEM_MAX_MDS; i++) {
        assert_int_equal(fake_md_live(&extra[i]), 0);
        pthread_mutex_destroy(&extra[i].lock);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_join_cached),  cmocka_unit_test(test_join_cached_nocache),
        cmocka_unit_test(test_join_grants),  cmocka_unit_test(test_fail_cached),
        cmocka_unit_test(test_fail_grants),  cmocka_unit_test(test_race_cached),
        cmocka_unit_test(test_race_nocache), cmocka_unit_test(test_race_grants),
        cmocka_unit_test(test_dereg_inside), cmocka_unit_test(test_desc_rkeys),
        cmocka_unit_test(test_limits),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
