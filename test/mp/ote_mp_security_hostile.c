/*
 * A hostile peer against a live target engine: truncated, oversized,
 * wrong-version, wrong-type, out-of-bounds and unauthenticated messages on
 * the control port and on the tcp data port, one connection each. After
 * each group the engine must still serve a well-behaved peer (WRITE and
 * READ, every byte verified), and the memory around its registered regions
 * (guard areas of the same mappings) must not have changed.
 */
#include "security_wire.h"
#include "testlib.h"

#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define KEY        "hostile-test-cluster-key-0123456789"
#define GUARD      65536
#define REGION_LEN (1u << 20)
#define HS_TIMEOUT_MS 600
/* The target's OTE_XFER_TIMEOUT_MS: how long its answers may stay unread. */
#define STALL_MS "2000"

typedef struct {
    ote_test_target_t t;
    ote_auth_t       *auth;     /* the cluster key, or none */
    ote_desc_t       *desc;
    struct sockaddr_storage data;
    socklen_t         data_len;
    char              guard0[64], guard1[64];
} fixture_t;

static fixture_t fx;

static void set_key_env(const char *key)
{
    if (key)
        setenv("OTE_AUTH_KEY", key, 1);
    else
        unsetenv("OTE_AUTH_KEY");
}

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

static uint64_t region_addr(int r)
{
    return fx.t.addr[r];
}

/* ---- control port ------------------------------------------------------ */

static void test_ctl_truncated_header(void **state)
{
    int fd = sw_connect_name(fx.t.name);
    uint8_t h[8] = {0x4f, 0x45, 0x54, 0x43, OTE_CTL_VERSION, OTE_CTL_GET_DESC, 0, 0};
    size_t junk = 1;

    (void)state;
    assert_true(fd >= 0);
    assert_int_equal(sw_send(fd, h, sizeof(h)), 0);
    shutdown(fd, SHUT_WR);
    assert_true(sw_closed(fd, 3000, &junk));
    assert_int_equal(junk, 0);
    close(fd);
}

static void test_ctl_truncated_payload(void **state)
{
    int fd = sw_connect_name(fx.t.name);
    uint8_t part[10] = {0};
    size_t junk = 1;

    (void)state;
    assert_true(fd >= 0);
    assert_int_equal(sw_ctl_send_raw(fd, OTE_CTL_MAGIC, OTE_CTL_VERSION, OTE_CTL_NOTIFY, 0, 100, 1,
                                     part, sizeof(part)),
                     0);
    shutdown(fd, SHUT_WR);
    assert_true(sw_closed(fd, 3000, &junk));
    assert_int_equal(junk, 0);
    close(fd);
}

/* Each of these headers must close the connection at once, unanswered. */
static void test_ctl_bad_headers(void **state)
{
    struct {
        uint32_t magic;
        uint8_t  version, type;
        uint16_t flags;
        uint32_t length;
    } bad[] = {
        {OTE_CTL_MAGIC ^ 1, OTE_CTL_VERSION, OTE_CTL_GET_DESC, 0, 0},   /* magic           */
        {OTE_CTL_MAGIC, OTE_CTL_VERSION + 1, OTE_CTL_GET_DESC, 0, 0},   /* version         */
        {OTE_CTL_MAGIC, 0, OTE_CTL_GET_DESC, 0, 0},                     /* version 0       */
        {OTE_CTL_MAGIC, OTE_CTL_VERSION, OTE_CTL_GET_DESC, 1, 0},       /* flags           */
        {OTE_CTL_MAGIC, OTE_CTL_VERSION, 0, 0, 0},                      /* type 0          */
        {OTE_CTL_MAGIC, OTE_CTL_VERSION, 200, 0, 0},                    /* unknown type    */
        {OTE_CTL_MAGIC, OTE_CTL_VERSION, OTE_CTL_DESC, 0, 4},           /* a response      */
        {OTE_CTL_MAGIC, OTE_CTL_VERSION, OTE_CTL_NOTIFY_ACK, 0, 4},     /* a response      */
        {OTE_CTL_MAGIC, OTE_CTL_VERSION, OTE_CTL_GET_DESC, 0, 1},       /* GET_DESC + data */
        {OTE_CTL_MAGIC, OTE_CTL_VERSION, OTE_CTL_NOTIFY, 0, 0xffffffffu}, /* oversized     */
        {OTE_CTL_MAGIC, OTE_CTL_VERSION, OTE_CTL_NOTIFY, 0, OTE_CTL_NOTIFY_MAX_LEN + 1},
        {OTE_CTL_MAGIC, OTE_CTL_VERSION, OTE_CTL_AUTH_PROOF, 0, 1u << 30},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int fd = sw_connect_name(fx.t.name);
        size_t junk = 1;

        assert_true(fd >= 0);
        /* Only the header: an oversized length must be refused before its payload. */
        assert_int_equal(sw_ctl_send_raw(fd, bad[i].magic, bad[i].version, bad[i].type,
                                         bad[i].flags, bad[i].length, 9, NULL, 0),
                         0);
        if (!sw_closed(fd, 3000, &junk))
            fail_msg("bad control header %zu left the connection open", i);
        assert_int_equal(junk, 0);
        close(fd);
    }
}

/* NOTIFY payloads whose inner fields lie. */
static void test_ctl_bad_notify(void **state)
{
    uint8_t p[64];
    size_t n;

    (void)state;
    for (int k = 0; k < 4; k++) {
        int fd = sw_connect_name(fx.t.name);

        assert_true(fd >= 0);
        memset(p, 0, sizeof(p));
        n = 8 + 8;
        if (k == 0) { /* sender name longer than the payload */
            p[n++] = 200;
        } else if (k == 1) { /* data length beyond the payload */
            p[n++] = 1; p[n++] = 'x';
            ote_put_u32(p + n, 4000); n += 4;
        } else if (k == 2) { /* NUL inside the sender name */
            p[n++] = 3; p[n++] = 'a'; p[n++] = 0; p[n++] = 'b';
            ote_put_u32(p + n, 0); n += 4;
        } else { /* data length over OTE_NOTIFY_MAX */
            p[n++] = 1; p[n++] = 'x';
            ote_put_u32(p + n, OTE_NOTIFY_MAX + 1); n += 4;
        }
        if (fx.auth->enabled)
            assert_int_equal(sw_ctl_authenticate(fd, fx.auth), OTE_OK);
        assert_int_equal(sw_ctl_send(fd, OTE_CTL_NOTIFY, 3, p, n), 0);
        assert_true(sw_closed(fd, 3000, NULL));
        close(fd);
    }
}

