/* Wire codecs: tcp data header, control header, notification, segment descriptor. */
#include "core/ctl/ctl_int.h"
#include "core/wire/ctl_msg.h"
#include "core/wire/desc.h"
#include "base/wire_util.h"
#include "mem/mem.h"
#include "uct_ext/tcp/tcp.h"

#include <arpa/inet.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static void test_tcp_hdr(void **state)
{
    ote_stream_hdr_t h = {.type = OTE_STREAM_WRITE, .status = 0, .id = 0x1122334455667788ull,
                       .addr = 0x7f0000001000ull, .length = 4096};
    ote_stream_hdr_t d;
    uint8_t b[OTE_STREAM_HDR_LEN];

    ote_stream_hdr_encode(&h, b);
    assert_int_equal(ote_stream_hdr_decode(b, sizeof(b), 1 << 20, &d), OTE_OK);
    assert_int_equal(d.type, h.type);
    assert_true(d.id == h.id && d.addr == h.addr && d.length == h.length);

    /* Truncated. */
    assert_int_equal(ote_stream_hdr_decode(b, OTE_STREAM_HDR_LEN - 1, 1 << 20, &d),
                     OTE_ERR_PROTOCOL);
    /* Payload above the limit. */
    assert_int_equal(ote_stream_hdr_decode(b, sizeof(b), 4095, &d), OTE_ERR_PROTOCOL);
    /* Bad magic, version, type. */
    b[0] ^= 0xff;
    assert_int_equal(ote_stream_hdr_decode(b, sizeof(b), 1 << 20, &d), OTE_ERR_PROTOCOL);
    b[0] ^= 0xff;
    b[2] = OTE_STREAM_VERSION + 1;
    assert_int_equal(ote_stream_hdr_decode(b, sizeof(b), 1 << 20, &d), OTE_ERR_PROTOCOL);
    b[2] = OTE_STREAM_VERSION;
    b[3] = 0;
    assert_int_equal(ote_stream_hdr_decode(b, sizeof(b), 1 << 20, &d), OTE_ERR_PROTOCOL);
    b[3] = 200;
    assert_int_equal(ote_stream_hdr_decode(b, sizeof(b), 1 << 20, &d), OTE_ERR_PROTOCOL);
    /* Zero-length and wrapping WRITE. */
    h.length = 0;
    ote_stream_hdr_encode(&h, b);
    assert_int_equal(ote_stream_hdr_decode(b, sizeof(b), 1 << 20, &d), OTE_ERR_PROTOCOL);
    h.addr   = UINT64_MAX - 10;
    h.length = 100;
    ote_stream_hdr_encode(&h, b);
    assert_int_equal(ote_stream_hdr_decode(b, sizeof(b), 1 << 20, &d), OTE_ERR_PROTOCOL);
    /* Unknown status value. */
    h = (ote_stream_hdr_t){.type = OTE_STREAM_WRITE_ACK, .status = -999, .length = 0};
    ote_stream_hdr_encode(&h, b);
    assert_int_equal(ote_stream_hdr_decode(b, sizeof(b), 1 << 20, &d), OTE_ERR_PROTOCOL);
    /* A HELLO carries no payload. */
    h = (ote_stream_hdr_t){.type = OTE_STREAM_HELLO, .length = 1};
    ote_stream_hdr_encode(&h, b);
    assert_int_equal(ote_stream_hdr_decode(b, sizeof(b), 1 << 20, &d), OTE_ERR_PROTOCOL);
}

/*
 * Encode the WRITEV or READV_REQ h into b and its n entries into t, then
 * decode both back into d and out: the same fields and entries.
 */
static void vector_roundtrip(const ote_stream_hdr_t *h, const ote_stream_vec_entry_t *in, size_t n,
                             uint8_t *b, uint8_t *t, ote_stream_hdr_t *d, ote_stream_vec_entry_t *out)
{
    for (size_t i = 0; i < n; i++)
        ote_stream_vec_entry_encode(&in[i], t + i * OTE_STREAM_WRITEV_ENTRY_LEN);
    ote_stream_hdr_encode(h, b);
    assert_int_equal(ote_stream_hdr_decode(b, OTE_STREAM_HDR_LEN, 1 << 20, d), OTE_OK);
    assert_int_equal(ote_stream_hdr_inline_len(d), n * OTE_STREAM_WRITEV_ENTRY_LEN);
    assert_int_equal(ote_stream_vec_decode(d, t, 1 << 20, out), OTE_OK);
    assert_memory_equal(out, in, n * sizeof(*in));
}

