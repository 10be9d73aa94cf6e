/*
 * The hostile peer on the tcp data port: bad and truncated messages, wrong
 * instances and ranges, vectors, stalled readers, peers without the key.
 */
#include "hostile.h"

void test_tcp_bad_first_message(void **state)
{
    struct {
        uint16_t magic;
        uint8_t  version, type;
        int32_t  status;
        uint64_t addr, length;
    } bad[] = {
        {OTE_STREAM_MAGIC ^ 0x100, OTE_STREAM_VERSION, OTE_STREAM_HELLO, 0, 0, 0},
        {OTE_STREAM_MAGIC, OTE_STREAM_VERSION + 1, OTE_STREAM_HELLO, 0, 0, 0},
        {OTE_STREAM_MAGIC, OTE_STREAM_VERSION, 0, 0, 0, 0},
        {OTE_STREAM_MAGIC, OTE_STREAM_VERSION, 77, 0, 0, 0},
        {OTE_STREAM_MAGIC, OTE_STREAM_VERSION, OTE_STREAM_HELLO, 12345, 0, 0},     /* unknown status  */
        {OTE_STREAM_MAGIC, OTE_STREAM_VERSION, OTE_STREAM_HELLO, 0, 0, 1000},      /* HELLO + payload */
        {OTE_STREAM_MAGIC, OTE_STREAM_VERSION, OTE_STREAM_WRITE, 0, 0x1000, 64},   /* WRITE first     */
        {OTE_STREAM_MAGIC, OTE_STREAM_VERSION, OTE_STREAM_READ_REQ, 0, 0x1000, 64},
        {OTE_STREAM_MAGIC, OTE_STREAM_VERSION, OTE_STREAM_WRITE_ACK, 0, 0, 0},     /* a response      */
        {OTE_STREAM_MAGIC, OTE_STREAM_VERSION, OTE_STREAM_AUTH_PROOF, 0, 0, 32},   /* proof first     */
        {OTE_STREAM_MAGIC, OTE_STREAM_VERSION, OTE_STREAM_AUTH_HELLO, 0, 0, 31},   /* short hello     */
    };

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int fd = data_connect();
        uint8_t zeros[64] = {0};

        assert_int_equal(sw_tcp_send_raw(fd, bad[i].magic, bad[i].version, bad[i].type,
                                         bad[i].status, 1, bad[i].addr, bad[i].length),
                         0);
        if (bad[i].type == OTE_STREAM_WRITE || bad[i].type == OTE_STREAM_AUTH_PROOF)
            sw_send(fd, zeros, bad[i].length < 64 ? bad[i].length : 64);
        if (!sw_closed(fd, 3000, NULL))
            fail_msg("bad first data message %zu left the connection open", i);
        close(fd);
    }
}

void test_tcp_truncated(void **state)
{
    int fd = data_connect();
    uint8_t half[16] = {0x4f, 0x54, OTE_STREAM_VERSION, OTE_STREAM_HELLO};

    (void)state;
    assert_int_equal(sw_send(fd, half, sizeof(half)), 0);
    /* Half a header, then silence: dropped by the handshake deadline. */
    assert_true(sw_closed(fd, 5000, NULL));
    close(fd);
}

void test_tcp_wrong_instance(void **state)
{
    int fd = data_connect();

    (void)state;
    assert_int_equal(sw_tcp_open(fd, fx.auth, fx.desc->instance_id ^ 1), OTE_ERR_NOT_FOUND);
    assert_true(sw_closed(fd, 3000, NULL));
    close(fd);
}

