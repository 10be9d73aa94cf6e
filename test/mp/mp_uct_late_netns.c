/*
 * A WRITE slice over UCT's tcp that timed out on one rail must not land
 * after the task that retried it on another rail COMPLETED. Two rails
 * (rail0, rail1: veth pairs between namespaces A and B, as in
 * mp_rails_netns), uct_tcp alone on both: rail1 goes down in the middle of
 * a WRITE of pattern A, its slices time out and are retried on rail0, and
 * every task completes. Pattern B is then written over the same range
 * (rail0 alone) and the target holds B. rail1 comes back up: what the
 * kernel still held of the timed-out slices must not be delivered over B.
 *
 * Then ote_peer_xfer() (a target's side of a PUTBACK READ and of a FILE_IO
 * by rails) over a rail shaped slow: it must answer only once its WRITE
 * ended, nothing of it in flight (test_peer_xfer_ends_before_answer; a
 * third veth pair, rail2, carries its control plane).
 *
 * Needs root, `ip netns` and `tc`; otherwise it says why and exits 77.
 */
#include "core/engine.h"
#include "core/ctl/ctl.h"
#include "core/segment/segment.h"
#include "base/util.h"
#include "mp_netns.h"
#include "mp_util.h"
#include "testlib.h"

#include <ote/ote.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#define REGION  (96u << 20)
#define TASK    (4u << 20)

static char ns_a[32], ns_b[32];

/* ---- parent: namespaces -------------------------------------------------------- */

static int parent(const char *self, unsigned id)
{
    static const char *const devs[] = {"rail0", "rail1", "rail2"};
    static const int nets[] = {0, 1, 2};

    return mp_netns_hosts("mp_uct_late_netns", self, ns_a, ns_b, "otl", id, "10.82", devs, nets, 3,
                          true);
}

/* ---- tests, inside namespace A --------------------------------------------------- */

static ote_test_pair_t *fx;

static int setup(void **state)
{
    const char *args_b[] = {"--listen", "0.0.0.0:0", "--region", "96m:rw", NULL};

    (void)state;
    ote_test_setenv_all((const char *const[]){
        "OTE_NET_DEVICES=rail0,rail1", "OTE_XFER_TIMEOUT_MS=1500", "OTE_CONNECT_TIMEOUT_MS=1000",
        "OTE_RAIL_COOLDOWN_MS=20000", "OTE_RAIL_COOLDOWN_MAX_MS=20000", "OTE_RAIL_MAX_BYTES=4m", NULL});
    return mp_netns_pair_open(&fx, ns_b, NULL, "uct_tcp", "0.0.0.0:0", args_b, REGION, NULL);
}

static int teardown(void **state)
{
    (void)state;
    mp_cmd(true, "ip link set rail1 up");
    mp_netns_pair_stop(&fx, (const char *const[]){"rail0", "rail1", NULL});
    return 0;
}

static void *link_down_thread(void *arg)
{
    double *down_at = arg;

    usleep(500 * 1000);
    *down_at = mp_now_s();
    mp_cmd(false, "ip link set rail1 down");
    return NULL;
}

static void test_timed_out_slice_does_not_land_later(void **state)
{
    double t0, down_at = 0;
    pthread_t th;

    (void)state;
    assert_int_equal(mp_netns_shape("rail0", "240mbit"), 0);
    assert_int_equal(mp_netns_shape("rail1", "240mbit"), 0);
    mp_pair_write_all(fx, 8u << 20, TASK, 11); /* both rails connected and carrying */
    t0 = mp_now_s();
    assert_int_equal(pthread_create(&th, NULL, link_down_thread, &down_at), 0);
    mp_pair_write_all(fx, REGION, TASK, 1001);   /* pattern A: rail1's slices time out, go to rail0 */
    pthread_join(th, NULL);
    printf("A written in %.2f s, rail1 down at %.2f s\n", mp_now_s() - t0, down_at - t0);
    assert_true(down_at > 0);
    mp_pair_check_all(fx, REGION, 1001);
    mp_pair_write_all(fx, REGION, TASK, 2002);   /* pattern B over the same range, rail0 alone */
    mp_pair_check_all(fx, REGION, 2002);
    printf("B written and verified; rail1 up again\n");
    mp_cmd(false, "ip link set rail1 up");
    /* Long enough for the kernel's retransmissions on rail1 to reach B. */
    sleep(12);
    mp_pair_check_all(fx, REGION, 2002);
}

