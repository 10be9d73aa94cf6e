/*
 * Regions a target registers after the initiator opened its segment, over
 * the transport OTE_TLS selects (run by tcp_, cma_ and shm_mp_late_region.sh):
 *
 * - WRITEs of 4 KiB, 64 MiB and 65 MiB + 4 KiB into such a region complete
 *   with every byte verified at the target, whichever size comes first
 *   (one re-read of the peer's descriptor finds the region);
 * - a range in no region the peer registered ends FAILED with
 *   OTE_ERR_REMOTE_NOT_REGISTERED at every size, READ and WRITE, and one
 *   that runs past a region's end with OTE_ERR_OUT_OF_BOUNDS, at every size;
 *   the submission itself succeeds and the valid requests beside them land;
 * - many threads submitting such requests at once cause a bounded number of
 *   descriptor fetches at the target: at most one per
 *   OTE_DESC_REREAD_INTERVAL_MS of the burst, plus one;
 * - once the target is killed, a range that would need a re-read ends as
 *   the known range beside it does, REMOTE_DISCONNECT or TIMEOUT (a dead
 *   peer), never NOT_FOUND from the refused re-read (the last test: it
 *   kills the target).
 */
#include "mp_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#define KIB         1024ul
#define MIB         (1024ul * 1024ul)
#define LATE_LEN    (66 * MIB)
#define BIG         (65 * MIB + 4 * KIB) /* over the 64 MiB of one tcp message */
#define INTERVAL_MS 50
#define BAD_ADDR    0x1000ull

static mp_fx_t fx;

static int setup(void **state)
{
    static const char *const args[] = {"--region", "1m:rw", NULL};
    char ms[16];

    (void)state;
    snprintf(ms, sizeof(ms), "%d", INTERVAL_MS);
    setenv("OTE_DESC_REREAD_INTERVAL_MS", ms, 1);
    mp_fx_start(&fx, args, LATE_LEN);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    mp_fx_stop(&fx, false);
    unsetenv("OTE_DESC_REREAD_INTERVAL_MS");
    return 0;
}

/* A region of len bytes the target registers now; its index, *addr_p its address. */
static unsigned late_region(size_t len, bool alloc, uint64_t *addr_p)
{
    char reply[128];
    unsigned r;
    unsigned long long addr;

    mp_target_cmd(fx.e, fx.seg, reply, sizeof(reply), "late %zu rw%s", len,
                  alloc ? " alloc" : "");
    if (sscanf(reply, "region %u %llx", &r, &addr) != 2)
        fail_msg("late region: '%s'", reply);
    *addr_p = addr;
    return r;
}

/* One request in a batch of its own; the submit must succeed. */
static ote_task_status_t one(ote_op_t op, size_t local_off, uint64_t remote, size_t len)
{
    ote_task_status_t st;

    assert_int_equal(
        ote_test_xfer(fx.e, fx.seg, op, fx.local + local_off, remote, len, 60000, &st), OTE_OK);
    return st;
}

/* WRITE len bytes of the pattern of seed to offset off of region r at addr; verified there. */
static void write_checked(unsigned r, uint64_t addr, size_t off, size_t len, uint64_t seed)
{
    ote_task_status_t st;

    ote_test_fill(fx.local, off, len, seed);
    st = one(OTE_OP_WRITE, 0, addr + off, len);
    if (st.state != OTE_TASK_COMPLETED)
        fail_msg("WRITE of %zu bytes into the late region: %s", len,
                 ote_status_string(st.error));
    assert_int_equal(st.transferred, len);
    mp_target_ok(fx.e, fx.seg, "check %u %zu %zu %llu", r, off, len, (unsigned long long)seed);
}

/* The large WRITE first: it is the one that found nothing before. */
static void test_late_region_large_first(void **state)
{
    uint64_t addr;
    unsigned r = late_region(LATE_LEN, false, &addr);

    (void)state;
    write_checked(r, addr, 0, BIG, 11);
    write_checked(r, addr, 4 * KIB, 64 * MIB, 12);
    write_checked(r, addr, 8 * KIB, 4 * KIB, 13);
}

/* Then the small one first, in memory from ote_mem_alloc (which shm maps). */
static void test_late_region_small_first(void **state)
{
    uint64_t addr;
    unsigned r = late_region(LATE_LEN, true, &addr);
    ote_task_status_t st;

    (void)state;
    write_checked(r, addr, 0, 4 * KIB, 21);
    write_checked(r, addr, 4 * KIB, 64 * MIB, 22);
    write_checked(r, addr, 0, BIG, 23);
    /* And READ it back whole. */
    memset(fx.local, 0, BIG);
    st = one(OTE_OP_READ, 0, addr, BIG);
    assert_int_equal(st.state, OTE_TASK_COMPLETED);
    assert_int_equal(ote_test_check(fx.local, 0, BIG, 23), -1);
}

static void expect_refused(ote_task_status_t st, ote_status_t want)
{
    if (st.state != OTE_TASK_FAILED || st.error != want)
        fail_msg("state %d, %s; expected FAILED, %s", st.state, ote_status_string(st.error),
                 ote_status_string(want));
    assert_int_equal(st.transferred, 0);
}

