/*
 * The failure-side series against failures this test causes, through
 * ote_engine_stats() (the samples /metrics serves, test_mp_metrics checks
 * that they are the same), each compared exactly with what the test saw:
 *
 *  - a target killed with SIGKILL and restarted under the same name three
 *    times, the restart seen each time another way (a notification, a
 *    WRITE, a reopen alone): ote_peer_restarts_total is 3;
 *  - WRITEs and READs that fail (past a region's end, outside every
 *    region, to a killed peer, across a restart):
 *    ote_transfer_failures_total{op,status} equals the tasks that ended
 *    with that status, every status; notifications likewise in
 *    ote_notification_failures_total{status};
 *  - opens that succeed, find no one, or fail: ote_metadata_requests_total
 *    {store="p2p",result} of an engine that only opens; the same with etcd
 *    and Redis when their servers are installed (each case skipped alone
 *    otherwise), a stopped store giving "error";
 *  - register, alloc, deregister, free: ote_registered_bytes{memory} and
 *    ote_registrations_total; opens and closes: ote_segments_open, and a
 *    target's that serves READs by PUTBACK (its own segment not counted);
 *  - every series of the list served with its type and exactly its label
 *    keys, nothing else, no peer's name in a label, latency buckets 1 us
 *    to 10 s;
 *  - submits past OTE_MAX_INFLIGHT_BYTES while the target is stopped:
 *    ote_admission_rejections_total, ote_inflight_requests / _bytes.
 */
#include "mp_stats.h"
#include "mp_util.h"
#include "store_server.h"

#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

typedef struct {
    unsigned long xfer[2][MP_NSTATUS]; /* [op == WRITE][-status] */
    unsigned long notif[MP_NSTATUS];
} tally_t;

static void tally_status(unsigned long *slot_array, ote_status_t s)
{
    int i = -(int)s;

    assert_true(i > 0 && i < MP_NSTATUS);
    slot_array[i]++;
}

/* One request in a batch of its own; the task's status (submit refused: state FAILED, counted not). */
static ote_status_t one(ote_engine_h e, ote_segment_h seg, ote_op_t op, void *local,
                        uint64_t remote, size_t len, tally_t *t, ote_task_status_t *st)
{
    ote_xfer_req_t r = {.op = op, .local_addr = local, .segment = seg, .remote_addr = remote,
                        .length = len};
    ote_batch_h b;
    ote_status_t sub;
    size_t first;

    memset(st, 0, sizeof(*st));
    assert_int_equal(ote_batch_create(e, 1, &b), OTE_OK);
    sub = ote_batch_submit(b, &r, 1, &first);
    if (sub == OTE_OK) {
        assert_int_equal(ote_batch_wait(b, 30000), OTE_OK);
        assert_int_equal(ote_batch_task_status(b, first, st), OTE_OK);
        if (st->state != OTE_TASK_COMPLETED)
            tally_status(t->xfer[op == OTE_OP_WRITE], st->error);
    }
    ote_batch_release(b);
    return sub;
}

static void notify(ote_engine_h e, ote_segment_h seg, const char *msg, tally_t *t,
                   unsigned long *sent)
{
    ote_status_t s = ote_notify_send(e, seg, msg, strlen(msg));

    if (s == OTE_OK)
        (*sent)++;
    else
        tally_status(t->notif, s);
    printf("notify '%s': %s\n", msg, ote_status_string(s));
}

static void check_failures(ote_engine_h e, const tally_t *t)
{
    char labels[128];

    for (int op = 0; op < 2; op++) {
        for (int i = 1; i < MP_NSTATUS; i++) {
            snprintf(labels, sizeof(labels), "op=\"%s\",status=\"%s\"", op ? "write" : "read",
                     mp_status_label((ote_status_t)-i));
            if (mp_stat(e, "ote_transfer_failures_total", labels) != (double)t->xfer[op][i]) {
                fprintf(stderr, "ote_transfer_failures_total{%s} = %g, tasks %lu\n", labels,
                        mp_stat(e, "ote_transfer_failures_total", labels), t->xfer[op][i]);
                fail();
            }
        }
    }
    for (int i = 1; i < MP_NSTATUS; i++) {
        snprintf(labels, sizeof(labels), "status=\"%s\"", mp_status_label((ote_status_t)-i));
        if (mp_stat(e, "ote_notification_failures_total", labels) != (double)t->notif[i]) {
            fprintf(stderr, "ote_notification_failures_total{%s} = %g, seen %lu\n", labels,
                    mp_stat(e, "ote_notification_failures_total", labels), t->notif[i]);
            fail();
        }
    }
}

static void start_target(ote_test_target_t *t, const char *listen)
{
    const char *args[] = {"--listen", listen, "--region", "1m:rw", NULL};

    assert_int_equal(ote_test_target_start(t, NULL, args), 0);
}

