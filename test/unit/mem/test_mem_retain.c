/*
 * Retained backing and access guards: a region deregistered while a data-
 * path user holds it leaves the table at once (new lookups fail with
 * NOT_REGISTERED, access_begin refuses) but stays registered on its mds
 * until the user lets go; deregistration waits for CPU accesses in progress;
 * a region inside engine-owned memory keeps that memory mapped while a user
 * holds it.
 */
#include "fake_md.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define RW (OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE)

typedef struct {
    ote_mem_table_t *table;
    fake_md_t        md, grant;
    long             counter;
} fixture_t;

static int setup_common(void **state, bool rcache)
{
    fixture_t *f = calloc(1, sizeof(*f));
    ote_mem_table_params_t p = {.rcache_enable = rcache, .rcache_max_size = SIZE_MAX,
                                .rcache_max_regions = 1024, .rcache_manual_invalidate = true};

    assert_non_null(f);
    fake_md_init(&f->md, "md", 0, &f->counter);
    fake_md_init(&f->grant, "grant", OTE_MD_FLAG_GRANTS_ACCESS, &f->counter);
    assert_int_equal(ote_mem_table_create(&p, &f->table), OTE_OK);
    assert_int_equal(ote_mem_table_add_md(f->table, &f->md.md), OTE_OK);
    assert_int_equal(ote_mem_table_add_md(f->table, &f->grant.md), OTE_OK);
    *state = f;
    return 0;
}

static int setup_rcache(void **state)
{
    return setup_common(state, true);
}

static int setup_no_rcache(void **state)
{
    return setup_common(state, false);
}

static int teardown(void **state)
{
    fixture_t *f = *state;

    ote_mem_table_destroy(f->table);
    assert_int_equal(fake_md_live(&f->md), 0);
    assert_int_equal(fake_md_live(&f->grant), 0);
    free(f);
    return 0;
}

static ote_region_t *reg1(fixture_t *f, uint64_t addr, size_t len)
{
    ote_mem_desc_t d = fake_desc(addr, len, RW);
    ote_region_t *r;

    assert_int_equal(ote_mem_table_register(f->table, &d, 1, &r), OTE_OK);
    return r;
}

/* An in-flight transfer holds the region across deregistration. */
static void test_inflight_reference_no_rcache(void **state)
{
    fixture_t *f = *state;
    ote_region_t *r = reg1(f, FAKE_BASE, 65536), *inflight, *again;

    assert_int_equal(ote_mem_region_acquire(f->table, FAKE_BASE + 4096, 4096, OTE_ACCESS_REMOTE_WRITE,
                                            &inflight),
                     OTE_OK);
    assert_ptr_equal(inflight, r);
    assert_int_equal(ote_mem_table_deregister(f->table, r), OTE_OK);

    /* Out of the table at once: a new transfer is refused. */
    assert_int_equal(ote_mem_table_count(f->table), 0);
    assert_int_equal(ote_mem_region_acquire(f->table, FAKE_BASE + 4096, 4096, 0, &again),
                     OTE_ERR_NOT_REGISTERED);
    /* The in-flight user may not touch the memory any more... */
    assert_false(ote_mem_region_access_begin(inflight));
    /* ...but the registration stays until it lets go. */
    assert_int_equal(fake_md_live(&f->md), 1);
    assert_int_equal(fake_md_live(&f->grant), 1);
    assert_int_equal(f->md.deregs, 0);
    ote_mem_region_put(inflight);
    assert_int_equal(fake_md_live(&f->md), 0);
    assert_int_equal(fake_md_live(&f->grant), 0);
}

/* With the cache on, the shared registration is cached only after the put. */
static void test_inflight_reference_rcache(void **state)
{
    fixture_t *f = *state;
    ote_region_t *r = reg1(f, FAKE_BASE, 65536), *inflight, *r2;
    ote_mem_rcache_stats_t s;

    assert_int_equal(ote_mem_region_acquire(f->table, FAKE_BASE, 65536, 0, &inflight), OTE_OK);
    assert_int_equal(ote_mem_table_deregister(f->table, r), OTE_OK);
    ote_mem_table_rcache_stats(f->table, &s);
    assert_int_equal(s.entries, 1);
    assert_int_equal(s.unreferenced, 0); /* still used by the in-flight region */
    assert_int_equal(fake_md_live(&f->grant), 1);

    ote_mem_region_put(inflight);
    ote_mem_table_rcache_stats(f->table, &s);
    assert_int_equal(s.unreferenced, 1);
    /* Kept for reuse on the checked md; the granting md's handle is gone. */
    assert_int_equal(fake_md_live(&f->md), 1);
    assert_int_equal(fake_md_live(&f->grant), 0);

    /* Registering the range again reuses it: no new registration on md. */
    r2 = reg1(f, FAKE_BASE, 65536);
    assert_int_equal(f->md.regs, 1);
    assert_int_equal(f->grant.regs, 2);
    assert_int_equal(ote_mem_table_deregister(f->table, r2), OTE_OK);
}

