/* CONNECT / CONNECT_ACK (to-ep wire-up): round trips and malformed input. */
#include "core/wire/ctl_msg.h"

#include <ote/ote.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static ote_ctl_connect_t *connect_msg(void)
{
    static const uint8_t addr[] = {4, 0, 1, 2, 3, 4, 3, 0, 9, 8, 7};
    ote_ctl_connect_t *m        = calloc(1, sizeof(*m));

    m->op        = OTE_CTL_CONNECT_OP_CONNECT;
    m->initiator = 0x1122334455667788ull;
    m->target    = 0x99aabbccddeeff00ull;
    m->conn_id   = 42;
    m->worker    = 3;
    strcpy(m->tl_name, "rc_mlx5");
    strcpy(m->dev_name, "mlx5_0:1");
    m->addr     = addr;
    m->addr_len = sizeof(addr);
    return m;
}

static void test_connect_roundtrip(void **state)
{
    ote_ctl_connect_t *m = connect_msg(), *d = calloc(1, sizeof(*d));
    ote_buf_t out        = {0};

    assert_int_equal(ote_ctl_connect_encode(m, &out), OTE_OK);
    assert_int_equal(ote_ctl_connect_decode(out.data, out.len, d), OTE_OK);
    assert_int_equal(d->op, OTE_CTL_CONNECT_OP_CONNECT);
    assert_int_equal(d->initiator, m->initiator);
    assert_int_equal(d->target, m->target);
    assert_int_equal(d->conn_id, 42);
    assert_int_equal(d->worker, 3);
    assert_string_equal(d->tl_name, "rc_mlx5");
    assert_string_equal(d->dev_name, "mlx5_0:1");
    assert_int_equal(d->addr_len, m->addr_len);
    assert_memory_equal(d->addr, m->addr, m->addr_len);
    /* Every truncation and any trailing byte is refused. */
    for (size_t len = 0; len < out.len; len++)
        assert_int_equal(ote_ctl_connect_decode(out.data, len, d), OTE_ERR_PROTOCOL);
    ote_buf_put_u8(&out, 0);
    assert_int_equal(ote_ctl_connect_decode(out.data, out.len, d), OTE_ERR_PROTOCOL);
    free(out.data);
    free(m);
    free(d);
}

static void test_release_roundtrip(void **state)
{
    ote_ctl_connect_t *m = calloc(1, sizeof(*m)), *d = calloc(1, sizeof(*d));
    ote_buf_t out        = {0};

    m->op        = OTE_CTL_CONNECT_OP_RELEASE;
    m->initiator = 7;
    m->target    = 8;
    m->num_ids   = OTE_CTL_CONNECT_MAX_IDS;
    for (size_t i = 0; i < m->num_ids; i++)
        m->ids[i] = 1000 + i;
    assert_int_equal(ote_ctl_connect_encode(m, &out), OTE_OK);
    assert_int_equal(ote_ctl_connect_decode(out.data, out.len, d), OTE_OK);
    assert_int_equal(d->num_ids, OTE_CTL_CONNECT_MAX_IDS);
    assert_int_equal(d->ids[17], 1017);
    assert_null(d->addr);
    for (size_t len = 0; len < out.len; len++)
        assert_int_equal(ote_ctl_connect_decode(out.data, len, d), OTE_ERR_PROTOCOL);
    free(out.data);

    /* Encoder refuses what the decoder would refuse. */
    out      = (ote_buf_t){0};
    m->num_ids = 0;
    assert_int_equal(ote_ctl_connect_encode(m, &out), OTE_ERR_INVALID_PARAM);
    m->num_ids = OTE_CTL_CONNECT_MAX_IDS + 1;
    assert_int_equal(ote_ctl_connect_encode(m, &out), OTE_ERR_INVALID_PARAM);
    m->op = 9;
    assert_int_equal(ote_ctl_connect_encode(m, &out), OTE_ERR_INVALID_PARAM);
    free(out.data);
    free(m);
    free(d);
}

/* A CONNECT (initiator 1, target 2, connection 3, worker 0) over tl on lo, up to its address. */
static ote_buf_t connect_head(const char *tl)
{
    ote_buf_t b = {0};

    ote_buf_put_u8(&b, OTE_CTL_CONNECT_OP_CONNECT);
    ote_buf_put_u64(&b, 1);
    ote_buf_put_u64(&b, 2);
    ote_buf_put_u64(&b, 3);
    ote_buf_put_u16(&b, 0);
    ote_buf_put_str8(&b, tl);
    ote_buf_put_str8(&b, "lo");
    return b;
}

