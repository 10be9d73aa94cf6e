/*
 * A hostile peer against a live target engine: truncated, oversized,
 * wrong-version, wrong-type, out-of-bounds and unauthenticated messages on
 * the control port and on the tcp data port, one connection each. After
 * each group the engine must still serve a well-behaved peer (WRITE and
 * READ, every byte verified), and the memory around its registered regions
 * (guard areas of the same mappings) must not have changed.
 *
 * This file holds the target fixture, the helpers the groups share and the
 * well-behaved peer; the hostile tests are by port in hostile_ctl.c,
 * hostile_tcp.c and hostile_cma.c (hostile.h).
 */
#include "hostile.h"

fixture_t fx;

static const char *group_tls = "tcp"; /* the target's OTE_TLS */

static int group_setup(const char *key)
{
    const char *args[] = {"--guard", "64k", "--region", "1m:rw", "--region", "64k:r", NULL};

    memset(&fx, 0, sizeof(fx));
    setenv("OTE_TLS", group_tls, 1);
    setenv("OTE_HANDSHAKE_TIMEOUT_MS", "600", 1);
    setenv("OTE_MAX_CONNS_PER_PEER", "24", 1);
    setenv("OTE_XFER_TIMEOUT_MS", STALL_MS, 1);
    set_key_env(key);
    if (ote_test_target_start(&fx.t, NULL, args) != 0 || fx.t.num_regions != 2)
        return -1;
    unsetenv("OTE_HANDSHAKE_TIMEOUT_MS");
    unsetenv("OTE_MAX_CONNS_PER_PEER");
    unsetenv("OTE_XFER_TIMEOUT_MS");
    fx.auth = sw_auth_new(key);
    if (fx.auth == NULL || sw_fetch_desc(fx.t.name, fx.auth, &fx.desc) != OTE_OK ||
        sw_desc_data_addr(fx.desc, group_tls, &fx.data, &fx.data_len) != 0)
        return -1;
    return 0;
}

static int group_setup_open(void **state)
{
    (void)state;
    return group_setup(NULL);
}

static int group_setup_keyed(void **state)
{
    (void)state;
    return group_setup(KEY);
}

/* A target whose data transport is the native cma (its descriptor has no tcp). */
static int group_setup_cma(void **state)
{
    (void)state;
    group_tls = "cma";
    return group_setup(NULL);
}

static int group_teardown(void **state)
{
    (void)state;
    ote_test_target_stop(&fx.t);
    ote_desc_free(fx.desc);
    ote_auth_destroy(fx.auth);
    set_key_env(NULL);
    return 0;
}

/* ---- what the groups share ---------------------------------------------- */

void set_key_env(const char *key)
{
    ote_test_setenv_or_unset("OTE_AUTH_KEY", key);
}

uint64_t region_addr(int r)
{
    return fx.t.addr[r];
}

/* The peer reset or closed the connection; pending data is not read. */
bool reset_within(int fd, int timeout_ms)
{
    uint64_t end = ote_time_ns() + (uint64_t)timeout_ms * 1000000ull;

    while (ote_time_ns() < end) {
        struct pollfd p = {.fd = fd, .events = POLLRDHUP};

        if (poll(&p, 1, 100) > 0 && (p.revents & (POLLERR | POLLHUP | POLLRDHUP)))
            return true;
    }
    return false;
}

int data_connect(void)
{
    int fd = sw_connect_addr(&fx.data, fx.data_len);

    assert_true(fd >= 0);
    return fd;
}

int data_open(void)
{
    int fd = data_connect();

    assert_int_equal(sw_tcp_open(fd, fx.auth, fx.desc->instance_id), OTE_OK);
    return fd;
}

/* data_open(), with the OTE_STREAM_CAP_* bits of the target's HELLO_ACK. */
int data_open_caps(uint64_t *caps_p)
{
    int fd = data_connect();

    assert_int_equal(sw_tcp_open_caps(fd, fx.auth, fx.desc->instance_id, caps_p), OTE_OK);
    return fd;
}

/* A control connection past its handshake: it holds its place. */
int ctl_open(void)
{
    int fd = sw_connect_name(fx.t.name);
    int st;

    if (fd < 0)
        return -1;
    if ((fx.auth->enabled && sw_ctl_authenticate(fd, fx.auth) != OTE_OK) ||
        sw_ctl_send(fd, OTE_CTL_GET_DESC, 1, NULL, 0) != 0) {
        close(fd);
        return -1;
    }
    st = sw_ctl_recv_status(fd, OTE_CTL_DESC, 5000);
    if (st != OTE_OK) {
        close(fd);
        return -1;
    }
    return fd;
}

/* ---- the engine still works, and nothing outside the regions changed ---- */

