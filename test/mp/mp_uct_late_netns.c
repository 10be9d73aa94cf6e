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
#include "core/worker/worker.h"
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

/* ---- A READ by PUTBACK that timed out: none of its bytes land later --------------- */

#define PBLEN   (1u << 20)
#define PB_FILL 0xa5

static int setup_putback(void **state)
{
    const char *wrap_b[] = {"ip", "netns", "exec", ns_b, NULL};
    /* The control plane (and the PUTBACK's answer) on rail2, the data on rail0 alone. */
    const char *args_b[] = {"--listen", "10.82.2.2:0", "--region", "96m:rw", NULL};

    (void)state;
    ote_test_setenv_all((const char *const[]){
        "OTE_NET_DEVICES=rail0", "OTE_XFER_TIMEOUT_MS=1500", "OTE_CONNECT_TIMEOUT_MS=1000",
        "OTE_RAIL_MAX_BYTES=1m", "OTE_RAIL_COOLDOWN_MS=100", "OTE_RAIL_COOLDOWN_MAX_MS=400",
        NULL});
    fx = ote_test_pair_start("uct_tcp", "10.82.2.1:0", wrap_b, args_b, PBLEN);
    if (fx == NULL)
        return -1;
    printf("target %s\n", fx->target.name);
    return ote_segment_open(fx->e, fx->target.name, &fx->seg) == OTE_OK ? 0 : -1;
}

static int teardown_putback(void **state)
{
    (void)state;
    mp_cmd(true, "ip netns exec %s tc qdisc del dev rail0 root", ns_b);
    if (fx != NULL)
        ote_test_pair_stop(fx);
    fx = NULL;
    return 0;
}

/* A READ of PBLEN bytes from the target's offset 0 into fx->local: the task's status. */
static ote_task_status_t read_one(void)
{
    ote_xfer_req_t r = {.op = OTE_OP_READ, .local_addr = fx->local, .segment = fx->seg,
                        .remote_addr = fx->target.addr[0], .length = PBLEN};
    ote_task_status_t st;
    ote_batch_h b;
    size_t first = 0;

    assert_int_equal(ote_batch_create(fx->e, 1, &b), OTE_OK);
    assert_int_equal(ote_batch_submit(b, &r, 1, &first), OTE_OK);
    assert_int_equal(ote_batch_wait(b, 60000), OTE_OK);
    assert_int_equal(ote_batch_task_status(b, first, &st), OTE_OK);
    ote_batch_release(b);
    return st;
}

static size_t bytes_differing(const uint8_t *a, const uint8_t *b, size_t len)
{
    size_t n = 0;

    for (size_t i = 0; i < len; i++)
        n += a[i] != b[i];
    return n;
}

/*
 * Over uct_tcp a READ goes by PUTBACK: the target PUTs into this buffer.
 * The target's egress on rail0 is shaped to a trickle (64 kbit/s, a queue
 * of a minute), so its PUT times out with most of its bytes past its
 * socket, in the queue; the target answers TIMEOUT and the READ ends. The
 * buffer is then rewritten and must stay as written: the queued bytes
 * reach this host later (during the trickle and when the shaping goes),
 * and none of them may land in the buffer after the READ's status was
 * reported. Then a READ completes again, bytes verified (the connections
 * closed for it are made again).
 */
static void test_putback_late_put_does_not_land(void **state)
{
    uint8_t *want = malloc(PBLEN), *fill = malloc(PBLEN);
    ote_task_status_t st;
    size_t bad;
    bool ok = false;
    char c[128];

    (void)state;
    assert_non_null(want);
    assert_non_null(fill);
    snprintf(c, sizeof(c), "fill 0 0 %u 5005", PBLEN);
    assert_int_equal(ote_test_target_expect(fx->e, fx->seg, c, "ok", 30000), 0);
    ote_test_fill(want, 0, PBLEN, 5005);
    memset(fill, PB_FILL, PBLEN);

    /* Connected, and right. */
    memset(fx->local, 0, PBLEN);
    st = read_one();
    assert_int_equal(st.state, OTE_TASK_COMPLETED);
    assert_int_equal(bytes_differing(fx->local, want, PBLEN), 0);

    {
        const char *tc[] = {"ip", "netns", "exec", ns_b, "tc", "qdisc", "add", "dev", "rail0",
                            "root", "tbf", "rate", "64kbit", "burst", "16k", "latency", "60s",
                            NULL};

        assert_int_equal(mp_run(tc, false), 0);
    }
    memset(fx->local, 0, PBLEN);
    st = read_one();
    printf("READ over a trickle: %s\n", ote_status_string(st.error));
    assert_int_not_equal(st.state, OTE_TASK_COMPLETED);
    assert_true(st.error == OTE_ERR_TIMEOUT || st.error == OTE_ERR_REMOTE_DISCONNECT);
    /* The task ended: the buffer is the application's again. */
    memcpy(fx->local, fill, PBLEN);
    for (int k = 0; k < 600; k++) { /* 6 s of the trickle */
        ote_engine_progress(fx->e);
        usleep(10000);
    }
    assert_int_equal(mp_cmd(false, "ip netns exec %s tc qdisc del dev rail0 root", ns_b), 0);
    for (int k = 0; k < 300; k++) { /* what was still queued comes at once */
        ote_engine_progress(fx->e);
        usleep(10000);
    }
    bad = bytes_differing(fx->local, fill, PBLEN);
    if (bad != 0)
        fail_msg("%zu bytes of the buffer changed after the READ ended %s: the target's "
                 "late PUT landed", bad, ote_status_string(st.error));

    /* The rails come back: a READ completes again, its bytes right. */
    for (int k = 0; k < 100 && !ok; k++) {
        memset(fx->local, 0, PBLEN);
        st = read_one();
        ok = st.state == OTE_TASK_COMPLETED;
        if (!ok) {
            printf("READ %d after: %s\n", k, ote_status_string(st.error));
            assert_true(st.error == OTE_ERR_TIMEOUT || st.error == OTE_ERR_REMOTE_DISCONNECT ||
                        st.error == OTE_ERR_NOT_FOUND);
            usleep(100000);
        }
    }
    assert_true(ok);
    assert_int_equal(bytes_differing(fx->local, want, PBLEN), 0);
    free(want);
    free(fill);
}