/* ---- A peer's request: its transfer ends before the answer ------------------------ */

#define XLEN (8u << 20)

static int setup_xfer(void **state)
{
    /* The control plane on rail2, the data on rail0 alone. */
    const char *args_b[] = {"--listen", "10.82.2.2:0", "--region", "96m:rw", NULL};

    (void)state;
    ote_test_setenv_all((const char *const[]){
        "OTE_NET_DEVICES=rail0", "OTE_XFER_TIMEOUT_MS=3000", "OTE_CONNECT_TIMEOUT_MS=1000",
        "OTE_RAIL_MAX_BYTES=1m", NULL});
    return mp_netns_pair_open(&fx, ns_b, NULL, "uct_tcp", "10.82.2.1:0", args_b, XLEN, NULL);
}

static int teardown_xfer(void **state)
{
    (void)state;
    mp_netns_pair_stop(&fx, (const char *const[]){"rail0", NULL});
    return 0;
}

static long inflight_slices(ote_segment_h seg)
{
    long n = 0;

    for (size_t i = 0; i < seg->rail_set.num_rails; i++)
        n += (long)atomic_load(&seg->rail_set.rails[i]->spray.inflight_slices);
    return n;
}

/*
 * ote_peer_xfer() is how a target serves a PUTBACK (READ by PUTBACK over
 * uct_tcp: its WRITE into the initiator's destination) and a FILE_IO by
 * rails; its status is the answer the initiator ends its slice with. Here
 * it WRITEs 8 MiB over one rail that sends at 5 Mbit/s, one 1 MiB slice at
 * a time: some 13 s, each slice well within OTE_XFER_TIMEOUT_MS (3 s), so
 * nothing fails on its own. It used to return TIMEOUT after a bounded wait
 * with the WRITE going on (slices posted and queued), whose bytes then
 * landed in the initiator's range after the initiator was answered and
 * its task had ended, the range in use again. It must return only once
 * the WRITE ended: canceled past the transfer timeout, nothing of it in
 * flight on any rail.
 */
static void test_peer_xfer_ends_before_answer(void **state)
{
    ote_status_t status;
    double t0;
    long n;

    (void)state;
    ote_test_fill(fx->local, 0, XLEN, 4004);
    status = ote_peer_xfer(fx->e, fx->seg, OTE_OP_WRITE, fx->local, fx->target.addr[0], 1u << 20,
                           false); /* connected, and right */
    assert_int_equal(status, OTE_OK);
    assert_int_equal(mp_cmd(false, "tc qdisc add dev rail0 root tbf rate 5mbit burst 16k "
                                   "latency 200ms"), 0);
    t0     = mp_now_s();
    status = ote_peer_xfer(fx->e, fx->seg, OTE_OP_WRITE, fx->local, fx->target.addr[0], XLEN,
                           false);
    n      = inflight_slices(fx->seg);
    printf("8 MiB at 5 Mbit/s: %s after %.1f s, %ld slices still in flight\n",
           ote_status_string(status), mp_now_s() - t0, n);
    assert_int_equal(status, OTE_ERR_TIMEOUT);
    if (n != 0)
        fail_msg("answered with %ld slices of the transfer still in flight: their bytes "
                 "would land after the answer", n);
}

static int in_netns_tests(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timed_out_slice_does_not_land_later),
    };
    const struct CMUnitTest xfers[] = {
        cmocka_unit_test(test_peer_xfer_ends_before_answer),
    };
    int rc = cmocka_run_group_tests_name("write", tests, setup, teardown);

    return rc | cmocka_run_group_tests_name("peer_xfer", xfers, setup_xfer, teardown_xfer);
}

int main(int argc, char **argv)
{
    return mp_netns_main(argc, argv, "ote_late", ns_a, ns_b, in_netns_tests, parent);
}
