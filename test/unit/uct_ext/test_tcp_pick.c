/*
 * Which of a tcp ep's connections a request takes (ote_stream_ep_conn): small
 * requests go in runs on one connection, up to OTE_STREAM_PICK_RUN bytes more
 * than the least loaded one holds, large ones spread, dead connections
 * are passed over. The connections here are bare structs: the pick reads
 * only whether one is dead and its bytes in flight, which the test keeps as
 * ote_stream_conn_op_push and op_pop would.
 */
#include "uct_ext/stream/stream.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#define NCONNS 3

typedef struct {
    ote_stream_ep_t    ep;
    ote_stream_conn_t  conn[NCONNS];
    ote_stream_conn_t *conns[NCONNS];
} fixture_t;

static fixture_t *fixture_new(size_t n)
{
    fixture_t *f = calloc(1, sizeof(*f));

    assert_non_null(f);
    for (size_t i = 0; i < NCONNS; i++)
        f->conns[i] = &f->conn[i];
    f->ep.conns     = f->conns;
    f->ep.num_conns = n;
    return f;
}

/* Post one request of len bytes: the index of the connection it took. */
static size_t post(fixture_t *f, size_t len)
{
    ote_stream_conn_t *c = ote_stream_ep_conn(&f->ep);

    assert_non_null(c);
    c->inflight_bytes += len;
    return (size_t)(c - f->conn);
}

/* 4 KiB requests: runs of OTE_STREAM_PICK_RUN bytes on one connection, then the other. */
static void test_small_requests_run(void **state)
{
    fixture_t *f   = fixture_new(2);
    size_t per_run = OTE_STREAM_PICK_RUN / 4096;

    (void)state;
    for (size_t i = 0; i < per_run; i++)
        assert_int_equal(post(f, 4096), 0);
    assert_int_equal(f->conn[0].inflight_bytes, OTE_STREAM_PICK_RUN);
    /* Conn 0 is a run ahead: conn 1 takes the next ones, until it is a run ahead. */
    for (size_t i = 0; i < 2 * per_run; i++)
        assert_int_equal(post(f, 4096), 1);
    assert_int_equal(post(f, 4096), 0);
    free(f);
}

/*
 * Requests of half a run or more spread: each connection takes half of
 * them, never more than two in a row (the previous pick keeps one more
 * where the loads are equal), and the loads stay within a request and a
 * run of each other.
 */
static void test_large_requests_spread(void **state)
{
    fixture_t *f  = fixture_new(2);
    size_t len    = 1u << 20, taken[2] = {0}, row = 0, prev = 2;

    (void)state;
    for (size_t i = 0; i < 16; i++) {
        size_t c = post(f, len);
        size_t a = f->conn[0].inflight_bytes, b = f->conn[1].inflight_bytes;

        taken[c]++;
        row  = c == prev ? row + 1 : 1;
        prev = c;
        assert_true(row <= 2);
        assert_true((a > b ? a - b : b - a) <= len + OTE_STREAM_PICK_RUN);
    }
    assert_int_equal(taken[0], 8);
    assert_int_equal(taken[1], 8);
    free(f);
}

/* Answers that empty a connection send the next request there once the last pick is a run ahead. */
static void test_answers_move_the_run(void **state)
{
    fixture_t *f = fixture_new(2);

    (void)state;
    f->conn[0].inflight_bytes = 3 * OTE_STREAM_PICK_RUN;
    f->conn[1].inflight_bytes = 3 * OTE_STREAM_PICK_RUN;
    f->ep.last_conn           = 0;
    assert_int_equal(post(f, 4096), 0);
    /* Conn 1's answers come back: conn 0 is now more than a run ahead. */
    f->conn[1].inflight_bytes = 0;
    assert_int_equal(post(f, 4096), 1);
    assert_int_equal(post(f, 4096), 1);
    free(f);
}

/* A dead connection takes nothing, even when the previous request went there. */
static void test_dead_connection_skipped(void **state)
{
    fixture_t *f = fixture_new(3);

    (void)state;
    assert_int_equal(post(f, 4096), 0);
    f->conn[0].dead = true;
    assert_int_equal(post(f, 4096), 1);
    f->conn[1].dead = true;
    assert_int_equal(post(f, 4096), 2);
    f->conn[2].dead = true;
    assert_null(ote_stream_ep_conn(&f->ep));
    free(f);
}

/* The previous pick's index past the connections there are now (fewer after a reconnect). */
static void test_previous_pick_gone(void **state)
{
    fixture_t *f = fixture_new(3);

    (void)state;
    f->ep.last_conn           = 2;
    f->ep.num_conns           = 2;
    f->conn[0].inflight_bytes = 8192;
    assert_int_equal(post(f, 4096), 1);
    free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_requests_run),
        cmocka_unit_test(test_large_requests_spread),
        cmocka_unit_test(test_answers_move_the_run),
        cmocka_unit_test(test_dead_connection_skipped),
        cmocka_unit_test(test_previous_pick_gone),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
