/*
 * Two rails between two "hosts": network namespaces A and B joined by two
 * veth pairs, rail0 (10.81.0.0/24) and rail1 (10.81.1.0/24), named alike on
 * both sides, made and deleted here. The engine in A and the target in B
 * use the native tcp on both interfaces (OTE_NET_DEVICES=rail0,rail1); the
 * target's control plane listens on rail0. In order:
 *
 *   - both rails carry data: the interfaces' byte counters and the
 *     segment's rail counters grow on both, and every byte lands;
 *   - rail1 shaped (tc tbf) to a third of rail0: the bytes split 3:1
 *     within 20%;
 *   - rail1 set down in the middle of a long transfer: every task
 *     completes on rail0, every byte is verified, rail1 counts errors;
 *   - rail1 up again: it is probed after its cool-down and carries again;
 *   - the target restarted on the same address: the old segment fails
 *     with OTE_ERR_PEER_RESTARTED, a segment opened anew works.
 *
 * The engine's series follow (ote_engine_stats, what /metrics serves):
 * ote_rail_state{tcp,rail1} 0 while rail1 is down and 1 when it carries
 * again, ote_rail_errors_total and ote_rail_failovers_total equal to the
 * slices that failed on rail1 and went again on rail0, none on rail0, the
 * bytes of the rails' and transfer series equal to the bytes written, no
 * transfer failure; ote_peer_restarts_total 1 after the restart.
 *
 * Needs root, `ip netns` and `tc`; otherwise it says why and exits 77. The
 * parent sets the namespaces up, runs the tests in A through `ip netns
 * exec` and deletes the namespaces however the tests end (a signal too).
 */
#include "core/engine.h"
#include "base/util.h"
#include "mp_netns.h"
#include "mp_stats.h"
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
    static const char *const devs[] = {"rail0", "rail1"};
    static const int nets[] = {0, 1};

    return mp_netns_hosts("mp_rails_netns", self, ns_a, ns_b, "otr", id, "10.81", devs, nets, 2,
                          true);
}

/* ---- tests, inside namespace A --------------------------------------------------- */

static ote_test_pair_t *fx;
static char target_listen[256];

/* rails[0..2) by device name. */
static void rails_get(ote_segment_h seg, ote_rail_info_t out[2])
{
    ote_rail_info_t all[OTE_PROTO_MAX_RAILS];
    size_t n = 0;
    bool seen[2] = {false, false};

    assert_int_equal(ote_segment_rails(seg, all, OTE_PROTO_MAX_RAILS, &n), OTE_OK);
    assert_int_equal(n, 2);
    for (size_t i = 0; i < n; i++) {
        int k = strcmp(all[i].device, "rail0") == 0 ? 0 : strcmp(all[i].device, "rail1") == 0 ? 1 : -1;

        assert_true(k >= 0);
        assert_string_equal(all[i].transport, "tcp");
        out[k]  = all[i];
        seen[k] = true;
    }
    assert_true(seen[0] && seen[1]);
}

/* The engine's series of one rail (transport tcp). */
typedef struct {
    double bytes, errors, failovers, state;
} rail_series_t;

static void rail_series(const char *dev, rail_series_t *r)
{
    char l[96];

    snprintf(l, sizeof(l), "transport=\"tcp\",device=\"%s\"", dev);
    r->bytes     = mp_stat(fx->e, "ote_rail_bytes_total", l);
    r->errors    = mp_stat(fx->e, "ote_rail_errors_total", l);
    r->failovers = mp_stat(fx->e, "ote_rail_failovers_total", l);
    r->state     = mp_stat(fx->e, "ote_rail_state", l);
    assert_true(r->bytes >= 0 && r->errors >= 0 && r->failovers >= 0 && r->state >= 0);
}

static double written(void)
{
    return mp_stat(fx->e, "ote_transfer_bytes_total", "op=\"write\",transport=\"tcp\"");
}

