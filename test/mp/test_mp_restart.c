/*
 * Segments and the peer's lifetime: a segment stays bound to the instance
 * it was opened on; after a restart under the same name, data and
 * notifications on it fail with a status and never reach the new
 * instance, and ote_segment_reopen() binds it to the new one. Also: names
 * an engine cannot be found by are refused at create, names that do not
 * resolve say so, a name service that does not answer holds an open no
 * longer than OTE_CONNECT_TIMEOUT_MS, descriptors fetched again do not
 * pile up, and a refresh waiting for a peer's answer holds no submit.
 */
#include "mp_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

static void write_one(ote_engine_h e, ote_segment_h seg, void *local, uint64_t remote, size_t len,
                      ote_status_t *submit_p, ote_task_status_t *st)
{
    ote_xfer_req_t r = {.op = OTE_OP_WRITE, .local_addr = local, .segment = seg,
                        .remote_addr = remote, .length = len};
    ote_batch_h b;
    size_t first;

    assert_int_equal(ote_batch_create(e, 1, &b), OTE_OK);
    *submit_p = ote_batch_submit(b, &r, 1, &first);
    if (*submit_p == OTE_OK) {
        assert_int_equal(ote_batch_wait(b, 20000), OTE_OK);
        assert_int_equal(ote_batch_task_status(b, first, st), OTE_OK);
    }
    ote_batch_release(b);
}

/* One transport list (*state, see OTE_TEST_CASE; NULL: no OTE_TLS). */
static void restart_case(void **state)
{
    const char *tls = *state;
    static const char *const base_args[] = {"--region", "1m:rw", NULL};
    char listen[64], cmd[128];
    const char *args[8] = {"--listen", listen, "--region", "1m:rw", NULL};
    ote_test_target_t t1, t2;
    ote_engine_h e;
    ote_segment_h seg;
    ote_mem_h mem;
    uint8_t *local;
    ote_task_status_t st;
    ote_status_t sub;
    int restarted = -1;

    (void)base_args;
    if (tls != NULL)
        setenv("OTE_TLS", tls, 1);
    snprintf(listen, sizeof(listen), "127.0.0.1:%u", mp_free_port());
    assert_int_equal(ote_test_target_start(&t1, NULL, args), 0);
    e = ote_test_engine(NULL);
    assert_int_equal(ote_mem_alloc(e, 1 << 20, NULL, 0, (void **)&local, &mem), OTE_OK);
    assert_int_equal(ote_segment_open(e, t1.name, &seg), OTE_OK);
    ote_test_fill(local, 0, 4096, 11);
    write_one(e, seg, local, t1.addr[0], 4096, &sub, &st);
    assert_int_equal(sub, OTE_OK);
    assert_int_equal(st.state, OTE_TASK_COMPLETED);
    assert_int_equal(ote_test_target_expect(e, seg, "check 0 0 4096 11", "ok", 10000), 0);

    /* The peer restarts under the same name. */
    ote_test_target_kill(&t1);
    assert_int_equal(ote_test_target_start(&t2, NULL, args), 0);
    assert_string_equal(t1.name, t2.name);

    /*
     * The old handle: notifications are refused, not handed to the new
     * instance: several in one frame (sent again on a fresh connection after
     * the old one broke, then refused whole), each with its status; then one.
     */
    {
        ote_notify_msg_t m[3] = {{"fill 0 0 4096 97", 16}, {"fill 0 0 4096 98", 16},
                                 {"fill 0 0 4096 99", 16}};
        ote_status_t ms[3] = {OTE_OK, OTE_OK, OTE_OK};

        assert_int_equal(ote_notify_send_many(e, seg, m, 3, ms), OTE_ERR_PEER_RESTARTED);
        for (int i = 0; i < 3; i++)
            assert_int_equal(ms[i], OTE_ERR_PEER_RESTARTED);
    }
    assert_int_equal(ote_notify_send(e, seg, "fill 0 0 4096 99", 16), OTE_ERR_PEER_RESTARTED);
    /* Data: refused at submit now that the restart is known. */
    write_one(e, seg, local, t2.addr[0], 4096, &sub, &st);
    assert_int_equal(sub, OTE_ERR_PEER_RESTARTED);
    assert_int_equal(ote_segment_refresh(seg), OTE_ERR_PEER_RESTARTED);

    /* Recovery: one call, which says the addresses changed. */
    assert_int_equal(ote_segment_reopen(seg, &restarted), OTE_OK);
    assert_int_equal(restarted, 1);
    {
        ote_region_info_t ri[4];
        size_t n = 0;

        assert_int_equal(ote_segment_regions(seg, ri, 4, &n), OTE_OK);
        assert_int_equal(n, 1);
        assert_true(ri[0].addr == t2.addr[0]);
    }
    /* Nothing of the old handle's reached the new instance: its memory is as it started. */
    snprintf(cmd, sizeof(cmd), "sum 0 0 4096");
    {
        char reply[64], want[64];
        uint8_t zero[4096] = {0};

        assert_int_equal(ote_test_target_cmd(e, seg, cmd, reply, sizeof(reply), 10000), 0);
        snprintf(want, sizeof(want), "sum %016llx", (unsigned long long)ote_test_hash(zero, 4096));
        assert_string_equal(reply, want);
    }
    ote_test_fill(local, 0, 4096, 12);
    write_one(e, seg, local, t2.addr[0], 4096, &sub, &st);
    assert_int_equal(sub, OTE_OK);
    assert_int_equal(st.state, OTE_TASK_COMPLETED);
    assert_int_equal(ote_test_target_expect(e, seg, "check 0 0 4096 12", "ok", 10000), 0);
    /* Same instance: reopen says so. */
    assert_int_equal(ote_segment_reopen(seg, &restarted), OTE_OK);
    assert_int_equal(restarted, 0);

    ote_segment_close(seg);
    ote_mem_free(e, mem);
    ote_engine_destroy(e);
    ote_test_target_stop(&t2);
    unsetenv("OTE_TLS");
}

