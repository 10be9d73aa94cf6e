/*
 * Authentication: the handshake primitives (mutual proof, wrong key,
 * reflection, replay, malformed messages), key configuration, and engines
 * in separate processes: matching key works, a wrong key or a missing key
 * on either side is OTE_ERR_AUTH at ote_segment_open. Also measures what
 * authentication adds to connection setup (printed, never asserted):
 *   ote_mp_security_auth --iters N
 */
#include "security_wire.h"
#include "testlib.h"

#include "base/config.h"
#include "base/util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define KEY  "auth-test-cluster-key-0123456789abcdef"
#define KEY2 "auth-test-other-key-0123456789abcdef"

static long bench_iters = 20;

/* ---- primitives ------------------------------------------------------------ */

/* Run a whole handshake between two auth objects; returns the target's verdict. */
static ote_status_t handshake(ote_auth_t *ini, ote_auth_t *tgt, ote_status_t *ini_status_p)
{
    ote_auth_session_t si, st;
    uint8_t hello[OTE_AUTH_HELLO_LEN], tproof[OTE_AUTH_TPROOF_LEN], iproof[OTE_AUTH_IPROOF_LEN];
    ote_status_t s;

    ote_auth_session_init(&si, OTE_AUTH_CHANNEL_CTL);
    ote_auth_session_init(&st, OTE_AUTH_CHANNEL_CTL);
    assert_int_equal(ote_auth_initiator_hello(ini, &si, hello), OTE_OK);
    assert_int_equal(ote_auth_target_hello(tgt, &st, hello, sizeof(hello), tproof), OTE_OK);
    s = ote_auth_initiator_proof(ini, &si, tproof, sizeof(tproof), iproof);
    *ini_status_p = s;
    if (s != OTE_OK) /* an honest initiator stops here; check the target anyway */
        memset(iproof, 0, sizeof(iproof));
    return ote_auth_target_proof(tgt, &st, iproof, sizeof(iproof));
}

static void test_handshake_keys(void **state)
{
    ote_auth_t *a = sw_auth_new(KEY), *b = sw_auth_new(KEY), *c = sw_auth_new(KEY2);
    ote_status_t ini;

    (void)state;
    assert_true(a->enabled && b->enabled && c->enabled);
    assert_int_equal(handshake(a, b, &ini), OTE_OK);
    assert_int_equal(ini, OTE_OK);
    assert_int_equal(handshake(a, c, &ini), OTE_ERR_AUTH);
    assert_int_equal(ini, OTE_ERR_AUTH);
    assert_int_equal(handshake(c, a, &ini), OTE_ERR_AUTH);
    assert_int_equal(ini, OTE_ERR_AUTH);
    ote_auth_destroy(a);
    ote_auth_destroy(b);
    ote_auth_destroy(c);
}

static void test_mac_binds_role_and_channel(void **state)
{
    ote_auth_t *a = sw_auth_new(KEY);
    uint8_t ni[32], nt[32], m[4][32];

    (void)state;
    memset(ni, 1, sizeof(ni));
    memset(nt, 2, sizeof(nt));
    assert_int_equal(ote_auth_mac(a, OTE_AUTH_CHANNEL_CTL, OTE_AUTH_ROLE_TARGET, ni, nt, m[0]), 0);
    assert_int_equal(ote_auth_mac(a, OTE_AUTH_CHANNEL_CTL, OTE_AUTH_ROLE_INITIATOR, ni, nt, m[1]),
                     0);
    assert_int_equal(ote_auth_mac(a, OTE_AUTH_CHANNEL_TCP, OTE_AUTH_ROLE_TARGET, ni, nt, m[2]), 0);
    assert_int_equal(ote_auth_mac(a, OTE_AUTH_CHANNEL_CTL, OTE_AUTH_ROLE_TARGET, nt, ni, m[3]), 0);
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++)
            assert_memory_not_equal(m[i], m[j], 32);
    ote_auth_destroy(a);
}