static int setup(void **state)
{
    const char *args_b[] = {"--listen", "0.0.0.0:0", "--region", "96m:rw", NULL};
    const char *port;

    (void)state;
    ote_test_setenv_all((const char *const[]){
        "OTE_NET_DEVICES=rail0,rail1", "OTE_XFER_TIMEOUT_MS=1500", "OTE_CONNECT_TIMEOUT_MS=1000",
        "OTE_RAIL_COOLDOWN_MS=300", "OTE_RAIL_COOLDOWN_MAX_MS=1200", "OTE_RAIL_MAX_BYTES=4m", NULL});
    /* Listening on every address: an engine bound to one uses that interface alone. */
    if (mp_netns_pair_open(&fx, ns_b, NULL, "tcp", "0.0.0.0:0", args_b, REGION, NULL) != 0)
        return -1;
    port = strrchr(fx->target.name, ':');
    if (port == NULL)
        return -1;
    snprintf(target_listen, sizeof(target_listen), "0.0.0.0%s", port);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    mp_netns_pair_stop(&fx, (const char *const[]){"rail0", "rail1", NULL});
    return 0;
}

/* Both interfaces carry the bytes, the rail counters say so too, and every byte lands. */
static void test_both_rails_carry(void **state)
{
    ote_rail_info_t before[2], after[2];
    uint64_t tx0 = mp_if_tx_bytes("rail0"), tx1 = mp_if_tx_bytes("rail1");
    uint64_t d0, d1;

    rails_get(fx->seg, before);
    mp_pair_write_all(fx, REGION, TASK, 101);
    mp_pair_check_all(fx, REGION, 101);
    rails_get(fx->seg, after);
    d0 = mp_if_tx_bytes("rail0") - tx0;
    d1 = mp_if_tx_bytes("rail1") - tx1;
    printf("both rails: rail0 %llu B (iface %llu), rail1 %llu B (iface %llu)\n",
           (unsigned long long)(after[0].bytes - before[0].bytes), (unsigned long long)d0,
           (unsigned long long)(after[1].bytes - before[1].bytes), (unsigned long long)d1);
    assert_int_equal(after[0].bytes - before[0].bytes + after[1].bytes - before[1].bytes, REGION);
    /* Each rail took a real share, and its interface sent at least that much. */
    assert_true(after[0].bytes - before[0].bytes >= REGION / 8);
    assert_true(after[1].bytes - before[1].bytes >= REGION / 8);
    assert_true(d0 >= after[0].bytes - before[0].bytes);
    assert_true(d1 >= after[1].bytes - before[1].bytes);
    assert_int_equal(after[0].state, OTE_RAIL_ACTIVE);
    assert_int_equal(after[1].state, OTE_RAIL_ACTIVE);
}

/* rail1 at a third of rail0: the bytes split 3:1, within 20%. */
static void test_shaped_split(void **state)
{
    ote_rail_info_t before[2], after[2];
    double share1, t0;

    assert_int_equal(mp_netns_shape("rail0", "480mbit"), 0);
    assert_int_equal(mp_netns_shape("rail1", "160mbit"), 0);
    mp_pair_write_all(fx, 32u << 20, TASK, 7); /* the estimates learn the rates */
    rails_get(fx->seg, before);
    t0 = mp_now_s();
    mp_pair_write_all(fx, REGION, TASK, 202);
    rails_get(fx->seg, after);
    share1 = (double)(after[1].bytes - before[1].bytes) / REGION;
    printf("shaped 3:1: rail1 share %.3f (bandwidth estimates %.0f / %.0f MB/s), %.1f MB/s\n",
           share1, after[0].bandwidth / 1e6, after[1].bandwidth / 1e6,
           REGION / (mp_now_s() - t0) / 1e6);
    mp_pair_check_all(fx, REGION, 202);
    assert_true(share1 >= 0.25 * 0.8 && share1 <= 0.25 * 1.2);
}

