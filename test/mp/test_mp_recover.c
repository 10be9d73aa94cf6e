/*
 * Recovery after a timeout: a target stopped (SIGSTOP) past a short
 * OTE_XFER_TIMEOUT_MS makes the writes in flight end TIMEOUT; once it runs
 * again (SIGCONT), writes and reads on the same segment succeed with the
 * right bytes, with and without an ote_segment_refresh() in between. The
 * native tcp and cma connect again by themselves at the next submit; UCT's
 * failed eps are rebuilt by ote_segment_refresh(), the documented recovery
 * call. A target restarted on the same name yields OTE_ERR_PEER_RESTARTED,
 * never success, and nothing reaches the new instance.
 *
 * The transport is the one OTE_TLS names (see the *_mp_recover.sh wrappers).
 */
#include "mp_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#define TIMEOUT_MS "1000"
#define REQ        (64u << 10)
/* Writes in flight while the target is stopped: every tcp connection gets some. */
#define NSTOPPED   4
#define REGION     "4m:rw"

typedef struct {
    bool native;      /* tcp or cma: connects again by itself        */
    bool has_get;     /* uct_tcp has no READ                         */
    bool stop_blocks; /* uct_cma copies from a stopped process anyway */
} tl_traits_t;

static tl_traits_t traits(void)
{
    const char *tls = getenv("OTE_TLS");
    tl_traits_t t   = {.native = true, .has_get = true, .stop_blocks = true};

    assert_non_null(tls); /* run by the *_mp_recover.sh wrappers */
    if (strcmp(tls, "uct_tcp") == 0) {
        t.native  = false;
        t.has_get = false;
    } else if (strcmp(tls, "uct_cma") == 0) {
        t.native      = false;
        t.stop_blocks = false;
    } else {
        assert_true(strcmp(tls, "tcp") == 0 || strcmp(tls, "cma") == 0);
    }
    return t;
}

/* n requests of REQ bytes, local + i*REQ <-> remote + i*REQ; waits for them. */
static ote_status_t xfer(ote_engine_h e, ote_op_t op, ote_segment_h seg, uint8_t *local,
                         uint64_t remote, size_t n, ote_task_status_t *st)
{
    ote_xfer_req_t r[NSTOPPED];
    ote_batch_h b;
    size_t first;
    ote_status_t sub;

    assert_true(n <= NSTOPPED);
    for (size_t i = 0; i < n; i++)
        r[i] = (ote_xfer_req_t){.op = op, .local_addr = local + i * REQ, .segment = seg,
                                .remote_addr = remote + i * REQ, .length = REQ};
    assert_int_equal(ote_batch_create(e, n, &b), OTE_OK);
    sub = ote_batch_submit(b, r, n, &first);
    if (sub == OTE_OK) {
        /* Bounded: OTE_XFER_TIMEOUT_MS plus the time a reconnect may take. */
        assert_int_equal(ote_batch_wait(b, 20000), OTE_OK);
        for (size_t i = 0; i < n; i++)
            assert_int_equal(ote_batch_task_status(b, first + i, &st[i]), OTE_OK);
    }
    ote_batch_release(b);
    return sub;
}

/* WRITE pattern seed to remote+off, READ it back (where the transport can), check both ends. */
static void write_read_verify(ote_engine_h e, ote_segment_h seg, uint8_t *local,
                              const ote_test_target_t *t, uint64_t off, uint64_t seed,
                              const tl_traits_t *tr)
{
    ote_task_status_t st[1];
    char cmd[128];

    ote_test_fill(local, off, REQ, seed);
    assert_int_equal(xfer(e, OTE_OP_WRITE, seg, local, t->addr[0] + off, 1, st), OTE_OK);
    assert_int_equal(st[0].state, OTE_TASK_COMPLETED);
    assert_int_equal(st[0].transferred, REQ);
    snprintf(cmd, sizeof(cmd), "check 0 %llu %u %llu", (unsigned long long)off, REQ,
             (unsigned long long)seed);
    assert_int_equal(ote_test_target_expect(e, seg, cmd, "ok", 10000), 0);
    if (!tr->has_get)
        return;
    memset(local + REQ, 0, REQ);
    assert_int_equal(xfer(e, OTE_OP_READ, seg, local + REQ, t->addr[0] + off, 1, st), OTE_OK);
    assert_int_equal(st[0].state, OTE_TASK_COMPLETED);
    assert_int_equal(ote_test_check(local + REQ, off, REQ, seed), -1);
}