/* Kill -9, restart under the same name (the same address). */
static void restart_target(ote_test_target_t *t, const char *listen)
{
    char name[sizeof(t->name)];

    snprintf(name, sizeof(name), "%s", t->name);
    ote_test_target_kill(t);
    start_target(t, listen);
    assert_string_equal(t->name, name);
}

static void test_restarts_and_failures(void **state)
{
    char listen[64];
    ote_test_target_t t;
    ote_engine_h e;
    ote_segment_h seg;
    ote_mem_h mem;
    uint8_t *local;
    ote_task_status_t st;
    ote_status_t sub;
    tally_t tally = {0};
    unsigned long sent = 0, restarts = 0;
    int restarted = -1;

    (void)state;
    setenv("OTE_TLS", "tcp", 1);
    setenv("OTE_XFER_TIMEOUT_MS", "3000", 1);
    snprintf(listen, sizeof(listen), "127.0.0.1:%u", mp_free_port());
    start_target(&t, listen);
    e = ote_test_engine(NULL);
    assert_int_equal(ote_mem_alloc(e, 1 << 20, NULL, 0, (void **)&local, &mem), OTE_OK);
    assert_int_equal(ote_segment_open(e, t.name, &seg), OTE_OK);
    assert_true(mp_stat(e, "ote_peer_restarts_total", "") == 0.0);

    /* Good traffic, then failures the peer's regions cause. */
    assert_int_equal(one(e, seg, OTE_OP_WRITE, local, t.addr[0], 4096, &tally, &st), OTE_OK);
    assert_int_equal(st.state, OTE_TASK_COMPLETED);
    notify(e, seg, "hello", &tally, &sent);
    assert_int_equal(one(e, seg, OTE_OP_WRITE, local, t.addr[0] + (1 << 20) - 16, 64, &tally,
                         &st),
                     OTE_OK);
    assert_int_equal(st.error, OTE_ERR_OUT_OF_BOUNDS);
    assert_int_equal(one(e, seg, OTE_OP_READ, local, t.addr[0] + (1 << 20) - 8, 4096, &tally,
                         &st),
                     OTE_OK);
    assert_int_equal(st.error, OTE_ERR_OUT_OF_BOUNDS);
    /* An address in no region of the peer's (below its region). */
    assert_int_equal(one(e, seg, OTE_OP_WRITE, local, t.addr[0] - (64u << 20), 128, &tally, &st),
                     OTE_OK);
    assert_int_equal(st.error, OTE_ERR_REMOTE_NOT_REGISTERED);
    check_failures(e, &tally);

    /* Restart 1, seen by a notification on the old handle. */
    restart_target(&t, listen);
    notify(e, seg, "after restart 1", &tally, &sent);
    assert_int_equal(tally.notif[-OTE_ERR_PEER_RESTARTED], 1);
    restarts++;
    assert_true(mp_stat(e, "ote_peer_restarts_total", "") == (double)restarts);
    /* Known now: refused at submit (no task, no failure), notifications too. */
    sub = one(e, seg, OTE_OP_WRITE, local, t.addr[0], 4096, &tally, &st);
    assert_int_equal(sub, OTE_ERR_PEER_RESTARTED);
    notify(e, seg, "still stale", &tally, &sent);
    assert_int_equal(ote_segment_reopen(seg, &restarted), OTE_OK);
    assert_int_equal(restarted, 1);
    assert_true(mp_stat(e, "ote_peer_restarts_total", "") == (double)restarts);
    assert_int_equal(one(e, seg, OTE_OP_WRITE, local, t.addr[0], 4096, &tally, &st), OTE_OK);
    assert_int_equal(st.state, OTE_TASK_COMPLETED);

    /* Restart 2, seen by WRITEs (whatever they end with, each is counted by it). */
    restart_target(&t, listen);
    for (int i = 0; i < 3; i++) {
        sub = one(e, seg, OTE_OP_WRITE, local, t.addr[0], 4096, &tally, &st);
        printf("write after restart 2: submit %s, task %s\n", ote_status_string(sub),
               ote_status_string(st.error));
    }
    /* The restart is known by now, or found by the reopen below: once either way. */
    assert_int_equal(ote_segment_reopen(seg, &restarted), OTE_OK);
    assert_int_equal(restarted, 1);
    restarts++;
    assert_true(mp_stat(e, "ote_peer_restarts_total", "") == (double)restarts);

    /* Restart 3, found by a reopen alone. */
    restart_target(&t, listen);
    assert_int_equal(ote_segment_reopen(seg, &restarted), OTE_OK);
    assert_int_equal(restarted, 1);
    restarts++;
    assert_true(mp_stat(e, "ote_peer_restarts_total", "") == (double)restarts);
    /* A reopen that finds the same instance is no restart. */
    assert_int_equal(ote_segment_reopen(seg, &restarted), OTE_OK);
    assert_int_equal(restarted, 0);
    assert_true(mp_stat(e, "ote_peer_restarts_total", "") == (double)restarts);
    notify(e, seg, "on the new instance", &tally, &sent);

    /* The peer gone for good: WRITEs, READs and a notification fail. */
    ote_test_target_kill(&t);
    for (int i = 0; i < 2; i++) {
        sub = one(e, seg, i ? OTE_OP_READ : OTE_OP_WRITE, local, t.addr[0], 8192, &tally, &st);
        printf("to a killed peer: submit %s, task %s %s\n", ote_status_string(sub),
               st.state == OTE_TASK_COMPLETED ? "completed" : "failed",
               ote_status_string(st.error));
        if (sub == OTE_OK)
            assert_int_not_equal(st.state, OTE_TASK_COMPLETED);
    }
    notify(e, seg, "to no one", &tally, &sent);
    check_failures(e, &tally);
    assert_true(mp_stat(e, "ote_notifications_sent_total", "") == (double)sent);
    assert_true(mp_stat(e, "ote_peer_restarts_total", "") == (double)restarts);

    ote_segment_close(seg);
    ote_mem_free(e, mem);
    ote_engine_destroy(e);
    unsetenv("OTE_TLS");
    unsetenv("OTE_XFER_TIMEOUT_MS");
}

