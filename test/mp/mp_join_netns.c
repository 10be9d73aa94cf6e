/*
 * A network device that appears while the engines run joins as a rail, and
 * one that goes away leaves. Network namespaces A and B start joined by one
 * veth pair, join0 (10.82.0.0/24); the engine in A and the target in B use
 * the native tcp (OTE_NET_DEVICES=join[0-9]) and read their devices again
 * every 100 ms (OTE_RDMA_POLL_MS). In order:
 *
 *   - a second pair, join1 (10.82.1.0/24), is made while both run: each
 *     engine opens tcp/join1 on its running workers and publishes it, the
 *     segment gains the rail at a refresh, and a transfer then goes over
 *     both interfaces (their byte counters and the rail counters grow on
 *     both) with every byte landing;
 *   - join1 deleted: its rail pauses, and transfers complete whole on join0.
 *
 * A also has join2 (10.82.2.1/24, a veth pair whose both ends stay in A),
 * which B has no device of that name for: the peer's join0 and join1
 * addresses are routed through A's join0 and join1, so join2 never becomes
 * a rail (one would carry its bytes over another interface). B reaches
 * 10.82.2.0/24 through A's join0, as an engine named by that address needs.
 *
 * Needs root and `ip netns`; otherwise it says why and exits 77. The parent
 * sets the namespaces up, runs the tests in A through `ip netns exec` and
 * deletes the namespaces however the tests end (a signal too).
 */
#include "base/util.h"
#include "mp_netns.h"
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

#define REGION (64u << 20)
#define TASK   (4u << 20)
#define MAX_RAILS 16

static char ns_a[32], ns_b[32];
static unsigned id;

/* A shell command line, its output hidden unless loud; 0 on success. */
static int sh(bool loud, const char *fmt, ...)
{
    char line[1024];
    size_t n;
    va_list ap;
    int status;

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line) - 32, fmt, ap);
    va_end(ap);
    n = strlen(line);
    if (!loud)
        snprintf(line + n, sizeof(line) - n, " >/dev/null 2>&1");
    status = system(line);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static int parent(const char *self)
{
    int rc = mp_netns_add_both("mp_join_netns", ns_a, ns_b);

    if (rc != 0)
        return rc;
    if (sh(true, "ip link add oja%u type veth peer name ojb%u", id, id) != 0 ||
        sh(true, "ip link set oja%u netns %s && ip link set ojb%u netns %s", id, ns_a, id,
           ns_b) != 0 ||
        sh(true, "ip -n %s link set oja%u name join0 && ip -n %s link set ojb%u name join0",
           ns_a, id, ns_b, id) != 0 ||
        sh(true, "ip -n %s addr add 10.82.0.1/24 dev join0 && ip -n %s addr add 10.82.0.2/24 "
                 "dev join0", ns_a, ns_b) != 0 ||
        sh(true, "ip -n %s link set join0 up && ip -n %s link set join0 up && ip -n %s link "
                 "set lo up && ip -n %s link set lo up", ns_a, ns_b, ns_a, ns_b) != 0 ||
        sh(true, "ip -n %s link add join2 type veth peer name ojx%u && ip -n %s addr add "
                 "10.82.2.1/24 dev join2 && ip -n %s link set join2 up && ip -n %s link set "
                 "ojx%u up && ip -n %s route add 10.82.2.0/24 via 10.82.0.1", ns_a, id, ns_a,
           ns_a, ns_a, id, ns_b) != 0) {
        printf("mp_join_netns: skipped: cannot set up the namespaces and their veth pair\n");
        return 77;
    }
    /* Running, not only up: an engine made before would find no device (mp_netns_wait_up). */
    if (mp_netns_wait_up(ns_a, "join0") != 0 || mp_netns_wait_up(ns_b, "join0") != 0 ||
        mp_netns_wait_up(ns_a, "join2") != 0) {
        printf("mp_join_netns: join0 or join2 not up within 10 s of `ip link set up`\n");
        return 1;
    }
    return sh(true, "ip netns exec %s '%s' --in-netns %s %s %u", ns_a, self, ns_a, ns_b, id);
}

/* ---- tests, inside namespace A --------------------------------------------------- */

static ote_test_pair_t *fx;

/* The segment's rails; the one on dev in *r (false when none). */
static size_t rails(const char *dev, ote_rail_info_t *r)
{
    ote_rail_info_t all[MAX_RAILS];
    size_t n = 0;
    bool found = false;

    assert_int_equal(ote_segment_rails(fx->seg, all, MAX_RAILS, &n), OTE_OK);
    for (size_t i = 0; i < n && i < MAX_RAILS; i++) {
        assert_string_equal(all[i].transport, "tcp");
        if (dev != NULL && strcmp(all[i].device, dev) == 0) {
            *r    = all[i];
            found = true;
        }
    }
    if (dev != NULL)
        assert_true(found);
    return n;
}

/* WRITE [0, len) of the region as TASK-sized tasks with pattern seed; all must complete. */
static void write_all(size_t len, uint64_t seed)
{
    char c[128];

    ote_test_fill(fx->local, 0, len, seed);
    mp_write_tasks(fx->e, fx->seg, fx->local, fx->target.addr[0], len, TASK, 60000);
    snprintf(c, sizeof(c), "check 0 0 %zu %llu", len, (unsigned long long)seed);
    assert_int_equal(ote_test_target_expect(fx->e, fx->seg, c, "ok", 30000), 0);
}