typedef struct {
    ote_engine_h      e;
    ote_test_target_t t;
    ote_segment_h     seg;
    uint8_t          *local;
    ote_mem_h         mem;
    char              listen[64];
} fixture_t;

static void fixture_start(fixture_t *f)
{
    const char *args[] = {"--listen", f->listen, "--region", REGION, NULL};

    setenv("OTE_XFER_TIMEOUT_MS", TIMEOUT_MS, 1);
    snprintf(f->listen, sizeof(f->listen), "127.0.0.1:%u", mp_free_port());
    assert_int_equal(ote_test_target_start(&f->t, NULL, args), 0);
    f->e = ote_test_engine(NULL);
    assert_int_equal(ote_mem_alloc(f->e, 2 * NSTOPPED * REQ, NULL, 0, (void **)&f->local,
                                   &f->mem),
                     OTE_OK);
    assert_int_equal(ote_segment_open(f->e, f->t.name, &f->seg), OTE_OK);
}

static void fixture_stop(fixture_t *f)
{
    ote_segment_close(f->seg);
    ote_mem_free(f->e, f->mem);
    ote_engine_destroy(f->e);
    ote_test_target_stop(&f->t);
    unsetenv("OTE_XFER_TIMEOUT_MS");
}

/*
 * Stop the target, write NSTOPPED requests (they end TIMEOUT where the
 * transport needs the target), resume it.
 */
static void stall(fixture_t *f, const tl_traits_t *tr)
{
    ote_task_status_t st[NSTOPPED];

    for (size_t i = 0; i < NSTOPPED; i++)
        ote_test_fill(f->local + i * REQ, 0, REQ, 100 + i);
    assert_int_equal(kill(f->t.pid, SIGSTOP), 0);
    {
        int ws;

        /* kill() returns before every thread stopped: wait for the group stop. */
        assert_int_equal(waitpid(f->t.pid, &ws, WUNTRACED), f->t.pid);
        assert_true(WIFSTOPPED(ws));
    }
    /* The last 1 MiB of the region: the writes below never overlap these. */
    assert_int_equal(xfer(f->e, OTE_OP_WRITE, f->seg, f->local, f->t.addr[0] + (3u << 20),
                          NSTOPPED, st),
                     OTE_OK);
    for (size_t i = 0; i < NSTOPPED; i++) {
        if (tr->stop_blocks) {
            assert_int_equal(st[i].state, OTE_TASK_TIMEOUT);
            assert_int_equal(st[i].error, OTE_ERR_TIMEOUT);
        } else {
            /* UCT cma copies from a stopped process's memory: nothing to time out. */
            assert_int_equal(st[i].state, OTE_TASK_COMPLETED);
        }
    }
    assert_int_equal(kill(f->t.pid, SIGCONT), 0);
}

/* A fixture whose peer answered once and then stopped until its requests timed out. */
static void fixture_start_stalled(fixture_t *f, const tl_traits_t *tr)
{
    fixture_start(f);
    write_read_verify(f->e, f->seg, f->local, &f->t, 0, 1, tr);
    stall(f, tr);
}

/* No call in between: the next requests find the peer again. */
static void test_resume_no_refresh(void **state)
{
    tl_traits_t tr = traits();
    fixture_t f;

    (void)state;
    fixture_start_stalled(&f, &tr);
    if (!tr.native && tr.stop_blocks) {
        ote_task_status_t st[1];

        /* UCT: the failed ep stays failed until ote_segment_refresh() rebuilds it. */
        ote_test_fill(f.local, 0, REQ, 2);
        assert_int_equal(xfer(f.e, OTE_OP_WRITE, f.seg, f.local, f.t.addr[0], 1, st), OTE_OK);
        assert_int_equal(st[0].state, OTE_TASK_TIMEOUT);
        assert_int_equal(st[0].error, OTE_ERR_TIMEOUT);
        assert_int_equal(ote_segment_refresh(f.seg), OTE_OK);
    }
    for (uint64_t round = 0; round < 3; round++)
        write_read_verify(f.e, f.seg, f.local, &f.t, round * REQ, 10 + round, &tr);
    fixture_stop(&f);
}