/* A notification after a batch whose task failed: counted once, with the status it ended with. */
/* The pair most tests use: a target with one 1 MiB region over tcp, an engine, 1 MiB of its memory, the open segment. */
typedef mp_fx_t pair_t;

static void pair_start(pair_t *p)
{
    const char *args[] = {"--region", "1m:rw", NULL};

    setenv("OTE_TLS", "tcp", 1);
    mp_fx_start(p, args, 1 << 20);
}

/* seg NULL: the test closed it (mp_fx_stop's close of NULL does nothing). */
static void pair_stop(pair_t *p)
{
    mp_fx_stop(p, false);
    unsetenv("OTE_TLS");
}

static void test_batch_notification_failure(void **state)
{
    pair_t p;
    ote_xfer_req_t r[2];
    ote_batch_h b;
    ote_status_t ns = OTE_INPROGRESS;
    ote_task_status_t st;
    tally_t tally = {0};
    size_t first;

    (void)state;
    pair_start(&p);
    r[0] = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = p.local, .segment = p.seg,
                            .remote_addr = p.t.addr[0], .length = 4096};
    r[1] = r[0];
    r[1].remote_addr = p.t.addr[0] + (1 << 20) - 100; /* past the end */
    for (int k = 0; k < 2; k++) {
        assert_int_equal(ote_batch_create(p.e, 2, &b), OTE_OK);
        assert_int_equal(ote_batch_submit_notify(b, r, 2, "done", 4, &first), OTE_OK);
        assert_int_equal(ote_batch_wait(b, 30000), OTE_OK);
        for (size_t i = 0; i < 2; i++) {
            assert_int_equal(ote_batch_task_status(b, first + i, &st), OTE_OK);
            if (st.state != OTE_TASK_COMPLETED)
                tally_status(tally.xfer[1], st.error);
        }
        for (int i = 0; i < 3000; i++) {
            assert_int_equal(ote_batch_notify_status(b, first, &ns), OTE_OK);
            if (ns != OTE_INPROGRESS)
                break;
            usleep(1000);
        }
        assert_int_not_equal(ns, OTE_OK);
        assert_int_not_equal(ns, OTE_INPROGRESS);
        tally_status(tally.notif, ns);
        ote_batch_release(b);
    }
    assert_int_equal(tally.xfer[1][-OTE_ERR_OUT_OF_BOUNDS], 2);
    check_failures(p.e, &tally);
    assert_true(mp_stat(p.e, "ote_notifications_sent_total", "") == 0.0);
    pair_stop(&p);
}

static double registered(ote_engine_h e)
{
    return mp_stat(e, "ote_registered_bytes", "memory=\"host\"");
}

