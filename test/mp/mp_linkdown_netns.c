/*
 * A link that is down is transient, not a configuration that cannot reach.
 * Network namespaces A and B joined by a control link (ctl, 10.82.9.0/24:
 * the target's name and descriptor travel there) and two data rails, rail0
 * and rail1 (10.82.0.0/24, 10.82.1.0/24), made and deleted here; the tcp
 * transport uses the rails alone (OTE_NET_DEVICES=rail0,rail1). With both
 * rails of A down (the engine sees its ports go):
 *
 *   - WRITEs on an open segment, with and without a notification, end with
 *     OTE_ERR_REMOTE_DISCONNECT or OTE_ERR_TIMEOUT, never UNREACHABLE, and
 *     the notification is not delivered (its status says why, the same way);
 *   - a new segment to the same peer (its descriptor fetched over ctl)
 *     fails with OTE_ERR_TIMEOUT after OTE_CONNECT_TIMEOUT_MS, never
 *     UNREACHABLE;
 *
 * and with the rails up again the open segment and a newly opened one
 * carry WRITEs whose bytes the target verifies.
 *
 * The engine's series say the same (ote_engine_stats): ote_rail_state 0
 * for both rails while their links are down, every
 * ote_transfer_failures_total{op="write",status} and
 * ote_notification_failures_total{status} equal to the tasks and the
 * notification that ended with that status.
 *
 * Needs root and `ip netns`; otherwise it says why and exits 77.
 */
#include "core/engine.h"
#include "base/util.h"
#include "mp_netns.h"
#include "mp_stats.h"
#include "mp_util.h"
#include "testlib.h"

#include <ote/ote.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#define REGION (16u << 20)
#define TASK   (1u << 20)
#define NTASKS 8

static char ns_a[32], ns_b[32];

/* ctl first: the first interface's address is the engines' name. */
static int parent(const char *self, unsigned id)
{
    static const char *const devs[] = {"ctl", "rail0", "rail1"};
    static const int nets[] = {9, 0, 1};

    return mp_netns_hosts("mp_linkdown_netns", self, ns_a, ns_b, "otl", id, "10.82", devs, nets, 3,
                          false);
}

/* ---- tests, inside namespace A --------------------------------------------------- */

static ote_test_pair_t *fx;

static void verify(ote_segment_h seg, size_t off, size_t len, uint64_t seed)
{
    char c[128];

    snprintf(c, sizeof(c), "check 0 %zu %zu %llu", off, len, (unsigned long long)seed);
    assert_int_equal(ote_test_target_expect(fx->e, seg, c, "ok", 30000), 0);
}

static const char *const rails[] = {"rail0", "rail1", NULL};

static bool transient(ote_status_t st)
{
    return st == OTE_ERR_REMOTE_DISCONNECT || st == OTE_ERR_TIMEOUT;
}

/* NTASKS WRITEs of TASK bytes at off on seg (msg: with a notification); all tasks ended. */
static void write_tasks(ote_segment_h seg, size_t off, uint64_t seed, const char *msg,
                        ote_task_status_t st[NTASKS], ote_status_t *notify_p)
{
    ote_xfer_req_t r[NTASKS];
    ote_batch_h b;
    size_t first = 0;

    ote_test_fill(fx->local + off, off, NTASKS * TASK, seed);
    for (size_t i = 0; i < NTASKS; i++)
        r[i] = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = fx->local + off + i * TASK,
                                .segment = seg, .remote_addr = fx->target.addr[0] + off + i * TASK,
                                .length = TASK};
    assert_int_equal(ote_batch_create(fx->e, NTASKS, &b), OTE_OK);
    if (msg != NULL)
        assert_int_equal(ote_batch_submit_notify(b, r, NTASKS, msg, strlen(msg), &first), OTE_OK);
    else
        assert_int_equal(ote_batch_submit(b, r, NTASKS, &first), OTE_OK);
    /* Every task ends: the wait is the bound. */
    assert_int_equal(ote_batch_wait(b, 30000), OTE_OK);
    for (size_t i = 0; i < NTASKS; i++)
        assert_int_equal(ote_batch_task_status(b, first + i, &st[i]), OTE_OK);
    if (notify_p != NULL) {
        *notify_p = OTE_INPROGRESS;
        for (int k = 0; k < 3000 && *notify_p == OTE_INPROGRESS; k++) {
            assert_int_equal(ote_batch_notify_status(b, first, notify_p), OTE_OK);
            if (*notify_p == OTE_INPROGRESS) {
                ote_engine_progress(fx->e);
                usleep(10000);
            }
        }
    }
    ote_batch_release(b);
}

/* Failed tasks and notifications by -status, as the test saw them. */
static unsigned long seen_xfer[MP_NSTATUS], seen_notif[MP_NSTATUS];

static void tally(const ote_task_status_t st[NTASKS], const ote_status_t *notify)
{
    for (size_t i = 0; i < NTASKS; i++) {
        if (st[i].state != OTE_TASK_COMPLETED && -(int)st[i].error > 0 &&
            -(int)st[i].error < MP_NSTATUS)
            seen_xfer[-(int)st[i].error]++;
    }
    if (notify != NULL && -(int)*notify > 0 && -(int)*notify < MP_NSTATUS)
        seen_notif[-(int)*notify]++;
}