/* WRITEV: its header's limits and its table, and WRITEV_ACK. */
static void test_tcp_writev(void **state)
{
    ote_stream_vec_entry_t in[3] = {{0x1000, 100}, {0x9000, 65536}, {0x20, 1}}, out[3];
    uint8_t b[OTE_STREAM_HDR_LEN], t[3 * OTE_STREAM_WRITEV_ENTRY_LEN];
    ote_stream_hdr_t h = {.type = OTE_STREAM_WRITEV, .id = 9, .addr = 3, .length = 65637}, d;
    uint64_t all = OTE_STREAM_WRITEV_MAX * OTE_STREAM_WRITEV_ENTRY_MAX;
    ote_status_t st[3];

    (void)state;
    vector_roundtrip(&h, in, 3, b, t, &d, out);
    /* An entry above the receiver's largest message, or above 64 KiB. */
    assert_int_equal(ote_stream_vec_decode(&d, t, 65535, out), OTE_ERR_PROTOCOL);
    in[1].length = OTE_STREAM_WRITEV_ENTRY_MAX + 1;
    ote_stream_vec_entry_encode(&in[1], t + OTE_STREAM_WRITEV_ENTRY_LEN);
    d.length = 65638;
    assert_int_equal(ote_stream_vec_decode(&d, t, 1ull << 30, out), OTE_ERR_PROTOCOL);
    /* The sum must be the header's length; no entry may be empty or wrap. */
    in[1] = (ote_stream_vec_entry_t){0x9000, 65536};
    ote_stream_vec_entry_encode(&in[1], t + OTE_STREAM_WRITEV_ENTRY_LEN);
    d.length = 65636;
    assert_int_equal(ote_stream_vec_decode(&d, t, 1 << 20, out), OTE_ERR_PROTOCOL);
    d.length = 65637;
    in[2] = (ote_stream_vec_entry_t){UINT64_MAX, 1};
    ote_stream_vec_entry_encode(&in[2], t + 2 * OTE_STREAM_WRITEV_ENTRY_LEN);
    assert_int_equal(ote_stream_vec_decode(&d, t, 1 << 20, out), OTE_ERR_PROTOCOL);
    in[2] = (ote_stream_vec_entry_t){0x20, 0};
    ote_stream_vec_entry_encode(&in[2], t + 2 * OTE_STREAM_WRITEV_ENTRY_LEN);
    d.length = 65636;
    assert_int_equal(ote_stream_vec_decode(&d, t, 1 << 20, out), OTE_ERR_PROTOCOL);
    /* Header: 2..64 entries, at least a byte each, at most 64 KiB each. */
    for (uint64_t n = 0; n <= OTE_STREAM_WRITEV_MAX + 1; n++) {
        h = (ote_stream_hdr_t){.type = OTE_STREAM_WRITEV, .addr = n, .length = n};
        ote_stream_hdr_encode(&h, b);
        assert_int_equal(ote_stream_hdr_decode(b, sizeof(b), 1 << 20, &d),
                         n >= 2 && n <= OTE_STREAM_WRITEV_MAX ? OTE_OK : OTE_ERR_PROTOCOL);
    }
    h = (ote_stream_hdr_t){.type = OTE_STREAM_WRITEV, .addr = 4, .length = 3};
    ote_stream_hdr_encode(&h, b);
    assert_int_equal(ote_stream_hdr_decode(b, sizeof(b), 1 << 20, &d), OTE_ERR_PROTOCOL);
    h = (ote_stream_hdr_t){.type = OTE_STREAM_WRITEV, .addr = OTE_STREAM_WRITEV_MAX,
                           .length = all + 1};
    ote_stream_hdr_encode(&h, b);
    assert_int_equal(ote_stream_hdr_decode(b, sizeof(b), 1 << 20, &d), OTE_ERR_PROTOCOL);
    h.length = all;
    ote_stream_hdr_encode(&h, b);
    assert_int_equal(ote_stream_hdr_decode(b, sizeof(b), 1 << 20, &d), OTE_OK);
    /* WRITEV_ACK: an error carries no length, success at least a byte an entry. */
    h = (ote_stream_hdr_t){.type = OTE_STREAM_WRITEV_ACK, .status = OTE_ERR_ACCESS, .addr = 2};
    ote_stream_hdr_encode(&h, b);
    assert_int_equal(ote_stream_hdr_decode(b, sizeof(b), 1 << 20, &d), OTE_OK);
    h.length = 2;
    ote_stream_hdr_encode(&h, b);
    assert_int_equal(ote_stream_hdr_decode(b, sizeof(b), 1 << 20, &d), OTE_ERR_PROTOCOL);
    h.status = OTE_OK;
    ote_stream_hdr_encode(&h, b);
    assert_int_equal(ote_stream_hdr_decode(b, sizeof(b), 1 << 20, &d), OTE_OK);
    h.length = 1;
    ote_stream_hdr_encode(&h, b);
    assert_int_equal(ote_stream_hdr_decode(b, sizeof(b), 1 << 20, &d), OTE_ERR_PROTOCOL);
    h = (ote_stream_hdr_t){.type = OTE_STREAM_WRITEV_ACK, .addr = 1, .length = 1};
    ote_stream_hdr_encode(&h, b);
    assert_int_equal(ote_stream_hdr_decode(b, sizeof(b), 1 << 20, &d), OTE_ERR_PROTOCOL);
    /* A failed WRITEV_ACK carries a status per entry: OK or a known error. */
    h = (ote_stream_hdr_t){.type = OTE_STREAM_WRITEV_ACK, .status = OTE_ERR_ACCESS, .addr = 3};
    assert_int_equal(ote_stream_hdr_inline_len(&h), 3 * OTE_STREAM_WRITEV_STATUS_LEN);
    ote_put_u32(t, (uint32_t)OTE_OK);
    ote_put_u32(t + 4, (uint32_t)OTE_ERR_ACCESS);
    ote_put_u32(t + 8, (uint32_t)OTE_ERR_NOT_REGISTERED);
    assert_int_equal(ote_stream_vec_status_decode(&h, t, st), OTE_OK);
    assert_int_equal(st[0], OTE_OK);
    assert_int_equal(st[1], OTE_ERR_ACCESS);
    assert_int_equal(st[2], OTE_ERR_NOT_REGISTERED);
    ote_put_u32(t + 8, (uint32_t)OTE_INPROGRESS);
    assert_int_equal(ote_stream_vec_status_decode(&h, t, st), OTE_ERR_PROTOCOL);
    ote_put_u32(t + 8, (uint32_t)-9999);
    assert_int_equal(ote_stream_vec_status_decode(&h, t, st), OTE_ERR_PROTOCOL);
    h.status = OTE_OK;
    assert_int_equal(ote_stream_hdr_inline_len(&h), 0);
}