static int setup(void **state)
{
    const char *args_b[] = {"--listen", "0.0.0.0:0", "--region", "64m:rw", NULL};

    (void)state;
    setenv("OTE_NET_DEVICES", "join[0-9]", 1);
    setenv("OTE_RDMA_POLL_MS", "100", 1);
    setenv("OTE_RAIL_MAX_BYTES", "4m", 1);
    /* Listening on every address: an engine bound to one uses that interface alone. */
    return mp_netns_pair_open(&fx, ns_b, NULL, "tcp", "0.0.0.0:0", args_b, REGION, NULL);
}

static int teardown(void **state)
{
    (void)state;
    sh(false, "ip link del join1");
    mp_netns_pair_stop(&fx, NULL);
    return 0;
}

/* join1 made while both engines run: a refresh gains its rail, and both interfaces carry. */
static void test_join(void **state)
{
    ote_rail_info_t r0, r1, a0, a1;
    uint64_t tx0, tx1, d0, d1;
    double t0;
    size_t n = 0;
    (void)state;

    assert_int_equal(rails("join0", &r0), 1);
    write_all(16u << 20, 11); /* one rail, whole */
    assert_int_equal(sh(true, "ip link add oja%u type veth peer name ojb%u && ip link set "
                              "ojb%u netns %s && ip link set oja%u name join1 && ip -n %s "
                              "link set ojb%u name join1", id, id, id, ns_b, id, ns_b, id), 0);
    assert_int_equal(sh(true, "ip addr add 10.82.1.1/24 dev join1 && ip -n %s addr add "
                              "10.82.1.2/24 dev join1 && ip link set join1 up && ip -n %s link "
                              "set join1 up", ns_b, ns_b), 0);
    /* Each engine reads its devices every 100 ms; generous bound for a loaded machine. */
    t0 = (double)ote_time_ns() / 1e9;
    while ((double)ote_time_ns() / 1e9 - t0 < 60 && n < 2) {
        usleep(100 * 1000);
        assert_int_equal(ote_segment_refresh(fx->seg), OTE_OK);
        n = rails(NULL, NULL);
    }
    printf("join1 made: the segment has %zu rails %.1f s later\n", n,
           (double)ote_time_ns() / 1e9 - t0);
    assert_int_equal(n, 2);
    rails("join0", &r0);
    rails("join1", &r1);
    tx0 = mp_if_tx_bytes("join0");
    tx1 = mp_if_tx_bytes("join1");
    write_all(REGION, 12);
    rails("join0", &a0);
    rails("join1", &a1);
    d0 = mp_if_tx_bytes("join0") - tx0;
    d1 = mp_if_tx_bytes("join1") - tx1;
    printf("both rails: join0 %llu B (iface %llu), join1 %llu B (iface %llu)\n",
           (unsigned long long)(a0.bytes - r0.bytes), (unsigned long long)d0,
           (unsigned long long)(a1.bytes - r1.bytes), (unsigned long long)d1);
    assert_int_equal(a0.bytes - r0.bytes + a1.bytes - r1.bytes, REGION);
    assert_true(a0.bytes - r0.bytes >= REGION / 8);
    assert_true(a1.bytes - r1.bytes >= REGION / 8);
    assert_true(d0 >= a0.bytes - r0.bytes);
    assert_true(d1 >= a1.bytes - r1.bytes);
}

/* join1 deleted: its rail pauses and every transfer completes whole on join0. */
static void test_leave(void **state)
{
    ote_rail_info_t r0, r1, a0;
    double t0;
    (void)state;

    assert_int_equal(sh(true, "ip link del join1"), 0);
    t0 = (double)ote_time_ns() / 1e9;
    do {
        usleep(50 * 1000);
        rails("join1", &r1);
    } while (r1.state != OTE_RAIL_COOLING && (double)ote_time_ns() / 1e9 - t0 < 60);
    printf("join1 deleted: its rail paused %.1f s later\n", (double)ote_time_ns() / 1e9 - t0);
    assert_int_equal(r1.state, OTE_RAIL_COOLING);
    rails("join0", &r0);
    write_all(32u << 20, 13);
    rails("join0", &a0);
    assert_int_equal(a0.bytes - r0.bytes, 32u << 20);
    /* The peer's descriptor no longer names join1: a refresh keeps the segment as it is. */
    assert_int_equal(ote_segment_refresh(fx->seg), OTE_OK);
    write_all(16u << 20, 14);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 5 && strcmp(argv[1], "--in-netns") == 0) {
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_join),
            cmocka_unit_test(test_leave),
        };

        snprintf(ns_a, sizeof(ns_a), "%s", argv[2]);
        snprintf(ns_b, sizeof(ns_b), "%s", argv[3]);
        id = (unsigned)strtoul(argv[4], NULL, 10);
        return cmocka_run_group_tests(tests, setup, teardown);
    }
    id = (unsigned)getpid() % 100000u;
    snprintf(ns_a, sizeof(ns_a), "ote_join_a%u", id);
    snprintf(ns_b, sizeof(ns_b), "ote_join_b%u", id);
    {
        /* The child runs under `ip`, where /proc/self/exe would be ip itself. */
        char self[4096];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

        if (n <= 0)
            return 1;
        self[n] = '\0';
        return parent(self);
    }
}