/* A connection that never speaks is dropped after OTE_HANDSHAKE_TIMEOUT_MS. */
static void test_ctl_idle(void **state)
{
    int fd = sw_connect_name(fx.t.name);
    uint64_t t0 = ote_time_ns();

    (void)state;
    assert_true(fd >= 0);
    assert_true(sw_closed(fd, 5000, NULL));
    assert_true(ote_time_ns() - t0 >= (HS_TIMEOUT_MS - 100) * 1000000ull);
    close(fd);
}

/* The peer reset or closed the connection; pending data is not read. */
static bool reset_within(int fd, int timeout_ms)
{
    uint64_t end = ote_time_ns() + (uint64_t)timeout_ms * 1000000ull;

    while (ote_time_ns() < end) {
        struct pollfd p = {.fd = fd, .events = POLLRDHUP};

        if (poll(&p, 1, 100) > 0 && (p.revents & (POLLERR | POLLHUP | POLLRDHUP)))
            return true;
    }
    return false;
}

/*
 * A peer that sends requests and never reads the replies: the listener
 * stops reading it, serves others meanwhile, and drops it once its reply
 * has made no progress for 2 s. The replies to 80000 requests (over 10 MB)
 * do not fit in the sockets, so the listener must stall on this peer; it
 * resets the connection (a FIN would queue behind the unread reply and
 * never arrive). The tiny receive buffer can also leave both kernels
 * retransmitting into each other: the listener's small send buffer makes
 * it notice the stall all the same.
 */
static void test_ctl_never_reads(void **state)
{
    int bad = sw_connect_name(fx.t.name);
    int small = 4096;
    uint8_t block[256 * OTE_CTL_HDR_LEN];
    size_t sent = 0, total = 80000 * OTE_CTL_HDR_LEN;
    uint64_t end;
    ote_desc_t *d = NULL;

    (void)state;
    assert_true(bad >= 0);
    setsockopt(bad, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    if (fx.auth->enabled)
        assert_int_equal(sw_ctl_authenticate(bad, fx.auth), OTE_OK);
    for (size_t k = 0; k < 256; k++) {
        ote_ctl_hdr_t hh = {.type = OTE_CTL_GET_DESC, .seq = (uint32_t)k};

        ote_ctl_hdr_encode(&hh, block + k * OTE_CTL_HDR_LEN);
    }
    ote_socket_set_nonblock(bad, true);
    end = ote_time_ns() + 20000000000ull;
    while (sent < total && ote_time_ns() < end) {
        size_t off = sent % sizeof(block);
        ssize_t n  = send(bad, block + off, OTE_MIN(sizeof(block) - off, total - sent),
                          MSG_NOSIGNAL);

        if (n > 0)
            sent += (size_t)n;
        else
            usleep(5000);
    }
    /* Meanwhile a good peer is served. */
    for (int i = 0; i < 5; i++) {
        assert_int_equal(sw_fetch_desc(fx.t.name, fx.auth, &d), OTE_OK);
        ote_desc_free(d);
    }
    /* Never reading: dropped after the reply timeout (generous for slow builds). */
    if (!reset_within(bad, 30000)) {
        struct tcp_info ti;
        socklen_t tl = sizeof(ti);
        int inq = -1, outq = -1;

        getsockopt(bad, IPPROTO_TCP, TCP_INFO, &ti, &tl);
        ioctl(bad, SIOCINQ, &inq);
        ioctl(bad, SIOCOUTQ, &outq);
        fail_msg("not dropped: sent %zu of %zu request bytes; socket state %u, %d bytes "
                 "unread, %d unsent",
                 sent, total, ti.tcpi_state, inq, outq);
    }
    close(bad);
}

/* ---- data port ------------------------------------------------------- */

static int data_connect(void)
{
    int fd = sw_connect_addr(&fx.data, fx.data_len);

    assert_true(fd >= 0);
    return fd;
}

static int data_open(void)
{
    int fd = data_connect();

    assert_int_equal(sw_tcp_open(fd, fx.auth, fx.desc->instance_id), OTE_OK);
    return fd;
}

/* data_open(), with the OTE_TCP_CAP_* bits of the target's HELLO_ACK. */
static int data_open_caps(uint64_t *caps_p)
{
    int fd = data_connect();

    assert_int_equal(sw_tcp_open_caps(fd, fx.auth, fx.desc->instance_id, caps_p), OTE_OK);
    return fd;
}

static void test_tcp_bad_first_message(void **state)
{
    struct {
        uint16_t magic;
        uint8_t  version, type;
        int32_t  status;
        uint64_t addr, length;
    } bad[] = {
        {OTE_TCP_MAGIC ^ 0x100, OTE_TCP_VERSION, OTE_TCP_HELLO, 0, 0, 0},
        {OTE_TCP_MAGIC, OTE_TCP_VERSION + 1, OTE_TCP_HELLO, 0, 0, 0},
        {OTE_TCP_MAGIC, OTE_TCP_VERSION, 0, 0, 0, 0},
        {OTE_TCP_MAGIC, OTE_TCP_VERSION, 77, 0, 0, 0},
        {OTE_TCP_MAGIC, OTE_TCP_VERSION, OTE_TCP_HELLO, 12345, 0, 0},     /* unknown status  */
        {OTE_TCP_MAGIC, OTE_TCP_VERSION, OTE_TCP_HELLO, 0, 0, 1000},      /* HELLO + payload */
        {OTE_TCP_MAGIC, OTE_TCP_VERSION, OTE_TCP_WRITE, 0, 0x1000, 64},   /* WRITE first     */
        {OTE_TCP_MAGIC, OTE_TCP_VERSION, OTE_TCP_READ_REQ, 0, 0x1000, 64},
        {OTE_TCP_MAGIC, OTE_TCP_VERSION, OTE_TCP_WRITE_ACK, 0, 0, 0},     /* a response      */
        {OTE_TCP_MAGIC, OTE_TCP_VERSION, OTE_TCP_AUTH_PROOF, 0, 0, 32},   /* proof first     */
        {OTE_TCP_MAGIC, OTE_TCP_VERSION, OTE_TCP_AUTH_HELLO, 0, 0, 31},   /* short hello     */
    };

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int fd = data_connect();
        uint8_t zeros[64] = {0};

        assert_int_equal(sw_tcp_send_raw(fd, bad[i].magic, bad[i].version, bad[i].type,
                                         bad[i].status, 1, bad[i].addr, bad[i].length),
                         0);
        if (bad[i].type == OTE_TCP_WRITE || bad[i].type == OTE_TCP_AUTH_PROOF)
            sw_send(fd, zeros, bad[i].length < 64 ? bad[i].length : 64);
        if (!sw_closed(fd, 3000, NULL))
            fail_msg("bad first data message %zu left the connection open", i);
        close(fd);
    }
}