/* READV_REQ: WRITEV's table and limits; READV_RESP: the bytes of the entries read. */
static void test_tcp_readv(void **state)
{
    ote_stream_vec_entry_t in[2] = {{0x1000, 100}, {0x9000, 4096}}, out[2];
    uint8_t b[OTE_STREAM_HDR_LEN], t[2 * OTE_STREAM_WRITEV_ENTRY_LEN];
    ote_stream_hdr_t h = {.type = OTE_STREAM_READV_REQ, .id = 3, .addr = 2, .length = 4196}, d;
    ote_status_t st[2];

    (void)state;
    vector_roundtrip(&h, in, 2, b, t, &d, out);
    d.length = 4197;
    assert_int_equal(ote_stream_vec_decode(&d, t, 1 << 20, out), OTE_ERR_PROTOCOL);
    h = (ote_stream_hdr_t){.type = OTE_STREAM_READV_REQ, .addr = 1, .length = 1};
    ote_stream_hdr_encode(&h, b);
    assert_int_equal(ote_stream_hdr_decode(b, sizeof(b), 1 << 20, &d), OTE_ERR_PROTOCOL);
    h = (ote_stream_hdr_t){.type = OTE_STREAM_READV_REQ, .status = OTE_ERR_IO, .addr = 2,
                           .length = 2};
    ote_stream_hdr_encode(&h, b);
    assert_int_equal(ote_stream_hdr_decode(b, sizeof(b), 1 << 20, &d), OTE_ERR_PROTOCOL);
    /* READV_RESP: all the bytes on success; on error fewer, and a status each. */
    h = (ote_stream_hdr_t){.type = OTE_STREAM_READV_RESP, .addr = 2, .length = 4196};
    ote_stream_hdr_encode(&h, b);
    assert_int_equal(ote_stream_hdr_decode(b, sizeof(b), 1 << 20, &d), OTE_OK);
    assert_int_equal(ote_stream_hdr_inline_len(&d), 0);
    h.length = 1;
    ote_stream_hdr_encode(&h, b);
    assert_int_equal(ote_stream_hdr_decode(b, sizeof(b), 1 << 20, &d), OTE_ERR_PROTOCOL);
    h = (ote_stream_hdr_t){.type = OTE_STREAM_READV_RESP, .status = OTE_ERR_ACCESS, .addr = 2,
                        .length = 100};
    ote_stream_hdr_encode(&h, b);
    assert_int_equal(ote_stream_hdr_decode(b, sizeof(b), 1 << 20, &d), OTE_OK);
    assert_int_equal(ote_stream_hdr_inline_len(&d), 2 * OTE_STREAM_WRITEV_STATUS_LEN);
    ote_put_u32(t, (uint32_t)OTE_OK);
    ote_put_u32(t + 4, (uint32_t)OTE_ERR_ACCESS);
    assert_int_equal(ote_stream_vec_status_decode(&d, t, st), OTE_OK);
    assert_int_equal(st[1], OTE_ERR_ACCESS);
    /* An error leaves at least one entry out: at most 64 KiB less than all. */
    h.length = OTE_STREAM_WRITEV_ENTRY_MAX + 1;
    ote_stream_hdr_encode(&h, b);
    assert_int_equal(ote_stream_hdr_decode(b, sizeof(b), 1 << 20, &d), OTE_ERR_PROTOCOL);
}

static void test_ctl_hdr(void **state)
{
    ote_ctl_hdr_t h = {.type = OTE_CTL_NOTIFY, .length = 100, .seq = 7}, d;
    uint8_t b[OTE_CTL_HDR_LEN];

    ote_ctl_hdr_encode(&h, b);
    assert_int_equal(ote_ctl_hdr_decode(b, sizeof(b), 1000, &d), OTE_OK);
    assert_int_equal(d.type, OTE_CTL_NOTIFY);
    assert_int_equal(d.length, 100);
    assert_int_equal(d.seq, 7);
    assert_int_equal(ote_ctl_hdr_decode(b, sizeof(b), 99, &d), OTE_ERR_PROTOCOL);
    assert_int_equal(ote_ctl_hdr_decode(b, sizeof(b) - 1, 1000, &d), OTE_ERR_PROTOCOL);
    for (size_t i = 0; i < 8; i++) {
        uint8_t c[OTE_CTL_HDR_LEN];

        memcpy(c, b, sizeof(c));
        c[i] ^= 0x5a; /* magic, version, type, flags */
        assert_int_equal(ote_ctl_hdr_decode(c, sizeof(c), 1000, &d), OTE_ERR_PROTOCOL);
    }
}

/*
 * The type table the listener, the decoder and the fuzz targets read: every
 * type up to OTE_CTL_TYPE_MAX has a row with a role, headers of exactly
 * those types decode, and only request types get a payload limit.
 */
static void test_ctl_types(void **state)
{
    const size_t cfg = 1u << 20;
    size_t max, requests = 0, responses = 0;

    for (unsigned t = 0; t < 256; t++) {
        const ote_ctl_type_info_t *info = ote_ctl_type_info((uint8_t)t);
        ote_ctl_hdr_t h = {.type = (uint8_t)t, .length = 0, .seq = 1}, d;
        uint8_t b[OTE_CTL_HDR_LEN];
        ote_status_t st;

        ote_ctl_hdr_encode(&h, b);
        st = ote_ctl_request_max_len((uint8_t)t, cfg, &max);
        /* Types 1..17 are in use: core's, STAGE's, PUTBACK's, FILE_IO's, NOTIFY_BATCH's. */
        if (t >= 1 && t <= 17 && info == NULL)
            fail_msg("control type %u has no row in the type table", t);
        if (info == NULL) {
            assert_int_equal(ote_ctl_hdr_decode(b, sizeof(b), cfg, &d), OTE_ERR_PROTOCOL);
            assert_int_equal(st, OTE_ERR_PROTOCOL);
            continue;
        }
        assert_int_equal(info->type, t);
        assert_non_null(info->name);
        assert_true(info->request || info->response);
        assert_int_equal(ote_ctl_hdr_decode(b, sizeof(b), cfg, &d), OTE_OK);
        assert_int_equal(d.type, t);
        if (info->request) {
            assert_int_equal(st, OTE_OK);
            assert_int_equal(max, info->request_max < cfg ? info->request_max : cfg);
            assert_int_equal(ote_ctl_request_max_len((uint8_t)t, 8, &max), OTE_OK);
            assert_true(max <= 8);
            requests++;
        } else {
            assert_int_equal(st, OTE_ERR_PROTOCOL);
        }
        responses += info->response;
    }
    /* The answers added last travel only back; the requests they answer are requests. */
    assert_false(ote_ctl_type_info(OTE_CTL_PUTBACK_ACK)->request);
    assert_false(ote_ctl_type_info(OTE_CTL_FILE_IO_ACK)->request);
    assert_true(ote_ctl_type_info(OTE_CTL_PUTBACK)->request);
    assert_true(ote_ctl_type_info(OTE_CTL_FILE_IO)->request);
    assert_int_equal(ote_ctl_request_max_len(OTE_CTL_GET_DESC, cfg, &max), OTE_OK);
    assert_int_equal(max, 0);
    assert_int_equal(ote_ctl_request_max_len(OTE_CTL_NOTIFY, cfg, &max), OTE_OK);
    assert_int_equal(max, OTE_CTL_NOTIFY_MAX_LEN);
    assert_true(requests > 0 && responses > 0);
    assert_null(ote_ctl_type_info(0));
}

/*
 * The protocols' message types are rows of their services: a type has one
 * row in all (core's own rows: ote_ctl_core_type_info), and a protocol's
 * request is served by its own service.
 */
