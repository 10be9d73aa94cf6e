/*
 * Two "hosts" on one machine: network namespaces A and B joined by a veth
 * pair (10.77.0.1/24 in A, 10.77.0.2/24 in B), made and deleted here. The
 * host identity includes the network namespace, so a peer in B is another
 * host to an engine in A: it must not be offered cma, native or UCT's (not
 * even when cma is all both sides have), only network transports, and
 * transfers must still work across the veth. A peer in A itself gets the
 * native cma.
 *
 * Needs root and `ip netns`; otherwise it says why and exits 77 (skipped).
 * The parent sets the namespaces up, runs the tests in A through
 * `ip netns exec` (which also gives UCT A's view of /sys/class/net), and
 * deletes the namespaces whatever the tests did.
 */
#include "core/engine_int.h"
#include "core/segment/segment.h"
#include "core/worker/worker.h"
#include "base/util.h"
#include "mp_netns.h"
#include "mp_util.h"
#include "uct_ext/tcp/tcp.h"

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

#define ADDR_A "10.77.0.1"
#define ADDR_B "10.77.0.2"
#define REGION (16u << 20)

static char ns_a[32], ns_b[32], veth_a[16], veth_b[16];

/* ---- parent: namespaces ------------------------------------------------------ */

static int parent(const char *self)
{
    int rc = mp_netns_add_both("mp_uct_netns", ns_a, ns_b);

    if (rc != 0)
        return rc;
    if (mp_cmd(false, "ip link add %s type veth peer name %s", veth_a, veth_b) != 0 ||
        mp_cmd(false, "ip link set %s netns %s", veth_a, ns_a) != 0 ||
        mp_cmd(false, "ip link set %s netns %s", veth_b, ns_b) != 0 ||
        mp_cmd(false, "ip -n %s addr add " ADDR_A "/24 dev %s", ns_a, veth_a) != 0 ||
        mp_cmd(false, "ip -n %s addr add " ADDR_B "/24 dev %s", ns_b, veth_b) != 0 ||
        mp_cmd(false, "ip -n %s link set %s up", ns_a, veth_a) != 0 ||
        mp_cmd(false, "ip -n %s link set %s up", ns_b, veth_b) != 0 ||
        mp_cmd(false, "ip -n %s link set lo up", ns_a) != 0 ||
        mp_cmd(false, "ip -n %s link set lo up", ns_b) != 0) {
        printf("mp_uct_netns: skipped: cannot set up the veth pair between namespaces\n");
        return 77;
    }
    if (mp_netns_wait_up(ns_a, veth_a) != 0 || mp_netns_wait_up(ns_b, veth_b) != 0) {
        printf("mp_uct_netns: the veth pair is not up within 10 s of `ip link set up`\n");
        return 1;
    }
    return mp_netns_run_child(self, ns_a, ns_b);
}

/* ---- tests, inside namespace A ------------------------------------------------- */

typedef ote_test_pair_t fx_t;

static fx_t *fx_start(const char *tls, bool target_in_b)
{
    const char *const wrap_b[]  = {"ip", "netns", "exec", ns_b, NULL};
    const char *const args_b[]  = {"--listen", ADDR_B ":0", "--region", "16m:rw", NULL};
    const char *const args_a[]  = {"--listen", ADDR_A ":0", "--region", "16m:rw", NULL};
    fx_t *f = ote_test_pair_start(tls, ADDR_A ":0", target_in_b ? wrap_b : NULL,
                                  target_in_b ? args_b : args_a, REGION);

    assert_non_null(f);
    return f;
}

