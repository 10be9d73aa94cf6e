/*
 * Notifications: each arrives exactly once, and one sent with a batch
 * arrives after the data of that batch. The target treats notifications as
 * commands: "check ..." verifies its memory the moment the message is
 * handled, so an "ok" proves the data was there first.
 */
#include "mp_util.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define ROUNDS 40
#define CHUNK  (1ul << 20)
#define PIECES 8

static void test_notify_after_data_exactly_once(void **state)
{
    static const char *const args[] = {"--region", "64m:rw", NULL};
    mp_fx_t f;
    int oks = 0, others = 0;

    mp_fx_start(&f, args, CHUNK * PIECES);

    for (int r = 0; r < ROUNDS; r++) {
        ote_xfer_req_t reqs[PIECES];
        uint64_t base = (uint64_t)(r % 8) * CHUNK * PIECES;
        ote_batch_h b;
        size_t first;
        char msg[128];

        ote_test_fill(f.local, base, CHUNK * PIECES, 1000 + (uint64_t)r);
        for (size_t i = 0; i < PIECES; i++)
            reqs[i] = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = f.local + i * CHUNK,
                                       .segment = f.seg,
                                       .remote_addr = f.t.addr[0] + base + i * CHUNK,
                                       .length = CHUNK};
        snprintf(msg, sizeof(msg), "check 0 %llu %lu %llu", (unsigned long long)base,
                 CHUNK * PIECES, (unsigned long long)(1000 + r));
        assert_int_equal(ote_batch_create(f.e, PIECES, &b), OTE_OK);
        assert_int_equal(ote_batch_submit_notify(b, reqs, PIECES, msg, strlen(msg), &first),
                         OTE_OK);
        assert_int_equal(ote_batch_wait(b, 30000), OTE_OK);
        ote_batch_release(b);
        /* Each check answers once; collect the answer before reusing the buffer. */
        for (int waited = 0; waited < 20000; waited++) {
            ote_notif_t n;
            size_t count = 0;

            ote_notify_recv(f.e, &n, 1, &count);
            if (count) {
                if (n.length == 2 && memcmp(n.data, "ok", 2) == 0)
                    oks++;
                else
                    others++;
                break;
            }
            usleep(1000);
        }
    }
    /* Nothing more arrives: every message was delivered exactly once. */
    usleep(300000);
    {
        ote_notif_t n;
        size_t count = 0;

        ote_notify_recv(f.e, &n, 1, &count);
        assert_int_equal(count, 0);
    }
    assert_int_equal(others, 0);
    assert_int_equal(oks, ROUNDS);

    mp_fx_stop(&f, true);
}

static void test_notify_not_sent_on_failure(void **state)
{
    static const char *const args[] = {"--region", "1m:r", NULL};
    mp_fx_t f;
    ote_xfer_req_t r;
    ote_batch_h b;
    size_t first, count = 0;
    ote_notif_t n;
    char reply[64];

    mp_fx_start(&f, args, 4096);
    /* A WRITE into a read-only region fails: its notification must not go out. */
    r = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = f.local, .segment = f.seg,
                         .remote_addr = f.t.addr[0], .length = 4096};
    assert_int_equal(ote_batch_create(f.e, 1, &b), OTE_OK);
    assert_int_equal(ote_batch_submit_notify(b, &r, 1, "sum 0 0 16", 10, &first), OTE_OK);
    assert_int_equal(ote_batch_wait(b, 10000), OTE_OK);
    ote_batch_release(b);
    usleep(300000);
    ote_notify_recv(f.e, &n, 1, &count);
    assert_int_equal(count, 0);
    /* The peer is fine and answers a direct message. */
    assert_int_equal(ote_test_target_cmd(f.e, f.seg, "sum 0 0 16", reply, sizeof(reply), 10000), 0);
    assert_int_equal(strncmp(reply, "sum ", 4), 0);

    mp_fx_stop(&f, true);
}

typedef struct {
    mp_fx_t     *f;
    ote_status_t status;
} slow_notify_t;

static void *notify_main(void *arg)
{
    slow_notify_t *n = arg;

    n->status = ote_notify_send(n->f->e, n->f->seg, "check 0 0 0 0", 13);
    return NULL;
}

/*
 * A notification to a peer that does not answer (stopped) waits up to
 * OTE_CONNECT_TIMEOUT_MS for its reply; a submit on the same segment from
 * another thread meanwhile returns at once (it waited for the reply's
 * timeout while the request held the segment's lock), and its WRITE lands
 * once the peer goes on.
 */
static void test_submit_beside_slow_notify(void **state)
{
    static const char *const args[] = {"--region", "1m:rw", NULL};
    enum { CONNECT_MS = 1500 };
    mp_fx_t f;
    slow_notify_t n = {.f = &f, .status = OTE_ERR_IO};
    pthread_t th;

    (void)state;
    setenv("OTE_CONNECT_TIMEOUT_MS", "1500", 1);
    mp_fx_start(&f, args, 4096);
    unsetenv("OTE_CONNECT_TIMEOUT_MS");
    ote_test_fill(f.local, 0, 4096, 31);
    /* The control connection is up before the peer stops (a notification answered). */
    assert_int_equal(ote_test_target_expect(f.e, f.seg, "check 0 0 0 0", "ok", 10000), 0);
    assert_int_equal(kill(f.t.pid, SIGSTOP), 0);
    assert_int_equal(pthread_create(&th, NULL, notify_main, &n), 0);
    usleep(200 * 1000);
    mp_submit_beside_stopped(&f, f.t.addr[0], 4096, "a notification", CONNECT_MS / 3);
    assert_int_equal(pthread_join(th, NULL), 0);
    /* Answered once the peer went on, or not within the bound: a status either way. */
    assert_true(n.status == OTE_OK || n.status == OTE_ERR_TIMEOUT ||
                n.status == OTE_ERR_REMOTE_DISCONNECT);
    if (n.status == OTE_OK) {
        /* Its command's reply comes back first: taken before the check's. */
        char reply[64];

        assert_int_equal(ote_test_target_reply(f.e, reply, sizeof(reply), 10000), 0);
        assert_string_equal(reply, "ok");
    }
    assert_int_equal(ote_test_target_expect(f.e, f.seg, "check 0 0 4096 31", "ok", 10000), 0);
    mp_fx_stop(&f, true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_notify_after_data_exactly_once),
        cmocka_unit_test(test_notify_not_sent_on_failure),
        cmocka_unit_test(test_submit_beside_slow_notify),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
