/*
 * A peer that dies while idle: the target is killed (SIGKILL) with no
 * request in flight, and the initiator keeps submitting on the segment it
 * has open, many requests at once right after the kill and then one batch
 * after another. Every task ends REMOTE_DISCONNECT or TIMEOUT: never
 * UNREACHABLE (which says that no configured transport reaches both
 * memories), never COMPLETED. Once a new instance listens under the same
 * address, the submissions end PEER_RESTARTED (at submit or as the tasks'
 * status); ote_segment_reopen() binds the segment to the new instance,
 * which no byte of the old handle's reached, and data moves again. While
 * it is dead, notifications, refreshes and reopens fail REMOTE_DISCONNECT.
 *
 * Run once per transport: tcp, cma and shm (native), uct_tcp (UCX's tcp,
 * where the build has UCX).
 */
#include "mp_util.h"

#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define REQ        4096u
#define PER_BATCH  4u
/* Batches submitted back to back right after the kill, before any is waited for. */
#define BURST      64u
/* Then batches one at a time. */
#define ROUNDS     40u
/* Rounds allowed for the restart to be seen (each waits for its batch, then 20 ms). */
#define SEE_ROUNDS 250u

typedef struct {
    size_t disconnect, timeout, restarted, submit_refused;
} tally_t;

/* True for the ends a task may have while the peer is dead. */
static bool dead_end(const ote_task_status_t *st)
{
    return (st->state == OTE_TASK_FAILED && st->error == OTE_ERR_REMOTE_DISCONNECT) ||
           (st->state == OTE_TASK_TIMEOUT && st->error == OTE_ERR_TIMEOUT);
}

static void submit_batch(ote_engine_h e, ote_segment_h seg, uint8_t *local, uint64_t remote,
                         ote_batch_h *b_p, ote_status_t *sub_p)
{
    ote_xfer_req_t r[PER_BATCH];
    size_t first;

    for (size_t i = 0; i < PER_BATCH; i++)
        r[i] = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = local + i * REQ,
                                .segment = seg, .remote_addr = remote + i * REQ,
                                .length = REQ};
    assert_int_equal(ote_batch_create(e, PER_BATCH, b_p), OTE_OK);
    *sub_p = ote_batch_submit(*b_p, r, PER_BATCH, &first);
    if (*sub_p == OTE_OK)
        assert_int_equal(first, 0);
}

/*
 * Wait for b (submitted with sub) and count how its tasks ended; restarted:
 * the new instance may be running, and PEER_RESTARTED is an allowed end.
 */
static void judge(ote_batch_h b, ote_status_t sub, bool restarted, tally_t *t)
{
    if (sub != OTE_OK) {
        if (sub == OTE_ERR_PEER_RESTARTED && restarted) {
            t->restarted++;
        } else {
            /* A submit may be refused only with what a task would end with. */
            if (sub != OTE_ERR_REMOTE_DISCONNECT && sub != OTE_ERR_TIMEOUT)
                fail_msg("submit on the dead peer's segment: %s (%d)", ote_status_string(sub),
                         (int)sub);
            t->submit_refused++;
        }
        ote_batch_release(b);
        return;
    }
    assert_int_equal(ote_batch_wait(b, 60000), OTE_OK);
    for (size_t i = 0; i < PER_BATCH; i++) {
        ote_task_status_t st;

        assert_int_equal(ote_batch_task_status(b, i, &st), OTE_OK);
        if (restarted && st.state == OTE_TASK_FAILED && st.error == OTE_ERR_PEER_RESTARTED) {
            t->restarted++;
            continue;
        }
        if (!dead_end(&st))
            fail_msg("task %zu on the dead peer's segment ended state %d: %s (%d)", i,
                     (int)st.state, ote_status_string(st.error), (int)st.error);
        assert_true(st.transferred < REQ);
        if (st.error == OTE_ERR_TIMEOUT)
            t->timeout++;
        else
            t->disconnect++;
    }
    ote_batch_release(b);
}

/* A batch of PER_BATCH WRITEs to remote: every task completes, with REQ bytes. */
static void batch_completes(ote_engine_h e, ote_segment_h seg, uint8_t *local, uint64_t remote)
{
    ote_batch_h b;
    ote_status_t sub;

    submit_batch(e, seg, local, remote, &b, &sub);
    assert_int_equal(sub, OTE_OK);
    assert_int_equal(ote_batch_wait(b, 20000), OTE_OK);
    for (size_t i = 0; i < PER_BATCH; i++) {
        ote_task_status_t st;

        assert_int_equal(ote_batch_task_status(b, i, &st), OTE_OK);
        assert_int_equal(st.state, OTE_TASK_COMPLETED);
        assert_int_equal(st.transferred, REQ);
    }
    ote_batch_release(b);
}