/* ote_segment_refresh() in between returns OK only with every rail usable. */
static void test_resume_refresh(void **state)
{
    tl_traits_t tr = traits();
    fixture_t f;

    (void)state;
    fixture_start_stalled(&f, &tr);
    assert_int_equal(ote_segment_refresh(f.seg), OTE_OK);
    for (uint64_t round = 0; round < 3; round++)
        write_read_verify(f.e, f.seg, f.local, &f.t, round * REQ, 20 + round, &tr);
    /* Twice in a row: a second stop recovers as the first did. */
    stall(&f, &tr);
    assert_int_equal(ote_segment_refresh(f.seg), OTE_OK);
    write_read_verify(f.e, f.seg, f.local, &f.t, 2 * REQ, 30, &tr);
    fixture_stop(&f);
}

/*
 * Requests that ended TIMEOUT are never served later: once the stopped
 * target runs again, a READ that timed out writes nothing into the
 * initiator's buffer (which its owner has taken back), and a WRITE that
 * timed out changes nothing in the target's region. (A local socket does
 * not reset when the initiator closes it: the target still reads what was
 * queued there, and must drop it.) Likewise WRITEs queued to a stopped
 * target when the segment is closed (they end CANCELED).
 */
static void test_timed_out_never_lands(void **state)
{
    tl_traits_t tr = traits();
    ote_task_status_t st[NSTOPPED];
    uint8_t *rd;
    fixture_t f;
    int ws;

    (void)state;
    if (!tr.native)
        skip(); /* UCT's eps: their own way (stop_blocks, refresh) */
    fixture_start(&f);
    rd = f.local + NSTOPPED * REQ;
    mp_target_ok(f.e, f.seg, "fill 0 %u %u 900", 3u << 20, NSTOPPED * REQ);
    assert_int_equal(kill(f.t.pid, SIGSTOP), 0);
    assert_int_equal(waitpid(f.t.pid, &ws, WUNTRACED), f.t.pid);
    assert_true(WIFSTOPPED(ws));
    for (size_t i = 0; i < NSTOPPED; i++)
        ote_test_fill(f.local + i * REQ, 0, REQ, 200 + i);
    assert_int_equal(xfer(f.e, OTE_OP_WRITE, f.seg, f.local, f.t.addr[0] + (3u << 20),
                          NSTOPPED, st),
                     OTE_OK);
    for (size_t i = 0; i < NSTOPPED; i++)
        assert_int_equal(st[i].state, OTE_TASK_TIMEOUT);
    assert_int_equal(xfer(f.e, OTE_OP_READ, f.seg, rd, f.t.addr[0] + (3u << 20), NSTOPPED, st),
                     OTE_OK);
    for (size_t i = 0; i < NSTOPPED; i++)
        assert_int_equal(st[i].state, OTE_TASK_TIMEOUT);
    memset(rd, 0xee, NSTOPPED * REQ);
    assert_int_equal(kill(f.t.pid, SIGCONT), 0);
    usleep(500 * 1000); /* the target reads what was queued for it */
    for (size_t i = 0; i < NSTOPPED * REQ; i++) {
        if (rd[i] != 0xee)
            fail_msg("byte %zu of a READ that timed out was written after it ended", i);
    }
    mp_target_ok(f.e, f.seg, "check 0 %u %u 900", 3u << 20, NSTOPPED * REQ);

    /* Closed with WRITEs queued (they end CANCELED): nothing of them lands either. */
    write_read_verify(f.e, f.seg, f.local, &f.t, 0, 3, &tr); /* connected again */
    for (size_t i = 0; i < NSTOPPED; i++)
        ote_test_fill(f.local + i * REQ, 0, REQ, 300 + i);
    assert_int_equal(kill(f.t.pid, SIGSTOP), 0);
    assert_int_equal(waitpid(f.t.pid, &ws, WUNTRACED), f.t.pid);
    {
        ote_xfer_req_t r[NSTOPPED];
        ote_batch_h b;
        size_t first;

        for (size_t i = 0; i < NSTOPPED; i++)
            r[i] = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = f.local + i * REQ,
                                    .segment = f.seg,
                                    .remote_addr = f.t.addr[0] + (3u << 20) + i * REQ,
                                    .length = REQ};
        assert_int_equal(ote_batch_create(f.e, NSTOPPED, &b), OTE_OK);
        assert_int_equal(ote_batch_submit(b, r, NSTOPPED, &first), OTE_OK);
        usleep(100 * 1000);
        assert_int_equal(ote_segment_close(f.seg), OTE_OK);
        assert_int_equal(ote_batch_wait(b, 20000), OTE_OK);
        for (size_t i = 0; i < NSTOPPED; i++) {
            assert_int_equal(ote_batch_task_status(b, first + i, &st[i]), OTE_OK);
            assert_int_not_equal(st[i].state, OTE_TASK_COMPLETED);
        }
        ote_batch_release(b);
    }
    assert_int_equal(kill(f.t.pid, SIGCONT), 0);
    usleep(500 * 1000);
    assert_int_equal(ote_segment_open(f.e, f.t.name, &f.seg), OTE_OK);
    mp_target_ok(f.e, f.seg, "check 0 %u %u 900", 3u << 20, NSTOPPED * REQ);
    fixture_stop(&f);
}