/* WRITE then READ of mixed sizes at unaligned offsets, every byte checked. */
static void transfer_and_check(fx_t *f, bool read_too)
{
    static const size_t sizes[] = {1, 4097, 65537, (1u << 20) + 3, (4u << 20) - 1};
    enum { N = sizeof(sizes) / sizeof(sizes[0]) };
    ote_xfer_req_t r[N];
    ote_task_status_t st[N];
    size_t off[N], pos = 11;
    char cmd[128];

    for (size_t i = 0; i < N; i++) {
        off[i] = pos;
        pos += sizes[i] + 17;
    }
    mp_pair_expect(f, "zero 0 0 16777216", "ok");
    for (int op = 0; op < (read_too ? 2 : 1); op++) {
        if (op == 1) {
            mp_pair_expect(f, "fill 0 0 16777216 66", "ok");
            memset(f->local, 0, REGION);
        }
        for (size_t i = 0; i < N; i++) {
            if (op == 0)
                ote_test_fill(f->local + off[i] + 1, off[i], sizes[i], 65);
            r[i] = (ote_xfer_req_t){.op = op == 0 ? OTE_OP_WRITE : OTE_OP_READ,
                                    .local_addr = f->local + off[i] + 1, .segment = f->seg,
                                    .remote_addr = f->target.addr[0] + off[i],
                                    .length = sizes[i]};
        }
        assert_int_equal(ote_test_batch_run(f->e, r, N, 60000, st), OTE_OK);
        for (size_t i = 0; i < N; i++) {
            if (st[i].state != OTE_TASK_COMPLETED)
                fail_msg("%s %zu bytes: %s", op ? "READ" : "WRITE", sizes[i],
                         ote_status_string(st[i].error));
            if (op == 0) {
                snprintf(cmd, sizeof(cmd), "check 0 %zu %zu 65", off[i], sizes[i]);
                mp_pair_expect(f, cmd, "ok");
            } else {
                assert_int_equal(ote_test_check(f->local + off[i] + 1, off[i], sizes[i], 66),
                                 -1);
                assert_int_equal(f->local[off[i]], 0);
                assert_int_equal(f->local[off[i] + 1 + sizes[i]], 0);
            }
        }
    }
}

/* A peer in B is another host: network transports only, and they work. */
static void test_other_namespace(void **state)
{
    fx_t *f = fx_start(NULL, true);

    assert_int_equal(ote_segment_open(f->e, f->target.name, &f->seg), OTE_OK);
    assert_false(f->seg->same_host);
    assert_string_not_equal(f->seg->desc->host_id, f->e->facts.host_id);
    assert_true(f->seg->rail_set.num_rails > 0);
    for (size_t i = 0; i < f->seg->rail_set.num_rails; i++) {
        ote_rail_t *r = f->seg->rail_set.rails[i];

        assert_string_not_equal(r->iface->resource.tl_name, "cma");
        assert_string_not_equal(r->iface->resource.tl_name, "uct_cma");
        assert_true(r->iface->resource.is_network);
        assert_true(r->caps.scope & OTE_TL_SCOPE_NETWORK);
    }
    /* The peer offers cma in its descriptor; we just cannot use it. */
    {
        bool offered = false;

        for (size_t k = 0; k < f->seg->desc->num_tls; k++)
            offered |= strcmp(f->seg->desc->tls[k].tl_name, "cma") == 0;
        assert_true(offered);
    }
    transfer_and_check(f, true);
    ote_test_pair_stop(f);
}

/*
 * cma on both sides and nothing else (the native one; with UCX also UCT's,
 * through the shm alias): no rail at all across namespaces. The native cma
 * reaches only this host, so it is not even tried: its scope has no
 * network, and the peer's host id differs.
 */
static void test_cma_never_across(void **state)
{
    static const char *const sels[] = {"cma", "shm"};

    for (size_t i = 0; i < sizeof(sels) / sizeof(sels[0]); i++) {
        fx_t *f = fx_start(sels[i], true);
        ote_worker_t *w   = &f->e->facts.workers[0];
        ote_segment_h seg = NULL;

        assert_true(w->num_ifaces > 0);
        for (size_t k = 0; k < w->num_ifaces; k++) {
            ote_tl_caps_t caps;

            w->ifaces[k]->ops->query(w->ifaces[k], &caps);
            assert_false(caps.scope & OTE_TL_SCOPE_NETWORK);
        }
        assert_int_equal(ote_segment_open(f->e, f->target.name, &seg), OTE_ERR_UNREACHABLE);
        ote_test_pair_stop(f);
    }
}

/* UCT's tcp across the veth: the rail runs on A's veth, not on loopback. */
static void test_uct_tcp_across(void **state)
{
#ifdef HAVE_UCX
    fx_t *f = fx_start("uct_tcp", true);

    assert_int_equal(ote_segment_open(f->e, f->target.name, &f->seg), OTE_OK);
    assert_true(f->seg->rail_set.num_rails > 0);
    for (size_t i = 0; i < f->seg->rail_set.num_rails; i++) {
        ote_rail_t *r = f->seg->rail_set.rails[i];

        assert_string_equal(r->iface->resource.tl_name, "uct_tcp");
        assert_string_equal(r->iface->resource.dev_name, veth_a);
    }
    transfer_and_check(f, false);
    ote_test_pair_stop(f);
#else
    skip();
#endif
}

/*
 * Devices named as users name them: both engines listen on every address
 * and select their veth by its interface name with OTE_TLS=tcp. The native
 * tcp transport runs on that device, the target's descriptor gives the
 * veth's address for it, and WRITE and READ move verified bytes across.
 */