/* The target's proof sent back as the initiator's, and an old proof replayed. */
static void test_reflection_and_replay(void **state)
{
    ote_auth_t *a = sw_auth_new(KEY), *tgt = sw_auth_new(KEY);
    ote_auth_session_t si, st, st2;
    uint8_t hello[32], tproof[64], iproof[32], tproof2[64];

    (void)state;
    ote_auth_session_init(&st, OTE_AUTH_CHANNEL_CTL);
    memset(hello, 7, sizeof(hello));
    assert_int_equal(ote_auth_target_hello(tgt, &st, hello, 32, tproof), OTE_OK);
    assert_int_equal(ote_auth_target_proof(tgt, &st, tproof + 32, 32), OTE_ERR_AUTH);

    /* A recorded good exchange, replayed on a new session with the same hello. */
    ote_auth_session_init(&si, OTE_AUTH_CHANNEL_CTL);
    ote_auth_session_init(&st, OTE_AUTH_CHANNEL_CTL);
    assert_int_equal(ote_auth_initiator_hello(a, &si, hello), OTE_OK);
    assert_int_equal(ote_auth_target_hello(tgt, &st, hello, 32, tproof), OTE_OK);
    assert_int_equal(ote_auth_initiator_proof(a, &si, tproof, 64, iproof), OTE_OK);
    assert_int_equal(ote_auth_target_proof(tgt, &st, iproof, 32), OTE_OK);
    ote_auth_session_init(&st2, OTE_AUTH_CHANNEL_CTL);
    assert_int_equal(ote_auth_target_hello(tgt, &st2, hello, 32, tproof2), OTE_OK);
    assert_memory_not_equal(tproof, tproof2, 32); /* a fresh target nonce */
    assert_int_equal(ote_auth_target_proof(tgt, &st2, iproof, 32), OTE_ERR_AUTH);

    /* A tcp proof is no good on the control channel. */
    ote_auth_session_init(&st, OTE_AUTH_CHANNEL_CTL);
    ote_auth_session_init(&si, OTE_AUTH_CHANNEL_TCP);
    assert_int_equal(ote_auth_initiator_hello(a, &si, hello), OTE_OK);
    assert_int_equal(ote_auth_target_hello(tgt, &st, hello, 32, tproof), OTE_OK);
    assert_int_equal(ote_auth_initiator_proof(a, &si, tproof, 64, iproof), OTE_ERR_AUTH);
    ote_auth_destroy(a);
    ote_auth_destroy(tgt);
}

static void test_malformed_and_order(void **state)
{
    ote_auth_t *a = sw_auth_new(KEY), *none = sw_auth_new(NULL);
    ote_auth_session_t s;
    uint8_t buf[64] = {0};

    (void)state;
    ote_auth_session_init(&s, OTE_AUTH_CHANNEL_TCP);
    assert_int_equal(ote_auth_target_hello(a, &s, buf, 31, buf), OTE_ERR_PROTOCOL);
    ote_auth_session_init(&s, OTE_AUTH_CHANNEL_TCP);
    assert_int_equal(ote_auth_target_hello(a, &s, NULL, 32, buf), OTE_ERR_PROTOCOL);
    ote_auth_session_init(&s, OTE_AUTH_CHANNEL_TCP);
    /* Proof before hello, and a second hello. */
    assert_int_equal(ote_auth_target_proof(a, &s, buf, 32), OTE_ERR_INVALID_PARAM);
    ote_auth_session_init(&s, OTE_AUTH_CHANNEL_TCP);
    assert_int_equal(ote_auth_target_hello(a, &s, buf, 32, buf), OTE_OK);
    assert_int_equal(ote_auth_target_hello(a, &s, buf, 32, buf), OTE_ERR_INVALID_PARAM);
    assert_int_equal(ote_auth_target_proof(a, &s, buf, 33), OTE_ERR_PROTOCOL);
    /* A failed session stays failed. */
    assert_int_equal(ote_auth_target_proof(a, &s, buf, 32), OTE_ERR_INVALID_PARAM);
    ote_auth_session_init(&s, OTE_AUTH_CHANNEL_TCP);
    assert_int_equal(ote_auth_initiator_hello(a, &s, buf), OTE_OK);
    assert_int_equal(ote_auth_initiator_proof(a, &s, buf, 63, buf), OTE_ERR_PROTOCOL);
    /* Without a key nothing is computed. */
    ote_auth_session_init(&s, OTE_AUTH_CHANNEL_TCP);
    assert_false(none->enabled);
    assert_int_equal(ote_auth_initiator_hello(none, &s, buf), OTE_ERR_INVALID_PARAM);
    ote_auth_destroy(a);
    ote_auth_destroy(none);
}

