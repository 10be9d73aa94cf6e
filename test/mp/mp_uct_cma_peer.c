/*
 * The native cma component against peers it must refuse or must check:
 *  - with OTE_AUTH_KEY both engines authenticate cma connections as they do
 *    tcp ones: transfers work with the key, and a raw client on the cma
 *    socket that skips the handshake is refused; an authenticated raw client
 *    gets the target's checks (NOT_REGISTERED, ACCESS) and is closed for a
 *    data-carrying WRITE, which has no place on a by-reference connection;
 *  - a target the kernel does not let reach us with process_vm_* (another
 *    pid namespace, another user) is found by the PROBE at connect: the cma
 *    rail is not used (UNREACHABLE when cma is all there is; tcp carries the
 *    data when it is also selected).
 * The pid namespace and user cases need root, unshare and setpriv, and are
 * skipped otherwise.
 */
#include "core/engine.h"
#include "core/segment/segment.h"
#include "security_wire.h"
#include "uct_ext/stream/stream.h"
#include "mp_util.h"

#include <ote/ote.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#define REGION (8u << 20)
#define KEY    "cma-test-cluster-key-0123456789abcdef"

typedef ote_test_pair_t fx_t;

static fx_t *fx_start(const char *tls, const char *const *wrap)
{
    const char *const args[] = {"--region", "8m:rw", "--region", "1m:r", NULL};
    fx_t *f = ote_test_pair_start(tls, "127.0.0.1:0", wrap, args, REGION);

    assert_non_null(f);
    return f;
}

static void assert_rails(fx_t *f, const char *tl)
{
    assert_true(f->seg->rail_set.num_rails > 0);
    for (size_t i = 0; i < f->seg->rail_set.num_rails; i++)
        assert_string_equal(f->seg->rail_set.rails[i]->iface->resource.tl_name, tl);
}

/* A WRITE and a READ of 3 MiB + 5 at odd offsets, every byte checked. */
static void write_read_check(fx_t *f)
{
    const size_t len = (3u << 20) + 5, off = 17;
    ote_xfer_req_t r = {.local_addr = f->local + 1, .segment = f->seg,
                        .remote_addr = f->target.addr[0] + off, .length = len};
    ote_task_status_t st;
    ote_batch_h b;
    size_t first;
    char cmd[128];

    for (int op = 0; op < 2; op++) {
        r.op = op == 0 ? OTE_OP_WRITE : OTE_OP_READ;
        if (op == 0) {
            ote_test_fill(f->local + 1, off, len, 41);
        } else {
            snprintf(cmd, sizeof(cmd), "fill 0 %zu %zu 42", off, len);
            mp_pair_expect(f, cmd, "ok");
            memset(f->local, 0, REGION);
        }
        assert_int_equal(ote_batch_create(f->e, 1, &b), OTE_OK);
        assert_int_equal(ote_batch_submit(b, &r, 1, &first), OTE_OK);
        assert_int_equal(ote_batch_wait(b, 30000), OTE_OK);
        assert_int_equal(ote_batch_task_status(b, 0, &st), OTE_OK);
        if (st.state != OTE_TASK_COMPLETED)
            fail_msg("%s: %s", op ? "READ" : "WRITE", ote_status_string(st.error));
        ote_batch_release(b);
        if (op == 0) {
            snprintf(cmd, sizeof(cmd), "check 0 %zu %zu 41", off, len);
            mp_pair_expect(f, cmd, "ok");
        } else {
            assert_int_equal(ote_test_check(f->local + 1, off, len, 42), -1);
            assert_int_equal(f->local[0], 0);
            assert_int_equal(f->local[1 + len], 0);
        }
    }
}

/* The cma address a descriptor publishes, as a socket address. */
static void desc_cma_addr(const ote_desc_t *d, struct sockaddr_storage *ss, socklen_t *len_p)
{
    for (size_t i = 0; i < d->num_tls; i++) {
        if (strcmp(d->tls[i].tl_name, "cma") == 0) {
            assert_int_equal(ote_stream_local_addr_unpack(d->tls[i].addr, d->tls[i].addr_len, ss,
                                                          len_p),
                             OTE_OK);
            return;
        }
    }
    fail_msg("the descriptor offers no cma");
}