static void test_connect_malformed(void **state)
{
    ote_ctl_connect_t *d = calloc(1, sizeof(*d));
    ote_buf_t b          = {0};

    /* Unknown op. */
    ote_buf_put_u8(&b, 3);
    ote_buf_put_u64(&b, 1);
    ote_buf_put_u64(&b, 2);
    assert_int_equal(ote_ctl_connect_decode(b.data, b.len, d), OTE_ERR_PROTOCOL);
    free(b.data);

    /* Release with count 0, then with a count larger than the ids present. */
    b = (ote_buf_t){0};
    ote_buf_put_u8(&b, OTE_CTL_CONNECT_OP_RELEASE);
    ote_buf_put_u64(&b, 1);
    ote_buf_put_u64(&b, 2);
    ote_buf_put_u16(&b, 0);
    assert_int_equal(ote_ctl_connect_decode(b.data, b.len, d), OTE_ERR_PROTOCOL);
    b.data[b.len - 2] = 0xff;
    b.data[b.len - 1] = 0xff;
    ote_buf_put_u64(&b, 5);
    assert_int_equal(ote_ctl_connect_decode(b.data, b.len, d), OTE_ERR_PROTOCOL);
    free(b.data);

    /* Connect whose address length is larger than the rest / than the limit. */
    b = connect_head("tcp");
    ote_buf_put_u16(&b, 10);
    ote_buf_put(&b, "abc", 3);
    assert_int_equal(ote_ctl_connect_decode(b.data, b.len, d), OTE_ERR_PROTOCOL);
    b.len -= 5;
    ote_buf_put_u16(&b, OTE_TL_ADDR_MAX + 1);
    for (int i = 0; i < OTE_TL_ADDR_MAX + 1; i++)
        ote_buf_put_u8(&b, 0);
    assert_int_equal(ote_ctl_connect_decode(b.data, b.len, d), OTE_ERR_PROTOCOL);
    free(b.data);

    /* A transport name longer than the field. */
    b = connect_head("a_transport_name_longer_than_thirty_two_bytes");
    ote_buf_put_u16(&b, 0);
    assert_int_equal(ote_ctl_connect_decode(b.data, b.len, d), OTE_ERR_PROTOCOL);
    free(b.data);
    free(d);
}

static void test_ack(void **state)
{
    static const uint8_t addr[] = {1, 2, 3, 4, 5};
    ote_buf_t out               = {0};
    const uint8_t *a;
    size_t alen;
    ote_status_t st;

    assert_int_equal(ote_ctl_connect_ack_encode(OTE_OK, addr, sizeof(addr), &out), OTE_OK);
    assert_int_equal(ote_ctl_connect_ack_decode(out.data, out.len, &st, &a, &alen), OTE_OK);
    assert_int_equal(st, OTE_OK);
    assert_int_equal(alen, sizeof(addr));
    assert_memory_equal(a, addr, sizeof(addr));
    for (size_t len = 0; len < out.len; len++)
        assert_int_equal(ote_ctl_connect_ack_decode(out.data, len, &st, &a, &alen),
                         OTE_ERR_PROTOCOL);
    free(out.data);

    out = (ote_buf_t){0};
    assert_int_equal(ote_ctl_connect_ack_encode(OTE_ERR_BUSY, NULL, 0, &out), OTE_OK);
    assert_int_equal(ote_ctl_connect_ack_decode(out.data, out.len, &st, &a, &alen), OTE_OK);
    assert_int_equal(st, OTE_ERR_BUSY);
    assert_int_equal(alen, 0);
    /* A status this build does not know is malformed. */
    out.data[0] = 0x80;
    out.data[1] = 0x80;
    assert_int_equal(ote_ctl_connect_ack_decode(out.data, out.len, &st, &a, &alen),
                     OTE_ERR_PROTOCOL);
    free(out.data);
    /* INPROGRESS is no answer to a CONNECT. */
    out = (ote_buf_t){0};
    assert_int_equal(ote_ctl_connect_ack_encode(OTE_INPROGRESS, addr, sizeof(addr), &out), OTE_OK);
    assert_int_equal(ote_ctl_connect_ack_decode(out.data, out.len, &st, &a, &alen),
                     OTE_ERR_PROTOCOL);
    free(out.data);
    out = (ote_buf_t){0};
    assert_int_equal(ote_ctl_connect_ack_encode(OTE_OK, addr, OTE_TL_ADDR_MAX + 1, &out),
                     OTE_ERR_INVALID_PARAM);
    free(out.data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_connect_roundtrip),
        cmocka_unit_test(test_release_roundtrip),
        cmocka_unit_test(test_connect_malformed),
        cmocka_unit_test(test_ack),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