static void test_admission_limits(void **state)
{
    ote_auth_params_t cfg;
    ote_auth_t *a;

    (void)state;
    memset(&cfg, 0, sizeof(cfg));
    cfg.max_conns          = 3;
    cfg.max_conns_per_peer = 2;
    assert_int_equal(ote_auth_create(&cfg, &a), OTE_OK);
    assert_int_equal(ote_auth_conn_admit(a, "10.0.0.1"), OTE_OK);
    assert_int_equal(ote_auth_conn_admit(a, "10.0.0.1"), OTE_OK);
    assert_int_equal(ote_auth_conn_admit(a, "10.0.0.1"), OTE_ERR_BUSY);
    /* A prefix of another address is another peer. */
    assert_int_equal(ote_auth_conn_admit(a, "10.0.0.10"), OTE_OK);
    assert_int_equal(ote_auth_conn_admit(a, "10.0.0.2"), OTE_ERR_BUSY); /* total */
    ote_auth_conn_release(a, "10.0.0.1");
    assert_int_equal(ote_auth_conn_admit(a, "10.0.0.2"), OTE_OK);
    ote_auth_conn_release(a, "10.0.0.1");
    ote_auth_conn_release(a, "10.0.0.10");
    ote_auth_conn_release(a, "10.0.0.2");
    assert_int_equal(a->num_conns, 0);
    assert_int_equal(a->num_peers, 0);
    ote_auth_destroy(a);
}

/* ---- configuration --------------------------------------------------------- */

static void test_key_config(void **state)
{
    char path[] = "/tmp/ote_auth_keyXXXXXX";
    int fd      = mkstemp(path);
    ote_engine_h e = NULL;
    ote_engine_params_t p = {.listen_addr = "127.0.0.1:0"};

    (void)state;
    assert_true(fd >= 0);
    /* Both variables: refused. */
    setenv("OTE_AUTH_KEY", KEY, 1);
    setenv("OTE_AUTH_KEY_FILE", path, 1);
    assert_int_equal(ote_engine_create(&p, &e), OTE_ERR_INVALID_PARAM);
    unsetenv("OTE_AUTH_KEY");
    /* An empty key file: refused. */
    assert_int_equal(ote_engine_create(&p, &e), OTE_ERR_INVALID_PARAM);
    /* A missing key file: refused. */
    setenv("OTE_AUTH_KEY_FILE", "/nonexistent/ote.key", 1);
    assert_int_equal(ote_engine_create(&p, &e), OTE_ERR_INVALID_PARAM);
    /* The first line of the file is the key. */
    assert_int_equal(write(fd, KEY "\nsecond line\n", strlen(KEY) + 13), (ssize_t)strlen(KEY) + 13);
    close(fd);
    setenv("OTE_AUTH_KEY_FILE", path, 1);
    assert_int_equal(ote_engine_create(&p, &e), OTE_OK);
    assert_true(e != NULL);
    {
        /* Same key as OTE_AUTH_KEY=KEY: a keyed raw peer authenticates. */
        ote_auth_t *k = sw_auth_new(KEY);
        int c         = sw_connect_name(ote_engine_name(e));

        assert_true(c >= 0);
        assert_int_equal(sw_ctl_authenticate(c, k), OTE_OK);
        close(c);
        ote_auth_destroy(k);
    }
    ote_engine_destroy(e);
    unsetenv("OTE_AUTH_KEY_FILE");
    unlink(path);
}