/* A lookup after deregistration with other references held: still there. */
static void test_refs_keep_region_in_table(void **state)
{
    fixture_t *f = *state;
    ote_region_t *a = reg1(f, FAKE_BASE, 4096), *b = reg1(f, FAKE_BASE, 4096), *got;

    assert_ptr_equal(a, b);
    assert_int_equal(ote_mem_table_deregister(f->table, a), OTE_OK);
    assert_true(ote_mem_region_access_begin(b));
    ote_mem_region_access_end(b);
    assert_int_equal(ote_mem_region_acquire(f->table, FAKE_BASE, 4096, 0, &got), OTE_OK);
    ote_mem_region_put(got);
    assert_int_equal(ote_mem_table_deregister(f->table, b), OTE_OK);
    assert_int_equal(ote_mem_region_acquire(f->table, FAKE_BASE, 4096, 0, &got),
                     OTE_ERR_NOT_REGISTERED);
}

typedef struct {
    ote_region_t   *region;
    atomic_int      phase;   /* 1: inside the access; 2: about to end it */
    atomic_bool     ended;
} accessor_t;

static void *accessor_main(void *arg)
{
    accessor_t *a = arg;
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 100 * 1000 * 1000};

    if (!ote_mem_region_access_begin(a->region)) {
        atomic_store(&a->phase, -1);
        return NULL;
    }
    atomic_store(&a->phase, 1);
    nanosleep(&ts, NULL); /* the deregistration must wait for this */
    atomic_store(&a->ended, true);
    ote_mem_region_access_end(a->region);
    return NULL;
}

/* Deregistration returns only after accesses in progress ended. */
static void test_access_guard_waits(void **state)
{
    fixture_t *f = *state;
    ote_region_t *r = reg1(f, FAKE_BASE, 65536), *inflight;
    accessor_t a    = {0};
    pthread_t th;

    assert_int_equal(ote_mem_region_acquire(f->table, FAKE_BASE, 64, 0, &inflight), OTE_OK);
    a.region = inflight;
    assert_int_equal(pthread_create(&th, NULL, accessor_main, &a), 0);
    while (atomic_load(&a.phase) == 0)
        sched_yield();
    assert_int_equal(atomic_load(&a.phase), 1);
    assert_int_equal(ote_mem_table_deregister(f->table, r), OTE_OK);
    /* Nothing can land after deregister returned: the access had ended. */
    assert_true(atomic_load(&a.ended));
    assert_false(ote_mem_region_access_begin(inflight));
    pthread_join(th, NULL);
    ote_mem_region_put(inflight);
}

/* Many threads acquiring, accessing and putting while regions come and go. */
typedef struct {
    fixture_t  *f;
    atomic_bool stop;
    atomic_long ok;
    long        refused, violations;
    /* Per slot: seq of the last region whose deregistration returned. */
    _Atomic uint64_t done_seq[64];
} churn_t;

static void *churn_reader(void *arg)
{
    churn_t *c = arg;
    uint64_t x = 12345;

    while (!atomic_load(&c->stop)) {
        ote_region_t *r;
        uint64_t a;

        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        a = FAKE_BASE + (x % 64) * 65536 + 100;
        if (ote_mem_region_acquire(c->f->table, a, 64, OTE_ACCESS_REMOTE_WRITE, &r) != OTE_OK)
            continue;
        if (ote_mem_region_access_begin(r)) {
            /* No deregistration of this region may have returned by now. */
            if (atomic_load(&c->done_seq[x % 64]) == r->seq)
                c->violations++;
            ote_mem_region_access_end(r);
            atomic_fetch_add(&c->ok, 1);
        } else {
            c->refused++;
        }
        ote_mem_region_put(r);
    }
    return NULL;
}