static void test_ctl_service_types(void **state)
{
    size_t nsvc, rows[256] = {0};
    const ote_ctl_service_t *const *svc = ote_ctl_services(&nsvc);

    for (unsigned t = 1; t <= OTE_CTL_CORE_TYPE_MAX; t++)
        rows[t] += ote_ctl_core_type_info((uint8_t)t) != NULL;
    for (size_t i = 0; i < nsvc; i++) {
        for (size_t k = 0; k < svc[i]->num_types; k++) {
            const ote_ctl_type_info_t *row = &svc[i]->types[k];

            if (ote_ctl_core_type_info(row->type) != NULL)
                fail_msg("service %s defines core's type %u", svc[i]->name, row->type);
            rows[row->type]++;
            assert_ptr_equal(ote_ctl_type_info(row->type), row);
            if (row->request)
                assert_ptr_equal(ote_ctl_handler_find(row->type)->handle,
                                 svc[i]->handlers[0].handle);
        }
    }
    for (unsigned t = 0; t < 256; t++) {
        if (rows[t] > 1)
            fail_msg("control type %u has %zu rows", t, rows[t]);
    }
    assert_ptr_equal(ote_ctl_type_info(OTE_CTL_PUTBACK), &ote_proto_putback_service.types[0]);
    assert_ptr_equal(ote_ctl_type_info(OTE_CTL_FILE_IO_ACK),
                     &ote_proto_file_io_service.types[1]);
    assert_ptr_equal(ote_ctl_type_info(OTE_CTL_STAGE_ACK), &ote_proto_stage_service.types[1]);
}

/*
 * The listener's handler table: every request type of the type table has
 * exactly one handler among the registered services, no other type has
 * one, and a request refused before authentication is answered with a
 * response type (GET_DESC with DESC, NOTIFY with NOTIFY_ACK, the others
 * with AUTH_DONE).
 */
static void test_ctl_handlers(void **state)
{
    size_t nsvc, served[256] = {0}, handlers = 0, requests = 0;
    const ote_ctl_service_t *const *svc = ote_ctl_services(&nsvc);

    assert_true(nsvc >= 4);
    for (size_t i = 0; i < nsvc; i++) {
        assert_non_null(svc[i]->name);
        for (size_t k = 0; k < svc[i]->num_handlers; k++) {
            const ote_ctl_handler_t *h = &svc[i]->handlers[k];
            const ote_ctl_type_info_t *refuse = ote_ctl_type_info(h->refuse_type);

            assert_non_null(h->handle);
            if (refuse == NULL || !refuse->response)
                fail_msg("service %s: type %u refused with %u, not a response", svc[i]->name,
                         h->type, h->refuse_type);
            served[h->type]++;
            handlers++;
        }
    }
    for (unsigned t = 0; t < 256; t++) {
        const ote_ctl_type_info_t *info = ote_ctl_type_info((uint8_t)t);
        const ote_ctl_handler_t *h     = ote_ctl_handler_find((uint8_t)t);

        if (info != NULL && info->request) {
            if (served[t] != 1)
                fail_msg("request %s has %zu handlers", info->name, served[t]);
            assert_non_null(h);
            assert_int_equal(h->type, t);
            requests++;
        } else {
            if (served[t] != 0)
                fail_msg("type %u is no request but has %zu handlers", t, served[t]);
            assert_null(h);
        }
    }
    assert_int_equal(handlers, requests);
    assert_int_equal(ote_ctl_handler_find(OTE_CTL_GET_DESC)->refuse_type, OTE_CTL_DESC);
    assert_int_equal(ote_ctl_handler_find(OTE_CTL_NOTIFY)->refuse_type, OTE_CTL_NOTIFY_ACK);
    assert_int_equal(ote_ctl_handler_find(OTE_CTL_PUTBACK)->refuse_type, OTE_CTL_AUTH_DONE);
    assert_int_equal(ote_ctl_handler_find(OTE_CTL_FILE_IO)->refuse_type, OTE_CTL_AUTH_DONE);
    assert_int_equal(ote_ctl_handler_find(OTE_CTL_STAGE)->refuse_type, OTE_CTL_AUTH_DONE);
    /* Each protocol serves its own requests: the rows are those of its service in proto/. */
    assert_ptr_equal(ote_ctl_handler_find(OTE_CTL_STAGE), &ote_proto_stage_service.handlers[0]);
    assert_ptr_equal(ote_ctl_handler_find(OTE_CTL_PUTBACK),
                     &ote_proto_putback_service.handlers[0]);
    assert_ptr_equal(ote_ctl_handler_find(OTE_CTL_FILE_IO),
                     &ote_proto_file_io_service.handlers[0]);
}

static void test_notify(void **state)
{
    uint8_t data[OTE_NOTIFY_MAX];
    ote_ctl_notify_t n = {.sender_key = 9, .target_instance = 11, .seq = 3,
                          .length = sizeof(data), .data = data};
    ote_ctl_notify_t d;
    ote_buf_t out = {0};

    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)(i * 7);
    snprintf(n.from, sizeof(n.from), "127.0.0.1:5000");
    assert_int_equal(ote_ctl_notify_encode(&n, &out), OTE_OK);
    assert_int_equal(ote_ctl_notify_decode(out.data, out.len, &d), OTE_OK);
    assert_string_equal(d.from, n.from);
    assert_int_equal(d.length, sizeof(data));
    assert_memory_equal(d.data, data, sizeof(data));
    assert_true(d.seq == 3 && d.sender_key == 9 && d.target_instance == 11);
    /* Every truncation and one extra byte are rejected. */
    for (size_t l = 0; l < out.len; l++)
        assert_int_equal(ote_ctl_notify_decode(out.data, l, &d), OTE_ERR_PROTOCOL);
    ote_buf_put_u8(&out, 0);
    assert_int_equal(ote_ctl_notify_decode(out.data, out.len, &d), OTE_ERR_PROTOCOL);
    /* Declared length above OTE_NOTIFY_MAX. */
    ote_put_u32(out.data + 8 + 8 + 8 + 1 + strlen(n.from), OTE_NOTIFY_MAX + 1);
    assert_int_equal(ote_ctl_notify_decode(out.data, out.len - 1, &d), OTE_ERR_PROTOCOL);
    free(out.data);
    n.length = OTE_NOTIFY_MAX + 1;
    out      = (ote_buf_t){0};
    assert_int_equal(ote_ctl_notify_encode(&n, &out), OTE_ERR_INVALID_PARAM);
    free(out.data);
}

