/*
 * Descriptor builds against uct_tcp quarantines. A quarantine (after a
 * PUTBACK READ that did not complete) closes the engine's uct_tcp ifaces
 * and opens them again under each worker's lock, while the engine's
 * descriptor is built on other threads: its control thread answering a
 * peer's descriptor fetch (ote_segment_refresh by a second engine, in a
 * loop) and a thread encoding it as the metadata thread does. Those builds
 * read each iface's address from the copy taken at its open, never from
 * the UCT iface being closed (under AddressSanitizer a read of the closed
 * one is a use after free, under ThreadSanitizer a race). Between
 * quarantines a WRITE to the target completes and its bytes are checked
 * there; every descriptor fetched names this engine.
 */
#include "core/engine.h"
#include "core/worker/worker.h"
#include "mp_util.h"

#include <pthread.h>
#include <stdatomic.h>

#define QUARANTINES 40

typedef struct {
    ote_engine_h e;      /* the engine quarantined */
    ote_engine_h peer;   /* fetches e's descriptor */
    atomic_bool  stop;
    atomic_long  encoded, refreshed, failed;
} race_t;

static void *encode_loop(void *arg)
{
    race_t *r = arg;

    while (!atomic_load(&r->stop)) {
        ote_buf_t b = {0};

        if (ote_engine_desc_encode(r->e, &b) == OTE_OK && b.len > 0)
            atomic_fetch_add(&r->encoded, 1);
        else
            atomic_fetch_add(&r->failed, 1);
        free(b.data);
    }
    return NULL;
}

static void *refresh_loop(void *arg)
{
    race_t *r = arg;
    ote_segment_h seg;

    if (ote_segment_open(r->peer, ote_engine_name(r->e), &seg) != OTE_OK) {
        atomic_fetch_add(&r->failed, 1);
        return NULL;
    }
    while (!atomic_load(&r->stop)) {
        if (ote_segment_refresh(seg) == OTE_OK)
            atomic_fetch_add(&r->refreshed, 1);
    }
    ote_segment_close(seg);
    return NULL;
}

/* How many of e's ifaces a quarantine left closed. */
static int closed_ifaces(ote_engine_h e)
{
    ote_engine_facts_t *f = ote_engine_facts(e);
    int n                 = 0;

    for (size_t w = 0; w < f->num_workers; w++) {
        for (size_t i = 0; i < atomic_load(&f->workers[w].num_ifaces); i++)
            n += ote_tl_iface_closed(f->workers[w].ifaces[i]);
    }
    return n;
}

static void test_desc_builds_race_quarantines(void **state)
{
    char listen[64];
    const char *args[] = {"--listen", listen, "--region", "1m:rw", NULL};
    ote_test_target_t t;
    ote_segment_h seg;
    ote_mem_h mem;
    uint8_t *local;
    race_t r = {0};
    pthread_t th[2];
    long completed = 0, retries = 0;

    (void)state;
    setenv("OTE_TLS", "uct_tcp", 1);
    setenv("OTE_CONNECT_TIMEOUT_MS", "2000", 1);
    snprintf(listen, sizeof(listen), "127.0.0.1:%u", mp_free_port());
    assert_int_equal(ote_test_target_start(&t, NULL, args), 0);
    r.e    = ote_test_engine(NULL);
    r.peer = ote_test_engine(NULL);
    assert_int_equal(ote_mem_alloc(r.e, 1 << 20, NULL, OTE_ACCESS_REMOTE_WRITE, (void **)&local,
                                   &mem), OTE_OK);
    assert_int_equal(ote_segment_open(r.e, t.name, &seg), OTE_OK);
    assert_int_equal(pthread_create(&th[0], NULL, encode_loop, &r), 0);
    assert_int_equal(pthread_create(&th[1], NULL, refresh_loop, &r), 0);
    for (int q = 0; q < QUARANTINES; q++) {
        char cmd[64];
        int state_ = -1;

        /* Every iface opens again at once here (its device is up), on its port or another. */
        (void)ote_worker_quarantine_tl(r.e, "uct_tcp");
        assert_int_equal(closed_ifaces(r.e), 0);
        ote_test_fill(local, 0, 65536, 100 + (unsigned)q);
        /* The rail's ep failed with the quarantine: made again by the next WRITEs. */
        for (int k = 0; k < 100 && state_ != OTE_TASK_COMPLETED; k++) {
            ote_task_status_t st;

            assert_int_equal(ote_test_xfer(r.e, seg, OTE_OP_WRITE, local, t.addr[0], 65536,
                                           20000, &st), OTE_OK);
            state_ = (int)st.state;
            if (state_ != OTE_TASK_COMPLETED) {
                /* The rail cools down after its failure; never UNREACHABLE. */
                if (st.error != OTE_ERR_REMOTE_DISCONNECT && st.error != OTE_ERR_TIMEOUT)
                    fail_msg("WRITE after quarantine %d: %s", q, ote_status_string(st.error));
                retries++;
                usleep(50000);
            }
        }
        assert_int_equal(state_, OTE_TASK_COMPLETED);
        snprintf(cmd, sizeof(cmd), "check 0 0 65536 %u", 100 + (unsigned)q);
        assert_int_equal(ote_test_target_expect(r.e, seg, cmd, "ok", 10000), 0);
        completed++;
    }
    atomic_store(&r.stop, true);
    pthread_join(th[0], NULL);
    pthread_join(th[1], NULL);
    printf("%d quarantines, %ld WRITEs verified (%ld failed first), %ld descriptors encoded, %ld fetched by a "
           "peer, %ld failed\n", QUARANTINES, completed, retries, atomic_load(&r.encoded),
           atomic_load(&r.refreshed), atomic_load(&r.failed));
    assert_int_equal(atomic_load(&r.failed), 0);
    assert_true(atomic_load(&r.encoded) > 0);
    assert_true(atomic_load(&r.refreshed) > 0);
    ote_segment_close(seg);
    ote_mem_free(r.e, mem);
    ote_engine_destroy(r.peer);
    ote_engine_destroy(r.e);
    ote_test_target_stop(&t);
    unsetenv("OTE_TLS");
    unsetenv("OTE_CONNECT_TIMEOUT_MS");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_desc_builds_race_quarantines),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