static ote_rail_info_t rail1_now(void)
{
    ote_rail_info_t r[2];

    rails_get(fx->seg, r);
    return r[1];
}

typedef struct {
    double down_at, detected_at;
} down_t;

/* Sets rail1 down 0.6 s in, then watches for the rail to be paused. */
static void *link_down_thread(void *arg)
{
    down_t *d = arg;

    usleep(600 * 1000);
    d->down_at = mp_now_s();
    mp_cmd(false, "ip link set rail1 down");
    while (mp_now_s() - d->down_at < 20) {
        if (rail1_now().state == OTE_RAIL_COOLING) {
            d->detected_at = mp_now_s();
            break;
        }
        usleep(5000);
    }
    return NULL;
}

/* rail1 down in the middle of a long transfer: every task completes on rail0, every byte lands. */
static void test_link_down(void **state)
{
    ote_rail_info_t before[2], after[2];
    rail_series_t m0[2], m1[2];
    double w0, fail0;
    down_t d = {0};
    pthread_t th;
    double t0, t1;

    assert_int_equal(mp_netns_shape("rail0", "240mbit"), 0);
    assert_int_equal(mp_netns_shape("rail1", "240mbit"), 0);
    rails_get(fx->seg, before);
    rail_series("rail0", &m0[0]);
    rail_series("rail1", &m0[1]);
    assert_true(m0[0].state == 1.0 && m0[1].state == 1.0);
    w0    = written();
    fail0 = mp_stat_sum(fx->e, "ote_transfer_failures_total");
    t0 = mp_now_s();
    assert_int_equal(pthread_create(&th, NULL, link_down_thread, &d), 0);
    mp_pair_write_all(fx, REGION, TASK, 303);
    t1 = mp_now_s();
    pthread_join(th, NULL);
    rails_get(fx->seg, after);
    printf("link down after %.2f s of a %.2f s transfer: rail1 paused %.0f ms after; "
           "rail1 errors %llu, retries %llu; rail0 %llu B, rail1 %llu B\n",
           d.down_at - t0, t1 - t0, (d.detected_at - d.down_at) * 1e3,
           (unsigned long long)(after[1].errors - before[1].errors),
           (unsigned long long)(after[1].retries - before[1].retries),
           (unsigned long long)(after[0].bytes - before[0].bytes),
           (unsigned long long)(after[1].bytes - before[1].bytes));
    assert_true(d.down_at > 0 && d.down_at < t1);
    assert_true(d.detected_at > 0);
    assert_true(after[1].errors > before[1].errors);
    assert_true(after[1].retries > before[1].retries);
    assert_int_equal(after[0].bytes - before[0].bytes + after[1].bytes - before[1].bytes, REGION);
    mp_pair_check_all(fx, REGION, 303);
    /* The series: rail1 down, its failed slices each gone again on rail0, every byte once. */
    rail_series("rail0", &m1[0]);
    rail_series("rail1", &m1[1]);
    printf("series: rail1 state %g errors +%g failovers +%g; rail0 errors +%g; "
           "rail bytes +%g +%g; written +%g\n",
           m1[1].state, m1[1].errors - m0[1].errors, m1[1].failovers - m0[1].failovers,
           m1[0].errors - m0[0].errors, m1[0].bytes - m0[0].bytes, m1[1].bytes - m0[1].bytes,
           written() - w0);
    assert_true(m1[1].state == 0.0);
    assert_true(m1[0].state == 1.0);
    assert_true(m1[1].errors - m0[1].errors == (double)(after[1].errors - before[1].errors));
    assert_true(m1[1].failovers - m0[1].failovers ==
                (double)(after[1].retries - before[1].retries));
    /* Every task completed: each slice that failed on rail1 went again elsewhere. */
    assert_true(m1[1].failovers - m0[1].failovers == m1[1].errors - m0[1].errors);
    assert_true(m1[0].errors == m0[0].errors && m1[0].failovers == m0[0].failovers);
    assert_true(m1[0].bytes - m0[0].bytes + m1[1].bytes - m0[1].bytes == (double)REGION);
    assert_true(written() - w0 == (double)REGION);
    assert_true(mp_stat_sum(fx->e, "ote_transfer_failures_total") == fail0);
    /* Still down: later transfers go on rail0 alone, whole. */
    mp_pair_write_all(fx, 16u << 20, TASK, 304);
    mp_pair_check_all(fx, 16u << 20, 304);
}