/* Registered bytes and registrations follow register / alloc / deregister / free; segments open / close. */
static void test_registrations_and_segments(void **state)
{
    const char *args[] = {"--region", "1m:rw", NULL};
    ote_test_target_t t;
    ote_engine_h e;
    ote_segment_h seg[3], bad = NULL;
    ote_mem_h m[2], ma, mdup;
    ote_mem_desc_t d[2];
    uint8_t *buf, *abuf;
    char name[300];

    (void)state;
    setenv("OTE_TLS", "tcp", 1);
    assert_int_equal(ote_test_target_start(&t, NULL, args), 0);
    e = ote_test_engine(NULL);
    assert_true(registered(e) == 0.0);
    assert_true(mp_stat(e, "ote_registrations_total", "") == 0.0);
    assert_true(mp_stat(e, "ote_registered_bytes", "memory=\"cuda\"") == 0.0);
    buf = aligned_alloc(4096, 3 << 20);
    assert_non_null(buf);
    d[0] = (ote_mem_desc_t){.addr = buf, .length = 1 << 20};
    d[1] = (ote_mem_desc_t){.addr = buf + (2 << 20), .length = 300000};
    assert_int_equal(ote_mem_register(e, d, 2, m), OTE_OK);
    assert_true(registered(e) == (double)((1 << 20) + 300000));
    assert_true(mp_stat(e, "ote_registrations_total", "") == 2.0);
    assert_int_equal(ote_mem_alloc(e, 65536, NULL, 0, (void **)&abuf, &ma), OTE_OK);
    assert_true(registered(e) == (double)((1 << 20) + 300000 + 65536));
    assert_true(mp_stat(e, "ote_registrations_total", "") == 3.0);
    /* The same range again: a reference on the same region, no new bytes, a registration. */
    assert_int_equal(ote_mem_register(e, d, 1, &mdup), OTE_OK);
    assert_ptr_equal(mdup, m[0]);
    assert_true(registered(e) == (double)((1 << 20) + 300000 + 65536));
    assert_true(mp_stat(e, "ote_registrations_total", "") == 4.0);
    /* Refused calls are no registrations. */
    d[1] = (ote_mem_desc_t){.addr = NULL, .length = 0};
    assert_int_not_equal(ote_mem_register(e, &d[1], 1, &mdup), OTE_OK);
    assert_true(mp_stat(e, "ote_registrations_total", "") == 4.0);
    /* One reference of two gone: the region stays; then the last. */
    assert_int_equal(ote_mem_deregister(e, m[0]), OTE_OK);
    assert_true(registered(e) == (double)((1 << 20) + 300000 + 65536));
    assert_int_equal(ote_mem_deregister(e, m[0]), OTE_OK);
    assert_true(registered(e) == (double)(300000 + 65536));
    assert_int_equal(ote_mem_free(e, ma), OTE_OK);
    assert_true(registered(e) == 300000.0);
    assert_int_equal(ote_mem_deregister(e, m[1]), OTE_OK);
    assert_true(registered(e) == 0.0);
    assert_true(mp_stat(e, "ote_registrations_total", "") == 4.0);

    /* Segments: opened, one open that fails, closed. */
    assert_true(mp_stat(e, "ote_segments_open", "") == 0.0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(ote_segment_open(e, t.name, &seg[i]), OTE_OK);
        assert_true(mp_stat(e, "ote_segments_open", "") == (double)(i + 1));
    }
    snprintf(name, sizeof(name), "127.0.0.1:%u", mp_free_port());
    assert_int_not_equal(ote_segment_open(e, name, &bad), OTE_OK);
    assert_true(mp_stat(e, "ote_segments_open", "") == 3.0);
    assert_int_equal(ote_segment_close(seg[1]), OTE_OK);
    assert_true(mp_stat(e, "ote_segments_open", "") == 2.0);
    assert_int_equal(ote_segment_close(seg[0]), OTE_OK);
    assert_int_equal(ote_segment_close(seg[2]), OTE_OK);
    assert_true(mp_stat(e, "ote_segments_open", "") == 0.0);
    ote_engine_destroy(e);
    free(buf);
    ote_test_target_stop(&t);
    unsetenv("OTE_TLS");
}

/*
 * Submits refused for OTE_MAX_INFLIGHT_BYTES: the target stopped (SIGSTOP)
 * holds the first WRITE in flight, so that every later one is refused
 * until it is let go on.
 */
static void test_admission_bytes(void **state)
{
    pair_t p;
    ote_xfer_req_t r;
    ote_batch_h b;
    ote_task_status_t st;
    size_t first;
    unsigned long busy = 0, ok = 0;

    (void)state;
    setenv("OTE_MAX_INFLIGHT_BYTES", "65536", 1);
    pair_start(&p);
    unsetenv("OTE_MAX_INFLIGHT_BYTES");
    r = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = p.local, .segment = p.seg,
                         .remote_addr = p.t.addr[0], .length = 40000};
    assert_int_equal(ote_batch_create(p.e, 64, &b), OTE_OK);
    mp_stop_process(p.t.pid); /* stopped indeed before the first WRITE */
    assert_int_equal(ote_batch_submit(b, &r, 1, &first), OTE_OK);
    ok++;
    for (int i = 0; i < 5; i++) {
        ote_status_t s = ote_batch_submit(b, &r, 1, &first);

        printf("admission: submit %d while stopped: %s\n", i, ote_status_string(s));
        assert_true(s == OTE_OK || s == OTE_ERR_BUSY);
        busy += s == OTE_ERR_BUSY;
        ok += s == OTE_OK;
    }
    assert_true(busy > 0);
    assert_true(mp_stat(p.e, "ote_admission_rejections_total", "") == (double)busy);
    assert_true(mp_stat(p.e, "ote_inflight_requests", "") == (double)ok);
    assert_true(mp_stat(p.e, "ote_inflight_bytes", "") == (double)(ok * 40000));
    assert_int_equal(kill(p.t.pid, SIGCONT), 0);
    assert_int_equal(ote_batch_wait(b, 30000), OTE_OK);
    for (size_t i = 0; i < ok; i++) {
        assert_int_equal(ote_batch_task_status(b, i, &st), OTE_OK);
        assert_int_equal(st.state, OTE_TASK_COMPLETED);
    }
    ote_batch_release(b);
    assert_true(mp_stat(p.e, "ote_admission_rejections_total", "") == (double)busy);
    assert_true(mp_stat(p.e, "ote_transfer_requests_total", "op=\"write\",transport=\"tcp\"") ==
                (double)ok);
    assert_true(mp_stat(p.e, "ote_transfer_bytes_total", "op=\"write\",transport=\"tcp\"") ==
                (double)(ok * 40000));
    assert_true(mp_stat(p.e, "ote_inflight_requests", "") == 0.0);
    assert_true(mp_stat(p.e, "ote_inflight_bytes", "") == 0.0);
    pair_stop(&p);
}