/* Refused accesses are answered and the connection stays usable. */
void test_tcp_out_of_bounds(void **state)
{
    uint64_t r0 = region_addr(0), r1 = region_addr(1);
    struct {
        uint8_t  type;
        uint64_t addr, length;
    } refused[] = {
        {OTE_STREAM_WRITE, r0 + REGION_LEN - 8, 64},   /* crosses the end         */
        {OTE_STREAM_WRITE, r0 - 64, 64},               /* guard before the region */
        {OTE_STREAM_WRITE, r0 - 8, 64},                /* crosses the start       */
        {OTE_STREAM_WRITE, r0 + REGION_LEN, 64},       /* guard after the region  */
        {OTE_STREAM_WRITE, 4096, 64},                  /* nowhere                 */
        {OTE_STREAM_WRITE, r1, 64},                    /* read-only region        */
        {OTE_STREAM_READ_REQ, r0 + REGION_LEN - 8, 64},
        {OTE_STREAM_READ_REQ, r0 - 64, 64},
        {OTE_STREAM_READ_REQ, r0 + REGION_LEN, 4096},
    };
    uint8_t payload[64], back[64];
    int fd = data_open();
    ote_stream_hdr_t h;

    (void)state;
    memset(payload, 0xa5, sizeof(payload));
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        assert_int_equal(sw_tcp_send(fd, refused[i].type, 100 + i, refused[i].addr,
                                     refused[i].length),
                         0);
        if (refused[i].type == OTE_STREAM_WRITE)
            assert_int_equal(sw_send(fd, payload, (size_t)refused[i].length), 0);
        assert_int_equal(sw_tcp_recv(fd, &h, 5000), 0);
        assert_int_equal(h.id, 100 + i);
        assert_int_equal(h.type, refused[i].type == OTE_STREAM_WRITE ? OTE_STREAM_WRITE_ACK
                                                                  : OTE_STREAM_READ_RESP);
        if (h.status >= 0)
            fail_msg("access %zu was not refused", i);
        assert_int_equal(h.length, 0);
    }
    /* Still usable for an access that is allowed. */
    assert_int_equal(sw_tcp_send(fd, OTE_STREAM_WRITE, 1, r0 + 128, sizeof(payload)), 0);
    assert_int_equal(sw_send(fd, payload, sizeof(payload)), 0);
    assert_int_equal(sw_tcp_recv(fd, &h, 5000), 0);
    assert_int_equal(h.status, OTE_OK);
    assert_int_equal(sw_tcp_send(fd, OTE_STREAM_READ_REQ, 2, r0 + 128, sizeof(back)), 0);
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
void test_tcp_never_reads(void **state)
{
    int fd = data_open();
    ote_desc_t *d = NULL;
    uint64_t t0;

    (void)state;
    for (uint64_t i = 0; i < 64; i++)
        assert_int_equal(sw_tcp_send(fd, OTE_STREAM_READ_REQ, 1000 + i, region_addr(0), REGION_LEN),
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

/* READ len bytes at addr on fd (open) into buf; the answer must be OK. */
static void read_back(int fd, uint64_t id, uint64_t addr, void *buf, size_t len)
{
    ote_stream_hdr_t h;

    assert_int_equal(sw_tcp_send(fd, OTE_STREAM_READ_REQ, id, addr, len), 0);
    assert_int_equal(sw_tcp_recv(fd, &h, 5000), 0);
    assert_int_equal(h.type, OTE_STREAM_READ_RESP);
    assert_int_equal(h.id, id);
    assert_int_equal(h.status, OTE_OK);
    assert_int_equal(h.length, len);
    assert_int_equal(sw_recv(fd, buf, len, 5000), 0);
}

/* Expect the WRITEV_ACK of a WRITEV of n entries with this id. */
static void writev_ack(int fd, uint64_t id, uint64_t n, ote_stream_hdr_t *h)
{
    assert_int_equal(sw_tcp_recv(fd, h, 5000), 0);
    assert_int_equal(h->type, OTE_STREAM_WRITEV_ACK);
    assert_int_equal(h->id, id);
    assert_int_equal(h->addr, n);
}

/*
 * WRITEV, which the target announces in HELLO_ACK: every entry lands where
 * the table says and one WRITEV_ACK answers them all; an entry the target
 * refuses is read and dropped while the others land, and the answer then
 * carries one status per entry. The connection carries on.
 */
void test_tcp_writev(void **state)
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
    ote_stream_hdr_t h;
    int fd = data_open_caps(&caps);

    (void)state;
    assert_non_null(data);
    assert_non_null(back);
    assert_true((caps & OTE_STREAM_CAP_WRITEV) != 0);
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
void test_tcp_readv(void **state)
{
    uint64_t r0 = region_addr(0), r1 = region_addr(1);
    uint64_t addr[3] = {r0 + 8192, r1 + 100, r0 + 500000}, len[3] = {300, 65536 - 100, 7};
    uint64_t bad_addr[3] = {r0 + 8192, r0 + REGION_LEN - 8, r1};
    uint64_t bad_len[3]  = {300, 64, 16};
    size_t total = 300 + 65436 + 7;
    uint8_t *back = malloc(total), *one = malloc(65536), table[3 * OTE_STREAM_WRITEV_ENTRY_LEN];
    uint8_t st[12];
    ote_stream_hdr_t h;
    size_t off = 0;
    int fd = data_open();

    (void)state;
    assert_non_null(back);
    assert_non_null(one);
    for (size_t i = 0; i < 3; i++) {
        ote_stream_vec_entry_t e = {.addr = addr[i], .length = len[i]};

        ote_stream_vec_entry_encode(&e, table + i * OTE_STREAM_WRITEV_ENTRY_LEN);
    }
    assert_int_equal(sw_tcp_send(fd, OTE_STREAM_READV_REQ, 80, 3, total), 0);
    assert_int_equal(sw_send(fd, table, sizeof(table)), 0);
    assert_int_equal(sw_tcp_recv(fd, &h, 5000), 0);
    assert_int_equal(h.type, OTE_STREAM_READV_RESP);
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
        ote_stream_vec_entry_t e = {.addr = bad_addr[i], .length = bad_len[i]};

        ote_stream_vec_entry_encode(&e, table + i * OTE_STREAM_WRITEV_ENTRY_LEN);
    }
    assert_int_equal(sw_tcp_send(fd, OTE_STREAM_READV_REQ, 90, 3, 380), 0);
    assert_int_equal(sw_send(fd, table, sizeof(table)), 0);
    assert_int_equal(sw_tcp_recv(fd, &h, 5000), 0);
    assert_int_equal(h.type, OTE_STREAM_READV_RESP);
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
void test_tcp_bad_vector(void **state)
{
    struct {
        uint64_t n, total;       /* header: entries, payload bytes */
        size_t   k;              /* table entries sent */
        uint64_t e[2][2];        /* (addr offset in region 0, length) */
    } bad[] = {
        {1, 16, 1, {{0, 16}}},                              /* one entry          */
        {OTE_STREAM_WRITEV_MAX + 1, 65, 0, {{0}}},             /* too many           */
        {2, 32, 2, {{0, 16}, {64, 8}}},                     /* sum differs        */
        {2, 16, 2, {{0, 16}, {64, 0}}},                     /* an empty entry     */
        {2, OTE_STREAM_WRITEV_ENTRY_MAX + 2, 2,
         {{0, OTE_STREAM_WRITEV_ENTRY_MAX + 1}, {0, 1}}},      /* an entry too large */
        {2, 32, 2, {{UINT64_MAX - 8, 16}, {0, 16}}},        /* address wraps      */
    };

    (void)state;
    for (size_t i = 0; i < 2 * sizeof(bad) / sizeof(bad[0]); i++) {
        uint8_t table[2 * OTE_STREAM_WRITEV_ENTRY_LEN];
        uint8_t type = i % 2 ? OTE_STREAM_READV_REQ : OTE_STREAM_WRITEV;
        int fd       = data_open();

        const size_t c = i / 2; /* each case as WRITEV, then as READV_REQ */

        for (size_t j = 0; j < bad[c].k; j++) {
            uint64_t a = bad[c].e[j][0] == UINT64_MAX - 8 ? bad[c].e[j][0]
                                                          : region_addr(0) + bad[c].e[j][0];
            ote_stream_vec_entry_t e = {.addr = a, .length = bad[c].e[j][1]};

            ote_stream_vec_entry_encode(&e, table + j * OTE_STREAM_WRITEV_ENTRY_LEN);
        }
        /* The header alone may close it: the table's send may then fail. */
        assert_true(sw_tcp_send_refused(fd, type, 9, bad[c].n, bad[c].total,
                                        bad[c].k ? table : NULL,
                                        bad[c].k * OTE_STREAM_WRITEV_ENTRY_LEN) >= 0);
        if (!sw_closed(fd, 3000, NULL))
            fail_msg("bad vector %zu (type %u) left the connection open", c, type);
        close(fd);
    }
}

/* Messages no initiator may send once open: the connection is closed. */
void test_tcp_bad_after_hello(void **state)
{
    struct {
        uint8_t  type;
        int32_t  status;
        uint64_t addr, length;
    } bad[] = {
        {OTE_STREAM_WRITE, 0, 0x1000, (1ull << 40)},          /* over OTE_TCP_MAX_MSG */
        {OTE_STREAM_READ_REQ, 0, 0x1000, (1ull << 40)},
        {OTE_STREAM_WRITE, 0, UINT64_MAX - 16, 64},           /* address wraps        */
        {OTE_STREAM_READ_REQ, 0, UINT64_MAX - 16, 64},
        {OTE_STREAM_WRITE, 0, 0x1000, 0},                     /* empty                */
        {OTE_STREAM_WRITE, OTE_ERR_IO, 0x1000, 64},           /* status on a request  */
        {OTE_STREAM_HELLO, 0, 0, 0},                          /* second HELLO         */
        {OTE_STREAM_READ_RESP, 0, 0, 0},                      /* a response           */
        {OTE_STREAM_HELLO_ACK, 0, 0, 0},
        {OTE_STREAM_AUTH_HELLO, 0, 0, 32},                    /* handshake again      */
        {OTE_STREAM_WRITEV_ACK, 0, 2, 32},                    /* an answer            */
        {OTE_STREAM_READV_RESP, 0, 2, 32},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int fd = data_open();

        assert_int_equal(sw_tcp_send_raw(fd, OTE_STREAM_MAGIC, OTE_STREAM_VERSION, bad[i].type,
                                         bad[i].status, 5, bad[i].addr, bad[i].length),
                         0);
        if (!sw_closed(fd, 3000, NULL))
            fail_msg("bad data message %zu left the connection open", i);
        close(fd);
    }
}

void test_tcp_unauthenticated(void **state)
{
    ote_stream_hdr_t h;
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
        assert_int_equal(sw_tcp_send(fd, OTE_STREAM_AUTH_HELLO, 1, 0, sizeof(hello)), 0);
        assert_int_equal(sw_send(fd, hello, sizeof(hello)), 0);
        assert_int_equal(sw_tcp_recv(fd, &h, 3000), 0);
        assert_int_equal(h.type, OTE_STREAM_AUTH_PROOF);
        assert_int_equal(sw_recv(fd, proof, sizeof(proof), 3000), 0);
        if (k == 0) {
            assert_int_equal(sw_tcp_send(fd, OTE_STREAM_AUTH_PROOF, 2, 0, 32), 0);
            assert_int_equal(sw_send(fd, junk, 32), 0);
            assert_int_equal(sw_tcp_recv(fd, &h, 3000), 0);
            assert_int_equal(h.type, OTE_STREAM_AUTH_DONE);
            assert_int_equal(h.status, OTE_ERR_AUTH);
        } else {
            assert_int_equal(sw_tcp_send(fd, OTE_STREAM_WRITE, 2, region_addr(0), sizeof(junk)), 0);
            sw_send(fd, junk, sizeof(junk));
        }
        assert_true(sw_closed(fd, 3000, NULL));
        close(fd);
    }
}

/* Read system calls of process pid so far (/proc/PID/io syscr: read, readv, ...). */
static long proc_syscr(pid_t pid)
{
    char path[64], line[128];
    long v = -1;
    FILE *fp;

    snprintf(path, sizeof(path), "/proc/%d/io", (int)pid);
    fp = fopen(path, "r");
    assert_non_null(fp);
    while (fgets(line, sizeof(line), fp) != NULL) {
        if (sscanf(line, "syscr: %ld", &v) == 1)
            break;
    }
    fclose(fp);
    assert_true(v >= 0);
    return v;
}

/*
 * A WRITE whose payload comes in pieces, a few milliseconds apart: the
 * target is told of the connection again only once 256 KiB more, or the
 * rest of the payload, is there (SO_RCVLOWAT), and reads each with one
 * readv, not one a piece (as a peer streaming 1 MiB messages would have it
 * read as the bytes trickle in). Its read system calls are counted
 * (/proc/PID/io); the bytes land.
 */
void test_tcp_payload_pieces(void **state)
{
    enum { PIECES = 32, PIECE = 16384, LEN = PIECES * PIECE };
    uint64_t r0 = region_addr(0);
    uint8_t *data = malloc(LEN), *back = malloc(LEN);
    struct timespec pause = {0, 3000000};
    ote_stream_hdr_t h;
    long before, reads;
    int fd = data_open();

    (void)state;
    assert_non_null(data);
    assert_non_null(back);
    for (size_t i = 0; i < LEN; i++)
        data[i] = (uint8_t)(i * 13 + 5);
    before = proc_syscr(fx.t.pid);
    assert_int_equal(sw_tcp_send(fd, OTE_STREAM_WRITE, 90, r0, LEN), 0);
    for (size_t k = 0; k < PIECES; k++) {
        assert_int_equal(send(fd, data + k * PIECE, PIECE, MSG_NOSIGNAL), PIECE);
        nanosleep(&pause, NULL);
    }
    assert_int_equal(sw_tcp_recv(fd, &h, 5000), 0);
    reads = proc_syscr(fx.t.pid) - before;
    assert_int_equal(h.type, OTE_STREAM_WRITE_ACK);
    assert_int_equal(h.id, 90);
    assert_int_equal(h.status, OTE_OK);
    assert_int_equal(h.length, LEN);
    read_back(fd, 91, r0, back, LEN);
    assert_memory_equal(back, data, LEN);
    printf("# a %d-byte WRITE in %d pieces %ld ms apart: %ld read system calls on the target\n",
           LEN, PIECES, pause.tv_nsec / 1000000, reads);
    /*
     * The header (and what came with it), a read at the 256 KiB mark
     * (OTE_STREAM_RX_LOWAT_MAX), one for what is left, and one more where
     * the pieces' boundaries fall badly: a read a piece (12 and more) before
     * the mark.
     */
    assert_true(reads <= 5);
    close(fd);
    free(data);
    free(back);
}

/*
 * A 1 MiB WRITE whose last quarter comes 300 ms after the rest: the target
 * reads what is there while it waits for the rest (SO_RCVLOWAT is at most
 * OTE_STREAM_RX_LOWAT_MAX, 256 KiB, stream_conn.h), so all but the last
 * 256 KiB of what came has landed before the rest is sent. Read back on
 * a second connection meanwhile, then whole once the WRITE is answered.
 * (With the mark at up to 1 MiB, 128 to 320 KiB of it had landed: the
 * target waited for most of a payload before it copied any of it, and a
 * caller with one batch in flight waited with it.)
 */
void test_tcp_payload_early(void **state)
{
    enum { LEN = REGION_LEN, FIRST = LEN / 4 * 3, LANDED = FIRST - 256 * 1024 };
    uint64_t r0 = region_addr(0);
    uint8_t *data = malloc(LEN), *back = malloc(LEN);
    struct timespec pause = {0, 300000000};
    ote_stream_hdr_t h;
    int fd = data_open(), fd2 = data_open();

    (void)state;
    assert_non_null(data);
    assert_non_null(back);
    /* Zeros first, over the same connection: nothing of the test's bytes is there. */
    memset(back, 0, LEN);
    assert_int_equal(sw_tcp_send(fd, OTE_STREAM_WRITE, 95, r0, LEN), 0);
    assert_int_equal(sw_send(fd, back, LEN), 0);
    assert_int_equal(sw_tcp_recv(fd, &h, 5000), 0);
    assert_int_equal(h.status, OTE_OK);
    for (size_t i = 0; i < LEN; i++)
        data[i] = (uint8_t)(i * 7 + 3) | 1;
    assert_int_equal(sw_tcp_send(fd, OTE_STREAM_WRITE, 96, r0, LEN), 0);
    assert_int_equal(sw_send(fd, data, FIRST), 0);
    nanosleep(&pause, NULL);
    read_back(fd2, 97, r0, back, LANDED);
    for (size_t i = 0; i < LANDED; i++) {
        if (back[i] != data[i])
            fail_msg("byte %zu of the %d bytes sent 300 ms ago not landed (it reads %d; the "
                     "first %d had to)",
                     i, FIRST, back[i], LANDED);
    }
    assert_int_equal(sw_send(fd, data + FIRST, LEN - FIRST), 0);
    assert_int_equal(sw_tcp_recv(fd, &h, 5000), 0);
    assert_int_equal(h.type, OTE_STREAM_WRITE_ACK);
    assert_int_equal(h.id, 96);
    assert_int_equal(h.status, OTE_OK);
    read_back(fd2, 98, r0, back, LEN);
    assert_memory_equal(back, data, LEN);
    close(fd2);
    close(fd);
    free(data);
    free(back);
}

/*
 * A refused WRITE (its payload is read and thrown away) whose payload
 * comes in three pieces: a few bytes with the header, then exactly the
 * target's largest SO_RCVLOWAT (256 KiB, OTE_STREAM_RX_LOWAT_MAX in
 * stream_conn.h), then less than that. The second piece is
 * read in full reads that may empty the socket without the read that
 * finds it empty taking a byte; the target must still be told of the
 * third piece (its SO_RCVLOWAT no higher than what is left to come) and
 * answer. Several first pieces, on fresh connections, put the reads'
 * boundaries in different places; after a first piece of 128 KiB the
 * target once set the mark to what was left of the payload counting the
 * bytes it had already read ahead into its buffer, 20 KiB above what was
 * to come, and never answered.
 */
void test_tcp_discard_pieces(void **state)
{
    static const size_t first[] = {0, 32, 4064, 4096, 8192, 12256, 65536, 131072};
    enum { LOWAT_MAX = 256 * 1024, REST = 64 * 1024 };
    struct timespec pause = {0, 20000000};
    uint8_t *junk = calloc(1, LOWAT_MAX);
    uint64_t r0 = region_addr(0);

    (void)state;
    assert_non_null(junk);
    for (size_t i = 0; i < sizeof(first) / sizeof(first[0]); i++) {
        size_t len = first[i] + LOWAT_MAX + REST;
        ote_stream_hdr_t h;
        int fd = data_open();

        assert_int_equal(sw_tcp_send(fd, OTE_STREAM_WRITE, 200 + i, 4096, len), 0);
        if (first[i] > 0)
            assert_int_equal(sw_send(fd, junk, first[i]), 0);
        nanosleep(&pause, NULL);
        assert_int_equal(sw_send(fd, junk, LOWAT_MAX), 0);
        nanosleep(&pause, NULL);
        assert_int_equal(sw_send(fd, junk, REST), 0);
        if (sw_tcp_recv(fd, &h, 5000) != 0)
            fail_msg("first piece of %zu bytes: no answer to the refused %zu-byte WRITE", first[i],
                     len);
        assert_int_equal(h.type, OTE_STREAM_WRITE_ACK);
        assert_int_equal(h.id, 200 + i);
        assert_true(h.status < 0);
        /* The connection is still in step: an allowed WRITE lands. */
        assert_int_equal(sw_tcp_send(fd, OTE_STREAM_WRITE, 300 + i, r0, 64), 0);
        assert_int_equal(sw_send(fd, junk, 64), 0);
        assert_int_equal(sw_tcp_recv(fd, &h, 5000), 0);
        assert_int_equal(h.id, 300 + i);
        assert_int_equal(h.status, OTE_OK);
        close(fd);
    }
    free(junk);
}