/* ---- engines in separate processes --------------------------------------- */

static ote_status_t open_with_key(const char *target_name, const char *key)
{
    ote_engine_h e;
    ote_segment_h seg;
    ote_status_t st;

    ote_test_setenv_or_unset("OTE_AUTH_KEY", key);
    e = ote_test_engine(NULL);
    unsetenv("OTE_AUTH_KEY");
    st = ote_segment_open(e, target_name, &seg);
    if (st == OTE_OK)
        ote_segment_close(seg);
    ote_engine_destroy(e);
    return st;
}

static int start_target(ote_test_target_t *t, const char *key)
{
    const char *args[] = {"--region", "1m:rw", NULL};
    int rc;

    if (key)
        setenv("OTE_AUTH_KEY", key, 1);
    rc = ote_test_target_start(t, NULL, args);
    unsetenv("OTE_AUTH_KEY");
    return rc;
}

static void test_mp_keys(void **state)
{
    ote_test_target_t keyed, open;

    (void)state;
    assert_int_equal(start_target(&keyed, KEY), 0);
    assert_int_equal(start_target(&open, NULL), 0);
    assert_int_equal(open_with_key(keyed.name, KEY2), OTE_ERR_AUTH);
    assert_int_equal(open_with_key(keyed.name, NULL), OTE_ERR_AUTH);
    assert_int_equal(open_with_key(open.name, KEY), OTE_ERR_AUTH);
    assert_int_equal(open_with_key(open.name, NULL), OTE_OK);
    assert_int_equal(open_with_key(keyed.name, KEY), OTE_OK);
    ote_test_target_stop(&open);
    ote_test_target_stop(&keyed);
}

/* With the matching key: a WRITE and a READ, every byte verified on both sides. */
static void test_mp_keyed_transfer(void **state)
{
    const size_t len = 1u << 20;
    ote_test_target_t t;
    ote_engine_h e;
    ote_segment_h seg;
    ote_batch_h b;
    ote_mem_h m;
    ote_task_status_t ts;
    size_t first;
    uint8_t *buf = malloc(2 * len);
    ote_mem_desc_t d = {.addr = buf, .length = 2 * len};
    ote_xfer_req_t req[2];
    char ans[64];

    (void)state;
    assert_non_null(buf);
    assert_int_equal(start_target(&t, KEY), 0);
    setenv("OTE_AUTH_KEY", KEY, 1);
    e = ote_test_engine(NULL);
    assert_int_equal(ote_segment_open(e, t.name, &seg), OTE_OK);
    assert_int_equal(ote_mem_register(e, &d, 1, &m), OTE_OK);
    ote_test_fill(buf, 0, len, 77);
    memset(buf + len, 0, len);
    assert_int_equal(ote_batch_create(e, 2, &b), OTE_OK);
    req[0] = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = buf, .segment = seg,
                              .remote_addr = t.addr[0], .length = len};
    assert_int_equal(ote_batch_submit(b, req, 1, &first), OTE_OK);
    assert_int_equal(ote_batch_wait(b, 20000), OTE_OK);
    req[1] = (ote_xfer_req_t){.op = OTE_OP_READ, .local_addr = buf + len, .segment = seg,
                              .remote_addr = t.addr[0], .length = len};
    assert_int_equal(ote_batch_submit(b, &req[1], 1, &first), OTE_OK);
    assert_int_equal(ote_batch_wait(b, 20000), OTE_OK);
    assert_int_equal(ote_batch_status(b, &ts), OTE_OK);
    assert_int_equal(ts.state, OTE_TASK_COMPLETED);
    assert_int_equal(ote_test_check(buf + len, 0, len, 77), -1);
    assert_int_equal(ote_test_target_cmd(e, seg, "check 0 0 1048576 77", ans, sizeof(ans), 10000),
                     0);
    assert_string_equal(ans, "ok");
    ote_batch_release(b);
    ote_mem_deregister(e, m);
    ote_segment_close(seg);
    ote_engine_destroy(e);
    unsetenv("OTE_AUTH_KEY");
    ote_test_target_stop(&t);
    free(buf);
}