/* One transport list (*state, see OTE_TEST_CASE). */
static void dead_peer_case(void **state)
{
    const char *tls = *state;
    char listen[64];
    const char *args[] = {"--listen", listen, "--region", "1m:rw", NULL};
    ote_test_target_t t1, t2;
    ote_engine_h e;
    ote_segment_h seg;
    ote_mem_h mem;
    uint8_t *local;
    ote_batch_h burst[BURST];
    ote_status_t burst_sub[BURST];
    tally_t dead = {0}, after = {0};
    char reply[64], want[64];
    int restarted = -1;

#ifndef HAVE_UCX
    if (strncmp(tls, "uct_", 4) == 0)
        skip(); /* built without UCX */
#endif

    setenv("OTE_TLS", tls, 1);
    snprintf(listen, sizeof(listen), "127.0.0.1:%u", mp_free_port());
    assert_int_equal(ote_test_target_start(&t1, NULL, args), 0);
    e = ote_test_engine(NULL);
    assert_int_equal(ote_mem_alloc(e, PER_BATCH * REQ, NULL, 0, (void **)&local, &mem), OTE_OK);
    assert_int_equal(ote_segment_open(e, t1.name, &seg), OTE_OK);
    /* The segment carries data, then stays idle while its peer dies. */
    ote_test_fill(local, 0, PER_BATCH * REQ, 7);
    batch_completes(e, seg, local, t1.addr[0]);
    assert_int_equal(ote_test_target_expect(e, seg, "check 0 0 16384 7", "ok", 10000), 0);
    usleep(50 * 1000);
    ote_test_target_kill(&t1);

    /* At once: many submissions before the first failure is known. */
    for (size_t i = 0; i < BURST; i++)
        submit_batch(e, seg, local, t1.addr[0], &burst[i], &burst_sub[i]);
    for (size_t i = 0; i < BURST; i++)
        judge(burst[i], burst_sub[i], false, &dead);
    /* Then one batch after another, as a user who keeps trying. */
    for (size_t i = 0; i < ROUNDS; i++) {
        ote_batch_h b;
        ote_status_t sub;

        submit_batch(e, seg, local, t1.addr[0], &b, &sub);
        judge(b, sub, false, &dead);
        if (i % 8 == 7)
            usleep(20 * 1000);
    }
    printf("# %s: dead peer: %zu tasks REMOTE_DISCONNECT, %zu TIMEOUT, %zu submits refused\n",
           tls, dead.disconnect, dead.timeout, dead.submit_refused);
    assert_int_equal(dead.disconnect + dead.timeout + dead.submit_refused * PER_BATCH,
                     (BURST + ROUNDS) * PER_BATCH);

    /*
     * The calls that ask the peer's control listener, which refuses now:
     * REMOTE_DISCONNECT as the tasks (NOT_FOUND, "no such segment or
     * peer", before), the segment still bound to the dead instance.
     */
    {
        ote_notify_msg_t m[2] = {{.data = "a", .length = 1}, {.data = "b", .length = 1}};
        ote_status_t ms[2];

        assert_int_equal(ote_notify_send(e, seg, "n", 1), OTE_ERR_REMOTE_DISCONNECT);
        assert_int_equal(ote_notify_send_many(e, seg, m, 2, ms), OTE_ERR_REMOTE_DISCONNECT);
        assert_int_equal(ms[0], OTE_ERR_REMOTE_DISCONNECT);
        assert_int_equal(ms[1], OTE_ERR_REMOTE_DISCONNECT);
        assert_int_equal(ote_segment_refresh(seg), OTE_ERR_REMOTE_DISCONNECT);
        assert_int_equal(ote_segment_reopen(seg, &restarted), OTE_ERR_REMOTE_DISCONNECT);
    }

    /* A new instance under the same address: the segment says so. */
    assert_int_equal(ote_test_target_start(&t2, NULL, args), 0);
    assert_string_equal(t1.name, t2.name);
    for (size_t i = 0; i < SEE_ROUNDS && after.restarted == 0; i++) {
        ote_batch_h b;
        ote_status_t sub;

        submit_batch(e, seg, local, t1.addr[0], &b, &sub);
        judge(b, sub, true, &after);
        if (after.restarted == 0)
            usleep(20 * 1000);
    }
    printf("# %s: after the restart: %zu tasks REMOTE_DISCONNECT, %zu TIMEOUT, then "
           "PEER_RESTARTED\n",
           tls, after.disconnect, after.timeout);
    assert_true(after.restarted > 0);
    assert_int_equal(ote_segment_refresh(seg), OTE_ERR_PEER_RESTARTED);

    assert_int_equal(ote_segment_reopen(seg, &restarted), OTE_OK);
    assert_int_equal(restarted, 1);
    /* Nothing of the old handle's reached the new instance. */
    {
        uint8_t zero[PER_BATCH * REQ];

        memset(zero, 0, sizeof(zero));
        assert_int_equal(ote_test_target_cmd(e, seg, "sum 0 0 16384", reply, sizeof(reply),
                                             10000),
                         0);
        snprintf(want, sizeof(want), "sum %016llx",
                 (unsigned long long)ote_test_hash(zero, sizeof(zero)));
        assert_string_equal(reply, want);
    }
    /* Bound to the new instance, the segment carries data again. */
    ote_test_fill(local, 0, PER_BATCH * REQ, 8);
    batch_completes(e, seg, local, t2.addr[0]);
    assert_int_equal(ote_test_target_expect(e, seg, "check 0 0 16384 8", "ok", 10000), 0);

    ote_segment_close(seg);
    ote_mem_free(e, mem);
    ote_engine_destroy(e);
    ote_test_target_stop(&t2);
    unsetenv("OTE_TLS");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        OTE_TEST_CASE(dead_peer_case, "tcp"),
        OTE_TEST_CASE(dead_peer_case, "cma"),
        /* The native shm component, not the alias. */
        OTE_TEST_CASE(dead_peer_case, "\\shm"),
        OTE_TEST_CASE(dead_peer_case, "uct_tcp"),
    };

    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