/*
 * WRITEs in flight to a stopped target when their segment is closed: each
 * ends with a status (CANCELED as their connections go), counted by it;
 * the rails count no error for a CANCELED slice.
 */
static void test_closed_under_tasks(void **state)
{
    pair_t p;
    ote_xfer_req_t r[8];
    ote_batch_h b;
    ote_task_status_t st;
    tally_t tally = {0};
    size_t first;
    uint64_t transferred = 0;
    double errors0;

    (void)state;
    pair_start(&p);
    errors0 = mp_stat_sum(p.e, "ote_rail_errors_total");
    for (int i = 0; i < 8; i++)
        r[i] = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = p.local + i * 131072,
                                .segment = p.seg, .remote_addr = p.t.addr[0] + i * 131072,
                                .length = 131072};
    assert_int_equal(ote_batch_create(p.e, 8, &b), OTE_OK);
    mp_stop_process(p.t.pid);
    assert_int_equal(ote_batch_submit(b, r, 8, &first), OTE_OK);
    usleep(100 * 1000);
    assert_int_equal(ote_segment_close(p.seg), OTE_OK);
    assert_int_equal(ote_batch_wait(b, 30000), OTE_OK);
    for (size_t i = 0; i < 8; i++) {
        assert_int_equal(ote_batch_task_status(b, first + i, &st), OTE_OK);
        printf("closed under task %zu: %s\n", i,
               st.state == OTE_TASK_COMPLETED ? "completed" : ote_status_string(st.error));
        if (st.state != OTE_TASK_COMPLETED)
            tally_status(tally.xfer[1], st.error);
        transferred += st.transferred;
    }
    ote_batch_release(b);
    assert_true(tally.xfer[1][-OTE_ERR_CANCELED] > 0);
    /* Bytes: what the tasks say arrived, canceled ones included. */
    assert_true(mp_stat(p.e, "ote_transfer_bytes_total", "op=\"write\",transport=\"tcp\"") ==
                (double)transferred);
    check_failures(p.e, &tally);
    /* Every task that did not complete was CANCELED: no rail counts an error. */
    {
        unsigned long failed = 0;

        for (int i = 1; i < MP_NSTATUS; i++)
            failed += tally.xfer[1][i];
        assert_int_equal(failed, tally.xfer[1][-OTE_ERR_CANCELED]);
    }
    assert_true(mp_stat_sum(p.e, "ote_rail_errors_total") == errors0);
    assert_true(mp_stat(p.e, "ote_inflight_requests", "") == 0.0);
    assert_true(mp_stat(p.e, "ote_segments_open", "") == 0.0);
    kill(p.t.pid, SIGCONT);
    p.seg = NULL; /* closed above */
    pair_stop(&p);
}

/*
 * A target that serves READs over uct_tcp by writing them back (PUTBACK)
 * opens a segment to the initiator for it: the engine's own, not one the
 * application opened, so its ote_segments_open stays 0; the WRITEs it made
 * are its transfer bytes, the initiator's READ bytes the same amount.
 */
