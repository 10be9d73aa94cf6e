/* The hostile peer on a native cma target's data port: bursts, WRITEs by value. */
#include "hostile.h"

/*
 * The native cma target serves the requests it reads together in groups,
 * one copy per group: a burst mixing WRITEs, READs of what the WRITEs before
 * them wrote, and refused accesses is answered in order, each with its own
 * status, and the READs see the WRITEs.
 */
void test_cma_burst(void **state)
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
        {OTE_STREAM_PUT_REF, r0, K, src, true},
        {OTE_STREAM_PUT_REF, r0 + K, K, src + K, true},
        {OTE_STREAM_PUT_REF, r1, 4096, src, false},                 /* read-only region */
        {OTE_STREAM_PUT_REF, r0 + 2 * K, K, src + 2 * K, true},
        {OTE_STREAM_GET_REF, r0, 3 * K, dst, true},
        {OTE_STREAM_GET_REF, r0 + REGION_LEN - 8, 64, dst4, false}, /* crosses the end */
        {OTE_STREAM_GET_REF, r0 + K, K, dst2, true},
        {OTE_STREAM_PUT_REF, r0 + REGION_LEN, 64, src, false},      /* guard after it */
        {OTE_STREAM_GET_REF, r1, 64, dst3, true},                   /* read-only: readable */
    };
    uint8_t burst[N * (OTE_STREAM_HDR_LEN + OTE_STREAM_REF_TRAILER_LEN)], *p = burst;
    int fd = data_open();

    (void)state;
    assert_non_null(src);
    for (size_t i = 0; i < 3 * K; i++)
        src[i] = (uint8_t)(i * 7 + i / 251);
    /* Every request in one send: the target reads them together. */
    for (size_t i = 0; i < N; i++) {
        ote_stream_hdr_t h = {.type = q[i].type, .id = 500 + i, .addr = q[i].addr,
                           .length = q[i].length};

        ote_stream_hdr_encode(&h, p);
        ote_put_u64(p + OTE_STREAM_HDR_LEN, (uint64_t)(uintptr_t)q[i].local);
        p += OTE_STREAM_HDR_LEN + OTE_STREAM_REF_TRAILER_LEN;
    }
    assert_int_equal(sw_send(fd, burst, sizeof(burst)), 0);
    for (size_t i = 0; i < N; i++) {
        ote_stream_hdr_t h;

        assert_int_equal(sw_tcp_recv(fd, &h, 5000), 0);
        assert_int_equal(h.type, OTE_STREAM_REF_ACK);
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
    ote_stream_hdr_t h;

    assert_int_equal(sw_tcp_send(fd, OTE_STREAM_WRITE, id, addr, len), 0);
    assert_int_equal(sw_send(fd, bytes, len), 0);
    assert_int_equal(sw_tcp_recv(fd, &h, 5000), 0);
    assert_int_equal(h.type, OTE_STREAM_WRITE_ACK);
    assert_int_equal(h.id, id);
    return (ote_status_t)h.status;
}

/*
 * Small puts and gets by value on the native cma target: its HELLO_ACK says
 * it takes them (and no WRITEV); a WRITE read along with by-reference
 * requests is answered after those before it and lands after them, and a
 * READ_REQ after it sees its bytes; one into read-only memory is refused
 * and the connection goes on; one larger than OTE_STREAM_INLINE_MAX closes
 * the connection.
 */
void test_cma_inline(void **state)
{
    enum { K = 4096, HR = OTE_STREAM_HDR_LEN + OTE_STREAM_REF_TRAILER_LEN };
    uint64_t r0 = region_addr(0), r1 = region_addr(1), caps = 0;
    uint8_t *src = malloc(K), *dst = calloc(1, K), small[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    uint8_t burst[3 * HR + 8], *p = burst;
    ote_stream_hdr_t h;
    int fd = data_open_caps(&caps);

    (void)state;
    assert_non_null(src);
    assert_non_null(dst);
    assert_true(caps & OTE_STREAM_CAP_INLINE_WRITE);
    assert_true(caps & OTE_STREAM_CAP_INLINE_READ);
    assert_false(caps & OTE_STREAM_CAP_WRITEV);
    for (size_t i = 0; i < K; i++)
        src[i] = (uint8_t)(i * 13 + 5);
    /* PUT_REF of K bytes, a WRITE of 8 into the middle of them, a GET_REF of all: one send. */
    h = (ote_stream_hdr_t){.type = OTE_STREAM_PUT_REF, .id = 600, .addr = r0, .length = K};
    ote_stream_hdr_encode(&h, p);
    ote_put_u64(p + OTE_STREAM_HDR_LEN, (uint64_t)(uintptr_t)src);
    p += HR;
    h = (ote_stream_hdr_t){.type = OTE_STREAM_WRITE, .id = 601, .addr = r0 + 16, .length = 8};
    ote_stream_hdr_encode(&h, p);
    memcpy(p + OTE_STREAM_HDR_LEN, small, 8);
    p += OTE_STREAM_HDR_LEN + 8;
    h = (ote_stream_hdr_t){.type = OTE_STREAM_GET_REF, .id = 602, .addr = r0, .length = K};
    ote_stream_hdr_encode(&h, p);
    ote_put_u64(p + OTE_STREAM_HDR_LEN, (uint64_t)(uintptr_t)dst);
    p += HR;
    assert_int_equal(sw_send(fd, burst, (size_t)(p - burst)), 0);
    for (uint64_t id = 600; id <= 602; id++) {
        assert_int_equal(sw_tcp_recv(fd, &h, 5000), 0);
        assert_int_equal(h.type, id == 601 ? OTE_STREAM_WRITE_ACK : OTE_STREAM_REF_ACK);
        assert_int_equal(h.id, id);
        assert_int_equal(h.status, OTE_OK);
        assert_int_equal(h.length, id == 601 ? 8 : K);
    }
    memcpy(src + 16, small, 8);
    assert_memory_equal(dst, src, K);
    /* A READ_REQ by value: the bytes in its READ_RESP. */
    {
        uint8_t got[24];

        assert_int_equal(sw_tcp_send(fd, OTE_STREAM_READ_REQ, 610, r0 + 8, 24), 0);
        assert_int_equal(sw_tcp_recv(fd, &h, 5000), 0);
        assert_int_equal(h.type, OTE_STREAM_READ_RESP);
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
    assert_true(sw_tcp_send_refused(fd, OTE_STREAM_WRITE, 605, r0, OTE_STREAM_INLINE_MAX + 1, src,
                                    OTE_STREAM_INLINE_MAX + 1) >= 0);
    assert_true(sw_closed(fd, 5000, NULL));
    close(fd);
    fd = data_open();
    assert_int_equal(sw_tcp_send(fd, OTE_STREAM_READ_REQ, 606, r0, OTE_STREAM_INLINE_MAX + 1), 0);
    assert_true(sw_closed(fd, 5000, NULL));
    close(fd);
    free(src);
    free(dst);
}
