/*
 * NOTIFY_BATCH (ctl_msg.h): the frame's decoder refuses every count,
 * number or length that the bytes do not back, and the receiver queues
 * the notifications of a frame in order and exactly once, however often
 * the frame comes (a sender resends it after a lost answer), up to its
 * backlog (BUSY with how many it queued).
 */
#include "core/wire/ctl_msg.h"
#include "core/engine_int.h"
#include "core/xfer/notify.h"
#include "base/wire_util.h"
#include "testlib.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static ote_ctl_notify_batch_t *frame(size_t count, uint64_t first_seq, uint64_t target)
{
    static char msgs[OTE_CTL_NOTIFY_BATCH_MAX][16];
    ote_ctl_notify_batch_t *m = calloc(1, sizeof(*m));

    assert_non_null(m);
    m->sender_key = 0x5e4d;
    m->target_instance = target;
    snprintf(m->from, sizeof(m->from), "%s", "127.0.0.1:4000");
    m->count = count;
    for (size_t i = 0; i < count; i++) {
        snprintf(msgs[i], sizeof(msgs[i]), "n%zu", (size_t)(first_seq + i));
        m->items[i] = (ote_ctl_notify_item_t){.seq = first_seq + i, .length = strlen(msgs[i]),
                                              .data = (const uint8_t *)msgs[i]};
    }
    return m;
}

static void test_roundtrip(void **state)
{
    ote_ctl_notify_batch_t *m = frame(3, 10, 0x77), *d = calloc(1, sizeof(*d));
    ote_buf_t b = {0};

    (void)state;
    assert_int_equal(ote_ctl_notify_batch_encode(m, &b), OTE_OK);
    assert_int_equal(ote_ctl_notify_batch_decode(b.data, b.len, d), OTE_OK);
    assert_int_equal(d->count, 3);
    assert_true(d->sender_key == 0x5e4d && d->target_instance == 0x77);
    assert_string_equal(d->from, "127.0.0.1:4000");
    for (size_t i = 0; i < 3; i++) {
        assert_true(d->items[i].seq == 10 + i);
        assert_int_equal(d->items[i].length, 3);
        assert_memory_equal(d->items[i].data, m->items[i].data, 3);
    }
    /* The encoder refuses what the decoder would. */
    {
        ote_buf_t x = {0};

        m->items[2].seq = 11;
        assert_int_equal(ote_ctl_notify_batch_encode(m, &x), OTE_ERR_INVALID_PARAM);
        m->count = 0;
        assert_int_equal(ote_ctl_notify_batch_encode(m, &x), OTE_ERR_INVALID_PARAM);
        free(x.data);
    }
    free(b.data);
    free(m);
    free(d);
}

/* Offset of the u16 count in an encoded frame whose from is "127.0.0.1:4000". */
#define COUNT_OFF (8 + 8 + 1 + 14)