typedef struct {
    ote_engine_h  e;
    ote_segment_h seg;
    uint8_t      *local;
    _Atomic uint64_t remote; /* the region of the instance the segment is bound to */
    atomic_bool   stop;
    long          completed, failed, refused;
} submitter_t;

/* 4 KiB WRITEs one at a time until stop; every task ends (the wait is bounded). */
static void *submitter_main(void *arg)
{
    submitter_t *s = arg;

    while (!atomic_load(&s->stop)) {
        ote_task_status_t st;
        ote_status_t sub;

        write_one(s->e, s->seg, s->local, atomic_load(&s->remote), 4096, &sub, &st);
        if (sub != OTE_OK)
            s->refused++;
        else if (st.state == OTE_TASK_COMPLETED)
            s->completed++;
        else
            s->failed++;
    }
    return NULL;
}

/*
 * Rails torn down and built again (a restart and ote_segment_reopen) while
 * another thread submits on the segment: every submit is refused or its
 * task ends with a status (none hangs), writes complete between the
 * rebuilds, and the last one lands in the last instance. Under
 * ThreadSanitizer (which runs this test) also: the rail set is taken out
 * and put back under the lock the submits plan with.
 */
static void test_reopen_during_submits(void **state)
{
    enum { CYCLES = 3 };
    char listen[64];
    const char *args[] = {"--listen", listen, "--region", "1m:rw", NULL};
    ote_test_target_t t[2];
    submitter_t s = {0};
    pthread_t th;
    ote_mem_h mem;
    int cur = 0, restarted = -1;

    (void)state;
    setenv("OTE_TLS", "tcp", 1);
    snprintf(listen, sizeof(listen), "127.0.0.1:%u", mp_free_port());
    assert_int_equal(ote_test_target_start(&t[0], NULL, args), 0);
    s.e = ote_test_engine(NULL);
    assert_int_equal(ote_mem_alloc(s.e, 1 << 20, NULL, 0, (void **)&s.local, &mem), OTE_OK);
    assert_int_equal(ote_segment_open(s.e, t[0].name, &s.seg), OTE_OK);
    atomic_store(&s.remote, t[0].addr[0]);
    ote_test_fill(s.local, 0, 4096, 21);
    assert_int_equal(pthread_create(&th, NULL, submitter_main, &s), 0);
    for (int c = 0; c < CYCLES; c++) {
        usleep(100 * 1000);
        ote_test_target_kill(&t[cur]);
        assert_int_equal(ote_test_target_start(&t[1 - cur], NULL, args), 0);
        cur = 1 - cur;
        assert_int_equal(ote_segment_reopen(s.seg, &restarted), OTE_OK);
        assert_int_equal(restarted, 1);
        atomic_store(&s.remote, t[cur].addr[0]);
    }
    usleep(100 * 1000);
    atomic_store(&s.stop, true);
    assert_int_equal(pthread_join(th, NULL), 0);
    print_message("submits beside %d rebuilds: %ld completed, %ld failed, %ld refused\n", CYCLES,
                  s.completed, s.failed, s.refused);
    assert_true(s.completed > 0);
    /* The segment serves the last instance. */
    {
        ote_task_status_t st;
        ote_status_t sub;

        ote_test_fill(s.local, 0, 4096, 22);
        write_one(s.e, s.seg, s.local, t[cur].addr[0], 4096, &sub, &st);
        assert_int_equal(sub, OTE_OK);
        assert_int_equal(st.state, OTE_TASK_COMPLETED);
        assert_int_equal(ote_test_target_expect(s.e, s.seg, "check 0 0 4096 22", "ok", 10000), 0);
    }
    ote_segment_close(s.seg);
    ote_mem_free(s.e, mem);
    ote_engine_destroy(s.e);
    ote_test_target_stop(&t[cur]);
    unsetenv("OTE_TLS");
}