static void test_putback_target(void **state)
{
    const char *args[] = {"--region", "1m:rw", NULL};
    char maddr[64], *text;
    ote_test_target_t t;
    ote_engine_h e;
    ote_segment_h seg;
    ote_mem_h mem;
    uint8_t *local;
    ote_task_status_t st;
    tally_t tally = {0};
    size_t moved = 0;

    (void)state;
#ifndef HAVE_MHD
    skip();
#endif
    setenv("OTE_TLS", "uct_tcp", 1);
    snprintf(maddr, sizeof(maddr), "127.0.0.1:%u", mp_free_port());
    setenv("OTE_METRICS_ADDR", maddr, 1);
    if (ote_test_target_start(&t, NULL, args) != 0) {
        unsetenv("OTE_METRICS_ADDR");
        unsetenv("OTE_TLS");
        printf("no target over uct_tcp: skipped\n");
        skip();
    }
    unsetenv("OTE_METRICS_ADDR");
    e = ote_test_engine(NULL);
    assert_int_equal(ote_mem_alloc(e, 1 << 20, NULL, 0, (void **)&local, &mem), OTE_OK);
    assert_int_equal(ote_segment_open(e, t.name, &seg), OTE_OK);
    /* The pattern written first (no command: the target's application opens no segment). */
    ote_test_fill(local, 0, 262144, 5);
    assert_int_equal(one(e, seg, OTE_OP_WRITE, local, t.addr[0], 262144, &tally, &st), OTE_OK);
    assert_int_equal(st.state, OTE_TASK_COMPLETED);
    for (size_t len = 100; len <= 262144; len *= 8) {
        memset(local, 0, len);
        assert_int_equal(one(e, seg, OTE_OP_READ, local, t.addr[0], len, &tally, &st), OTE_OK);
        assert_int_equal(st.state, OTE_TASK_COMPLETED);
        assert_int_equal(ote_test_check(local, 0, len, 5), -1);
        moved += len;
    }
    text = mp_http_get(maddr, "/metrics", NULL);
    assert_non_null(text);
    printf("target: segments open %g, written over uct_tcp %g of %zu\n",
           mp_scraped(text, "ote_segments_open{engine=\"%s\"}", t.name),
           mp_scraped(text, "ote_transfer_bytes_total{engine=\"%s\",op=\"write\","
                            "transport=\"uct_tcp\"}", t.name), moved);
    assert_true(mp_stat(e, "ote_transfer_bytes_total", "op=\"read\",transport=\"uct_tcp\"") ==
                (double)moved);
    assert_true(mp_scraped(text, "ote_segments_open{engine=\"%s\"}", t.name) == 0.0);
    assert_true(mp_scraped(text, "ote_transfer_bytes_total{engine=\"%s\",op=\"write\","
                                 "transport=\"uct_tcp\"}", t.name) == (double)moved);
    assert_true(mp_stat(e, "ote_segments_open", "") == 1.0);
    free(text);
    ote_segment_close(seg);
    ote_mem_free(e, mem);
    ote_engine_destroy(e);
    ote_test_target_stop(&t);
    unsetenv("OTE_TLS");
}

/* ---- the catalogue: every series of the list, its type and label keys ---- */

typedef struct {
    const char *family, *type, *keys; /* keys: comma-separated, in order */
    unsigned    seen;
} family_t;

static family_t catalogue[] = {
    {"ote_transfer_bytes_total", "counter", "op,transport", 0},
    {"ote_transfer_requests_total", "counter", "op,transport", 0},
    {"ote_transfer_failures_total", "counter", "op,status", 0},
    {"ote_transfer_latency_seconds", "histogram", "op", 0},
    {"ote_transfer_size_bytes", "histogram", "op", 0},
    {"ote_inflight_requests", "gauge", "", 0},
    {"ote_inflight_bytes", "gauge", "", 0},
    {"ote_rail_bytes_total", "counter", "transport,device", 0},
    {"ote_rail_errors_total", "counter", "transport,device", 0},
    {"ote_rail_state", "gauge", "transport,device", 0},
    {"ote_rail_failovers_total", "counter", "transport,device", 0},
    {"ote_notifications_sent_total", "counter", "", 0},
    {"ote_notifications_received_total", "counter", "", 0},
    {"ote_notification_failures_total", "counter", "status", 0},
    {"ote_registered_bytes", "gauge", "memory", 0},
    {"ote_registrations_total", "counter", "", 0},
    {"ote_segments_open", "gauge", "", 0},
    {"ote_peer_restarts_total", "counter", "", 0},
    {"ote_metadata_requests_total", "counter", "store,result", 0},
    {"ote_admission_rejections_total", "counter", "", 0},
    {"ote_build_info", "gauge", "version,transports", 0},
};

typedef struct {
    const char *peer;    /* a peer's name: no label value may hold it */
    unsigned    bad, lat_buckets;
    double      lat_le[32];
} catalogue_check_t;

/* The label keys of "k1=\"v1\",k2=\"v2\"" into keys ("k1,k2"); 0, or -1 when malformed. */
static int label_keys(const char *labels, char *keys, size_t len, char *le, size_t le_len)
{
    size_t k = 0;

    keys[0] = le[0] = '\0';
    for (const char *p = labels; *p;) {
        const char *eq = strchr(p, '='), *v, *end;

        if (eq == NULL || eq[1] != '"')
            return -1;
        k += (size_t)snprintf(keys + k, len - k, "%s%.*s", k ? "," : "", (int)(eq - p), p);
        v = eq + 2;
        for (end = v; *end && *end != '"'; end++)
            if (*end == '\\' && end[1])
                end++;
        if (*end != '"')
            return -1;
        if (eq - p == 2 && strncmp(p, "le", 2) == 0)
            snprintf(le, le_len, "%.*s", (int)(end - v), v);
        p = end + 1;
        if (*p == ',')
            p++;
        else if (*p)
            return -1;
    }
    return 0;
}