static void test_lying_frames(void **state)
{
    ote_ctl_notify_batch_t *m = frame(4, 1, 0x77), *d = calloc(1, sizeof(*d));
    ote_buf_t b = {0};
    uint8_t *x;

    (void)state;
    assert_int_equal(ote_ctl_notify_batch_encode(m, &b), OTE_OK);
    assert_int_equal(ote_get_u16(b.data + COUNT_OFF), 4);
    x = malloc(b.len + 64);
    /* A count larger than the items sent. */
    memcpy(x, b.data, b.len);
    ote_put_u16(x + COUNT_OFF, 5);
    assert_int_equal(ote_ctl_notify_batch_decode(x, b.len, d), OTE_ERR_PROTOCOL);
    /* A count no payload of this size can hold, and the largest a u16 says. */
    ote_put_u16(x + COUNT_OFF, 0xffff);
    assert_int_equal(ote_ctl_notify_batch_decode(x, b.len, d), OTE_ERR_PROTOCOL);
    /* A count smaller: the last item is bytes left over. */
    ote_put_u16(x + COUNT_OFF, 3);
    assert_int_equal(ote_ctl_notify_batch_decode(x, b.len, d), OTE_ERR_PROTOCOL);
    /* No notification. */
    ote_put_u16(x + COUNT_OFF, 0);
    assert_int_equal(ote_ctl_notify_batch_decode(x, b.len, d), OTE_ERR_PROTOCOL);
    /* Numbers that do not grow, and number 0. */
    memcpy(x, b.data, b.len);
    ote_put_u64(x + COUNT_OFF + 2 + (12 + 2), 1); /* the second item's seq: 1 again */
    assert_int_equal(ote_ctl_notify_batch_decode(x, b.len, d), OTE_ERR_PROTOCOL);
    memcpy(x, b.data, b.len);
    ote_put_u64(x + COUNT_OFF + 2, 0);
    assert_int_equal(ote_ctl_notify_batch_decode(x, b.len, d), OTE_ERR_PROTOCOL);
    /* An item length past the end, and one above OTE_NOTIFY_MAX. */
    memcpy(x, b.data, b.len);
    ote_put_u32(x + COUNT_OFF + 2 + 8, 200);
    assert_int_equal(ote_ctl_notify_batch_decode(x, b.len, d), OTE_ERR_PROTOCOL);
    ote_put_u32(x + COUNT_OFF + 2 + 8, OTE_NOTIFY_MAX + 1);
    assert_int_equal(ote_ctl_notify_batch_decode(x, b.len, d), OTE_ERR_PROTOCOL);
    /* Every truncation. */
    for (size_t len = 0; len < b.len; len++)
        assert_int_equal(ote_ctl_notify_batch_decode(b.data, len, d), OTE_ERR_PROTOCOL);
    /* The original still decodes. */
    assert_int_equal(ote_ctl_notify_batch_decode(b.data, b.len, d), OTE_OK);
    /* The listener refuses a frame announced larger than the type allows. */
    {
        size_t max = 0;

        assert_int_equal(ote_ctl_request_max_len(OTE_CTL_NOTIFY_BATCH, 64u << 20, &max), OTE_OK);
        assert_int_equal(max, OTE_CTL_NOTIFY_BATCH_MAX_LEN);
        assert_int_equal(ote_ctl_request_max_len(OTE_CTL_NOTIFY_BATCH_ACK, 64u << 20, &max),
                         OTE_ERR_PROTOCOL);
    }
    free(x);
    free(b.data);
    free(m);
    free(d);
}

static void test_ack(void **state)
{
    uint8_t a[6];
    ote_status_t st;
    size_t q;

    (void)state;
    assert_int_equal(ote_ctl_notify_batch_ack_encode(OTE_ERR_BUSY, 7, a), OTE_OK);
    assert_int_equal(ote_ctl_notify_batch_ack_decode(a, 6, &st, &q), OTE_OK);
    assert_int_equal(st, OTE_ERR_BUSY);
    assert_int_equal(q, 7);
    assert_int_equal(ote_ctl_notify_batch_ack_decode(a, 4, &st, &q), OTE_ERR_PROTOCOL);
    assert_int_equal(ote_ctl_notify_batch_ack_decode(a, 7, &st, &q), OTE_ERR_PROTOCOL);
    ote_put_u16(a + 4, OTE_CTL_NOTIFY_BATCH_MAX + 1);
    assert_int_equal(ote_ctl_notify_batch_ack_decode(a, 6, &st, &q), OTE_ERR_PROTOCOL);
    ote_put_u16(a + 4, 1);
    ote_put_u32(a, 0x7fffff00u);
    assert_int_equal(ote_ctl_notify_batch_ack_decode(a, 6, &st, &q), OTE_ERR_PROTOCOL);
    assert_int_equal(ote_ctl_notify_batch_ack_encode(OTE_OK, OTE_CTL_NOTIFY_BATCH_MAX + 1, a),
                     OTE_ERR_INVALID_PARAM);
    /* Only what a receiver answers: OK, BUSY, NO_MEMORY, PEER_RESTARTED with none queued. */
    {
        static const struct {
            ote_status_t status;
            size_t       queued;
            ote_status_t want;
        } acks[] = {
            {OTE_OK, 3, OTE_OK},
            {OTE_ERR_BUSY, 0, OTE_OK},
            {OTE_ERR_NO_MEMORY, 2, OTE_OK},
            {OTE_ERR_PEER_RESTARTED, 0, OTE_OK},
            {OTE_ERR_PEER_RESTARTED, 1, OTE_ERR_PROTOCOL},
            {OTE_INPROGRESS, 0, OTE_ERR_PROTOCOL},
            {OTE_ERR_INVALID_PARAM, 0, OTE_ERR_PROTOCOL},
            {OTE_ERR_TIMEOUT, 0, OTE_ERR_PROTOCOL},
            {OTE_ERR_REMOTE_DISCONNECT, 0, OTE_ERR_PROTOCOL},
        };

        for (size_t i = 0; i < sizeof(acks) / sizeof(acks[0]); i++) {
            assert_int_equal(ote_ctl_notify_batch_ack_encode(acks[i].status, acks[i].queued, a),
                             OTE_OK);
            if (ote_ctl_notify_batch_ack_decode(a, 6, &st, &q) != acks[i].want)
                fail_msg("ack %zu (status %d, %zu queued) decoded wrongly", i,
                         (int)acks[i].status, acks[i].queued);
            if (acks[i].want == OTE_OK)
                assert_true(st == acks[i].status && q == acks[i].queued);
        }
    }
}