/* No OTE_TLS: what the engine picks on its own (*state is NULL). */
static void test_restart_auto(void **state)
{
    restart_case(state);
}

static void test_names(void **state)
{
    ote_engine_params_t p = {.listen_addr = "127.0.0.1:0", .name = "decode-0"};
    char name[64], listen[64];
    ote_engine_h e = NULL;
    ote_segment_h seg;
    unsigned port = mp_free_port();

    (void)state;
    /* p2p finds an engine by the address of its listener: other names are refused. */
    assert_int_equal(ote_engine_create(&p, &e), OTE_ERR_INVALID_PARAM);
    assert_null(e);
    p.name = "no-such-host.invalid:4000";
    assert_int_equal(ote_engine_create(&p, &e), OTE_ERR_INVALID_PARAM);
    snprintf(listen, sizeof(listen), "127.0.0.1:%u", port);
    snprintf(name, sizeof(name), "127.0.0.1:%u", port + 1 == 65536 ? 1 : port + 1);
    p.listen_addr = listen;
    p.name        = name;
    assert_int_equal(ote_engine_create(&p, &e), OTE_ERR_INVALID_PARAM);
    /* A host name for this listener is fine, and peers open it by that name. */
    snprintf(name, sizeof(name), "localhost:%u", port);
    assert_int_equal(ote_engine_create(&p, &e), OTE_OK);
    assert_string_equal(ote_engine_name(e), name);
    assert_int_equal(ote_segment_open(e, name, &seg), OTE_OK);
    ote_segment_close(seg);
    /* Opening: a host that does not resolve, and a name that is not host:port. */
    assert_int_equal(ote_segment_open(e, "no-such-host.invalid:4000", &seg), OTE_ERR_NOT_FOUND);
    assert_int_equal(ote_segment_open(e, "decode-0", &seg), OTE_ERR_INVALID_PARAM);
    ote_engine_destroy(e);
}

/*
 * Opening a peer whose host name the name service never answers for (in a
 * child, ote_test_in_dns_blackhole): OTE_ERR_TIMEOUT at
 * OTE_CONNECT_TIMEOUT_MS, where the resolver alone would wait 2 s. 0
 * passed, 1 a check failed.
 */
static int open_in_blackhole(void)
{
    ote_engine_params_t p = {.listen_addr = "127.0.0.1:0"};
    ote_engine_h e        = NULL;
    ote_segment_h seg     = NULL;
    ote_status_t st;
    uint64_t t0, ms;

    setenv("OTE_CONNECT_TIMEOUT_MS", "400", 1);
    setenv("OTE_TLS", "tcp", 1);
    if (ote_engine_create(&p, &e) != OTE_OK)
        return 1;
    t0 = ote_time_ns();
    st = ote_segment_open(e, "blackhole.invalid:4000", &seg);
    ms = (ote_time_ns() - t0) / 1000000;
    printf("# open of a name the name service does not answer for: %s after %llu ms\n",
           ote_status_string(st), (unsigned long long)ms);
    ote_engine_destroy(e);
    return st == OTE_ERR_TIMEOUT && seg == NULL && ms >= 350 && ms < 1500 ? 0 : 1;
}

static void test_name_lookup_bounded(void **state)
{
    int rc = ote_test_in_dns_blackhole(open_in_blackhole);

    (void)state;
    if (rc != 77)
        assert_int_equal(rc, 0);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
/* The sanitizer's allocator keeps freed blocks in quarantine: count live ones. */
size_t __sanitizer_get_current_allocated_bytes(void);

static long heap_kib(void)
{
    return (long)(__sanitizer_get_current_allocated_bytes() / 1024);
}
#else
/* Resident memory: what a process that kept old descriptors would grow. */
static long heap_kib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;

    assert_non_null(f);
    assert_int_equal(fscanf(f, "%ld %ld", &size, &res), 2);
    fclose(f);
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}
#endif