static void test_well_behaved_peer(void **state)
{
    ote_engine_h e;
    ote_segment_h seg;
    ote_batch_h b;
    ote_task_status_t ts;
    size_t first;
    uint8_t *src = malloc(REGION_LEN), *dst = calloc(1, REGION_LEN);
    char ans[128], expect[128];
    uint8_t *g = malloc(GUARD);
    ote_mem_desc_t md[2];
    ote_mem_h mems;
    ote_xfer_req_t req;

    (void)state;
    assert_non_null(src);
    assert_non_null(dst);
    assert_non_null(g);
    if (fx.auth->enabled)
        set_key_env(KEY);
    e = ote_test_engine(NULL);
    assert_int_equal(ote_segment_open(e, fx.t.name, &seg), OTE_OK);
    ote_test_fill(src, 0, REGION_LEN, 4242);
    md[0] = (ote_mem_desc_t){.addr = src, .length = REGION_LEN};
    md[1] = (ote_mem_desc_t){.addr = dst, .length = REGION_LEN};
    assert_int_equal(ote_mem_register(e, md, 1, &mems), OTE_OK);
    {
        ote_mem_h m2;

        assert_int_equal(ote_mem_register(e, &md[1], 1, &m2), OTE_OK);
        assert_int_equal(ote_batch_create(e, 4, &b), OTE_OK);
        req = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = src, .segment = seg,
                               .remote_addr = region_addr(0), .length = REGION_LEN};
        assert_int_equal(ote_batch_submit(b, &req, 1, &first), OTE_OK);
        assert_int_equal(ote_batch_wait(b, 20000), OTE_OK);
        assert_int_equal(ote_batch_status(b, &ts), OTE_OK);
        assert_int_equal(ts.state, OTE_TASK_COMPLETED);
        req.op         = OTE_OP_READ;
        req.local_addr = dst;
        assert_int_equal(ote_batch_submit(b, &req, 1, &first), OTE_OK);
        assert_int_equal(ote_batch_wait(b, 20000), OTE_OK);
        assert_int_equal(ote_batch_status(b, &ts), OTE_OK);
        assert_int_equal(ts.state, OTE_TASK_COMPLETED);
        assert_int_equal(ote_test_check(dst, 0, REGION_LEN, 4242), -1);
        ote_batch_release(b);
        ote_mem_deregister(e, m2);
    }
    assert_int_equal(ote_test_target_cmd(e, seg, "check 0 0 1048576 4242", ans, sizeof(ans),
                                         10000),
                     0);
    assert_string_equal(ans, "ok");
    /* Guard areas of both regions, and the read-only region, are untouched. */
    ote_test_fill(g, 0, GUARD, OTE_TEST_GUARD_SEED);
    snprintf(expect, sizeof(expect), "guard %016llx %016llx",
             (unsigned long long)ote_test_hash(g, GUARD), (unsigned long long)ote_test_hash(g, GUARD));
    for (int r = 0; r < 2; r++) {
        char cmd[32];

        snprintf(cmd, sizeof(cmd), "guard %d", r);
        assert_int_equal(ote_test_target_cmd(e, seg, cmd, ans, sizeof(ans), 10000), 0);
        assert_string_equal(ans, expect);
    }
    memset(g, 0, GUARD);
    snprintf(expect, sizeof(expect), "sum %016llx", (unsigned long long)ote_test_hash(g, GUARD));
    assert_int_equal(ote_test_target_cmd(e, seg, "sum 1 0 65536", ans, sizeof(ans), 10000), 0);
    assert_string_equal(ans, expect);
    ote_mem_deregister(e, mems);
    ote_segment_close(seg);
    ote_engine_destroy(e);
    set_key_env(NULL);
    free(src);
    free(dst);
    free(g);
}

#define HOSTILE_TESTS                                                  \
    cmocka_unit_test(test_ctl_truncated_header),                       \
    cmocka_unit_test(test_ctl_truncated_payload),                      \
    cmocka_unit_test(test_ctl_bad_headers),                            \
    cmocka_unit_test(test_ctl_bad_notify),                             \
    cmocka_unit_test(test_ctl_idle),                                   \
    cmocka_unit_test(test_ctl_never_reads),                            \
    cmocka_unit_test(test_ctl_unauthenticated),                        \
    cmocka_unit_test(test_tcp_bad_first_message),                      \
    cmocka_unit_test(test_tcp_truncated),                              \
    cmocka_unit_test(test_tcp_wrong_instance),                         \
    cmocka_unit_test(test_tcp_out_of_bounds),                          \
    cmocka_unit_test(test_tcp_bad_after_hello),                        \
    cmocka_unit_test(test_tcp_writev),                                 \
    cmocka_unit_test(test_tcp_readv),                                  \
    cmocka_unit_test(test_tcp_bad_vector),                             \
    cmocka_unit_test(test_tcp_never_reads),                            \
    cmocka_unit_test(test_tcp_unauthenticated),                        \
    cmocka_unit_test(test_tcp_payload_pieces),                         \
    cmocka_unit_test(test_tcp_payload_early),                          \
    cmocka_unit_test(test_tcp_discard_pieces),                         \
    cmocka_unit_test(test_accept_no_fd),                               \
    cmocka_unit_test(test_conn_limit),                                 \
    cmocka_unit_test(test_well_behaved_peer)

int main(void)
{
    const struct CMUnitTest open_tests[]  = {HOSTILE_TESTS};
    const struct CMUnitTest keyed_tests[] = {HOSTILE_TESTS};
    const struct CMUnitTest cma_tests[]   = {cmocka_unit_test(test_cma_burst),
                                             cmocka_unit_test(test_cma_inline)};
    int rc;

    setenv("OTE_LOG_LEVEL", "error", 0);
    rc = cmocka_run_group_tests_name("hostile peer, no key", open_tests, group_setup_open,
                                     group_teardown);
    if (ote_auth_supported())
        rc |= cmocka_run_group_tests_name("hostile peer, with a key", keyed_tests,
                                          group_setup_keyed, group_teardown);
    rc |= cmocka_run_group_tests_name("native cma target", cma_tests, group_setup_cma,
                                      group_teardown);
    return rc;
}