/* A memory domain that hands out rkeys "KEY<addr>" so the codec carries real bytes. */
static ote_status_t fake_reg(ote_md_t *md, void *addr, size_t len, unsigned access, void **h)
{
    *h = addr;
    return OTE_OK;
}

static void fake_dereg(ote_md_t *md, void *h)
{
}

static ote_status_t fake_pack(ote_md_t *md, void *h, void *buf, size_t max, size_t *len_p)
{
    int n = snprintf(buf, max, "KEY%p", h);

    *len_p = (size_t)n;
    return OTE_OK;
}

static const ote_md_ops_t fake_ops = {fake_reg, fake_dereg, fake_pack};

static void test_desc_roundtrip(void **state)
{
    ote_md_t md = {.name = "fake", .ops = &fake_ops, .mem_types = OTE_MEM_TYPE_HOST};
    ote_mem_table_t *table;
    static uint8_t mem[3][8192];
    ote_mem_desc_t descs[3] = {
        {.addr = mem[0], .length = 8192, .location = "cpu:0", .access = OTE_ACCESS_REMOTE_READ},
        {.addr = mem[1], .length = 100, .location = "cpu:0", .access = OTE_ACCESS_REMOTE_WRITE},
        {.addr = mem[2], .length = 1, .location = "cpu:0", .access = 3},
    };
    ote_region_t *regions[3];
    ote_desc_t *in = calloc(1, sizeof(*in)), *out = NULL;
    ote_buf_t buf = {0};

    assert_int_equal(ote_mem_table_create(NULL, &table), OTE_OK);
    assert_int_equal(ote_mem_table_add_md(table, &md), OTE_OK);
    assert_int_equal(ote_mem_table_register(table, descs, 3, regions), OTE_OK);
    in->instance_id = 0xabcdef;
    snprintf(in->name, sizeof(in->name), "10.0.0.1:1234");
    snprintf(in->host_id, sizeof(in->host_id), "host-a");
    in->num_tls = 2;
    in->tls     = calloc(2, sizeof(*in->tls));
    assert_non_null(in->tls);
    snprintf(in->tls[0].tl_name, sizeof(in->tls[0].tl_name), "tcp");
    snprintf(in->tls[0].dev_name, sizeof(in->tls[0].dev_name), "lo");
    in->tls[0].addr_len = 7;
    memcpy(in->tls[0].addr, "\x04\x12\x34\x7f\x00\x00\x01", 7);
    snprintf(in->tls[1].tl_name, sizeof(in->tls[1].tl_name), "cma");
    snprintf(in->tls[1].dev_name, sizeof(in->tls[1].dev_name), "memory");
    in->tls[1].addr_len = 0;
    in->num_mds = 1;
    snprintf(in->mds[0], sizeof(in->mds[0]), "fake");
    in->num_exports = 2;
    in->exports     = calloc(2, sizeof(*in->exports));
    assert_non_null(in->exports);
    in->exports[0] = (ote_desc_export_t){.name = "kv", .id = 7, .size = 1u << 20,
                                         .access = OTE_ACCESS_REMOTE_READ};
    in->exports[1] = (ote_desc_export_t){.name = "dir/f", .id = 8, .size = 1,
                                         .access = OTE_ACCESS_REMOTE_READ |
                                                   OTE_ACCESS_REMOTE_WRITE};
    /* It runs uct_tcp too, no device of which is up now. */
    in->runs = calloc(OTE_DESC_MAX_TLS, sizeof(*in->runs));
    assert_non_null(in->runs);
    ote_desc_runs_add(in, "tcp");
    ote_desc_runs_add(in, "uct_tcp");
    ote_desc_runs_add(in, "tcp");
    ote_desc_runs_add(in, "cma");
    assert_int_equal(in->num_runs, 3);

    assert_int_equal(ote_desc_encode(in, table, &buf), OTE_OK);
    assert_int_equal(ote_desc_decode(buf.data, buf.len, &out), OTE_OK);
    assert_true(out->instance_id == 0xabcdef);
    assert_string_equal(out->name, "10.0.0.1:1234");
    assert_string_equal(out->host_id, "host-a");
    assert_int_equal(out->num_tls, 2);
    assert_string_equal(out->tls[1].tl_name, "cma");
    assert_int_equal(out->tls[0].addr_len, 7);
    assert_memory_equal(out->tls[0].addr, in->tls[0].addr, 7);
    assert_int_equal(out->num_exports, 2);
    assert_non_null(ote_desc_find_export(out, "dir/f"));
    assert_true(ote_desc_find_export(out, "dir/f")->id == 8);
    assert_true(ote_desc_find_export(out, "kv")->size == 1u << 20);
    assert_int_equal(ote_desc_find_export(out, "kv")->access, OTE_ACCESS_REMOTE_READ);
    assert_null(ote_desc_find_export(out, "dir"));
    assert_int_equal(out->num_runs, 3);
    assert_string_equal(out->runs[1], "uct_tcp");
    assert_true(ote_desc_runs(out, "uct_tcp") && !ote_desc_has_device(out, "uct_tcp"));
    assert_true(ote_desc_runs(out, "tcp") && ote_desc_has_device(out, "tcp"));
    assert_false(ote_desc_runs(out, "shm") || ote_desc_has_device(out, "shm"));
    assert_int_equal(out->num_regions, 3);
    for (size_t i = 0; i < 3; i++) {
        const ote_desc_region_t *r = ote_desc_find_region(out, (uintptr_t)mem[i], 1);
        char key[64];

        assert_non_null(r);
        assert_true(r->addr == (uintptr_t)mem[i]);
        assert_int_equal(r->access, descs[i].access);
        assert_int_equal(r->num_rkeys, 1);
        snprintf(key, sizeof(key), "KEY%p", (void *)mem[i]);
        assert_int_equal(r->rkeys[0].length, strlen(key));
        assert_memory_equal(r->rkeys[0].data, key, strlen(key));
    }
    /* Range checks on the decoded copy. */
    assert_null(ote_desc_find_region(out, (uintptr_t)mem[1], 101));
    assert_non_null(ote_desc_find_region(out, (uintptr_t)mem[0] + 8000, 192));
    /*
     * What a segment holds for its peer's descriptor grows with what the
     * peer has (2 transports, 3 regions, 2 exports here), not with the
     * largest table it could have: a table of every possible transport
     * inline was 39 KiB per open segment.
     */
    assert_true(ote_desc_footprint(out) >= buf.len + 2 * sizeof(ote_desc_tl_t));
    assert_true(ote_desc_footprint(out) <= 8192);
    ote_desc_free(out);

    /* Every truncation and every single-byte corruption of the header area fails cleanly. */
    for (size_t l = 0; l < buf.len; l++) {
        out = NULL;
        assert_int_equal(ote_desc_decode(buf.data, l, &out), OTE_ERR_PROTOCOL);
        assert_null(out);
    }
    for (size_t i = 0; i < buf.len; i++) {
        uint8_t *c = malloc(buf.len);

        memcpy(c, buf.data, buf.len);
        c[i] ^= 0xff;
        out = NULL;
        if (ote_desc_decode(c, buf.len, &out) == OTE_OK)
            ote_desc_free(out); /* some bytes (addresses, names) may legitimately change */
        free(c);
    }
    free(buf.data);
    free(in->exports);
    free(in->runs);
    free(in->tls);
    free(in);
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(ote_mem_table_deregister(table, regions[i]), OTE_OK);
    ote_mem_table_destroy(table);
}