/* Refreshes and failed look-ups keep memory flat (2,000 regions, 300 rounds). */
static void descriptors_flat(const char *tls, bool failed_lookups)
{
    enum { REGIONS = 2000, ROUNDS = 300 };
    ote_engine_h rx, tx;
    static ote_mem_h mems[REGIONS];
    static ote_mem_desc_t d[REGIONS];
    uint8_t *pool, *local;
    ote_mem_h mlocal;
    ote_segment_h seg;
    long before, after;

    if (tls != NULL)
        setenv("OTE_TLS", tls, 1);
    rx = ote_test_engine(NULL);
    tx = ote_test_engine(NULL);
    pool = aligned_alloc(4096, (size_t)REGIONS * 4096);
    assert_non_null(pool);
    for (size_t i = 0; i < REGIONS; i++)
        d[i] = (ote_mem_desc_t){.addr = pool + i * 4096, .length = 4096,
                                .access = OTE_ACCESS_REMOTE_WRITE};
    assert_int_equal(ote_mem_register(rx, d, REGIONS, mems), OTE_OK);
    assert_int_equal(ote_mem_alloc(tx, 4096, NULL, 0, (void **)&local, &mlocal), OTE_OK);
    assert_int_equal(ote_segment_open(tx, ote_engine_name(rx), &seg), OTE_OK);
    for (int warm = 0; warm < 20; warm++)
        assert_int_equal(ote_segment_refresh(seg), OTE_OK);
    before = heap_kib();
    for (int i = 0; i < ROUNDS; i++) {
        if (failed_lookups) {
            ote_task_status_t st;
            ote_status_t sub;

            /* Outside every published region: refused, whatever the transport. */
            write_one(tx, seg, local, (uint64_t)(uintptr_t)local, 64, &sub, &st);
            assert_true(sub != OTE_OK || st.state == OTE_TASK_FAILED);
        } else {
            assert_int_equal(ote_segment_refresh(seg), OTE_OK);
        }
    }
    after = heap_kib();
    /* One descriptor of 2,000 regions is some 200 KiB: 300 kept would be tens of MiB. */
    assert_true(after - before < 8 * 1024);
    ote_segment_close(seg);
    ote_mem_free(tx, mlocal);
    ote_mem_deregister(rx, mems[0]);
    ote_engine_destroy(tx);
    ote_engine_destroy(rx);
    free(pool);
    unsetenv("OTE_TLS");
}

static void test_refresh_memory_flat(void **state)
{
    (void)state;
    descriptors_flat(NULL, false);
}

static void test_uct_failed_lookups_flat(void **state)
{
    (void)state;
    descriptors_flat("uct_tcp", true);
}

/*
 * A refresh whose descriptor fetch a peer does not answer (stopped) waits
 * up to OTE_CONNECT_TIMEOUT_MS; a submit on the same segment from another
 * thread meanwhile returns at once (its repair check waited for the
 * fetch's timeout while the refresh held the lock it takes), and its WRITE
 * lands once the peer goes on.
 */
static void test_submit_beside_slow_refresh(void **state)
{
    static const char *const args[] = {"--region", "1m:rw", NULL};
    enum { CONNECT_MS = 1500 };
    mp_fx_t f;
    mp_refresh_t rf = {.status = OTE_ERR_IO};
    ote_status_t sub;
    ote_task_status_t st;
    pthread_t th;

    (void)state;
    setenv("OTE_CONNECT_TIMEOUT_MS", "1500", 1);
    mp_fx_start(&f, args, 4096);
    unsetenv("OTE_CONNECT_TIMEOUT_MS");
    ote_test_fill(f.local, 8192, 4096, 33);
    /* The rails are up before the peer stops (a WRITE landed). */
    write_one(f.e, f.seg, f.local, f.t.addr[0], 4096, &sub, &st);
    assert_int_equal(sub, OTE_OK);
    assert_int_equal(st.state, OTE_TASK_COMPLETED);
    assert_int_equal(kill(f.t.pid, SIGSTOP), 0);
    rf.seg = f.seg;
    assert_int_equal(pthread_create(&th, NULL, mp_refresh_main, &rf), 0);
    usleep(200 * 1000);
    mp_submit_beside_stopped(&f, f.t.addr[0] + 8192, 4096, "a refresh", CONNECT_MS / 3);
    assert_int_equal(pthread_join(th, NULL), 0);
    /* Answered once the peer went on, or not within the bound: a status either way. */
    assert_true(rf.status == OTE_OK || rf.status == OTE_ERR_TIMEOUT ||
                rf.status == OTE_ERR_REMOTE_DISCONNECT);
    assert_int_equal(ote_test_target_expect(f.e, f.seg, "check 0 8192 4096 33", "ok", 10000), 0);
    mp_fx_stop(&f, true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        OTE_TEST_CASE(restart_case, "tcp"),
        OTE_TEST_CASE(restart_case, "cma"),
        cmocka_unit_test(test_restart_auto),
        cmocka_unit_test(test_reopen_during_submits),
        cmocka_unit_test(test_submit_beside_slow_refresh),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_name_lookup_bounded),
        cmocka_unit_test(test_refresh_memory_flat),
        cmocka_unit_test(test_uct_failed_lookups_flat),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