static void test_tcp_truncated(void **state)
{
    int fd = data_connect();
    uint8_t half[16] = {0x4f, 0x54, OTE_TCP_VERSION, OTE_TCP_HELLO};

    (void)state;
    assert_int_equal(sw_send(fd, half, sizeof(half)), 0);
    /* Half a header, then silence: dropped by the handshake deadline. */
    assert_true(sw_closed(fd, 5000, NULL));
    close(fd);
}

static void test_tcp_wrong_instance(void **state)
{
    int fd = data_connect();

    (void)state;
    assert_int_equal(sw_tcp_open(fd, fx.auth, fx.desc->instance_id ^ 1), OTE_ERR_NOT_FOUND);
    assert_true(sw_closed(fd, 3000, NULL));
    close(fd);
}

/* Refused accesses are answered and the connection stays usable. */
static void test_tcp_out_of_bounds(void **state)
{
    uint64_t r0 = region_addr(0), r1 = region_addr(1);
    struct {
        uint8_t  type;
        uint64_t addr, length;
    } refused[] = {
        {OTE_TCP_WRITE, r0 + REGION_LEN - 8, 64},   /* crosses the end         */
        {OTE_TCP_WRITE, r0 - 64, 64},               /* guard before the region */
        {OTE_TCP_WRITE, r0 - 8, 64},                /* crosses the start       */
        {OTE_TCP_WRITE, r0 + REGION_LEN, 64},       /* guard after the region  */
        {OTE_TCP_WRITE, 4096, 64},                  /* nowhere                 */
        {OTE_TCP_WRITE, r1, 64},                    /* read-only region        */
        {OTE_TCP_READ_REQ, r0 + REGION_LEN - 8, 64},
        {OTE_TCP_READ_REQ, r0 - 64, 64},
        {OTE_TCP_READ_REQ, r0 + REGION_LEN, 4096},
    };
    uint8_t payload[64], back[64];
    int fd = data_open();
    ote_tcp_hdr_t h;

    (void)state;
    memset(payload, 0xa5, sizeof(payload));
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        assert_int_equal(sw_tcp_send(fd, refused[i].type, 100 + i, refused[i].addr,
                                     refused[i].length),
                         0);
        if (refused[i].type == OTE_TCP_WRITE)
            assert_int_equal(sw_send(fd, payload, (size_t)refused[i].length), 0);
        assert_int_equal(sw_tcp_recv(fd, &h, 5000), 0);
        assert_int_equal(h.id, 100 + i);
        assert_int_equal(h.type, refused[i].type == OTE_TCP_WRITE ? OTE_TCP_WRITE_ACK
                                                                  : OTE_TCP_READ_RESP);
        if (h.status >= 0)
            fail_msg("access %zu was not refused", i);
        assert_int_equal(h.length, 0);
    }
    /* Still usable for an access that is allowed. */
    assert_int_equal(sw_tcp_send(fd, OTE_TCP_WRITE, 1, r0 + 128, sizeof(payload)), 0);
    assert_int_equal(sw_send(fd, payload, sizeof(payload)), 0);
    assert_int_equal(sw_tcp_recv(fd, &h, 5000), 0);
    assert_int_equal(h.status, OTE_OK);
    assert_int_equal(sw_tcp_send(fd, OTE_TCP_READ_REQ, 2, r0 + 128, sizeof(back)), 0);
    assert_int_equal(sw_tcp_recv(fd, &h, 5000), 0);
    assert_int_equal(h.status, OTE_OK);
    assert_int_equal(h.length, sizeof(back));
    assert_int_equal(sw_recv(fd, back, sizeof(back), 5000), 0);
    assert_memory_equal(back, payload, sizeof(back));
    close(fd);
}

/*
 * A peer that asks for answers and never reads them: 64 MiB of READ
 * answers cannot fit in the sockets, so the target stalls on this peer; it
 * resets the connection once they have not moved for OTE_XFER_TIMEOUT_MS
 * (its worker keeps a timer for that even with no task of its own), and
 * serves others meanwhile.
 */
static void test_tcp_never_reads(void **state)
{
    int fd = data_open();
    ote_desc_t *d = NULL;
    uint64_t t0;

    (void)state;
    for (uint64_t i = 0; i < 64; i++)
        assert_int_equal(sw_tcp_send(fd, OTE_TCP_READ_REQ, 1000 + i, region_addr(0), REGION_LEN),
                         0);
    t0 = ote_time_ns();
    assert_int_equal(sw_fetch_desc(fx.t.name, fx.auth, &d), OTE_OK);
    ote_desc_free(d);
    if (!reset_within(fd, 20000))
        fail_msg("a peer that does not read its answers was not dropped in 20 s");
    printf("# a peer not reading its answers was reset after %.1f s (OTE_XFER_TIMEOUT_MS %s)\n",
           (double)(ote_time_ns() - t0) / 1e9, STALL_MS);
    /* Not before the timeout: the answers stalled at once. */
    assert_true(ote_time_ns() - t0 >= 1500000000ull);
    close(fd);
}

