/*
 * A segment opened at once after a link came back is not UNREACHABLE.
 * Namespaces A and B joined by a control link (ctl: the target's name and
 * descriptor travel there) and two data rails, rail0 and rail1, one
 * network transport alone on them (OTE_NET_DEVICES=rail0,rail1): uct_tcp,
 * or the native tcp built with REOPEN_NATIVE_TCP (mp_tcp_reopen_netns).
 * Both rails go down: each engine takes its devices of the transport out
 * of its descriptor (engine_join.c). They come up again and this engine,
 * which sees its ports back at once (OTE_RDMA_POLL_MS=50), opens the
 * target at once, while the target (which looks every 3 s) still
 * publishes a descriptor without them. The target still runs the
 * transport (its descriptor says so: desc.h, runs): every open ends OK,
 * REMOTE_DISCONNECT or TIMEOUT, never UNREACHABLE, and once one opens its
 * WRITEs land (the target checks the bytes).
 *
 * Needs root and `ip netns`; otherwise it says why and exits 77.
 */
#include "core/engine.h"
#include "base/util.h"
#include "mp_netns.h"
#include "mp_util.h"
#include "testlib.h"

#include <ote/ote.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#ifdef REOPEN_NATIVE_TCP
#define REOPEN_TLS  "tcp"
#define REOPEN_NS   "ote_tro"
#define REOPEN_VETH "ott"
#else
#define REOPEN_TLS  "uct_tcp"
#define REOPEN_NS   "ote_uro"
#define REOPEN_VETH "otu"
#endif

#define REGION (4u << 20)
#define TASK   (1u << 20)

static char ns_a[32], ns_b[32];

/* ctl first: the first interface's address is the engines' name. */
static int parent(const char *self, unsigned id)
{
    static const char *const devs[] = {"ctl", "rail0", "rail1"};
    static const int nets[] = {9, 0, 1};

    return mp_netns_hosts(REOPEN_NS, self, ns_a, ns_b, REOPEN_VETH, id, "10.82", devs, nets, 3,
                          false);
}

static ote_test_pair_t *fx;

static const char *const rails[] = {"rail0", "rail1", NULL};

/* One WRITE of TASK bytes at off; the target checks them. */
static void write_verified(ote_segment_h seg, size_t off, uint64_t seed)
{
    ote_xfer_req_t r = {.op = OTE_OP_WRITE, .local_addr = fx->local + off, .segment = seg,
                        .remote_addr = fx->target.addr[0] + off, .length = TASK};
    ote_task_status_t st;
    ote_batch_h b;
    size_t first = 0;
    char c[128];

    ote_test_fill(fx->local + off, off, TASK, seed);
    assert_int_equal(ote_batch_create(fx->e, 1, &b), OTE_OK);
    assert_int_equal(ote_batch_submit(b, &r, 1, &first), OTE_OK);
    assert_int_equal(ote_batch_wait(b, 30000), OTE_OK);
    assert_int_equal(ote_batch_task_status(b, first, &st), OTE_OK);
    ote_batch_release(b);
    assert_int_equal(st.state, OTE_TASK_COMPLETED);
    snprintf(c, sizeof(c), "check 0 %zu %u %llu", off, TASK, (unsigned long long)seed);
    assert_int_equal(ote_test_target_expect(fx->e, seg, c, "ok", 30000), 0);
}

static int setup(void **state)
{
    const char *args_b[] = {"--listen", "0.0.0.0:0", "--region", "4m:rw", NULL};

    (void)state;
    ote_test_setenv_all((const char *const[]){
        "OTE_NET_DEVICES=rail0,rail1", "OTE_XFER_TIMEOUT_MS=1500", "OTE_CONNECT_TIMEOUT_MS=3000",
        "OTE_RAIL_COOLDOWN_MS=200", "OTE_RAIL_COOLDOWN_MAX_MS=800", "OTE_RDMA_POLL_MS=50", NULL});
    /* The target looks at its interfaces every 3 s: its descriptor lags. */
    return mp_netns_pair_open(&fx, ns_b, "OTE_RDMA_POLL_MS=3000", REOPEN_TLS, "0.0.0.0:0", args_b,
                              REGION, "10.82.9.2:");
}

static int teardown(void **state)
{
    (void)state;
    mp_netns_pair_stop(&fx, NULL);
    return 0;
}

static void test_open_right_after_link_up(void **state)
{
    ote_segment_h seg2 = NULL;
    ote_status_t st    = OTE_ERR_TIMEOUT;
    int transient      = 0;

    (void)state;
    write_verified(fx->seg, 0, 21);
    mp_netns_links_set(rails, "down");
    for (int k = 0; k < 1000 && !mp_rails_link_down(fx->seg); k++) {
        ote_engine_progress(fx->e);
        usleep(10000);
    }
    assert_true(mp_rails_link_down(fx->seg));
    /* Two of the target's rounds: it took its devices out of its descriptor. */
    usleep(6500 * 1000);
    mp_netns_links_set(rails, "up");
    /* This side's links running again (the target's descriptor still lags). */
    assert_int_equal(mp_netns_wait_up(ns_a, "rail0"), 0);
    assert_int_equal(mp_netns_wait_up(ns_a, "rail1"), 0);
    for (int k = 0; k < 200 && st != OTE_OK; k++) {
        st = ote_segment_open(fx->e, fx->target.name, &seg2);
        printf("open %d after the links came up: %s\n", k, ote_status_string(st));
        assert_int_not_equal(st, OTE_ERR_UNREACHABLE);
        if (st != OTE_OK) {
            assert_true(st == OTE_ERR_REMOTE_DISCONNECT || st == OTE_ERR_TIMEOUT);
            assert_null(seg2);
            transient++;
            usleep(50000);
        }
    }
    printf("%d opens ended transient before one opened\n", transient);
    assert_int_equal(st, OTE_OK);
    write_verified(seg2, TASK, 22);
    ote_segment_close(seg2);
}

static int in_netns_tests(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_right_after_link_up),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}

int main(int argc, char **argv)
{
    return mp_netns_main(argc, argv, REOPEN_NS, ns_a, ns_b, in_netns_tests, parent);
}