/* A target restarted on the same name after a timeout: never success, nothing reaches it. */
static void test_restarted_peer(void **state)
{
    tl_traits_t tr = traits();
    const char *args[6];
    ote_test_target_t t2;
    ote_task_status_t st[1];
    ote_status_t sub;
    char reply[64], want[64];
    uint8_t zero[REQ];
    fixture_t f;

    (void)state;
    fixture_start_stalled(&f, &tr);
    ote_test_target_kill(&f.t);
    args[0] = "--listen";
    args[1] = f.listen;
    args[2] = "--region";
    args[3] = REGION;
    args[4] = NULL;
    assert_int_equal(ote_test_target_start(&t2, NULL, args), 0);
    assert_string_equal(t2.name, f.t.name);

    ote_test_fill(f.local, 0, REQ, 40);
    sub = xfer(f.e, OTE_OP_WRITE, f.seg, f.local, t2.addr[0], 1, st);
    if (tr.native) {
        /* The reconnect finds another instance behind the name: refused at submit. */
        assert_int_equal(sub, OTE_ERR_PEER_RESTARTED);
    } else if (sub == OTE_OK) {
        /* UCT: the old ep fails; ote_segment_refresh() then tells why. */
        assert_int_not_equal(st[0].state, OTE_TASK_COMPLETED);
        assert_int_equal(ote_segment_refresh(f.seg), OTE_ERR_PEER_RESTARTED);
        sub = xfer(f.e, OTE_OP_WRITE, f.seg, f.local, t2.addr[0], 1, st);
        assert_int_equal(sub, OTE_ERR_PEER_RESTARTED);
    } else {
        assert_int_equal(sub, OTE_ERR_PEER_RESTARTED);
    }
    assert_int_equal(ote_segment_refresh(f.seg), OTE_ERR_PEER_RESTARTED);
    if (tr.has_get)
        assert_int_equal(xfer(f.e, OTE_OP_READ, f.seg, f.local, t2.addr[0], 1, st),
                         OTE_ERR_PEER_RESTARTED);

    /* Nothing reached the new instance: its region is as it started. */
    {
        int restarted = -1;

        assert_int_equal(ote_segment_reopen(f.seg, &restarted), OTE_OK);
        assert_int_equal(restarted, 1);
    }
    memset(zero, 0, sizeof(zero));
    assert_int_equal(ote_test_target_cmd(f.e, f.seg, "sum 0 0 65536", reply, sizeof(reply),
                                         10000),
                     0);
    snprintf(want, sizeof(want), "sum %016llx",
             (unsigned long long)ote_test_hash(zero, sizeof(zero)));
    assert_string_equal(reply, want);
    /* Bound to the new instance, the segment carries data again. */
    write_read_verify(f.e, f.seg, f.local, &t2, 0, 41, &tr);
    f.t = t2;
    fixture_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resume_no_refresh),
        cmocka_unit_test(test_resume_refresh),
        cmocka_unit_test(test_restarted_peer),
        cmocka_unit_test(test_timed_out_never_lands),
    };

    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
