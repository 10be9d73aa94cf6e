/*
 * A stream connection's receive buffer grows with what it receives and is
 * given back while the connection is idle (stream_conn.h, OTE_STREAM_RXBUF_FIRST):
 * a tcp target iface takes one end of a socketpair as an accepted
 * connection; the test is its initiator on the other end, sends HELLO,
 * WRITEs and WRITEVs, and checks the buffer's size, the bytes that landed
 * and the answers, and that the timeout check's watch list holds the
 * connection exactly while it has a buffer (or a handshake) to watch.
 */
#include "uct_ext/stream/stream.h"

#include "base/dlist.h"
#include "base/log.h"
#include "base/util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

extern ote_tl_component_t ote_tcp_component;

#define INSTANCE   0x1122334455667788ull
#define REGION_LEN (1u << 20)

typedef struct {
    ote_mem_table_t    *table;
    ote_auth_t         *auth;
    ote_tl_iface_t     *tl;
    ote_stream_iface_t *iface;
    ote_stream_conn_t  *conn;
    uint8_t            *region;
    int                 fd;    /* the initiator's end */
    size_t              acked; /* WRITE_ACKs and WRITEV_ACKs with status OK read */
    size_t              acked_bytes;
    size_t              refused; /* answers with another status, the last in last_status */
    ote_status_t        last_status;
    size_t              in_len;  /* bytes of a partial answer in in[] */
    size_t              skip;    /* bytes of an answer's table still to read past */
    uint8_t             in[OTE_STREAM_HDR_LEN];
} fixture_t;

static fixture_t f;

