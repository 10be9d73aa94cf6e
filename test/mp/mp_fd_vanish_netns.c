/*
 * Peers that vanish unheard leave no descriptors behind: an engine in
 * namespace A exchanges data over native tcp with a peer in namespace B
 * (each cycle its own B, joined to A's bridge by a veth pair); the peer
 * writes into the engine's memory too, so the engine holds accepted
 * connections of its own. Then the veth pair is deleted and the peer is
 * killed: no FIN or reset can reach the engine. After several such cycles
 * the engine's open descriptors (/proc/self/fd) must come back to within a
 * small constant of the count after a clean warm-up cycle: connections to
 * a peer that stopped answering are found (TCP keepalive) and closed.
 *
 * Needs root and `ip netns`; otherwise it says why and exits 77.
 */
#include "mp_netns.h"
#include "mp_util.h"

#include <time.h>

enum { CYCLES = 6, SLACK = 2 };

static char ns_a[32], ns_b[32]; /* ns_b: the prefix of the per-cycle namespaces */

/* One peer's life in namespace ns_b<c> at 10.82.0.<10+c>: traffic both ways, then its end. */
static void cycle(ote_engine_h e, uint8_t *local, int c, bool vanish)
{
    char ns[48], listen[64];
    const char *args[] = {"--listen", listen, "--region", "1m:rw", NULL};
    const char *wrap[] = {"ip", "netns", "exec", ns, NULL};
    ote_test_target_t t;
    ote_segment_h seg;
    unsigned seed = 40 + (unsigned)c;

    snprintf(ns, sizeof(ns), "%s_%d", ns_b, c);
    assert_int_equal(mp_cmd(false, "ip link add fdv%d type veth peer name eth0 netns %s", c, ns), 0);
    assert_int_equal(mp_cmd(false, "ip link set fdv%d master br0", c), 0);
    assert_int_equal(mp_cmd(false, "ip link set fdv%d up", c), 0);
    assert_int_equal(mp_cmd(false, "ip -n %s addr add 10.82.0.%d/24 dev eth0", ns, 10 + c), 0);
    assert_int_equal(mp_cmd(false, "ip -n %s link set eth0 up", ns), 0);
    assert_int_equal(mp_cmd(false, "ip -n %s link set lo up", ns), 0);
    {
        /* Until the new link reports its carrier (bounded: 10 s). */
        const char *wait[] = {"ip", "netns", "exec", ns, "sh", "-c",
                              "for i in $(seq 100); do grep -q up /sys/class/net/eth0/operstate "
                              "&& exit 0; sleep 0.1; done; exit 1", NULL};

        assert_int_equal(mp_run(wait, false), 0);
    }
    snprintf(listen, sizeof(listen), "10.82.0.%d:%u", 10 + c, 20000u + (unsigned)c);
    assert_int_equal(ote_test_target_start(&t, wrap, args), 0);
    assert_int_equal(ote_segment_open(e, t.name, &seg), OTE_OK);
    /* The peer writes into this engine's memory too: connections this engine accepted. */
    mp_traffic_both_ways(e, seg, local, t.addr[0], seed);
    /* Every byte acknowledged (delayed ACKs too): the connections are idle now. */
    usleep(500 * 1000);
    if (vanish) {
        /* Cut off first: whatever its kernel sends as it dies reaches nobody. */
        assert_int_equal(mp_cmd(false, "ip link del fdv%d", c), 0);
        ote_test_target_kill(&t);
    } else {
        ote_test_target_stop(&t);
        mp_cmd(false, "ip link del fdv%d", c);
    }
    ote_segment_close(seg);
}

static void test_vanished_peers(void **state)
{
    ote_engine_h e;
    ote_mem_h mem;
    uint8_t *local;
    int base, now = 0;

    (void)state;
    /* The bridge takes a moment to report its carrier. */
    for (int i = 0; i < 100; i++) {
        char st[16] = "";
        FILE *f = fopen("/sys/class/net/br0/operstate", "r");

        if (f != NULL) {
            if (fgets(st, sizeof(st), f) == NULL)
                st[0] = '\0';
            fclose(f);
        }
        if (strncmp(st, "up", 2) == 0)
            break;
        usleep(100 * 1000);
    }
    setenv("OTE_TLS", "tcp", 1);
    setenv("OTE_CONNECT_TIMEOUT_MS", "1000", 1);
    e = ote_test_engine("10.82.0.1:0");
    assert_int_equal(ote_mem_alloc(e, 1 << 20, NULL, OTE_ACCESS_REMOTE_WRITE, (void **)&local,
                                   &mem), OTE_OK);
    /* Warm-up: a peer that exits cleanly, its connections closed by its FINs. */
    cycle(e, local, 0, false);
    usleep(500 * 1000);
    base = mp_count_fds();
    for (int c = 1; c <= CYCLES; c++)
        cycle(e, local, c, true);
    /* Keepalive finds the dead connections within seconds; allow a generous bound. */
    for (int i = 0; i < 600; i++) {
        now = mp_count_fds();
        if (now <= base + SLACK)
            break;
        usleep(100 * 1000);
    }
    if (now > base + SLACK) {
        const char *ss[] = {"ss", "-tanoe", NULL};

        fprintf(stderr, "%d descriptors after a clean warm-up, %d after %d peers vanished\n",
                base, now, CYCLES);
        mp_run(ss, false);
    }
    assert_true(now <= base + SLACK);
    ote_mem_free(e, mem);
    ote_engine_destroy(e);
    unsetenv("OTE_TLS");
    unsetenv("OTE_CONNECT_TIMEOUT_MS");
}

/* ---- parent: namespaces -------------------------------------------------------- */

static int parent(const char *self, unsigned id)
{
    int rc = mp_netns_add_first("mp_fd_vanish_netns", ns_a);

    (void)id;
    if (rc != 0)
        return rc;
    mp_netns_delete_at_exit(ns_a, ns_b, CYCLES + 1);
    for (int c = 0; c <= CYCLES; c++) {
        if (mp_cmd(false, "ip netns add %s_%d", ns_b, c) != 0) {
            printf("mp_fd_vanish_netns: skipped: cannot add namespaces\n");
            return 77;
        }
    }
    /* A bridge (10.82.0.1) that keeps its carrier through a port of its own. */
    if (mp_cmd(false, "ip -n %s link set lo up", ns_a) != 0 ||
        mp_cmd(false, "ip -n %s link add br0 type bridge", ns_a) != 0 ||
        mp_cmd(false, "ip -n %s link add keep0 type veth peer name keep1", ns_a) != 0 ||
        mp_cmd(false, "ip -n %s link set keep0 master br0", ns_a) != 0 ||
        mp_cmd(false, "ip -n %s link set keep0 up", ns_a) != 0 ||
        mp_cmd(false, "ip -n %s link set keep1 up", ns_a) != 0 ||
        mp_cmd(false, "ip -n %s addr add 10.82.0.1/24 dev br0", ns_a) != 0 ||
        mp_cmd(false, "ip -n %s link set br0 up", ns_a) != 0) {
        printf("mp_fd_vanish_netns: skipped: cannot set up the bridge\n");
        return 77;
    }
    if (mp_netns_wait_up(ns_a, "br0") != 0) {
        printf("mp_fd_vanish_netns: br0 is not up within 10 s of `ip link set up`\n");
        return 1;
    }
    return mp_netns_run_child(self, ns_a, ns_b);
}

static int in_netns_tests(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vanished_peers),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

int main(int argc, char **argv)
{
    return mp_netns_main(argc, argv, "ote_fdv", ns_a, ns_b, in_netns_tests, parent);
}