/* A descriptor's start: magic, version, no flags, instance 1, and (names) "x:1" and "h". */
static ote_buf_t desc_head(uint16_t version, bool names)
{
    ote_buf_t b = {0};

    ote_buf_put_u32(&b, OTE_DESC_MAGIC);
    ote_buf_put_u16(&b, version);
    ote_buf_put_u16(&b, 0);
    ote_buf_put_u64(&b, 1);
    if (names) {
        ote_buf_put_str8(&b, "x:1");
        ote_buf_put_str8(&b, "h");
    }
    return b;
}

/* FILE_IO: both ops and the answer round trip; malformed ones are refused. */
static void test_file_io(void **state)
{
    uint8_t data[100];
    ote_ctl_file_io_t m = {.op = OTE_CTL_FILE_IO_WRITE, .initiator = 1, .target = 2,
                           .file_id = 3, .offset = 4096, .length = sizeof(data), .data = data};
    ote_ctl_file_io_t d;
    ote_buf_t buf = {0};
    const uint8_t *p;
    ote_status_t st;
    size_t n;

    (void)state;
    memset(data, 0x42, sizeof(data));
    assert_int_equal(ote_ctl_file_io_encode(&m, &buf), OTE_OK);
    assert_int_equal(ote_ctl_file_io_decode(buf.data, buf.len, &d), OTE_OK);
    assert_true(d.file_id == 3 && d.offset == 4096 && d.length == sizeof(data));
    assert_memory_equal(d.data, data, sizeof(data));
    /* One byte short or over, or a READ with data: refused. */
    assert_int_equal(ote_ctl_file_io_decode(buf.data, buf.len - 1, &d), OTE_ERR_PROTOCOL);
    buf.data[0] = OTE_CTL_FILE_IO_READ;
    assert_int_equal(ote_ctl_file_io_decode(buf.data, buf.len, &d), OTE_ERR_PROTOCOL);
    assert_int_equal(ote_ctl_file_io_decode(buf.data, OTE_CTL_FILE_IO_HDR_LEN, &d), OTE_OK);
    free(buf.data);
    memset(&buf, 0, sizeof(buf));
    m.offset = UINT64_MAX - 10;
    assert_int_equal(ote_ctl_file_io_encode(&m, &buf), OTE_ERR_INVALID_PARAM);
    m.offset = 0;
    m.length = OTE_CTL_FILE_IO_MAX_BYTES + 1;
    assert_int_equal(ote_ctl_file_io_encode(&m, &buf), OTE_ERR_INVALID_PARAM);
    free(buf.data);
    memset(&buf, 0, sizeof(buf));
    assert_int_equal(ote_ctl_file_io_ack_encode(OTE_ERR_OUT_OF_BOUNDS, data, 10, &buf), OTE_OK);
    assert_int_equal(ote_ctl_file_io_ack_decode(buf.data, buf.len, 10, &st, &p, &n), OTE_OK);
    assert_int_equal(st, OTE_ERR_OUT_OF_BOUNDS);
    assert_int_equal(n, 10);
    /* More bytes than asked for: refused. */
    assert_int_equal(ote_ctl_file_io_ack_decode(buf.data, buf.len, 9, &st, &p, &n),
                     OTE_ERR_PROTOCOL);
    free(buf.data);
}