/* A by-reference request: header and the 8-byte trailer. */
static void send_ref(int fd, uint8_t type, uint64_t id, uint64_t addr, uint64_t len,
                     uint64_t trailer)
{
    uint8_t t[8];

    ote_put_u64(t, trailer);
    assert_int_equal(sw_tcp_send(fd, type, id, addr, len), 0);
    assert_int_equal(sw_send(fd, t, sizeof(t)), 0);
}

static void test_auth_key(void **state)
{
    ote_auth_t *auth, *other;
    struct sockaddr_storage ss;
    ote_desc_t *d = NULL;
    ote_stream_hdr_t h;
    socklen_t sslen;
    fx_t *f;
    int fd;

    if (!ote_auth_supported())
        skip();
    setenv("OTE_AUTH_KEY", KEY, 1);
    f = fx_start("cma", NULL);
    assert_int_equal(ote_segment_open(f->e, f->target.name, &f->seg), OTE_OK);
    assert_rails(f, "cma");
    write_read_check(f);

    auth  = sw_auth_new(KEY);
    other = sw_auth_new("another-cluster-key-0123456789abcdef");
    assert_non_null(auth);
    assert_non_null(other);
    assert_int_equal(sw_fetch_desc(f->target.name, auth, &d), OTE_OK);
    desc_cma_addr(d, &ss, &sslen);

    mp_pair_expect(f, "fill 1 0 1048576 7", "ok");

    /* No handshake: HELLO is answered AUTH and the connection closes. */
    fd = sw_connect_addr(&ss, sslen);
    assert_true(fd >= 0);
    assert_int_equal(sw_tcp_open(fd, NULL, d->instance_id), OTE_ERR_AUTH);
    assert_true(sw_closed(fd, 5000, NULL));
    close(fd);

    /* The wrong key: refused. */
    fd = sw_connect_addr(&ss, sslen);
    assert_true(fd >= 0);
    assert_int_not_equal(sw_tcp_open(fd, other, d->instance_id), OTE_OK);
    close(fd);

    /* The key: the target's checks answer by-reference requests. */
    fd = sw_connect_addr(&ss, sslen);
    assert_true(fd >= 0);
    assert_int_equal(sw_tcp_open(fd, auth, d->instance_id), OTE_OK);
    {
        uint64_t probe[2];
        uint8_t buf[64], big[OTE_STREAM_INLINE_MAX + 1] = {0};

        probe[0] = 0x0123456789abcdefull;
        probe[1] = 0;
        send_ref(fd, OTE_STREAM_PROBE, 4, 0, 16, (uint64_t)(uintptr_t)probe);
        assert_int_equal(sw_tcp_recv(fd, &h, 5000), 0);
        assert_int_equal(h.type, OTE_STREAM_PROBE_ACK);
        assert_int_equal(h.status, OTE_OK);
        assert_true(h.addr == probe[0]);
        assert_true(*(volatile uint64_t *)&probe[1] == ~probe[0]);

        send_ref(fd, OTE_STREAM_PUT_REF, 5, 0x1000, 64, (uint64_t)(uintptr_t)buf);
        assert_int_equal(sw_tcp_recv(fd, &h, 5000), 0);
        assert_int_equal(h.type, OTE_STREAM_REF_ACK);
        assert_int_equal(h.status, OTE_ERR_NOT_REGISTERED);
        send_ref(fd, OTE_STREAM_PUT_REF, 6, f->target.addr[1], 64, (uint64_t)(uintptr_t)buf);
        assert_int_equal(sw_tcp_recv(fd, &h, 5000), 0);
        assert_int_equal(h.status, OTE_ERR_ACCESS);
        send_ref(fd, OTE_STREAM_GET_REF, 7, f->target.addr[0] + REGION - 8, 64,
                 (uint64_t)(uintptr_t)buf);
        assert_int_equal(sw_tcp_recv(fd, &h, 5000), 0);
        assert_int_equal(h.status, OTE_ERR_OUT_OF_BOUNDS);
        /* Small puts travel by value, checked as on tcp; larger ones close the connection. */
        memset(buf, 0, sizeof(buf));
        assert_int_equal(sw_tcp_send(fd, OTE_STREAM_WRITE, 8, f->target.addr[1], 64), 0);
        assert_int_equal(sw_send(fd, buf, 64), 0);
        assert_int_equal(sw_tcp_recv(fd, &h, 5000), 0);
        assert_int_equal(h.type, OTE_STREAM_WRITE_ACK);
        assert_int_equal(h.status, OTE_ERR_ACCESS);
        /*
         * The target may close as soon as it reads the header, before the
         * payload is all sent (the send then fails with EPIPE or
         * ECONNRESET): either way the connection must end closed.
         */
        assert_true(sw_tcp_send_refused(fd, OTE_STREAM_WRITE, 9, f->target.addr[0],
                                        OTE_STREAM_INLINE_MAX + 1, big,
                                        OTE_STREAM_INLINE_MAX + 1) >= 0);
        assert_true(sw_closed(fd, 5000, NULL));
    }
    close(fd);
    /*
     * The interleaving that failed under load, forced: the header alone
     * closes the connection, and the payload sent after it fails (EPIPE or
     * ECONNRESET); the outcome checked is the same.
     */
    fd = sw_connect_addr(&ss, sslen);
    assert_true(fd >= 0);
    assert_int_equal(sw_tcp_open(fd, auth, d->instance_id), OTE_OK);
    assert_int_equal(sw_tcp_send(fd, OTE_STREAM_WRITE, 10, f->target.addr[0],
                                 OTE_STREAM_INLINE_MAX + 1),
                     0);
    assert_true(sw_wait_reset(fd, 5000));
    {
        uint8_t big[OTE_STREAM_INLINE_MAX + 1] = {0};

        assert_int_equal(sw_send_refused(fd, big, sizeof(big)), 1);
    }
    assert_true(sw_closed(fd, 5000, NULL));
    close(fd);
    /* The refused writes left the read-only region alone; the engine still serves us. */
    mp_pair_expect(f, "check 1 0 1048576 7", "ok");
    write_read_check(f);
    ote_desc_free(d);
    ote_auth_destroy(auth);
    ote_auth_destroy(other);
    ote_test_pair_stop(f);
    unsetenv("OTE_AUTH_KEY");
}