static void test_net_devices_across(void **state)
{
    char env_b[48];
    const char *const wrap_b[] = {"ip", "netns", "exec", ns_b, "env", env_b, NULL};
    const char *const args_b[] = {"--listen", "0.0.0.0:0", "--region", "16m:rw", NULL};
    fx_t *f;
    bool published = false;

    snprintf(env_b, sizeof(env_b), "OTE_NET_DEVICES=%s", veth_b);
    setenv("OTE_NET_DEVICES", veth_a, 1);
    f = ote_test_pair_start("tcp", "0.0.0.0:0", wrap_b, args_b, REGION);
    assert_non_null(f);
    assert_int_equal(f->e->facts.num_tls, 1);
    assert_string_equal(f->e->facts.tls[0].resource.tl_name, "tcp");
    assert_string_equal(f->e->facts.tls[0].resource.dev_name, veth_a);
    assert_int_equal(ote_segment_open(f->e, f->target.name, &f->seg), OTE_OK);
    for (size_t k = 0; k < f->seg->desc->num_tls; k++) {
        const ote_desc_tl_t *t = &f->seg->desc->tls[k];
        ote_stream_sockaddr_t addrs[OTE_TCP_MAX_ADDRS];
        size_t n = 0;
        char ip[64];

        /* The target selected its veth alone, and publishes its address. */
        if (strcmp(t->tl_name, "tcp") != 0)
            continue;
        assert_string_equal(t->dev_name, veth_b);
        assert_int_equal(ote_tcp_addr_unpack(t->addr, t->addr_len, addrs, OTE_TCP_MAX_ADDRS, &n),
                         OTE_OK);
        assert_int_equal(n, 1);
        ote_sockaddr_ip((struct sockaddr *)&addrs[0].ss, ip, sizeof(ip));
        assert_string_equal(ip, ADDR_B);
        published = true;
    }
    assert_true(published);
    assert_true(f->seg->rail_set.num_rails > 0);
    for (size_t i = 0; i < f->seg->rail_set.num_rails; i++) {
        ote_rail_t *r = f->seg->rail_set.rails[i];

        assert_string_equal(r->iface->resource.tl_name, "tcp");
        assert_string_equal(r->iface->resource.dev_name, veth_a);
        assert_true(r->caps.ops & OTE_TL_CAP_GET_ZCOPY);
    }
    transfer_and_check(f, true);
    ote_test_pair_stop(f);
    unsetenv("OTE_NET_DEVICES");
}

/* The same namespace is the same host: the native shm alone, both ways. */
static void test_same_namespace(void **state)
{
    fx_t *f = fx_start(NULL, false);

    assert_int_equal(ote_segment_open(f->e, f->target.name, &f->seg), OTE_OK);
    assert_true(f->seg->same_host);
    assert_true(f->seg->rail_set.num_rails > 0);
    for (size_t i = 0; i < f->seg->rail_set.num_rails; i++) {
        assert_string_equal(f->seg->rail_set.rails[i]->iface->resource.tl_name, "shm");
        assert_true(f->seg->rail_set.rails[i]->caps.ops & OTE_TL_CAP_CHECKED);
    }
    transfer_and_check(f, true);
    ote_test_pair_stop(f);
}

int main(int argc, char **argv)
{
    unsigned id = (unsigned)getpid() % 1000000u;
    char path[4096];
    const char *self;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_other_namespace),
        cmocka_unit_test(test_cma_never_across),
        cmocka_unit_test(test_uct_tcp_across),
        cmocka_unit_test(test_net_devices_across),
        cmocka_unit_test(test_same_namespace),
    };
    bool child = mp_netns_child(argc, argv, ns_a, sizeof(ns_a), ns_b, sizeof(ns_b));

    signal(SIGPIPE, SIG_IGN);
    if (!child) {
        snprintf(ns_a, sizeof(ns_a), "ote_uct_a%u", id);
        snprintf(ns_b, sizeof(ns_b), "ote_uct_b%u", id);
    } else if (sscanf(ns_a, "ote_uct_a%u", &id) != 1) {
        return 1;
    }
    snprintf(veth_a, sizeof(veth_a), "oteua%u", id);
    snprintf(veth_b, sizeof(veth_b), "oteub%u", id);
    if (child)
        return cmocka_run_group_tests(tests, NULL, NULL);
    self = mp_netns_self(path, sizeof(path));
    return self != NULL ? parent(self) : 1;
}