/* FILE_IO by rails: address and name, no data; the answer a count, no bytes. */
static void test_file_io_rails(void **state)
{
    ote_ctl_file_io_t m = {.op = OTE_CTL_FILE_IO_READ, .rails = true, .initiator = 1,
                           .target = 2, .file_id = 3, .offset = 4096, .length = 1000,
                           .local = 0x10003, .name = "host:1234"};
    ote_ctl_file_io_t d;
    ote_buf_t buf = {0};
    ote_status_t st;
    size_t n;

    (void)state;
    assert_int_equal(ote_ctl_file_io_encode(&m, &buf), OTE_OK);
    assert_int_equal(buf.data[0], OTE_CTL_FILE_IO_READ_RAILS);
    assert_int_equal(buf.len, OTE_CTL_FILE_IO_HDR_LEN + 8 + 1 + strlen(m.name));
    assert_int_equal(ote_ctl_file_io_decode(buf.data, buf.len, &d), OTE_OK);
    assert_true(d.rails && d.op == OTE_CTL_FILE_IO_READ && d.local == 0x10003 &&
                d.length == 1000 && d.data == NULL);
    assert_string_equal(d.name, "host:1234");
    /* One byte short or over, a NUL in the name, an empty name: refused. */
    assert_int_equal(ote_ctl_file_io_decode(buf.data, buf.len - 1, &d), OTE_ERR_PROTOCOL);
    assert_int_equal(ote_ctl_file_io_decode(buf.data, buf.len + 1, &d), OTE_ERR_PROTOCOL);
    buf.data[buf.len - 3] = '\0';
    assert_int_equal(ote_ctl_file_io_decode(buf.data, buf.len, &d), OTE_ERR_PROTOCOL);
    buf.data[OTE_CTL_FILE_IO_HDR_LEN + 8] = 0;
    assert_int_equal(ote_ctl_file_io_decode(buf.data, OTE_CTL_FILE_IO_HDR_LEN + 9, &d),
                     OTE_ERR_PROTOCOL);
    /* Unknown ops. */
    buf.data[0] = 5;
    assert_int_equal(ote_ctl_file_io_decode(buf.data, buf.len, &d), OTE_ERR_PROTOCOL);
    buf.data[0] = 0;
    assert_int_equal(ote_ctl_file_io_decode(buf.data, buf.len, &d), OTE_ERR_PROTOCOL);
    free(buf.data);
    memset(&buf, 0, sizeof(buf));
    /* A WRITE by rails carries no data; a wrapping local range or no name is refused. */
    m.op = OTE_CTL_FILE_IO_WRITE;
    assert_int_equal(ote_ctl_file_io_encode(&m, &buf), OTE_OK);
    assert_int_equal(buf.data[0], OTE_CTL_FILE_IO_WRITE_RAILS);
    assert_int_equal(ote_ctl_file_io_decode(buf.data, buf.len, &d), OTE_OK);
    assert_true(d.rails && d.op == OTE_CTL_FILE_IO_WRITE && d.data == NULL);
    free(buf.data);
    memset(&buf, 0, sizeof(buf));
    m.local = UINT64_MAX - 10;
    assert_int_equal(ote_ctl_file_io_encode(&m, &buf), OTE_ERR_INVALID_PARAM);
    m.local   = 0x10003;
    m.name[0] = '\0';
    assert_int_equal(ote_ctl_file_io_encode(&m, &buf), OTE_ERR_INVALID_PARAM);
    free(buf.data);
    memset(&buf, 0, sizeof(buf));
    /* The answer: exactly status and count, the count at most what was asked. */
    assert_int_equal(ote_ctl_file_io_rails_ack_encode(OTE_ERR_OUT_OF_BOUNDS, 100, &buf), OTE_OK);
    assert_int_equal(buf.len, OTE_CTL_FILE_IO_ACK_HDR_LEN);
    assert_int_equal(ote_ctl_file_io_rails_ack_decode(buf.data, buf.len, 100, &st, &n), OTE_OK);
    assert_int_equal(st, OTE_ERR_OUT_OF_BOUNDS);
    assert_int_equal(n, 100);
    assert_int_equal(ote_ctl_file_io_rails_ack_decode(buf.data, buf.len, 99, &st, &n),
                     OTE_ERR_PROTOCOL);
    assert_int_equal(ote_ctl_file_io_rails_ack_decode(buf.data, buf.len - 1, 100, &st, &n),
                     OTE_ERR_PROTOCOL);
    free(buf.data);
}

static void test_desc_hostile_counts(void **state)
{
    ote_buf_t b;
    ote_desc_t *out = NULL;

    /* A region count far beyond the bytes present must not allocate or read past the end. */
    b = desc_head(OTE_DESC_VERSION, true);
    ote_buf_put_u16(&b, 0);
    ote_buf_put_u16(&b, 0);
    ote_buf_put_u32(&b, 0xffffffffu);
    assert_int_equal(ote_desc_decode(b.data, b.len, &out), OTE_ERR_PROTOCOL);
    free(b.data);

    /* Too many transports. */
    b = desc_head(OTE_DESC_VERSION, true);
    ote_buf_put_u16(&b, OTE_DESC_MAX_TLS + 1);
    assert_int_equal(ote_desc_decode(b.data, b.len, &out), OTE_ERR_PROTOCOL);
    free(b.data);

    /* Wrong version. */
    b = desc_head(OTE_DESC_VERSION + 1, false);
    assert_int_equal(ote_desc_decode(b.data, b.len, &out), OTE_ERR_PROTOCOL);
    free(b.data);
}

/*
 * The transports a descriptor's engine runs (version 4): a list after the
 * exported files, each named once; version 3 has none, and there a
 * transport is run only when a device of it is listed.
 */
static ote_buf_t desc_runs(uint16_t version, uint16_t count, const char *const *names)
{
    ote_buf_t b = desc_head(version, true);

    ote_buf_put_str8(&b, "x:1"); /* control address */
    ote_buf_put_u16(&b, 1);      /* one device: tcp on lo */
    ote_buf_put_str8(&b, "tcp");
    ote_buf_put_str8(&b, "lo");
    ote_buf_put_u16(&b, 0);
    ote_buf_put_u16(&b, 0); /* no memory domain */
    ote_buf_put_u32(&b, 0); /* no region */
    ote_buf_put_u32(&b, 0); /* no export */
    if (version >= 4) {
        ote_buf_put_u16(&b, count);
        for (uint16_t i = 0; names != NULL && names[i] != NULL; i++)
            ote_buf_put_str8(&b, names[i]);
    }
    return b;
}

static void test_desc_runs(void **state)
{
    static const char *const two[] = {"tcp", "uct_tcp", NULL};
    static const char *const twice[] = {"tcp", "tcp", NULL};
    static const char *const empty[] = {"tcp", "", NULL};
    ote_desc_t *out = NULL;
    ote_buf_t b;

    (void)state;
    b = desc_runs(4, 2, two);
    assert_int_equal(ote_desc_decode(b.data, b.len, &out), OTE_OK);
    assert_int_equal(out->num_runs, 2);
    assert_true(ote_desc_runs(out, "uct_tcp") && !ote_desc_has_device(out, "uct_tcp"));
    ote_desc_free(out);
    /* Trailing bytes, a cut list, a count beyond the bytes or the bound, a name twice, empty. */
    ote_buf_put_u8(&b, 0);
    assert_int_equal(ote_desc_decode(b.data, b.len, &out), OTE_ERR_PROTOCOL);
    assert_int_equal(ote_desc_decode(b.data, b.len - 2, &out), OTE_ERR_PROTOCOL);
    free(b.data);
    b = desc_runs(4, 3, two);
    assert_int_equal(ote_desc_decode(b.data, b.len, &out), OTE_ERR_PROTOCOL);
    free(b.data);
    b = desc_runs(4, OTE_DESC_MAX_TLS + 1, NULL);
    for (int i = 0; i <= OTE_DESC_MAX_TLS; i++)
        ote_buf_put_str8(&b, i % 2 ? "a" : "b");
    assert_int_equal(ote_desc_decode(b.data, b.len, &out), OTE_ERR_PROTOCOL);
    free(b.data);
    b = desc_runs(4, 2, twice);
    assert_int_equal(ote_desc_decode(b.data, b.len, &out), OTE_ERR_PROTOCOL);
    free(b.data);
    b = desc_runs(4, 2, empty);
    assert_int_equal(ote_desc_decode(b.data, b.len, &out), OTE_ERR_PROTOCOL);
    free(b.data);
    /* Version 3: still read; what it runs is what it lists a device of. */
    b = desc_runs(3, 0, NULL);
    assert_int_equal(ote_desc_decode(b.data, b.len, &out), OTE_OK);
    assert_int_equal(out->num_runs, 0);
    assert_true(ote_desc_runs(out, "tcp"));
    assert_false(ote_desc_runs(out, "uct_tcp"));
    ote_desc_free(out);
    free(b.data);
}

