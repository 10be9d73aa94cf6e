/*
 * Open descriptors stay flat across peer restarts: a long-lived engine
 * writes to a peer that is killed (kill -9 or a clean exit) and restarted
 * under the same name many times, reopening its segment each time, over
 * each transport; its count of open descriptors (/proc/self/fd) after the
 * last cycle is within a small constant of the count after the first.
 */
#include "mp_util.h"
#include "store_server.h"


/* One transport list (*state, see OTE_TEST_CASE). */
static void restart_cycles(void **state)
{
    const char *tls = *state;
    enum { CYCLES = 12, SLACK = 4 };
    char listen[64];
    const char *args[] = {"--listen", listen, "--region", "1m:rw", NULL};
    ote_test_target_t t;
    ote_engine_h e;
    ote_segment_h seg;
    ote_mem_h mem;
    uint8_t *local;
    int after_first = -1, now = -1;

    setenv("OTE_TLS", tls, 1);
    setenv("OTE_CONNECT_TIMEOUT_MS", "1000", 1);
    snprintf(listen, sizeof(listen), "127.0.0.1:%u", mp_free_port());
    assert_int_equal(ote_test_target_start(&t, NULL, args), 0);
    e = ote_test_engine(NULL);
    assert_int_equal(ote_mem_alloc(e, 1 << 20, NULL, OTE_ACCESS_REMOTE_WRITE, (void **)&local,
                                   &mem), OTE_OK);
    assert_int_equal(ote_segment_open(e, t.name, &seg), OTE_OK);
    for (int c = 0; c <= CYCLES; c++) {
        int restarted = -1;
        unsigned seed = 20 + (unsigned)c;

        /* The peer writes into this engine's memory too (its own rails to us). */
        mp_traffic_both_ways(e, seg, local, t.addr[0], seed);
        if (c == 1)
            after_first = mp_count_fds();
        if (c == CYCLES)
            break;
        /* The peer goes away (kill -9 or a clean exit) and comes back under the same name. */
        if (c % 2 == 0)
            ote_test_target_kill(&t);
        else
            ote_test_target_stop(&t);
        /* Writes towards the dead instance fail (connections refused or gone). */
        assert_true(mp_write_one(e, seg, local, t.addr[0], 4096) != OTE_TASK_COMPLETED);
        /* Opening and reopening towards the dead instance fail, and leave nothing open. */
        for (int k = 0; k < 3; k++) {
            ote_segment_h dead = NULL;

            assert_true(ote_segment_reopen(seg, &restarted) != OTE_OK);
            assert_true(ote_segment_open(e, t.name, &dead) != OTE_OK);
        }
        assert_int_equal(ote_test_target_start(&t, NULL, args), 0);
        if (c % 4 < 2) {
            assert_int_equal(ote_segment_reopen(seg, &restarted), OTE_OK);
            assert_int_equal(restarted, 1);
        } else {
            /* A segment closed while its rails' peer was gone, and a fresh one. */
            ote_segment_close(seg);
            assert_int_equal(ote_segment_open(e, t.name, &seg), OTE_OK);
        }
    }
    now = mp_count_fds();
    if (now > after_first + SLACK)
        fprintf(stderr, "OTE_TLS=%s: %d descriptors after the first restart, %d after %d\n", tls,
                after_first, now, CYCLES);
    assert_true(now <= after_first + SLACK);
    ote_segment_close(seg);
    ote_mem_free(e, mem);
    ote_engine_destroy(e);
    ote_test_target_stop(&t);
    unsetenv("OTE_TLS");
    unsetenv("OTE_CONNECT_TIMEOUT_MS");
}

/*
 * A peer killed while its record stays in a metadata store (its lease runs
 * on): every write towards it fails, and each probe of its rails fetches
 * the same dead instance from the store. UCX's tcp leaked the socket of
 * each connect that failed inside uct_ep_create (one descriptor per rail
 * per probe); the segment now asks the instance's control address first
 * and makes no ep when nothing answers there. Over uct_tcp with Redis.
 */
static void test_fd_flat_uct_tcp_dead_in_store(void **state)
{
    enum { WRITES = 24, SLACK = 4 };
    char listen[64];
    const char *args[] = {"--listen", listen, "--region", "1m:rw", NULL};
    ote_test_store_t store;
    ote_test_target_t t;
    ote_engine_h e;
    ote_segment_h seg;
    ote_mem_h mem;
    uint8_t *local;
    int before, now;

    (void)state;
    if (ote_test_store_start(&store, "redis", NULL) != 0)
        skip();
    ote_test_setenv_all((const char *const[]){
        "OTE_TLS=uct_tcp", "OTE_CONNECT_TIMEOUT_MS=1000", "OTE_METADATA_TTL_S=60",
        "OTE_RAIL_COOLDOWN_MS=100", "OTE_RAIL_COOLDOWN_MAX_MS=100", NULL});
    setenv("OTE_METADATA", store.uri, 1);
    snprintf(listen, sizeof(listen), "127.0.0.1:%u", mp_free_port());
    assert_int_equal(ote_test_target_start(&t, NULL, args), 0);
    e = ote_test_engine(NULL);
    assert_int_equal(ote_mem_alloc(e, 1 << 20, NULL, OTE_ACCESS_REMOTE_WRITE, (void **)&local,
                                   &mem), OTE_OK);
    assert_int_equal(ote_segment_open(e, t.name, &seg), OTE_OK);
    ote_test_fill(local, 0, 65536, 31);
    assert_int_equal(mp_write_one(e, seg, local, t.addr[0], 65536), OTE_TASK_COMPLETED);
    ote_test_target_kill(&t);
    assert_true(mp_write_one(e, seg, local, t.addr[0], 4096) != OTE_TASK_COMPLETED);
    before = mp_count_fds();
    for (int i = 0; i < WRITES; i++) {
        assert_true(mp_write_one(e, seg, local, t.addr[0], 4096) != OTE_TASK_COMPLETED);
        usleep(150 * 1000); /* past the rails' cool-down: each write probes them */
    }
    now = mp_count_fds();
    fprintf(stderr, "uct_tcp, dead peer still in the store: %d descriptors, %d after %d writes\n",
            before, now, WRITES);
    assert_true(now <= before + SLACK);
    ote_segment_close(seg);
    ote_mem_free(e, mem);
    ote_engine_destroy(e);
    ote_test_store_stop(&store);
    unsetenv("OTE_METADATA");
    unsetenv("OTE_METADATA_TTL_S");
    unsetenv("OTE_RAIL_COOLDOWN_MS");
    unsetenv("OTE_RAIL_COOLDOWN_MAX_MS");
    unsetenv("OTE_TLS");
    unsetenv("OTE_CONNECT_TIMEOUT_MS");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        OTE_TEST_CASE(restart_cycles, "uct_tcp"),
        OTE_TEST_CASE(restart_cycles, "tcp"),
        OTE_TEST_CASE(restart_cycles, "tcp,shm"),
        OTE_TEST_CASE(restart_cycles, "tcp,cma"),
        cmocka_unit_test(test_fd_flat_uct_tcp_dead_in_store),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