/*
 * The native cma target serves the requests it reads together in groups,
 * one copy per group: a burst mixing WRITEs, READs of what the WRITEs before
 * them wrote, and refused accesses is answered in order, each with its own
 * status, and the READs see the WRITEs.
 */
static void test_cma_burst(void **state)
{
    enum { K = 64 << 10, N = 9 };
    uint64_t r0 = region_addr(0), r1 = region_addr(1);
    uint8_t *src = malloc(3 * K), *dst = calloc(1, 3 * K), *dst2 = calloc(1, K);
    uint8_t *dst3 = calloc(1, 64), *dst4 = calloc(1, 64);
    struct {
        uint8_t  type;
        uint64_t addr, length;
        void    *local;
        bool     ok;
    } q[N] = {
        {OTE_TCP_PUT_REF, r0, K, src, true},
        {OTE_TCP_PUT_REF, r0 + K, K, src + K, true},
        {OTE_TCP_PUT_REF, r1, 4096, src, false},                 /* read-only region */
        {OTE_TCP_PUT_REF, r0 + 2 * K, K, src + 2 * K, true},
        {OTE_TCP_GET_REF, r0, 3 * K, dst, true},
        {OTE_TCP_GET_REF, r0 + REGION_LEN - 8, 64, dst4, false}, /* crosses the end */
        {OTE_TCP_GET_REF, r0 + K, K, dst2, true},
        {OTE_TCP_PUT_REF, r0 + REGION_LEN, 64, src, false},      /* guard after it */
        {OTE_TCP_GET_REF, r1, 64, dst3, true},                   /* read-only: readable */
    };
    uint8_t burst[N * (OTE_TCP_HDR_LEN + OTE_TCP_REF_TRAILER_LEN)], *p = burst;
    int fd = data_open();

    (void)state;
    assert_non_null(src);
    for (size_t i = 0; i < 3 * K; i++)
        src[i] = (uint8_t)(i * 7 + i / 251);
    /* Every request in one send: the target reads them together. */
    for (size_t i = 0; i < N; i++) {
        ote_tcp_hdr_t h = {.type = q[i].type, .id = 500 + i, .addr = q[i].addr,
                           .length = q[i].length};

        ote_tcp_hdr_encode(&h, p);
        ote_put_u64(p + OTE_TCP_HDR_LEN, (uint64_t)(uintptr_t)q[i].local);
        p += OTE_TCP_HDR_LEN + OTE_TCP_REF_TRAILER_LEN;
    }
    assert_int_equal(sw_send(fd, burst, sizeof(burst)), 0);
    for (size_t i = 0; i < N; i++) {
        ote_tcp_hdr_t h;

        assert_int_equal(sw_tcp_recv(fd, &h, 5000), 0);
        assert_int_equal(h.type, OTE_TCP_REF_ACK);
        assert_int_equal(h.id, 500 + i);
        if (q[i].ok) {
            assert_int_equal(h.status, OTE_OK);
            assert_int_equal(h.length, q[i].length);
        } else {
            if (h.status >= 0)
                fail_msg("request %zu was not refused", i);
            assert_int_equal(h.length, 0);
        }
    }
    /* The READs saw the WRITEs before them; the refused READ left its buffer alone. */
    assert_memory_equal(dst, src, 3 * K);
    assert_memory_equal(dst2, src + K, K);
    for (size_t i = 0; i < 64; i++)
        assert_int_equal(dst4[i], 0);
    close(fd);
    free(src);
    free(dst);
    free(dst2);
    free(dst3);
    free(dst4);
}

/* A WRITE of len bytes with id on fd (open): the status of its WRITE_ACK. */
static ote_status_t write_by_value(int fd, uint64_t id, uint64_t addr, const void *bytes,
                                   size_t len)
{
    ote_tcp_hdr_t h;

    assert_int_equal(sw_tcp_send(fd, OTE_TCP_WRITE, id, addr, len), 0);
    assert_int_equal(sw_send(fd, bytes, len), 0);
    assert_int_equal(sw_tcp_recv(fd, &h, 5000), 0);
    assert_int_equal(h.type, OTE_TCP_WRITE_ACK);
    assert_int_equal(h.id, id);
    return (ote_status_t)h.status;
}

/*
 * Small puts and gets by value on the native cma target: its HELLO_ACK says
 * it takes them (and no WRITEV); a WRITE read along with by-reference
 * requests is answered after those before it and lands after them, and a
 * READ_REQ after it sees its bytes; one into read-only memory is refused
 * and the connection goes on; one larger than OTE_TCP_INLINE_MAX closes
 * the connection.
 */