static int catalogue_cb(void *arg, const ote_stat_t *st)
{
    catalogue_check_t *c = arg;
    char family[128], keys[256], le[32], want[256];
    size_t n = strlen(st->name);
    const char *suffix = "";
    family_t *f = NULL;

    snprintf(family, sizeof(family), "%s", st->name);
    if (strcmp(st->type, "histogram") == 0) {
        static const char *const sfx[] = {"_bucket", "_sum", "_count"};

        for (int i = 0; i < 3; i++) {
            size_t m = strlen(sfx[i]);

            if (n > m && strcmp(st->name + n - m, sfx[i]) == 0) {
                family[n - m] = '\0';
                suffix        = sfx[i];
            }
        }
    }
    for (size_t i = 0; i < sizeof(catalogue) / sizeof(catalogue[0]); i++)
        if (strcmp(catalogue[i].family, family) == 0)
            f = &catalogue[i];
    if (f == NULL || strcmp(f->type, st->type) != 0 ||
        label_keys(st->labels, keys, sizeof(keys), le, sizeof(le)) != 0) {
        fprintf(stderr, "unexpected sample %s{%s} (%s)\n", st->name, st->labels, st->type);
        c->bad++;
        return 0;
    }
    snprintf(want, sizeof(want), "%s%s%s", f->keys,
             strcmp(suffix, "_bucket") == 0 && f->keys[0] ? "," : "",
             strcmp(suffix, "_bucket") == 0 ? "le" : "");
    if (strcmp(keys, want) != 0 || (c->peer != NULL && strstr(st->labels, c->peer) != NULL)) {
        fprintf(stderr, "%s{%s}: label keys %s, want %s\n", st->name, st->labels, keys, want);
        c->bad++;
    }
    if (strcmp(family, "ote_transfer_latency_seconds") == 0 && strcmp(suffix, "_bucket") == 0 &&
        strstr(st->labels, "op=\"write\"") != NULL && c->lat_buckets < 32)
        c->lat_le[c->lat_buckets++] = strcmp(le, "+Inf") == 0 ? -1 : strtod(le, NULL);
    if (strcmp(family, "ote_build_info") == 0) {
        char v[64];

        snprintf(v, sizeof(v), "version=\"%s\",", ote_version());
        if (strncmp(st->labels, v, strlen(v)) != 0 || st->value != 1.0)
            c->bad++;
    }
    f->seen++;
    return 0;
}

/*
 * Every series of the list, with its type and exactly its label keys, and
 * nothing else; no label holds a peer's name; the latency buckets are 1 us
 * .. 10 s (1, 2.5, 5 per decade) and +Inf.
 */
static void test_series_catalogue(void **state)
{
    pair_t p;
    ote_task_status_t st;
    tally_t tally = {0};
    catalogue_check_t c = {0};
    double b = 1e-6;

    (void)state;
    pair_start(&p);
    assert_int_equal(one(p.e, p.seg, OTE_OP_WRITE, p.local, p.t.addr[0], 4096, &tally, &st), OTE_OK);
    assert_int_equal(one(p.e, p.seg, OTE_OP_WRITE, p.local, p.t.addr[0] + (1 << 20) - 1, 2, &tally, &st),
                     OTE_OK);
    c.peer = p.t.name;
    assert_int_equal(ote_engine_stats(p.e, catalogue_cb, &c), OTE_OK);
    assert_int_equal(c.bad, 0);
    for (size_t i = 0; i < sizeof(catalogue) / sizeof(catalogue[0]); i++) {
        if (catalogue[i].seen == 0)
            fprintf(stderr, "%s not served\n", catalogue[i].family);
        assert_true(catalogue[i].seen > 0);
    }
    assert_int_equal(c.lat_buckets, 23);
    for (int i = 0; i < 22; i++) {
        static const double m[3] = {1, 2.5, 5};
        double want;

        if (i % 3 == 0 && i > 0)
            b *= 10;
        want = b * m[i % 3];
        if (c.lat_le[i] < want * (1 - 1e-9) || c.lat_le[i] > want * (1 + 1e-9)) {
            fprintf(stderr, "latency bucket %d: le %g, want %g\n", i, c.lat_le[i], want);
            fail();
        }
    }
    assert_true(c.lat_le[21] == 10.0);
    assert_true(c.lat_le[22] == -1);
    pair_stop(&p);
}

/* result label of an open's status */
static int meta_result(ote_status_t s)
{
    return s == OTE_OK ? 0 : s == OTE_ERR_NOT_FOUND ? 1 : 2;
}

static void check_meta(ote_engine_h e, const char *store, const unsigned long want[3])
{
    static const char *const results[3] = {"ok", "not_found", "error"};
    char labels[96];

    for (int i = 0; i < 3; i++) {
        snprintf(labels, sizeof(labels), "store=\"%s\",result=\"%s\"", store, results[i]);
        if (mp_stat(e, "ote_metadata_requests_total", labels) != (double)want[i]) {
            fprintf(stderr, "ote_metadata_requests_total{%s} = %g, opens %lu\n", labels,
                    mp_stat(e, "ote_metadata_requests_total", labels), want[i]);
            fail();
        }
    }
}