/* The native tcp address: a list of IPv4 and IPv6 entries, every byte checked. */
static void test_tcp_addr(void **state)
{
    ote_stream_sockaddr_t in[3], out[OTE_TCP_MAX_ADDRS];
    struct sockaddr_in *a4 = (struct sockaddr_in *)&in[0].ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&in[1].ss;
    struct sockaddr_in *b4 = (struct sockaddr_in *)&in[2].ss;
    uint8_t buf[OTE_TCP_MAX_ADDRS * 19 + 19], bad[sizeof(buf)];
    size_t len = 0, n = 0;

    memset(in, 0, sizeof(in));
    a4->sin_family = AF_INET;
    a4->sin_port   = htons(4000);
    inet_pton(AF_INET, "10.1.2.3", &a4->sin_addr);
    a6->sin6_family = AF_INET6;
    a6->sin6_port   = htons(4000);
    inet_pton(AF_INET6, "fd00::2", &a6->sin6_addr);
    b4->sin_family = AF_INET;
    b4->sin_port   = htons(4000);
    inet_pton(AF_INET, "192.0.2.7", &b4->sin_addr);
    assert_int_equal(ote_tcp_addr_pack(in, 3, buf, sizeof(buf), &len), OTE_OK);
    assert_int_equal(len, 7 + 19 + 7);
    assert_memory_equal(buf, "\x04\x0f\xa0\x0a\x01\x02\x03\x06\x0f\xa0\xfd", 11);
    assert_int_equal(ote_tcp_addr_unpack(buf, len, out, OTE_TCP_MAX_ADDRS, &n), OTE_OK);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(out[i].ss.ss_family, in[i].ss.ss_family);
        assert_int_equal(out[i].len, in[i].ss.ss_family == AF_INET ? sizeof(*a4) : sizeof(*a6));
        assert_memory_equal(&out[i].ss, &in[i].ss, out[i].len);
    }
    /* One entry is the format of a single address. */
    assert_int_equal(ote_tcp_addr_unpack(buf, 7, out, OTE_TCP_MAX_ADDRS, &n), OTE_OK);
    assert_int_equal(n, 1);
    /* Too small a buffer to pack into, nothing to pack, too many. */
    assert_int_equal(ote_tcp_addr_pack(in, 3, buf, 7 + 19 + 6, &len), OTE_ERR_INVALID_PARAM);
    assert_int_equal(ote_tcp_addr_pack(in, 0, buf, sizeof(buf), &len), OTE_ERR_INVALID_PARAM);
    /* Cut, unknown family, port 0, empty, more entries than room or than allowed. */
    assert_int_equal(ote_tcp_addr_unpack(buf, 7 + 18, out, OTE_TCP_MAX_ADDRS, &n),
                     OTE_ERR_PROTOCOL);
    memcpy(bad, buf, 33);
    bad[7] = 5;
    assert_int_equal(ote_tcp_addr_unpack(bad, 33, out, OTE_TCP_MAX_ADDRS, &n), OTE_ERR_PROTOCOL);
    memcpy(bad, buf, 33);
    bad[27] = bad[28] = 0;
    assert_int_equal(ote_tcp_addr_unpack(bad, 33, out, OTE_TCP_MAX_ADDRS, &n), OTE_ERR_PROTOCOL);
    assert_int_equal(ote_tcp_addr_unpack(buf, 0, out, OTE_TCP_MAX_ADDRS, &n), OTE_ERR_PROTOCOL);
    assert_int_equal(ote_tcp_addr_unpack(buf, len, out, 2, &n), OTE_ERR_PROTOCOL);
    for (size_t i = 0; i <= OTE_TCP_MAX_ADDRS; i++)
        memcpy(bad + 7 * i, buf, 7);
    assert_int_equal(ote_tcp_addr_unpack(bad, 7 * OTE_TCP_MAX_ADDRS, out, OTE_TCP_MAX_ADDRS, &n),
                     OTE_OK);
    assert_int_equal(n, OTE_TCP_MAX_ADDRS);
    assert_int_equal(ote_tcp_addr_unpack(bad, 7 * (OTE_TCP_MAX_ADDRS + 1), out,
                                         OTE_TCP_MAX_ADDRS, &n),
                     OTE_ERR_PROTOCOL);
}

static void test_status_strings(void **state)
{
    for (int s = OTE_ERR_STORE_UNAVAILABLE; s <= OTE_INPROGRESS; s++) {
        const char *m = ote_status_string((ote_status_t)s);

        assert_non_null(m);
        assert_string_not_equal(m, "unknown status");
    }
    assert_string_equal(ote_status_string((ote_status_t)-1000), "unknown status");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tcp_hdr),       cmocka_unit_test(test_tcp_writev),
        cmocka_unit_test(test_tcp_readv),
        cmocka_unit_test(test_ctl_hdr),
        cmocka_unit_test(test_ctl_service_types),
        cmocka_unit_test(test_ctl_types),
        cmocka_unit_test(test_ctl_handlers),
        cmocka_unit_test(test_notify),        cmocka_unit_test(test_desc_roundtrip),
        cmocka_unit_test(test_desc_hostile_counts), cmocka_unit_test(test_status_strings),
        cmocka_unit_test(test_desc_runs),
        cmocka_unit_test(test_tcp_addr),      cmocka_unit_test(test_file_io),
        cmocka_unit_test(test_file_io_rails),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