static void test_cma_inline(void **state)
{
    enum { K = 4096, HR = OTE_TCP_HDR_LEN + OTE_TCP_REF_TRAILER_LEN };
    uint64_t r0 = region_addr(0), r1 = region_addr(1), caps = 0;
    uint8_t *src = malloc(K), *dst = calloc(1, K), small[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    uint8_t burst[3 * HR + 8], *p = burst;
    ote_tcp_hdr_t h;
    int fd = data_open_caps(&caps);

    (void)state;
    assert_non_null(src);
    assert_non_null(dst);
    assert_true(caps & OTE_TCP_CAP_INLINE_WRITE);
    assert_true(caps & OTE_TCP_CAP_INLINE_READ);
    assert_false(caps & OTE_TCP_CAP_WRITEV);
    for (size_t i = 0; i < K; i++)
        src[i] = (uint8_t)(i * 13 + 5);
    /* PUT_REF of K bytes, a WRITE of 8 into the middle of them, a GET_REF of all: one send. */
    h = (ote_tcp_hdr_t){.type = OTE_TCP_PUT_REF, .id = 600, .addr = r0, .length = K};
    ote_tcp_hdr_encode(&h, p);
    ote_put_u64(p + OTE_TCP_HDR_LEN, (uint64_t)(uintptr_t)src);
    p += HR;
    h = (ote_tcp_hdr_t){.type = OTE_TCP_WRITE, .id = 601, .addr = r0 + 16, .length = 8};
    ote_tcp_hdr_encode(&h, p);
    memcpy(p + OTE_TCP_HDR_LEN, small, 8);
    p += OTE_TCP_HDR_LEN + 8;
    h = (ote_tcp_hdr_t){.type = OTE_TCP_GET_REF, .id = 602, .addr = r0, .length = K};
    ote_tcp_hdr_encode(&h, p);
    ote_put_u64(p + OTE_TCP_HDR_LEN, (uint64_t)(uintptr_t)dst);
    p += HR;
    assert_int_equal(sw_send(fd, burst, (size_t)(p - burst)), 0);
    for (uint64_t id = 600; id <= 602; id++) {
        assert_int_equal(sw_tcp_recv(fd, &h, 5000), 0);
        assert_int_equal(h.type, id == 601 ? OTE_TCP_WRITE_ACK : OTE_TCP_REF_ACK);
        assert_int_equal(h.id, id);
        assert_int_equal(h.status, OTE_OK);
        assert_int_equal(h.length, id == 601 ? 8 : K);
    }
    memcpy(src + 16, small, 8);
    assert_memory_equal(dst, src, K);
    /* A READ_REQ by value: the bytes in its READ_RESP. */
    {
        uint8_t got[24];

        assert_int_equal(sw_tcp_send(fd, OTE_TCP_READ_REQ, 610, r0 + 8, 24), 0);
        assert_int_equal(sw_tcp_recv(fd, &h, 5000), 0);
        assert_int_equal(h.type, OTE_TCP_READ_RESP);
        assert_int_equal(h.id, 610);
        assert_int_equal(h.status, OTE_OK);
        assert_int_equal(h.length, 24);
        assert_int_equal(sw_recv(fd, got, 24, 5000), 0);
        assert_memory_equal(got, src + 8, 24);
    }

    /* Read-only memory: refused, its bytes dropped, the connection serves on. */
    if (write_by_value(fd, 603, r1, small, 8) >= 0)
        fail_msg("a WRITE into read-only memory was not refused");
    assert_int_equal(write_by_value(fd, 604, r0 + K, small, 8), OTE_OK);
    close(fd);

    /* Larger than a by-value put or get may be: the connection is closed. */
    fd = data_open();
    /* Closed as soon as the header is read: the payload's send may fail (EPIPE, ECONNRESET). */
    assert_true(sw_tcp_send_refused(fd, OTE_TCP_WRITE, 605, r0, OTE_TCP_INLINE_MAX + 1, src,
                                    OTE_TCP_INLINE_MAX + 1) >= 0);
    assert_true(sw_closed(fd, 5000, NULL));
    close(fd);
    fd = data_open();
    assert_int_equal(sw_tcp_send(fd, OTE_TCP_READ_REQ, 606, r0, OTE_TCP_INLINE_MAX + 1), 0);
    assert_true(sw_closed(fd, 5000, NULL));
    close(fd);
    free(src);
    free(dst);
}

/* READ len bytes at addr on fd (open) into buf; the answer must be OK. */
static void read_back(int fd, uint64_t id, uint64_t addr, void *buf, size_t len)
{
    ote_tcp_hdr_t h;

    assert_int_equal(sw_tcp_send(fd, OTE_TCP_READ_REQ, id, addr, len), 0);
    assert_int_equal(sw_tcp_recv(fd, &h, 5000), 0);
    assert_int_equal(h.type, OTE_TCP_READ_RESP);
    assert_int_equal(h.id, id);
    assert_int_equal(h.status, OTE_OK);
    assert_int_equal(h.length, len);
    assert_int_equal(sw_recv(fd, buf, len, 5000), 0);
}

/* Expect the WRITEV_ACK of a WRITEV of n entries with this id. */
static void writev_ack(int fd, uint64_t id, uint64_t n, ote_tcp_hdr_t *h)
{
    assert_int_equal(sw_tcp_recv(fd, h, 5000), 0);
    assert_int_equal(h->type, OTE_TCP_WRITEV_ACK);
    assert_int_equal(h->id, id);
    assert_int_equal(h->addr, n);
}

/*
 * WRITEV, which the target announces in HELLO_ACK: every entry lands where
 * the table says and one WRITEV_ACK answers them all; an entry the target
 * refuses is read and dropped while the others land, and the answer then
 * carries one status per entry. The connection carries on.
 */
static void test_tcp_writev(void **state)
{
    uint64_t r0 = region_addr(0), r1 = region_addr(1), end = r0 + REGION_LEN - 8;
    uint64_t addr[3] = {r0 + 4096, r0 + 70000, r0 + 200}, len[3] = {100, 65536, 1};
    /* Each set has one entry the target must refuse; the others are fine. */
    uint64_t bad_addr[2][3] = {{r0 + 300000, r1, r0 + 300100}, {r0 + 300000, r0 + 300100, end}};
    uint64_t bad_len[3]     = {16, 16, 64};
    ote_status_t expect[2][3] = {{OTE_OK, OTE_ERR_ACCESS, OTE_OK},
                                 {OTE_OK, OTE_OK, OTE_ERR_OUT_OF_BOUNDS}};
    size_t total = 100 + 65536 + 1, off = 0;
    uint8_t *data = malloc(total), *back = malloc(65536), ro[16], tail[8], st[12];
    uint64_t caps = 0;
    ote_tcp_hdr_t h;
    int fd = data_open_caps(&caps);

    (void)state;
    assert_non_null(data);
    assert_non_null(back);
    assert_true((caps & OTE_TCP_CAP_WRITEV) != 0);
    for (size_t i = 0; i < total; i++)
        data[i] = (uint8_t)(i * 7 + 3);
    assert_int_equal(sw_tcp_send_writev(fd, 40, addr, len, 3, data), 0);
    writev_ack(fd, 40, 3, &h);
    assert_int_equal(h.status, OTE_OK);
    assert_int_equal(h.length, total);
    for (size_t i = 0; i < 3; i++) {
        read_back(fd, 50 + i, addr[i], back, (size_t)len[i]);
        assert_memory_equal(back, data + off, (size_t)len[i]);
        off += (size_t)len[i];
    }
    read_back(fd, 60, r1, ro, sizeof(ro));
    read_back(fd, 61, end, tail, sizeof(tail));
    for (size_t k = 0; k < 2; k++) {
        uint8_t now[16];

        memset(data, (int)(0x5a + k), 96);
        assert_int_equal(sw_tcp_send_writev(fd, 41 + k, bad_addr[k], bad_len, 3, data), 0);
        writev_ack(fd, 41 + k, 3, &h);
        assert_int_equal(h.status, k == 0 ? OTE_ERR_ACCESS : OTE_ERR_OUT_OF_BOUNDS);
        assert_int_equal(h.length, 0);
        assert_int_equal(sw_recv(fd, st, sizeof(st), 5000), 0);
        for (size_t i = 0; i < 3; i++)
            assert_int_equal((int32_t)ote_get_u32(st + 4 * i), expect[k][i]);
        /* The entries allowed landed; the refused ranges are as they were. */
        read_back(fd, 62, r0 + 300000, back, 16);
        assert_memory_equal(back, data, 16);
        read_back(fd, 63, r0 + 300100, back, 16);
        assert_memory_equal(back, data + 16, 16);
        read_back(fd, 64, r1, now, sizeof(ro));
        assert_memory_equal(now, ro, sizeof(ro));
        read_back(fd, 65, end, now, sizeof(tail));
        assert_memory_equal(now, tail, sizeof(tail));
    }
    /* Still usable. */
    assert_int_equal(sw_tcp_send_writev(fd, 70, addr, len, 2, data), 0);
    writev_ack(fd, 70, 2, &h);
    assert_int_equal(h.status, OTE_OK);
    close(fd);
    free(data);
    free(back);
}

/*
 * READV_REQ: the bytes of every entry come back in table order with one
 * READV_RESP; an entry the target refuses is left out of the bytes and the
 * answer carries one status per entry.
 */
static void test_tcp_readv(void **state)
{
    uint64_t r0 = region_addr(0), r1 = region_addr(1);
    uint64_t addr[3] = {r0 + 8192, r1 + 100, r0 + 500000}, len[3] = {300, 65536 - 100, 7};
    uint64_t bad_addr[3] = {r0 + 8192, r0 + REGION_LEN - 8, r1};
    uint64_t bad_len[3]  = {300, 64, 16};
    size_t total = 300 + 65436 + 7;
    uint8_t *back = malloc(total), *one = malloc(65536), table[3 * OTE_TCP_WRITEV_ENTRY_LEN];
    uint8_t st[12];
    ote_tcp_hdr_t h;
    size_t off = 0;
    int fd = data_open();

    (void)state;
    assert_non_null(back);
    assert_non_null(one);
    for (size_t i = 0; i < 3; i++) {
        ote_tcp_vec_entry_t e = {.addr = addr[i], .length = len[i]};

        ote_tcp_vec_entry_encode(&e, table + i * OTE_TCP_WRITEV_ENTRY_LEN);
    }
    assert_int_equal(sw_tcp_send(fd, OTE_TCP_READV_REQ, 80, 3, total), 0);
    assert_int_equal(sw_send(fd, table, sizeof(table)), 0);
    assert_int_equal(sw_tcp_recv(fd, &h, 5000), 0);
    assert_int_equal(h.type, OTE_TCP_READV_RESP);
    assert_int_equal(h.id, 80);
    assert_int_equal(h.addr, 3);
    assert_int_equal(h.status, OTE_OK);
    assert_int_equal(h.length, total);
    assert_int_equal(sw_recv(fd, back, total, 5000), 0);
    for (size_t i = 0; i < 3; i++) {
        read_back(fd, 81 + i, addr[i], one, (size_t)len[i]);
        assert_memory_equal(back + off, one, (size_t)len[i]);
        off += (size_t)len[i];
    }
    /* The second entry runs past region 0: only the others' bytes come. */
    for (size_t i = 0; i < 3; i++) {
        ote_tcp_vec_entry_t e = {.addr = bad_addr[i], .length = bad_len[i]};

        ote_tcp_vec_entry_encode(&e, table + i * OTE_TCP_WRITEV_ENTRY_LEN);
    }
    assert_int_equal(sw_tcp_send(fd, OTE_TCP_READV_REQ, 90, 3, 380), 0);
    assert_int_equal(sw_send(fd, table, sizeof(table)), 0);
    assert_int_equal(sw_tcp_recv(fd, &h, 5000), 0);
    assert_int_equal(h.type, OTE_TCP_READV_RESP);
    assert_int_equal(h.status, OTE_ERR_OUT_OF_BOUNDS);
    assert_int_equal(h.length, 300 + 16);
    assert_int_equal(sw_recv(fd, st, sizeof(st), 5000), 0);
    assert_int_equal((int32_t)ote_get_u32(st), OTE_OK);
    assert_int_equal((int32_t)ote_get_u32(st + 4), OTE_ERR_OUT_OF_BOUNDS);
    assert_int_equal((int32_t)ote_get_u32(st + 8), OTE_OK);
    assert_int_equal(sw_recv(fd, back, 316, 5000), 0);
    read_back(fd, 91, r0 + 8192, one, 300);
    assert_memory_equal(back, one, 300);
    read_back(fd, 92, r1, one, 16);
    assert_memory_equal(back + 300, one, 16);
    close(fd);
    free(back);
    free(one);
}

/* A WRITEV or READV_REQ whose header or table breaks the rules closes the connection. */
static void test_tcp_bad_vector(void **state)
{
    struct {
        uint64_t n, total;       /* header: entries, payload bytes */
        size_t   k;              /* table entries sent */
        uint64_t e[2][2];        /* (addr offset in region 0, length) */
    } bad[] = {
        {1, 16, 1, {{0, 16}}},                              /* one entry          */
        {OTE_TCP_WRITEV_MAX + 1, 65, 0, {{0}}},             /* too many           */
        {2, 32, 2, {{0, 16}, {64, 8}}},                     /* sum differs        */
        {2, 16, 2, {{0, 16}, {64, 0}}},                     /* an empty entry     */
        {2, OTE_TCP_WRITEV_ENTRY_MAX + 2, 2,
         {{0, OTE_TCP_WRITEV_ENTRY_MAX + 1}, {0, 1}}},      /* an entry too large */
        {2, 32, 2, {{UINT64_MAX - 8, 16}, {0, 16}}},        /* address wraps      */
    };

    (void)state;
    for (size_t i = 0; i < 2 * sizeof(bad) / sizeof(bad[0]); i++) {
        uint8_t table[2 * OTE_TCP_WRITEV_ENTRY_LEN];
        uint8_t type = i % 2 ? OTE_TCP_READV_REQ : OTE_TCP_WRITEV;
        int fd       = data_open();

        const size_t c = i / 2; /* each case as WRITEV, then as READV_REQ */

        for (size_t j = 0; j < bad[c].k; j++) {
            uint64_t a = bad[c].e[j][0] == UINT64_MAX - 8 ? bad[c].e[j][0]
                                                          : region_addr(0) + bad[c].e[j][0];
            ote_tcp_vec_entry_t e = {.addr = a, .length = bad[c].e[j][1]};

            ote_tcp_vec_entry_encode(&e, table + j * OTE_TCP_WRITEV_ENTRY_LEN);
        }
        /* The header alone may close it: the table's send may then fail. */
        assert_true(sw_tcp_send_refused(fd, type, 9, bad[c].n, bad[c].total,
                                        bad[c].k ? table : NULL,
                                        bad[c].k * OTE_TCP_WRITEV_ENTRY_LEN) >= 0);
        if (!sw_closed(fd, 3000, NULL))
            fail_msg("bad vector %zu (type %u) left the connection open", c, type);
        close(fd);
    }
}

/* Messages no initiator may send once open: the connection is closed. */
static void test_tcp_bad_after_hello(void **state)
{
    struct {
        uint8_t  type;
        int32_t  status;
        uint64_t addr, length;
    } bad[] = {
        {OTE_TCP_WRITE, 0, 0x1000, (1ull << 40)},          /* over OTE_TCP_MAX_MSG */
        {OTE_TCP_READ_REQ, 0, 0x1000, (1ull << 40)},
        {OTE_TCP_WRITE, 0, UINT64_MAX - 16, 64},           /* address wraps        */
        {OTE_TCP_READ_REQ, 0, UINT64_MAX - 16, 64},
        {OTE_TCP_WRITE, 0, 0x1000, 0},                     /* empty                */
        {OTE_TCP_WRITE, OTE_ERR_IO, 0x1000, 64},           /* status on a request  */
        {OTE_TCP_HELLO, 0, 0, 0},                          /* second HELLO         */
        {OTE_TCP_READ_RESP, 0, 0, 0},                      /* a response           */
        {OTE_TCP_HELLO_ACK, 0, 0, 0},
        {OTE_TCP_AUTH_HELLO, 0, 0, 32},                    /* handshake again      */
        {OTE_TCP_WRITEV_ACK, 0, 2, 32},                    /* an answer            */
        {OTE_TCP_READV_RESP, 0, 2, 32},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int fd = data_open();

        assert_int_equal(sw_tcp_send_raw(fd, OTE_TCP_MAGIC, OTE_TCP_VERSION, bad[i].type,
                                         bad[i].status, 5, bad[i].addr, bad[i].length),
                         0);
        if (!sw_closed(fd, 3000, NULL))
            fail_msg("bad data message %zu left the connection open", i);
        close(fd);
    }
}

/* A control connection past its handshake: it holds its place. */
static int ctl_open(void)
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

/*
 * OTE_MAX_CONNS_PER_PEER (24 for this target) counts the control and the
 * data listener together: connections past the limit are closed at once,
 * and closing others makes room again.
 */
static void test_conn_limit(void **state)
{
    int fds[40], n = 0, extra;
    uint64_t end;
    bool room = false;

    (void)state;
    /*
     * Connections of earlier tests (and of a try here) count until the
     * engine has seen them close, which takes longer on a loaded machine:
     * try again until they are gone, for 20 s at most.
     */
    end = ote_time_ns() + 20000000000ull;
    for (;;) {
        for (n = 0; n < 40; n++) {
            if (n % 2) {
                fds[n] = ctl_open();
            } else {
                fds[n] = data_connect();
                if (sw_tcp_open(fds[n], fx.auth, fx.desc->instance_id) != OTE_OK) {
                    close(fds[n]);
                    fds[n] = -1;
                }
            }
            if (fds[n] < 0)
                break;
        }
        if (n >= 20 || ote_time_ns() >= end)
            break;
        for (int i = 0; i < n; i++)
            close(fds[i]);
        usleep(200000);
    }
    /* A connection of an earlier test may still be counted: a little slack. */
    if (n > 24 || n < 20)
        fail_msg("%d connections admitted with OTE_MAX_CONNS_PER_PEER=24", n);
    extra = sw_connect_name(fx.t.name);
    assert_true(extra >= 0);
    assert_true(sw_closed(extra, 2000, NULL));
    close(extra);
    extra = data_connect();
    assert_true(sw_closed(extra, 2000, NULL));
    close(extra);
    for (int i = 0; i < n; i++)
        close(fds[i]);
    /* Room again once the engine has seen them go (20 s: loaded machines are slow to). */
    end = ote_time_ns() + 20000000000ull;
    while (!room && ote_time_ns() < end) {
        int fd = ctl_open();

        room = fd >= 0;
        if (fd >= 0)
            close(fd);
        else
            usleep(50000);
    }
    assert_true(room);
}

/* ---- authentication ------------------------------------------------------ */

static void test_ctl_unauthenticated(void **state)
{
    int fd;
    ote_ctl_hdr_t h;
    uint8_t *p = NULL;

    (void)state;
    if (!fx.auth->enabled) {
        /* A keyed initiator against this keyless target: AUTH, closed. */
        ote_auth_t *k = sw_auth_new(KEY);

        fd = sw_connect_name(fx.t.name);
        assert_int_equal(sw_ctl_authenticate(fd, k), OTE_ERR_AUTH);
        assert_true(sw_closed(fd, 3000, NULL));
        close(fd);
        ote_auth_destroy(k);
        return;
    }
    /* GET_DESC without the handshake: DESC carrying only AUTH, then closed. */
    fd = sw_connect_name(fx.t.name);
    assert_int_equal(sw_ctl_send(fd, OTE_CTL_GET_DESC, 1, NULL, 0), 0);
    assert_int_equal(sw_ctl_recv(fd, &h, &p, 3000), 0);
    assert_int_equal(h.type, OTE_CTL_DESC);
    assert_int_equal(h.length, 4); /* no descriptor byte */
    assert_int_equal((int32_t)ote_get_u32(p), OTE_ERR_AUTH);
    free(p);
    assert_true(sw_closed(fd, 3000, NULL));
    close(fd);

    /* NOTIFY without the handshake. */
    fd = sw_connect_name(fx.t.name);
    {
        ote_ctl_notify_t n = {.length = 4, .data = (const uint8_t *)"quit"};
        ote_buf_t b = {0};

        snprintf(n.from, sizeof(n.from), "127.0.0.1:1");
        assert_int_equal(ote_ctl_notify_encode(&n, &b), OTE_OK);
        assert_int_equal(sw_ctl_send(fd, OTE_CTL_NOTIFY, 1, b.data, b.len), 0);
        free(b.data);
    }
    assert_int_equal(sw_ctl_recv_status(fd, OTE_CTL_NOTIFY_ACK, 3000), OTE_ERR_AUTH);
    assert_true(sw_closed(fd, 3000, NULL));
    close(fd);

    /* The wrong key. */
    {
        ote_auth_t *k = sw_auth_new("not-the-cluster-key-but-long-enough");

        fd = sw_connect_name(fx.t.name);
        assert_int_equal(sw_ctl_authenticate(fd, k), OTE_ERR_AUTH);
        assert_true(sw_closed(fd, 3000, NULL));
        close(fd);
        ote_auth_destroy(k);
    }

    /* HELLO, then garbage, the target's own proof reflected, or a skipped proof. */
    for (int k = 0; k < 3; k++) {
        uint8_t hello[OTE_AUTH_HELLO_LEN] = {1, 2, 3};
        uint8_t iproof[OTE_AUTH_IPROOF_LEN];

        fd = sw_connect_name(fx.t.name);
        assert_int_equal(sw_ctl_send(fd, OTE_CTL_AUTH_HELLO, 1, hello, sizeof(hello)), 0);
        assert_int_equal(sw_ctl_recv(fd, &h, &p, 3000), 0);
        assert_int_equal(h.type, OTE_CTL_AUTH_PROOF);
        assert_int_equal(h.length, OTE_AUTH_TPROOF_LEN);
        if (k == 0)
            memset(iproof, 0x55, sizeof(iproof));
        else
            memcpy(iproof, p + OTE_AUTH_NONCE_LEN, sizeof(iproof));
        free(p);
        if (k < 2) {
            assert_int_equal(sw_ctl_send(fd, OTE_CTL_AUTH_PROOF, 2, iproof, sizeof(iproof)), 0);
        } else {
            assert_int_equal(sw_ctl_send(fd, OTE_CTL_GET_DESC, 2, NULL, 0), 0);
        }
        assert_int_equal(sw_ctl_recv_status(fd, OTE_CTL_AUTH_DONE, 3000), OTE_ERR_AUTH);
        assert_true(sw_closed(fd, 3000, NULL));
        close(fd);
    }
}

static void test_tcp_unauthenticated(void **state)
{
    ote_tcp_hdr_t h;
    int fd;

    (void)state;
    if (!fx.auth->enabled) {
        ote_auth_t *k = sw_auth_new(KEY);

        fd = data_connect();
        assert_int_equal(sw_tcp_open(fd, k, fx.desc->instance_id), OTE_ERR_AUTH);
        assert_true(sw_closed(fd, 3000, NULL));
        close(fd);
        ote_auth_destroy(k);
        return;
    }
    /* HELLO without the handshake: HELLO_ACK(AUTH), closed. */
    fd = data_connect();
    assert_int_equal(sw_tcp_open(fd, NULL, fx.desc->instance_id), OTE_ERR_AUTH);
    assert_true(sw_closed(fd, 3000, NULL));
    close(fd);

    /* The wrong key. */
    {
        ote_auth_t *k = sw_auth_new("not-the-cluster-key-but-long-enough");

        fd = data_connect();
        assert_int_equal(sw_tcp_open(fd, k, fx.desc->instance_id), OTE_ERR_AUTH);
        assert_true(sw_closed(fd, 3000, NULL));
        close(fd);
        ote_auth_destroy(k);
    }

    /* Garbage proof, and a WRITE in place of the proof: never lands. */
    for (int k = 0; k < 2; k++) {
        uint8_t hello[OTE_AUTH_HELLO_LEN] = {9}, proof[OTE_AUTH_TPROOF_LEN], junk[64];

        memset(junk, 0x3c, sizeof(junk));
        fd = data_connect();
        assert_int_equal(sw_tcp_send(fd, OTE_TCP_AUTH_HELLO, 1, 0, sizeof(hello)), 0);
        assert_int_equal(sw_send(fd, hello, sizeof(hello)), 0);
        assert_int_equal(sw_tcp_recv(fd, &h, 3000), 0);
        assert_int_equal(h.type, OTE_TCP_AUTH_PROOF);
        assert_int_equal(sw_recv(fd, proof, sizeof(proof), 3000), 0);
        if (k == 0) {
            assert_int_equal(sw_tcp_send(fd, OTE_TCP_AUTH_PROOF, 2, 0, 32), 0);
            assert_int_equal(sw_send(fd, junk, 32), 0);
            assert_int_equal(sw_tcp_recv(fd, &h, 3000), 0);
            assert_int_equal(h.type, OTE_TCP_AUTH_DONE);
            assert_int_equal(h.status, OTE_ERR_AUTH);
        } else {
            assert_int_equal(sw_tcp_send(fd, OTE_TCP_WRITE, 2, region_addr(0), sizeof(junk)), 0);
            sw_send(fd, junk, sizeof(junk));
        }
        assert_true(sw_closed(fd, 3000, NULL));
        close(fd);
    }
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