/* ---- cost of authentication on connection setup (printed) ----------------- */

static double open_close_us(const char *target_name, const char *key, long iters)
{
    ote_engine_h e;
    uint64_t t0 = 0;

    if (key)
        setenv("OTE_AUTH_KEY", key, 1);
    e = ote_test_engine(NULL);
    unsetenv("OTE_AUTH_KEY");
    /* One warm-up open. */
    for (long i = -1; i < iters; i++) {
        ote_segment_h seg;

        if (i == 0)
            t0 = ote_time_ns();
        assert_int_equal(ote_segment_open(e, target_name, &seg), OTE_OK);
        ote_segment_close(seg);
    }
    {
        double us = (double)(ote_time_ns() - t0) / 1e3 / (double)iters;

        ote_engine_destroy(e);
        return us;
    }
}

static void test_setup_cost(void **state)
{
    ote_test_target_t keyed, open;
    double with_key, without;
    long conns = 2;
    const char *v = getenv("OTE_TCP_CONNS");

    (void)state;
    if (v)
        conns = atol(v);
    assert_int_equal(start_target(&keyed, KEY), 0);
    assert_int_equal(start_target(&open, NULL), 0);
    without  = open_close_us(open.name, NULL, bench_iters);
    with_key = open_close_us(keyed.name, KEY, bench_iters);
    {
        /* The CPU part alone: both sides of one handshake, no sockets. */
        ote_auth_t *a = sw_auth_new(KEY), *b = sw_auth_new(KEY);
        long n        = bench_iters * 10;
        uint64_t t0   = ote_time_ns();
        ote_status_t ini;

        for (long i = 0; i < n; i++)
            assert_int_equal(handshake(a, b, &ini), OTE_OK);
        printf("# handshake computation (both sides, no I/O): %.1f us\n",
               (double)(ote_time_ns() - t0) / 1e3 / (double)n);
        ote_auth_destroy(a);
        ote_auth_destroy(b);
    }
    printf("# segment open+close, %ld iterations, control + %ld tcp connections each\n",
           bench_iters, conns);
    printf("#   without key: %8.1f us\n#   with key:    %8.1f us\n#   authentication adds "
           "%.1f us per open (%.1f us per connection)\n",
           without, with_key, with_key - without, (with_key - without) / (double)(1 + conns));
    ote_test_target_stop(&open);
    ote_test_target_stop(&keyed);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_handshake_keys),
        cmocka_unit_test(test_mac_binds_role_and_channel),
        cmocka_unit_test(test_reflection_and_replay),
        cmocka_unit_test(test_malformed_and_order),
        cmocka_unit_test(test_admission_limits),
        cmocka_unit_test(test_key_config),
        cmocka_unit_test(test_mp_keys),
        cmocka_unit_test(test_mp_keyed_transfer),
        cmocka_unit_test(test_setup_cost),
    };

    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "--iters") == 0)
            bench_iters = atol(argv[i + 1]);
    }
    if (bench_iters < 1)
        bench_iters = 1;
    setenv("OTE_TLS", "tcp", 1);
    setenv("OTE_LOG_LEVEL", "error", 0);
    unsetenv("OTE_AUTH_KEY");
    unsetenv("OTE_AUTH_KEY_FILE");
    if (!ote_auth_supported()) {
        printf("# no libcrypto in this build: authentication tests skipped\n");
        return 77;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