/* Take every queued notification; their texts must be "n<first>" .. in order. */
static void expect_queue(ote_engine_h e, uint64_t first, size_t count)
{
    static ote_notif_t n[64];
    size_t got = 0;

    assert_int_equal(ote_notify_recv(e, n, 64, &got), OTE_OK);
    assert_int_equal(got, count);
    for (size_t i = 0; i < count; i++) {
        char want[16];

        snprintf(want, sizeof(want), "n%zu", (size_t)(first + i));
        assert_int_equal(n[i].length, strlen(want));
        assert_memory_equal(n[i].data, want, n[i].length);
        assert_string_equal(n[i].from, "127.0.0.1:4000");
    }
}

static void test_receiver_exactly_once(void **state)
{
    ote_engine_h e;
    ote_ctl_notify_batch_t *m;
    size_t q = 99;

    (void)state;
    setenv("OTE_MAX_NOTIF_BACKLOG", "8", 1);
    e = ote_test_engine(NULL);
    unsetenv("OTE_MAX_NOTIF_BACKLOG");
    /* Another instance's frame: nothing queued. */
    m = frame(3, 1, e->facts.instance_id + 1);
    assert_int_equal(ote_engine_notif_push_batch(e, m, &q), OTE_ERR_PEER_RESTARTED);
    assert_int_equal(q, 0);
    expect_queue(e, 1, 0);
    free(m);

    /* A frame, then the same frame again (its answer was lost): queued once. */
    m = frame(5, 1, e->facts.instance_id);
    assert_int_equal(ote_engine_notif_push_batch(e, m, &q), OTE_OK);
    assert_int_equal(q, 5);
    assert_int_equal(ote_engine_notif_push_batch(e, m, &q), OTE_OK);
    assert_int_equal(q, 5);
    expect_queue(e, 1, 5);
    free(m);

    /* A backlog of 8: 12 sent, the first 8 queued, BUSY for the rest. */
    m = frame(12, 6, e->facts.instance_id);
    assert_int_equal(ote_engine_notif_push_batch(e, m, &q), OTE_ERR_BUSY);
    assert_int_equal(q, 8);
    expect_queue(e, 6, 8);
    /* The sender sends the whole frame again: the 8 count as queued, the 4 are new. */
    assert_int_equal(ote_engine_notif_push_batch(e, m, &q), OTE_OK);
    assert_int_equal(q, 12);
    expect_queue(e, 14, 4);
    free(m);
    ote_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_lying_frames),
        cmocka_unit_test(test_ack),
        cmocka_unit_test(test_receiver_exactly_once),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