/* Read every whole answer waiting on the initiator's end. */
static void read_answers(void)
{
    for (;;) {
        uint8_t table[256];
        ssize_t n;
        ote_stream_hdr_t h;

        if (f.skip > 0) {
            n = recv(f.fd, table, f.skip < sizeof(table) ? f.skip : sizeof(table), MSG_DONTWAIT);
            if (n <= 0) {
                assert_true(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
                return;
            }
            f.skip -= (size_t)n;
            continue;
        }
        n = recv(f.fd, f.in + f.in_len, sizeof(f.in) - f.in_len, MSG_DONTWAIT);
        if (n <= 0) {
            assert_true(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
            return;
        }
        f.in_len += (size_t)n;
        if (f.in_len < OTE_STREAM_HDR_LEN)
            continue;
        f.in_len = 0;
        assert_int_equal(ote_stream_hdr_decode(f.in, OTE_STREAM_HDR_LEN, 1u << 30, &h), OTE_OK);
        f.skip = ote_stream_hdr_inline_len(&h); /* a failed WRITEV_ACK's statuses */
        if (h.type == OTE_STREAM_HELLO_ACK)
            continue;
        assert_true(h.type == OTE_STREAM_WRITE_ACK || h.type == OTE_STREAM_WRITEV_ACK ||
                    h.type == OTE_STREAM_READ_RESP);
        if (h.status != OTE_OK) {
            assert_int_equal(h.length, 0);
            f.refused++;
            f.last_status = (ote_status_t)h.status;
            continue;
        }
        assert_int_equal(h.type == OTE_STREAM_READ_RESP, false);
        f.acked++;
        f.acked_bytes += h.length;
    }
}

/* Progress the target until it has nothing left to do and every answer is read. */
static void settle(void)
{
    for (int i = 0; i < 1000; i++) {
        unsigned n = f.tl->ops->progress(f.tl);

        read_answers();
        if (n == 0 && i > 4)
            break;
    }
}

/* Send len bytes, progressing the target whenever the socket is full. */
static void send_all(const void *buf, size_t len)
{
    const uint8_t *p = buf;

    while (len > 0) {
        ssize_t n = send(f.fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);

        if (n < 0) {
            assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
            f.tl->ops->progress(f.tl);
            read_answers();
            continue;
        }
        p += n;
        len -= (size_t)n;
    }
}

static void send_hdr(const ote_stream_hdr_t *h)
{
    uint8_t buf[OTE_STREAM_HDR_LEN];

    ote_stream_hdr_encode(h, buf);
    send_all(buf, sizeof(buf));
}

static int setup(void **state)
{
    ote_tl_iface_params_t p = {.instance_id = INSTANCE, .bind_ip = "127.0.0.1",
                               .advertise_ip = "127.0.0.1", .max_conns = 64,
                               .max_conns_per_peer = 64, .handshake_timeout_ms = 10000};
    static const ote_auth_params_t limits = {
        .max_conns = 64, .max_conns_per_peer = 64, .handshake_timeout_ms = 10000};
    ote_mem_table_params_t mp = {0};
    struct sockaddr_in peer = {.sin_family = AF_INET, .sin_port = htons(9),
                               .sin_addr.s_addr = htonl(0x7f000001)};
    struct sockaddr_storage ss = {0};
    ote_tl_resource_t *res = NULL;
    ote_mem_desc_t d;
    ote_region_t *r;
    size_t n = 0;
    int sv[2];

    (void)state;
    memset(&f, 0, sizeof(f));
    f.region = calloc(1, REGION_LEN);
    assert_non_null(f.region);
    assert_int_equal(ote_mem_table_create(&mp, &f.table), OTE_OK);
    d = (ote_mem_desc_t){.addr = f.region, .length = REGION_LEN, .location = "cpu:0",
                         .access = OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE};
    assert_int_equal(ote_mem_table_register(f.table, &d, 1, &r), OTE_OK);
    assert_int_equal(ote_auth_create(&limits, &f.auth), OTE_OK);
    p.regions = f.table;
    p.auth    = f.auth;
    assert_int_equal(ote_tcp_component.ops->query_resources(&ote_tcp_component, &p, &res, &n),
                     OTE_OK);
    assert_true(n >= 1);
    assert_int_equal(ote_tcp_component.ops->iface_open(&res[0], NULL, &p, &f.tl), OTE_OK);
    free(res);
    f.iface = (ote_stream_iface_t *)f.tl;
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    memcpy(&ss, &peer, sizeof(peer));
    assert_int_equal(ote_stream_iface_conn_accept(f.iface, sv[0], &ss), OTE_OK);
    f.conn = f.iface->conns;
    f.fd   = sv[1];
    assert_non_null(f.conn);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    close(f.fd);
    f.tl->ops->close(f.tl);
    ote_mem_table_destroy(f.table);
    ote_auth_destroy(f.auth);
    free(f.region);
    return 0;
}

static void hello(void)
{
    send_hdr(&(ote_stream_hdr_t){.type = OTE_STREAM_HELLO, .id = 7, .addr = INSTANCE});
    settle();
    assert_int_equal(f.iface->num_accepted, 1);
    assert_int_equal(f.conn->rx_state, OTE_STREAM_RX_HDR);
}

/* count WRITEs of len bytes each, at off + i * len, filled with (i + seed). */
static void send_writes(size_t count, size_t len, size_t off, uint8_t seed)
{
    size_t msg = OTE_STREAM_HDR_LEN + len, total = count * msg;
    uint8_t *buf = malloc(total);

    assert_non_null(buf);
    for (size_t i = 0; i < count; i++) {
        ote_stream_hdr_t h = {.type = OTE_STREAM_WRITE, .id = i,
                              .addr = (uint64_t)(uintptr_t)(f.region + off + i * len),
                              .length = len};

        ote_stream_hdr_encode(&h, buf + i * msg);
        memset(buf + i * msg + OTE_STREAM_HDR_LEN, (int)(uint8_t)(i + seed), len);
    }
    send_all(buf, total);
    free(buf);
}

static void check_writes(size_t count, size_t len, size_t off, uint8_t seed)
{
    for (size_t i = 0; i < count; i++)
        for (size_t j = 0; j < len; j++)
            assert_int_equal(f.region[off + i * len + j], (uint8_t)(i + seed));
}

/*
 * Small messages one at a time: the buffer stays at its first size; a
 * connection before its first read has none.
 */
static void test_small_stays_small(void **state)
{
    (void)state;
    assert_null(f.conn->rxbuf);
    assert_int_equal(f.conn->rx_cap, 0);
    hello();
    assert_int_equal(f.conn->rx_cap, OTE_STREAM_RXBUF_FIRST);
    for (size_t i = 0; i < 32; i++) {
        send_writes(1, 64, i * 64, (uint8_t)(3 * i));
        settle();
    }
    for (size_t i = 0; i < 32; i++)
        check_writes(1, 64, i * 64, (uint8_t)(3 * i));
    assert_int_equal(f.acked, 32);
    assert_int_equal(f.acked_bytes, 32 * 64);
    assert_int_equal(f.conn->rx_cap, OTE_STREAM_RXBUF_FIRST);
}

/*
 * A WRITEV with the largest table (its header and table read together, more
 * than the first size when the table is large enough): the buffer holds
 * it, and every byte lands.
 */
static void test_largest_table(void **state)
{
    size_t n = OTE_STREAM_WRITEV_MAX, len = 512, tbl = n * OTE_STREAM_WRITEV_ENTRY_LEN;
    uint8_t *buf = malloc(OTE_STREAM_HDR_LEN + tbl + n * len);

    (void)state;
    assert_non_null(buf);
    hello();
    ote_stream_hdr_encode(&(ote_stream_hdr_t){.type = OTE_STREAM_WRITEV, .id = 1, .addr = n,
                                              .length = n * len},
                          buf);
    for (size_t i = 0; i < n; i++) {
        ote_stream_vec_entry_t e = {.addr = (uint64_t)(uintptr_t)(f.region + i * len),
                                    .length = len};

        ote_stream_vec_entry_encode(&e, buf + OTE_STREAM_HDR_LEN + i * OTE_STREAM_WRITEV_ENTRY_LEN);
        memset(buf + OTE_STREAM_HDR_LEN + tbl + i * len, (int)(uint8_t)(i + 9), len);
    }
    send_all(buf, OTE_STREAM_HDR_LEN + tbl + n * len);
    settle();
    free(buf);
    check_writes(n, len, 0, 9);
    assert_int_equal(f.acked, 1);
    assert_int_equal(f.acked_bytes, n * len);
    assert_true(f.conn->rx_cap >= OTE_STREAM_HDR_LEN + tbl);
    assert_true(f.conn->rx_cap <= OTE_STREAM_RXBUF);
}

/*
 * Many messages waiting at once: reads fill the buffer, which doubles up
 * to OTE_STREAM_RXBUF and no further; every byte lands. Two idle checks
 * without a receive between them free it; the next message allocates
 * the first size again.
 */
static void test_grows_then_idle_frees(void **state)
{
    size_t count = 4096, len = 64;

    (void)state;
    hello();
    send_writes(count, len, 0, 1);
    settle();
    check_writes(count, len, 0, 1);
    assert_int_equal(f.acked, count);
    assert_int_equal(f.acked_bytes, count * len);
    assert_int_equal(f.conn->rx_cap, OTE_STREAM_RXBUF);

    /* The first check sees the receive since the previous one; the second frees. */
    f.tl->ops->check_timeouts(f.tl, 0);
    assert_int_equal(f.conn->rx_cap, OTE_STREAM_RXBUF);
    f.tl->ops->check_timeouts(f.tl, 0);
    assert_null(f.conn->rxbuf);
    assert_int_equal(f.conn->rx_cap, 0);
    assert_int_equal(f.iface->num_accepted, 1);
    /* Nothing left to watch (handshake done, no buffer): the next checks skip it. */
    assert_false(f.conn->watched);
    assert_null(f.iface->watch);

    send_writes(4, len, 0, 77);
    settle();
    check_writes(4, len, 0, 77);
    assert_int_equal(f.acked, count + 4);
    assert_int_equal(f.conn->rx_cap, OTE_STREAM_RXBUF_FIRST);
    /* A buffer again: watched until the checks free it. */
    assert_true(f.conn->watched);
    assert_ptr_equal(f.iface->watch, f.conn);
    f.tl->ops->check_timeouts(f.tl, 0);
    f.tl->ops->check_timeouts(f.tl, 0);
    assert_null(f.conn->rxbuf);
    assert_null(f.iface->watch);
}

/* Bytes read ahead and not yet handled keep the buffer through idle checks. */
static void test_idle_keeps_pending_bytes(void **state)
{
    ote_stream_hdr_t h = {.type = OTE_STREAM_WRITE, .id = 1,
                          .addr = (uint64_t)(uintptr_t)f.region, .length = 8};
    uint8_t buf[OTE_STREAM_HDR_LEN];

    (void)state;
    hello();
    /* Half a header: read into the buffer, not yet a message. */
    ote_stream_hdr_encode(&h, buf);
    send_all(buf, OTE_STREAM_HDR_LEN / 2);
    settle();
    assert_int_equal(f.conn->rx_len - f.conn->rx_off, OTE_STREAM_HDR_LEN / 2);
    f.tl->ops->check_timeouts(f.tl, 0);
    f.tl->ops->check_timeouts(f.tl, 0);
    f.tl->ops->check_timeouts(f.tl, 0);
    assert_non_null(f.conn->rxbuf);
    send_all(buf + OTE_STREAM_HDR_LEN / 2, OTE_STREAM_HDR_LEN / 2);
    send_all("abcdefgh", 8);
    settle();
    assert_memory_equal(f.region, "abcdefgh", 8);
    assert_int_equal(f.acked, 1);
}

/*
 * Two connections that stopped on their read budget with messages still in
 * their buffers and nothing in their sockets (no epoll event will come for
 * them) are read again in the next round's walk; the first one walked
 * fails there (a malformed header in its buffer). The walk went on from a
 * failed connection's next, which leaving the list had cleared: the
 * connection after it was never read again and its WRITE never answered.
 */
static void test_rerun_after_failed_conn(void **state)
{
    struct sockaddr_in peer = {.sin_family = AF_INET, .sin_port = htons(10),
                               .sin_addr.s_addr = htonl(0x7f000001)};
    ote_stream_hdr_t h = {.type = OTE_STREAM_WRITE, .id = 5,
                          .addr = (uint64_t)(uintptr_t)f.region, .length = 8};
    struct sockaddr_storage ss = {0};
    ote_stream_conn_t *x, *y = f.conn;
    int sv[2];

    (void)state;
    hello();
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    memcpy(&ss, &peer, sizeof(peer));
    assert_int_equal(ote_stream_iface_conn_accept(f.iface, sv[0], &ss), OTE_OK);
    x = f.iface->conns; /* accepted last: walked first */
    assert_true(x != y && x->next == y);
    {
        uint8_t buf[OTE_STREAM_HDR_LEN];

        ote_stream_hdr_encode(&(ote_stream_hdr_t){.type = OTE_STREAM_HELLO, .id = 8,
                                                  .addr = INSTANCE},
                              buf);
        assert_int_equal(send(sv[1], buf, sizeof(buf), MSG_NOSIGNAL), (ssize_t)sizeof(buf));
        settle();
        assert_int_equal(x->rx_state, OTE_STREAM_RX_HDR);
    }
    /* As a budget stop leaves them: whole messages in the buffers, sockets empty. */
    assert_non_null(x->rxbuf);
    assert_non_null(y->rxbuf);
    assert_true(x->rx_cap >= OTE_STREAM_HDR_LEN && y->rx_cap >= OTE_STREAM_HDR_LEN + 8);
    memset(x->rxbuf, 0xff, OTE_STREAM_HDR_LEN);
    x->rx_off = 0;
    x->rx_len = OTE_STREAM_HDR_LEN;
    ote_stream_hdr_encode(&h, y->rxbuf);
    memcpy(y->rxbuf + OTE_STREAM_HDR_LEN, "ABCDEFGH", 8);
    y->rx_off = 0;
    y->rx_len = OTE_STREAM_HDR_LEN + 8;
    x->rx_again = y->rx_again = true;
    f.iface->rx_again_conns = true;
    settle();
    assert_true(f.iface->conns == y && y->next == NULL); /* x failed and left */
    assert_memory_equal(f.region, "ABCDEFGH", 8);
    assert_int_equal(f.acked, 1);
    close(sv[1]);
}

/*
 * A range in a device-memory region is refused (UNSUPPORTED) on every
 * path that would touch its bytes with the CPU (WRITE, WRITEV, READ_REQ):
 * nothing is written to it, nothing read from it. (The region is host
 * memory marked as device memory in the table: on a GPU the copy would
 * fault.)
 */
static void test_device_region_refused(void **state)
{
    static uint8_t dev[4096];
    ote_mem_desc_t d = {.addr = dev, .length = sizeof(dev), .location = "cpu:0",
                        .access = OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE};
    ote_stream_vec_entry_t e[2] = {
        {.addr = (uint64_t)(uintptr_t)f.region, .length = 8},
        {.addr = (uint64_t)(uintptr_t)dev + 64, .length = 8},
    };
    uint8_t table[2 * OTE_STREAM_WRITEV_ENTRY_LEN];
    ote_region_t *r;

    (void)state;
    assert_int_equal(ote_mem_table_register(f.table, &d, 1, &r), OTE_OK);
    r->mem_type = OTE_MEM_TYPE_CUDA;
    hello();
    send_hdr(&(ote_stream_hdr_t){.type = OTE_STREAM_WRITE, .id = 1,
                                 .addr = (uint64_t)(uintptr_t)dev, .length = 8});
    send_all("abcdefgh", 8);
    settle();
    assert_int_equal(f.refused, 1);
    assert_int_equal(f.last_status, OTE_ERR_UNSUPPORTED);
    /* A WRITEV whose second entry is device memory: the host entry lands, not that one. */
    for (size_t i = 0; i < 2; i++)
        ote_stream_vec_entry_encode(&e[i], table + i * OTE_STREAM_WRITEV_ENTRY_LEN);
    send_hdr(&(ote_stream_hdr_t){.type = OTE_STREAM_WRITEV, .id = 2, .addr = 2, .length = 16});
    send_all(table, sizeof(table));
    send_all("ABCDEFGHIJKLMNOP", 16);
    settle();
    assert_int_equal(f.refused, 2);
    assert_memory_equal(f.region, "ABCDEFGH", 8);
    for (size_t i = 0; i < sizeof(dev); i++)
        assert_int_equal(dev[i], 0);
    send_hdr(&(ote_stream_hdr_t){.type = OTE_STREAM_READ_REQ, .id = 3,
                                 .addr = (uint64_t)(uintptr_t)dev, .length = 8});
    settle();
    assert_int_equal(f.refused, 3);
    assert_int_equal(f.last_status, OTE_ERR_UNSUPPORTED);
    assert_true(f.conn->rx_state == OTE_STREAM_RX_HDR);
}

/*
 * Target side: a peer that sends part of a WRITE's payload and then nothing
 * (its connection still up) is reset once it has sent nothing more for a
 * transfer timeout: the regions the payload was going to are let go (a
 * deregistered one's memory is unmapped only then), and the bytes that
 * came stay where they landed, nothing more.
 */
static void test_stalled_payload_reset(void **state)
{
    ote_stream_hdr_t h = {.type = OTE_STREAM_WRITE, .id = 1,
                          .addr = (uint64_t)(uintptr_t)f.region, .length = 4096};
    ote_region_t *r;
    long life;

    (void)state;
    hello();
    assert_int_equal(ote_mem_region_acquire(f.table, h.addr, 1, 0, &r), OTE_OK);
    life = atomic_load(&r->life);
    send_hdr(&h);
    send_all("abcd", 4);
    settle();
    assert_int_equal(f.conn->rx_state, OTE_STREAM_RX_PAYLOAD);
    assert_true(atomic_load(&r->life) > life); /* held by the payload */
    /* Timeout checks: the first ones see the bytes that came, then none. */
    for (int i = 0; i < 3; i++)
        f.tl->ops->check_timeouts(f.tl, 0);
    assert_false(f.conn->dead);
    assert_true(f.tl->ops->has_deadlines(f.tl));
    f.tl->ops->check_timeouts(f.tl, ote_time_ns() + 1); /* the transfer timeout has passed */
    assert_true(f.iface->conns == NULL);                 /* reset and gone */
    assert_int_equal(atomic_load(&r->life), life);
    assert_memory_equal(f.region, "abcd", 4);
    ote_mem_region_put(r);
}

/*
 * Target side: replies that carry a descriptor (shm's MAP_ACK) each hold an
 * open file until sent. A peer that asks and does not read would use up the
 * target's descriptors: past OTE_STREAM_TX_FDS_PAUSE queued, the target
 * stops reading its requests, and reads again once it has taken them.
 */
static void test_fd_replies_pause(void **state)
{
    ote_stream_hdr_t r = {.type = OTE_STREAM_WRITE_ACK, .id = 1, .status = OTE_OK};
    int small = 4096, before, after;

    (void)state;
    hello();
    assert_int_equal(setsockopt(f.conn->fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
    for (int i = 0; i < 2 * OTE_STREAM_TX_FDS_PAUSE; i++)
        assert_int_equal(ote_stream_conn_tx_push_fd(f.conn, &r, NULL, 0, dup(0)), OTE_OK);
    ote_stream_conn_flush(f.conn);
    before = (int)f.conn->tx_fds;
    assert_true(before >= OTE_STREAM_TX_FDS_PAUSE); /* the socket took a few */
    /* A request now: not read while so many descriptors wait. */
    send_hdr(&(ote_stream_hdr_t){.type = OTE_STREAM_WRITE, .id = 2,
                                 .addr = (uint64_t)(uintptr_t)f.region, .length = 8});
    send_all("ABCDEFGH", 8);
    f.tl->ops->progress(f.tl);
    assert_true(f.conn->rx_paused);
    assert_int_not_equal(memcmp(f.region, "ABCDEFGH", 8), 0);
    /* The peer reads (its descriptors dropped unclaimed): the target goes on. */
    for (int i = 0; i < 1000 && (f.conn->tx_fds > 0 || memcmp(f.region, "ABCDEFGH", 8) != 0);
         i++) {
        uint8_t buf[4096];

        while (recv(f.fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
            ;
        f.tl->ops->progress(f.tl);
    }
    after = (int)f.conn->tx_fds;
    assert_int_equal(after, 0);
    assert_false(f.conn->rx_paused);
    assert_memory_equal(f.region, "ABCDEFGH", 8);
}

static ote_status_t early_status;
static int          early_calls;

static void early_comp(ote_tl_completion_t *comp, ote_status_t status)
{
    (void)comp;
    early_calls++;
    early_status = status;
}

/*
 * Initiator side: a target that answers a WRITE before its payload has
 * left this side's send queue (it read the header, learned the id and
 * length, and acked without reading the bytes) is lying: completing the
 * operation would let its owner free the buffer the queue still sends
 * from. The connection fails with PROTOCOL instead, and the operation
 * with it.
 */
static void test_answer_before_sent(void **state)
{
    enum { LEN = 8 << 20 };
    ote_stream_ep_t ep  = {0};
    ote_tl_completion_t comp = {.func = early_comp};
    uint8_t *buf = malloc(LEN), hb[OTE_STREAM_HDR_LEN];
    ote_mem_desc_t d;
    ote_stream_hdr_t h = {.type = OTE_STREAM_WRITE, .id = 1, .addr = 0x1000, .length = LEN};
    ote_stream_op_t op = {.comp = &comp, .type = OTE_STREAM_WRITE, .id = 1, .length = LEN};
    ote_stream_conn_t *c;
    ote_region_t *r;
    int sv[2], small = 4096;

    (void)state;
    assert_non_null(buf);
    d = (ote_mem_desc_t){.addr = buf, .length = LEN, .location = "cpu:0"};
    assert_int_equal(ote_mem_table_register(f.table, &d, 1, &r), OTE_OK);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
    assert_int_equal(ote_stream_conn_new(f.iface, sv[0], &ep, &c), OTE_OK);
    OTE_DLIST_PUSH_FRONT(f.iface->conns, c);
    op.local        = buf;
    op.local_region = r;
    assert_int_equal(ote_stream_conn_op_push(c, &op), OTE_OK);
    assert_int_equal(ote_stream_conn_tx_push(c, &h, buf, LEN, r, false), OTE_OK);
    ote_stream_conn_flush(c);
    assert_int_equal(c->tx_count, 1); /* 8 MiB do not fit the socket */
    /* The "target" reads the header and answers at once. */
    assert_int_equal(recv(sv[1], hb, sizeof(hb), MSG_WAITALL), (ssize_t)sizeof(hb));
    ote_stream_hdr_encode(&(ote_stream_hdr_t){.type = OTE_STREAM_WRITE_ACK, .id = 1,
                                              .status = OTE_OK, .length = LEN},
                          hb);
    assert_int_equal(send(sv[1], hb, sizeof(hb), MSG_NOSIGNAL), (ssize_t)sizeof(hb));
    ote_stream_conn_rx(c);
    assert_int_equal(early_calls, 1);
    assert_int_equal(early_status, OTE_ERR_PROTOCOL);
    assert_true(c->dead);
    ote_stream_conn_free(c);
    close(sv[1]);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_small_stays_small, setup, teardown),
        cmocka_unit_test_setup_teardown(test_largest_table, setup, teardown),
        cmocka_unit_test_setup_teardown(test_grows_then_idle_frees, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idle_keeps_pending_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rerun_after_failed_conn, setup, teardown),
        cmocka_unit_test_setup_teardown(test_device_region_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_answer_before_sent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stalled_payload_reset, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fd_replies_pause, setup, teardown),
    };

    ote_log_set_level(OTE_LOG_WARN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