/* ---- A quarantine while the link is down: closed, then open again ---------------- */

/* Whether fd is in the interest list of epoll fd epfd (/proc/self/fdinfo). */
static bool epoll_watches(int epfd, int fd)
{
    char path[64], line[256];
    bool found = false;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", epfd);
    f = fopen(path, "r");
    assert_non_null(f);
    while (!found && fgets(line, sizeof(line), f) != NULL) {
        int tfd;

        found = sscanf(line, "tfd: %d", &tfd) == 1 && tfd == fd;
    }
    fclose(f);
    return found;
}

/* The engine's uct_tcp iface on rail0 (one worker): its worker in *w_p. */
static ote_tl_iface_t *rail0_iface(ote_engine_h e, ote_worker_t **w_p)
{
    ote_engine_facts_t *f = ote_engine_facts(e);

    for (size_t w = 0; w < f->num_workers; w++) {
        for (size_t i = 0; i < atomic_load(&f->workers[w].num_ifaces); i++) {
            ote_tl_iface_t *iface = f->workers[w].ifaces[i];

            if (strcmp(iface->resource.tl_name, "uct_tcp") == 0 &&
                strcmp(iface->resource.dev_name, "rail0") == 0) {
                *w_p = &f->workers[w];
                return iface;
            }
        }
    }
    fail_msg("no uct_tcp iface on rail0");
    return NULL;
}

static void *rail0_down_thread(void *arg)
{
    (void)arg;
    usleep(300 * 1000);
    mp_cmd(false, "ip link set rail0 down");
    return NULL;
}

static int teardown_closed(void **state)
{
    mp_cmd(true, "ip link set rail0 up");
    return teardown_putback(state);
}

/*
 * A READ by PUTBACK times out (the target's egress on rail0 a trickle)
 * while this side's rail0 goes down: its quarantine closes the uct_tcp
 * iface on rail0 and cannot open it again (UCX opens no tcp iface on a
 * device that is not up). The iface is then closed in a defined way: its
 * old event fd out of the worker's epoll, none now, left out of the
 * descriptor; the engine progresses for seconds (worker thread and this
 * thread) with WRITEs to the target ending REMOTE_DISCONNECT, never
 * UNREACHABLE; it stays closed while the link is down. When rail0 comes
 * back the engine's device check opens it again, its new event fd in the
 * worker's epoll, and WRITEs and READs complete with their bytes right.
 */