static bool have_root_tool(const char *tool)
{
    char cmd[128];

    if (geteuid() != 0)
        return false;
    snprintf(cmd, sizeof(cmd), "command -v %s >/dev/null 2>&1", tool);
    return system(cmd) == 0;
}

/*
 * The target runs where it cannot reach us with process_vm_*: the PROBE
 * fails, cma alone gives no rail, cma with tcp gives tcp rails that work.
 */
static void probe_refused(const char *const *wrap)
{
    fx_t *f = fx_start("cma", wrap);
    ote_segment_h seg = NULL;

    assert_int_equal(ote_segment_open(f->e, f->target.name, &seg), OTE_ERR_UNREACHABLE);
    ote_test_pair_stop(f);

    f = fx_start("cma,tcp", wrap);
    assert_int_equal(ote_segment_open(f->e, f->target.name, &f->seg), OTE_OK);
    assert_true(f->seg->same_host);
    assert_rails(f, "tcp");
    write_read_check(f);
    ote_test_pair_stop(f);
}

static void test_other_pid_namespace(void **state)
{
    static const char *const wrap[] = {"unshare", "--pid", "--fork", "--kill-child", NULL};

    if (!have_root_tool("unshare"))
        skip();
    probe_refused(wrap);
}

static void test_other_user(void **state)
{
    static const char *const wrap[] = {"setpriv", "--reuid=65534", "--regid=65534",
                                       "--clear-groups", NULL};

    const char *dir = getenv("ORBITTE_TEST_BUILDDIR");
    char cmd[4200];

    if (!have_root_tool("setpriv"))
        skip();
    /* The target runs as nobody: it must be able to reach the build tree
     * (a build under a private directory, such as mktemp -d, is not). */
    snprintf(cmd, sizeof(cmd),
             "setpriv --reuid=65534 --regid=65534 --clear-groups "
             "test -r '%s/common/ote_test_target' -a -x '%s/common/ote_test_target'",
             dir != NULL ? dir : ".", dir != NULL ? dir : ".");
    if (system(cmd) != 0) {
        fprintf(stderr, "test_other_user: the build tree is not reachable by uid 65534; skipped\n");
        skip();
    }
    probe_refused(wrap);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auth_key),
        cmocka_unit_test(test_other_pid_namespace),
        cmocka_unit_test(test_other_user),
    };

    signal(SIGPIPE, SIG_IGN);
    setenv("OTE_LOG_LEVEL", "error", 0);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