static void test_concurrent_churn(void **state)
{
    fixture_t *f = *state;
    churn_t c    = {.f = f};
    ote_region_t *r[64] = {0};
    pthread_t th;
    uint64_t x = 777;

    assert_int_equal(pthread_create(&th, NULL, churn_reader, &c), 0);
    /*
     * 20,000 rounds, and on until the reader got some accesses in (on a
     * loaded host it may not have run yet), for 20 s at most.
     */
    time_t deadline = time(NULL) + 20;

    for (int round = 0; round < 20000 || (atomic_load(&c.ok) == 0 && time(NULL) < deadline);
         round++) {
        size_t i;

        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        i = x % 64;
        if (r[i] == NULL) {
            r[i] = reg1(f, FAKE_BASE + i * 65536, 65536);
        } else {
            uint64_t seq = r[i]->seq;

            assert_int_equal(ote_mem_table_deregister(f->table, r[i]), OTE_OK);
            atomic_store(&c.done_seq[i], seq);
            r[i] = NULL;
        }
    }
    atomic_store(&c.stop, true);
    pthread_join(th, NULL);
    for (size_t i = 0; i < 64; i++) {
        if (r[i] != NULL)
            assert_int_equal(ote_mem_table_deregister(f->table, r[i]), OTE_OK);
    }
    assert_true(atomic_load(&c.ok) > 0);
    assert_int_equal(c.violations, 0);
}

/* Table destroyed while a data-path user still holds a region. */
static void test_destroy_with_holder(void **state)
{
    fixture_t f;
    ote_mem_table_params_t p = {.rcache_enable = true, .rcache_max_size = SIZE_MAX,
                                .rcache_max_regions = 16, .rcache_manual_invalidate = true};
    ote_mem_desc_t d = fake_desc(FAKE_BASE, 4096, RW);
    ote_region_t *r, *held;

    memset(&f, 0, sizeof(f));
    fake_md_init(&f.md, "md", 0, &f.counter);
    assert_int_equal(ote_mem_table_create(&p, &f.table), OTE_OK);
    assert_int_equal(ote_mem_table_add_md(f.table, &f.md.md), OTE_OK);
    assert_int_equal(ote_mem_table_register(f.table, &d, 1, &r), OTE_OK);
    assert_int_equal(ote_mem_region_acquire(f.table, FAKE_BASE, 16, 0, &held), OTE_OK);
    ote_mem_table_destroy(f.table);
    assert_false(ote_mem_region_access_begin(held));
    assert_int_equal(fake_md_live(&f.md), 1);
    ote_mem_region_put(held); /* releases the registration and the table */
    assert_int_equal(fake_md_live(&f.md), 0);
}

/*
 * A region registered inside engine-owned memory holds that memory: the
 * owned memory freed while a transfer still uses the inner region
 * (deregistered already) stays mapped until that transfer lets go.
 */
static void test_inner_region_holds_owned(void **state)
{
    fixture_t *f = *state;
    ote_region_t *own, *inner, *inflight;
    uint8_t *addr;

    assert_int_equal(ote_mem_table_alloc(f->table, 65536, NULL, RW, (void **)&addr, &own),
                     OTE_OK);
    inner = reg1(f, (uintptr_t)addr + 4096, 8192);
    assert_int_equal(ote_mem_region_acquire(f->table, (uintptr_t)addr + 4096, 8192,
                                            OTE_ACCESS_REMOTE_WRITE, &inflight),
                     OTE_OK);
    assert_ptr_equal(inflight, inner);
    /* Still registered inside: the owned memory is not freed. */
    assert_int_equal(ote_mem_table_free(f->table, own), OTE_ERR_BUSY);
    assert_int_equal(ote_mem_table_deregister(f->table, inner), OTE_OK);
    assert_int_equal(ote_mem_table_free(f->table, own), OTE_OK);
    assert_int_equal(ote_mem_table_count(f->table), 0);
    /* The transfer still writes through the inner region: its pages are there. */
    assert_int_equal(msync(addr, 65536, MS_ASYNC), 0);
    memset(addr + 4096, 0x5a, 8192);
    ote_mem_region_put(inflight);
    /* Its end let go of the owned memory: unmapped now. */
    errno = 0;
    assert_int_equal(msync(addr, 65536, MS_ASYNC), -1);
    assert_int_equal(errno, ENOMEM);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_inflight_reference_no_rcache, setup_no_rcache,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_inflight_reference_rcache, setup_rcache, teardown),
        cmocka_unit_test_setup_teardown(test_refs_keep_region_in_table, setup_rcache, teardown),
        cmocka_unit_test_setup_teardown(test_access_guard_waits, setup_rcache, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_churn, setup_rcache, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_churn, setup_no_rcache, teardown),
        cmocka_unit_test(test_destroy_with_holder),
        cmocka_unit_test_setup_teardown(test_inner_region_holds_owned, setup_rcache, teardown),
        cmocka_unit_test_setup_teardown(test_inner_region_holds_owned, setup_no_rcache, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