/* Every status of the failure series against what was seen. */
static void series_match(void)
{
    char l[128];

    for (int i = 1; i < MP_NSTATUS; i++) {
        snprintf(l, sizeof(l), "op=\"write\",status=\"%s\"", mp_status_label((ote_status_t)-i));
        if (mp_stat(fx->e, "ote_transfer_failures_total", l) != (double)seen_xfer[i]) {
            printf("ote_transfer_failures_total{%s} %g, tasks %lu\n", l,
                   mp_stat(fx->e, "ote_transfer_failures_total", l), seen_xfer[i]);
            fail();
        }
        snprintf(l, sizeof(l), "status=\"%s\"", mp_status_label((ote_status_t)-i));
        if (mp_stat(fx->e, "ote_notification_failures_total", l) != (double)seen_notif[i]) {
            printf("ote_notification_failures_total{%s} %g, seen %lu\n", l,
                   mp_stat(fx->e, "ote_notification_failures_total", l), seen_notif[i]);
            fail();
        }
    }
}

static double rail_state(const char *dev)
{
    char l[96];

    snprintf(l, sizeof(l), "transport=\"tcp\",device=\"%s\"", dev);
    return mp_stat(fx->e, "ote_rail_state", l);
}

static bool write_ok(ote_segment_h seg, size_t off, uint64_t seed)
{
    ote_task_status_t st[NTASKS];

    write_tasks(seg, off, seed, NULL, st, NULL);
    tally(st, NULL);
    for (size_t i = 0; i < NTASKS; i++) {
        if (st[i].state != OTE_TASK_COMPLETED || st[i].transferred != TASK)
            return false;
    }
    return true;
}

static int setup(void **state)
{
    const char *args_b[] = {"--listen", "0.0.0.0:0", "--region", "16m:rw", NULL};

    (void)state;
    ote_test_setenv_all((const char *const[]){
        "OTE_NET_DEVICES=rail0,rail1", "OTE_XFER_TIMEOUT_MS=1500", "OTE_CONNECT_TIMEOUT_MS=1000",
        "OTE_RAIL_COOLDOWN_MS=200", "OTE_RAIL_COOLDOWN_MAX_MS=800", NULL});
    /* Its name must travel over ctl, which stays up. */
    return mp_netns_pair_open(&fx, ns_b, NULL, "tcp", "0.0.0.0:0", args_b, REGION, "10.82.9.2:");
}

static int teardown(void **state)
{
    (void)state;
    mp_netns_pair_stop(&fx, NULL);
    return 0;
}

static void test_links_down_then_up(void **state)
{
    ote_task_status_t st[NTASKS];
    ote_status_t notify = OTE_OK, open_st;
    ote_segment_h seg2 = NULL;
    bool ok = false;

    (void)state;
    /* Both rails carry first. */
    assert_true(write_ok(fx->seg, 0, 11));
    verify(fx->seg, 0, NTASKS * TASK, 11);

    mp_netns_links_set(rails, "down");
    for (int k = 0; k < 1000 && !mp_rails_link_down(fx->seg); k++) {
        ote_engine_progress(fx->e);
        usleep(10000);
    }
    assert_true(mp_rails_link_down(fx->seg));
    assert_true(rail_state("rail0") == 0.0);
    assert_true(rail_state("rail1") == 0.0);
    series_match();

    /* Tasks on the open segment: the peer is away for a while, not out of reach by configuration. */
    write_tasks(fx->seg, 0, 12, NULL, st, NULL);
    tally(st, NULL);
    for (size_t i = 0; i < NTASKS; i++) {
        printf("links down: task %zu %s\n", i, ote_status_string(st[i].error));
        assert_int_equal(st[i].state, OTE_TASK_FAILED);
        assert_true(transient(st[i].error));
    }
    write_tasks(fx->seg, 0, 13, "linkdown", st, &notify);
    tally(st, &notify);
    series_match();
    assert_true(rail_state("rail0") == 0.0);
    assert_true(rail_state("rail1") == 0.0);
    printf("links down: notification %s\n", ote_status_string(notify));
    for (size_t i = 0; i < NTASKS; i++) {
        assert_int_equal(st[i].state, OTE_TASK_FAILED);
        assert_true(transient(st[i].error));
    }
    assert_true(transient(notify));

    /* A new segment: its descriptor arrives over ctl, its rails' links are down. */
    open_st = ote_segment_open(fx->e, fx->target.name, &seg2);
    printf("links down: open %s\n", ote_status_string(open_st));
    assert_int_equal(open_st, OTE_ERR_TIMEOUT);
    assert_null(seg2);

    mp_netns_links_set(rails, "up");
    /* The rails are probed again once their ports are up; the bytes land. */
    for (int k = 0; k < 100 && !ok; k++) {
        ok = write_ok(fx->seg, 0, 14);
        if (!ok)
            usleep(50000);
    }
    assert_true(ok);
    verify(fx->seg, 0, NTASKS * TASK, 14);

    /*
     * The target's links went down and up too (the far ends of the veth
     * pairs): its descriptor lists its devices again after its next device
     * check, so a new open may fail until then, transient (it says it runs
     * tcp: never UNREACHABLE); within 10 s it opens.
     */
    open_st = OTE_ERR_TIMEOUT;
    for (int k = 0; k < 100 && open_st != OTE_OK; k++) {
        open_st = ote_segment_open(fx->e, fx->target.name, &seg2);
        if (open_st != OTE_OK) {
            assert_true(transient(open_st));
            usleep(100000);
        }
    }
    assert_int_equal(open_st, OTE_OK);
    assert_true(write_ok(seg2, NTASKS * TASK, 15));
    verify(seg2, NTASKS * TASK, NTASKS * TASK, 15);
    series_match();
    ote_segment_close(seg2);
}

static int in_netns_tests(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_links_down_then_up),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}

int main(int argc, char **argv)
{
    return mp_netns_main(argc, argv, "ote_ld", ns_a, ns_b, in_netns_tests, parent);
}