/* Opens on the embedded p2p metadata: one fetch each, by its result. */
static void test_metadata_p2p(void **state)
{
    const char *args[] = {"--region", "1m:rw", NULL};
    ote_test_target_t t;
    ote_engine_h e;
    ote_segment_h seg;
    unsigned long want[3] = {0};
    char name[300];
    ote_status_t s;

    (void)state;
    setenv("OTE_TLS", "tcp", 1);
    setenv("OTE_CONNECT_TIMEOUT_MS", "1000", 1);
    assert_int_equal(ote_test_target_start(&t, NULL, args), 0);
    e = ote_test_engine(NULL);
    check_meta(e, "p2p", want);
    for (int i = 0; i < 3; i++) {
        s = ote_segment_open(e, t.name, &seg);
        assert_int_equal(s, OTE_OK);
        want[meta_result(s)]++;
        ote_segment_close(seg);
    }
    /* An address where no engine listens. */
    snprintf(name, sizeof(name), "127.0.0.1:%u", mp_free_port());
    s = ote_segment_open(e, name, &seg);
    printf("open of %s: %s\n", name, ote_status_string(s));
    assert_int_not_equal(s, OTE_OK);
    want[meta_result(s)]++;
    check_meta(e, "p2p", want);
    /* The peer killed under an open segment: its refresh fails. */
    assert_int_equal(ote_segment_open(e, t.name, &seg), OTE_OK);
    want[0]++;
    ote_test_target_kill(&t);
    s = ote_segment_refresh(seg);
    printf("refresh of a killed peer: %s\n", ote_status_string(s));
    assert_int_not_equal(s, OTE_OK);
    want[meta_result(s)]++;
    check_meta(e, "p2p", want);
    ote_segment_close(seg);
    ote_engine_destroy(e);
    unsetenv("OTE_TLS");
    unsetenv("OTE_CONNECT_TIMEOUT_MS");
}

/* One store kind (*state, see OTE_TEST_CASE). */
static void metadata_store(void **state)
{
    const char *kind = *state;
    ote_test_store_t store;
    ote_test_target_t t;
    ote_engine_params_t p = {.listen_addr = "127.0.0.1:0"};
    ote_engine_h e = NULL;
    ote_segment_h seg;
    unsigned long want[3] = {0};
    char tname[64], ename[64];
    const char *args[] = {"--name", tname, "--metadata", NULL, "--region", "1m:rw", NULL};
    ote_status_t s;
    int rc = ote_test_store_start(&store, kind, NULL);

    if (rc == 77) {
        printf("%s not installed: this case is skipped\n", kind);
        skip();
    }
    assert_int_equal(rc, 0);
    setenv("OTE_METADATA_TIMEOUT_MS", "1000", 1);
    snprintf(tname, sizeof(tname), "obs-%s-target-%d", kind, (int)getpid());
    snprintf(ename, sizeof(ename), "obs-%s-initiator-%d", kind, (int)getpid());
    args[3] = store.uri;
    assert_int_equal(ote_test_target_start(&t, NULL, args), 0);
    p.name     = ename;
    p.metadata = store.uri;
    assert_int_equal(ote_engine_create(&p, &e), OTE_OK);
    check_meta(e, kind, want);
    for (int i = 0; i < 2; i++) {
        s = ote_segment_open(e, tname, &seg);
        assert_int_equal(s, OTE_OK);
        want[0]++;
        ote_segment_close(seg);
    }
    s = ote_segment_open(e, "obs-no-such-engine", &seg);
    assert_int_equal(s, OTE_ERR_NOT_FOUND);
    want[1]++;
    check_meta(e, kind, want);
    /* The store gone: an open and a refresh fail with its status. */
    assert_int_equal(ote_segment_open(e, tname, &seg), OTE_OK);
    want[0]++;
    ote_test_store_kill(&store);
    s = ote_segment_open(e, tname, &seg);
    printf("%s killed: open %s\n", kind, ote_status_string(s));
    assert_int_equal(s, OTE_ERR_STORE_UNAVAILABLE);
    want[2]++;
    check_meta(e, kind, want);
    ote_engine_destroy(e);
    ote_test_target_kill(&t);
    ote_test_store_stop(&store);
    unsetenv("OTE_METADATA_TIMEOUT_MS");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_series_catalogue),
        cmocka_unit_test(test_restarts_and_failures),
        cmocka_unit_test(test_batch_notification_failure),
        cmocka_unit_test(test_registrations_and_segments),
        cmocka_unit_test(test_admission_bytes),
        cmocka_unit_test(test_closed_under_tasks),
        cmocka_unit_test(test_putback_target),
        cmocka_unit_test(test_metadata_p2p),
        OTE_TEST_CASE(metadata_store, "etcd"),
        OTE_TEST_CASE(metadata_store, "redis"),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