static void test_quarantine_link_down_reopens_later(void **state)
{
    uint8_t *want = malloc(PBLEN);
    ote_task_status_t st;
    ote_tl_iface_t *iface;
    ote_worker_t *w = NULL;
    pthread_t th;
    int old_fd, fd;
    bool ok = false;
    char c[128];

    (void)state;
    assert_non_null(want);
    snprintf(c, sizeof(c), "fill 0 0 %u 6006", PBLEN);
    assert_int_equal(ote_test_target_expect(fx->e, fx->seg, c, "ok", 30000), 0);
    ote_test_fill(want, 0, PBLEN, 6006);
    memset(fx->local, 0, PBLEN);
    st = read_one();
    assert_int_equal(st.state, OTE_TASK_COMPLETED);
    assert_int_equal(bytes_differing(fx->local, want, PBLEN), 0);
    iface  = rail0_iface(fx->e, &w);
    old_fd = iface->ops->event_fd(iface);
    assert_true(old_fd >= 0);
    assert_true(epoll_watches(w->epfd, old_fd));

    {
        const char *tc[] = {"ip", "netns", "exec", ns_b, "tc", "qdisc", "add", "dev", "rail0",
                            "root", "tbf", "rate", "64kbit", "burst", "16k", "latency", "60s",
                            NULL};

        assert_int_equal(mp_run(tc, false), 0);
    }
    assert_int_equal(pthread_create(&th, NULL, rail0_down_thread, NULL), 0);
    st = read_one();
    pthread_join(th, NULL);
    printf("READ over a trickle, rail0 going down: %s\n", ote_status_string(st.error));
    assert_int_not_equal(st.state, OTE_TASK_COMPLETED);
    assert_true(st.error == OTE_ERR_TIMEOUT || st.error == OTE_ERR_REMOTE_DISCONNECT);
    if (!ote_tl_iface_closed(iface))
        fail_msg("the READ's quarantine did not leave uct_tcp/rail0 closed with its link down");
    assert_int_equal(iface->ops->event_fd(iface), -1);
    assert_false(epoll_watches(w->epfd, old_fd));

    /* Seconds of progress with it closed; WRITEs to the target end REMOTE_DISCONNECT. */
    for (int k = 0; k < 6; k++) {
        ote_test_fill(fx->local, 0, 65536, 7000 + (unsigned)k);
        assert_int_equal(ote_test_xfer(fx->e, fx->seg, OTE_OP_WRITE, fx->local,
                                       fx->target.addr[0], 65536, 20000, &st), OTE_OK);
        printf("WRITE %d with rail0 down: %s\n", k, ote_status_string(st.error));
        assert_int_not_equal(st.state, OTE_TASK_COMPLETED);
        assert_int_equal(st.error, OTE_ERR_REMOTE_DISCONNECT);
        for (int p = 0; p < 50; p++) {
            ote_engine_progress(fx->e);
            usleep(10000);
        }
    }
    assert_true(ote_tl_iface_closed(iface));

    mp_cmd(true, "ip netns exec %s tc qdisc del dev rail0 root", ns_b);
    mp_netns_links_set((const char *const[]){"rail0", NULL}, "up");
    assert_int_equal(mp_netns_wait_up(ns_a, "rail0"), 0);
    for (int k = 0; k < 300 && ote_tl_iface_closed(iface); k++) {
        ote_engine_progress(fx->e);
        usleep(50000);
    }
    if (ote_tl_iface_closed(iface))
        fail_msg("uct_tcp/rail0 still closed 15 s after its link came back");
    fd = iface->ops->event_fd(iface);
    assert_true(fd >= 0);
    assert_true(epoll_watches(w->epfd, fd));

    /* The rail works again: a WRITE, then READs, bytes verified. */
    for (int k = 0; k < 100 && !ok; k++) {
        ote_test_fill(fx->local, 0, PBLEN, 8008);
        assert_int_equal(ote_test_xfer(fx->e, fx->seg, OTE_OP_WRITE, fx->local,
                                       fx->target.addr[0], PBLEN, 20000, &st), OTE_OK);
        ok = st.state == OTE_TASK_COMPLETED;
        if (!ok) {
            printf("WRITE %d after: %s\n", k, ote_status_string(st.error));
            assert_true(st.error == OTE_ERR_TIMEOUT || st.error == OTE_ERR_REMOTE_DISCONNECT);
            usleep(100000);
        }
    }
    assert_true(ok);
    snprintf(c, sizeof(c), "check 0 0 %u 8008", PBLEN);
    assert_int_equal(ote_test_target_expect(fx->e, fx->seg, c, "ok", 30000), 0);
    ote_test_fill(want, 0, PBLEN, 8008);
    for (int k = 0; k < 3; k++) {
        memset(fx->local, 0, PBLEN);
        st = read_one();
        assert_int_equal(st.state, OTE_TASK_COMPLETED);
        assert_int_equal(bytes_differing(fx->local, want, PBLEN), 0);
    }
    free(want);
}

static int in_netns_tests(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timed_out_slice_does_not_land_later),
    };
    const struct CMUnitTest xfers[] = {
        cmocka_unit_test(test_peer_xfer_ends_before_answer),
    };
    const struct CMUnitTest putbacks[] = {
        cmocka_unit_test(test_putback_late_put_does_not_land),
    };
    const struct CMUnitTest closed[] = {
        cmocka_unit_test(test_quarantine_link_down_reopens_later),
    };
    int rc = cmocka_run_group_tests_name("write", tests, setup, teardown);

    rc |= cmocka_run_group_tests_name("peer_xfer", xfers, setup_xfer, teardown_xfer);
    rc |= cmocka_run_group_tests_name("putback", putbacks, setup_putback, teardown_putback);
    return rc | cmocka_run_group_tests_name("closed", closed, setup_putback, teardown_closed);
}

int main(int argc, char **argv)
{
    return mp_netns_main(argc, argv, "ote_late", ns_a, ns_b, in_netns_tests, parent);
}