/* rail1 up again: after its cool-down it is probed and carries again. */
static void test_link_up(void **state)
{
    ote_rail_info_t r = {0};
    double up_at, back_at = 0;
    uint64_t bytes0 = rail1_now().bytes;

    mp_cmd(false, "ip link set rail1 up");
    up_at = mp_now_s();
    while (mp_now_s() - up_at < 15) {
        mp_pair_write_all(fx, 8u << 20, TASK, 405);
        r = rail1_now();
        if (r.state == OTE_RAIL_ACTIVE && r.bytes > bytes0) {
            back_at = mp_now_s();
            break;
        }
        usleep(20000);
    }
    printf("link up: rail1 carries again %.0f ms later\n", (back_at - up_at) * 1e3);
    assert_true(back_at > 0);
    {
        rail_series_t m;

        rail_series("rail1", &m);
        assert_true(m.state == 1.0);
        assert_true(m.bytes == (double)r.bytes); /* one segment so far */
    }
    mp_pair_check_all(fx, 8u << 20, 405);
}

/* The target restarted on the same address: PEER_RESTARTED on the old segment, a new one works. */
static void test_restart(void **state)
{
    const char *wrap_b[] = {"ip", "netns", "exec", ns_b, NULL};
    const char *args_b[] = {"--listen", target_listen, "--region", "96m:rw", NULL};
    ote_xfer_req_t r = {.op = OTE_OP_WRITE, .local_addr = fx->local, .segment = fx->seg,
                        .remote_addr = fx->target.addr[0], .length = TASK};
    ote_status_t last = OTE_OK;
    ote_segment_h old = fx->seg;
    ote_batch_h b;
    size_t first;

    ote_test_target_kill(&fx->target);
    assert_int_equal(ote_test_target_start(&fx->target, wrap_b, args_b), 0);
    /* The transports may fail first; the handshake with the new instance tells it. */
    for (int i = 0; i < 10 && last != OTE_ERR_PEER_RESTARTED; i++) {
        ote_task_status_t st;

        assert_int_equal(ote_batch_create(fx->e, 1, &b), OTE_OK);
        last = ote_batch_submit(b, &r, 1, &first);
        if (last == OTE_OK) {
            assert_int_equal(ote_batch_wait(b, 20000), OTE_OK);
            assert_int_equal(ote_batch_task_status(b, first, &st), OTE_OK);
            assert_int_not_equal(st.state, OTE_TASK_COMPLETED);
            last = st.error;
        }
        ote_batch_release(b);
    }
    assert_int_equal(last, OTE_ERR_PEER_RESTARTED);
    assert_true(mp_stat(fx->e, "ote_peer_restarts_total", "") == 1.0);
    ote_segment_close(old);
    fx->seg = NULL;
    assert_int_equal(ote_segment_open(fx->e, fx->target.name, &fx->seg), OTE_OK);
    mp_pair_write_all(fx, 16u << 20, TASK, 506);
    mp_pair_check_all(fx, 16u << 20, 506);
}

static int in_netns_tests(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_both_rails_carry),
        cmocka_unit_test(test_shaped_split),
        cmocka_unit_test(test_link_down),
        cmocka_unit_test(test_link_up),
        cmocka_unit_test(test_restart),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}

int main(int argc, char **argv)
{
    return mp_netns_main(argc, argv, "ote_rails", ns_a, ns_b, in_netns_tests, parent);
}