/* Never registered: the remote status, whatever the size and direction. */
static void test_never_registered(void **state)
{
    const size_t sizes[] = {4 * KIB, 64 * MIB, BIG};
    uint64_t r0 = fx.t.addr[0];

    (void)state;
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        expect_refused(one(OTE_OP_WRITE, 0, BAD_ADDR, sizes[i]), OTE_ERR_REMOTE_NOT_REGISTERED);
        expect_refused(one(OTE_OP_READ, 0, BAD_ADDR, sizes[i]), OTE_ERR_REMOTE_NOT_REGISTERED);
        /* Starts in the 1 MiB region, runs past its end. */
        expect_refused(one(OTE_OP_WRITE, 0, r0 + MIB - 100, sizes[i]), OTE_ERR_OUT_OF_BOUNDS);
    }
    assert_string_equal(ote_status_string(OTE_ERR_REMOTE_NOT_REGISTERED),
                        "remote address not inside any region the peer registered");
    /* The valid range still works. */
    ote_test_fill(fx.local, 0, MIB, 31);
    assert_int_equal(one(OTE_OP_WRITE, 0, r0, MIB).state, OTE_TASK_COMPLETED);
    mp_target_ok(fx.e, fx.seg, "check 0 0 %lu 31", MIB);
}

/* ---- a burst of bad addresses from many threads ---------------------------- */

#define THREADS 8
#define ROUNDS  12

static atomic_int bad_wrong, good_wrong;

/* Each round: a bad WRITE and a valid 4 KiB WRITE of this thread's slot, in one batch. */
static void *bad_stream(void *arg)
{
    size_t k = (size_t)(uintptr_t)arg;

    for (int i = 0; i < ROUNDS; i++) {
        ote_xfer_req_t r[2] = {
            {.op = OTE_OP_WRITE, .local_addr = fx.local + k * 8 * KIB, .segment = fx.seg,
             .remote_addr = BAD_ADDR + (uint64_t)(k * ROUNDS + (size_t)i) * 4 * KIB,
             .length = i % 2 ? BIG : 4 * KIB},
            {.op = OTE_OP_WRITE, .local_addr = fx.local + k * 8 * KIB, .segment = fx.seg,
             .remote_addr = fx.t.addr[0] + k * 8 * KIB, .length = 4 * KIB},
        };
        ote_task_status_t st[2];

        if (ote_test_batch_run(fx.e, r, 2, 60000, st) != OTE_OK) {
            atomic_fetch_add(&bad_wrong, 1);
            continue;
        }
        if (st[0].state != OTE_TASK_FAILED || st[0].error != OTE_ERR_REMOTE_NOT_REGISTERED)
            atomic_fetch_add(&bad_wrong, 1);
        if (st[1].state != OTE_TASK_COMPLETED || st[1].transferred != 4 * KIB)
            atomic_fetch_add(&good_wrong, 1);
    }
    return NULL;
}

static unsigned long served(void)
{
    char reply[64];
    unsigned long n;

    mp_target_cmd(fx.e, fx.seg, reply, sizeof(reply), "descserved");
    if (sscanf(reply, "served %lu", &n) != 1)
        fail_msg("descserved: '%s'", reply);
    return n;
}

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void test_bad_burst_bounded_fetches(void **state)
{
    pthread_t th[THREADS];
    unsigned long before, after, bound;
    uint64_t t0, t1;

    (void)state;
    for (size_t k = 0; k < THREADS; k++)
        ote_test_fill(fx.local + k * 8 * KIB, k * 8 * KIB, 4 * KIB, 40 + k);
    before = served();
    t0     = now_ms();
    for (size_t k = 0; k < THREADS; k++)
        assert_int_equal(pthread_create(&th[k], NULL, bad_stream, (void *)(uintptr_t)k), 0);
    for (size_t k = 0; k < THREADS; k++)
        pthread_join(th[k], NULL);
    t1    = now_ms();
    after = served();
    assert_int_equal(atomic_load(&bad_wrong), 0);
    assert_int_equal(atomic_load(&good_wrong), 0);
    /* The rate limit: one re-read per interval of the burst, and one at its start. */
    bound = (unsigned long)((t1 - t0) / INTERVAL_MS) + 2;
    printf("# %d bad requests in %llu ms: %lu descriptor fetches (bound %lu)\n",
           THREADS * ROUNDS, (unsigned long long)(t1 - t0), after - before, bound);
    assert_true(after - before >= 1);
    assert_true(after - before <= bound);
    assert_true(after - before < THREADS * ROUNDS);
    for (size_t k = 0; k < THREADS; k++)
        mp_target_ok(fx.e, fx.seg, "check 0 %zu %lu %zu", k * 8 * KIB, 4 * KIB, 40 + k);
}

/* A dead peer: the re-read a range outside its descriptor asks for fails as the peer does. */
static void test_dead_peer_unknown_range(void **state)
{
    (void)state;
    ote_test_target_kill(&fx.t);
    for (int i = 0; i < 3; i++) {
        ote_xfer_req_t r[2] = {
            {.op = OTE_OP_WRITE, .local_addr = fx.local, .segment = fx.seg,
             .remote_addr = BAD_ADDR, .length = 4 * KIB},
            {.op = OTE_OP_WRITE, .local_addr = fx.local, .segment = fx.seg,
             .remote_addr = fx.t.addr[0], .length = 4 * KIB},
        };
        ote_task_status_t st[2];

        assert_int_equal(ote_test_batch_run(fx.e, r, 2, 60000, st), OTE_OK);
        for (int k = 0; k < 2; k++) {
            if (st[k].state != OTE_TASK_FAILED || (st[k].error != OTE_ERR_REMOTE_DISCONNECT &&
                                                   st[k].error != OTE_ERR_TIMEOUT))
                fail_msg("round %d, %s range: state %d, %s; expected FAILED, "
                         "REMOTE_DISCONNECT or TIMEOUT",
                         i, k == 0 ? "unknown" : "known", st[k].state,
                         ote_status_string(st[k].error));
            assert_int_equal(st[k].transferred, 0);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_late_region_large_first),
        cmocka_unit_test(test_late_region_small_first),
        cmocka_unit_test(test_never_registered),
        cmocka_unit_test(test_bad_burst_bounded_fetches),
        cmocka_unit_test(test_dead_peer_unknown_range),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
