/*
 * Released batches of up to OTE_BATCH_SPARE_TASKS tasks are kept by their
 * engine (at most OTE_BATCH_SPARES) and taken again by ote_batch_create
 * (core/xfer/batch.c). A batch taken again behaves as a new one: no task,
 * its own capacity, telemetry from zero, the data of its own requests; a
 * batch released with tasks in flight is kept only once they ended; a
 * larger batch is freed; a second release changes nothing; the engine
 * frees its spares (the sanitizer builds' leak check).
 */
#include "core/xfer/xfer_def.h"
#include "self_fixture.h"

#include <ote/ote.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

typedef ote_test_self_t fx_t;

#define LEN (8u << 20)

static int setup(void **state)
{
    *state = ote_test_self_open(LEN, "cpu:0");
    return 0;
}

static int teardown(void **state)
{
    ote_test_self_close(*state);
    return 0;
}

static size_t spares(fx_t *f)
{
    ote_xfer_state_t *x = ote_xfer_state(f->e);
    size_t n;

    pthread_mutex_lock(&x->batch_lock);
    n = x->num_spares;
    pthread_mutex_unlock(&x->batch_lock);
    return n;
}

static ote_xfer_req_t write_req(fx_t *f, size_t off, size_t len)
{
    return (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = f->local + off,
                            .segment = f->self, .remote_addr = (uintptr_t)f->remote + off,
                            .length = len};
}

static void test_taken_again_as_new(void **state)
{
    fx_t *f = *state;
    ote_xfer_req_t r[3] = {write_req(f, 0, 4096), write_req(f, 4096, 4096),
                           write_req(f, 8192, 4096)};
    ote_batch_telemetry_t tel = {.version = OTE_BATCH_TELEMETRY_VERSION};
    ote_task_status_t st;
    ote_batch_h b, again;
    size_t first, before = spares(f);
    ote_notif_t n[2];
    size_t count = 0;

    ote_test_fill(f->local, 0, LEN, 21);
    memset(f->remote, 0, LEN);
    assert_int_equal(ote_batch_create(f->e, OTE_BATCH_SPARE_TASKS, &b), OTE_OK);
    assert_int_equal(ote_batch_submit_notify(b, r, 3, "spare", 5, &first), OTE_OK);
    assert_int_equal(ote_batch_wait(b, 10000), OTE_OK);
    assert_memory_equal(f->remote, f->local, 3 * 4096);
    /* A worker may still hold the batch for a moment after the wait: kept once it lets go. */
    ote_batch_release(b);
    for (int i = 0; i < 1000 && spares(f) != before + 1; i++)
        usleep(1000);
    assert_int_equal(spares(f), before + 1);
    ote_batch_release(b); /* a second release of a spare changes nothing */
    assert_int_equal(spares(f), before + 1);

    /* Taken again for one request: no task, capacity 1, telemetry from zero. */
    assert_int_equal(ote_batch_create(f->e, 1, &again), OTE_OK);
    assert_ptr_equal(again, b);
    assert_int_equal(spares(f), before);
    assert_int_equal(ote_batch_task_status(again, 0, &st), OTE_ERR_INVALID_PARAM);
    assert_int_equal(ote_batch_telemetry(again, &tel), OTE_OK);
    assert_true(tel.requests == 0 && tel.ended == 0 && tel.bytes == 0 && tel.start_us == 0);
    assert_int_equal(ote_batch_submit(again, r, 2, &first), OTE_ERR_BUSY);
    ote_test_fill(f->local + 3 * 4096, 0, 4096, 22);
    r[0] = write_req(f, 3 * 4096, 4096);
    assert_int_equal(ote_batch_submit(again, r, 1, &first), OTE_OK);
    assert_int_equal(first, 0);
    assert_int_equal(ote_batch_submit(again, r, 1, &first), OTE_ERR_BUSY);
    assert_int_equal(ote_batch_wait(again, 10000), OTE_OK);
    assert_int_equal(ote_batch_status(again, &st), OTE_OK);
    assert_int_equal(st.state, OTE_TASK_COMPLETED);
    assert_int_equal(st.transferred, 4096);
    assert_int_equal(ote_batch_telemetry(again, &tel), OTE_OK);
    assert_true(tel.requests == 1 && tel.ended == 1 && tel.completed == 1 && tel.bytes == 4096);
    assert_int_equal(ote_test_check(f->remote + 3 * 4096, 0, 4096, 22), -1);
    ote_batch_release(again);

    /* The notification of the first use came once. */
    for (int i = 0; i < 1000 && count == 0; i++) {
        assert_int_equal(ote_notify_recv(f->e, n, 2, &count), OTE_OK);
        if (count == 0)
            usleep(1000);
    }
    assert_int_equal(count, 1);
    assert_memory_equal(n[0].data, "spare", 5);
    usleep(50000);
    assert_int_equal(ote_notify_recv(f->e, n, 2, &count), OTE_OK);
    assert_int_equal(count, 0);
}

/* Take every spare of the engine (held in held[], *n of them), so that a kept batch shows. */
static void take_spares(fx_t *f, ote_batch_h *held, size_t *n)
{
    *n = 0;
    while (spares(f) > 0) {
        assert_true(*n < OTE_BATCH_SPARES);
        assert_int_equal(ote_batch_create(f->e, 1, &held[(*n)++]), OTE_OK);
    }
}

static void release_all(ote_batch_h *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ote_batch_release(b[i]);
}

static void test_in_flight_kept_after_end(void **state)
{
    fx_t *f = *state;
    ote_batch_h held[OTE_BATCH_SPARES], b;
    ote_xfer_req_t r[8];
    size_t first, n;

    take_spares(f, held, &n);
    ote_test_fill(f->local, 0, LEN, 23);
    memset(f->remote, 0, LEN);
    for (size_t i = 0; i < 8; i++)
        r[i] = write_req(f, i * (LEN / 8), LEN / 8);
    assert_int_equal(ote_batch_create(f->e, 8, &b), OTE_OK);
    assert_int_equal(ote_batch_submit(b, r, 8, &first), OTE_OK);
    /* Released with its tasks in flight: they end, and then it is kept. */
    ote_batch_release(b);
    for (int i = 0; i < 10000 && spares(f) == 0; i++)
        usleep(1000);
    assert_int_equal(spares(f), 1);
    assert_memory_equal(f->remote, f->local, LEN);
    release_all(held, n);
}

static void test_bounded(void **state)
{
    fx_t *f = *state;
    ote_batch_h held[OTE_BATCH_SPARES], b[OTE_BATCH_SPARES + 4], big, c;
    size_t n, count = OTE_BATCH_SPARES + 4;
    bool was_spare = false;

    take_spares(f, held, &n);
    for (size_t i = 0; i < count; i++)
        assert_int_equal(ote_batch_create(f->e, 1 + i, &b[i]), OTE_OK);
    for (size_t i = 0; i < count; i++)
        ote_batch_release(b[i]);
    /* The first OTE_BATCH_SPARES released are kept (1 to 8 tasks), the rest freed. */
    assert_int_equal(spares(f), OTE_BATCH_SPARES);
    /* More tasks than a spare may hold: a new batch, freed at its release. */
    assert_int_equal(ote_batch_create(f->e, OTE_BATCH_SPARE_TASKS + 1, &big), OTE_OK);
    assert_int_equal(big->tasks_cap, OTE_BATCH_SPARE_TASKS + 1);
    assert_int_equal(spares(f), OTE_BATCH_SPARES);
    ote_batch_release(big);
    assert_int_equal(spares(f), OTE_BATCH_SPARES);
    /* No spare holds 10 tasks: a new batch. One that holds 5 is taken for 5. */
    assert_int_equal(ote_batch_create(f->e, 10, &c), OTE_OK);
    assert_int_equal(spares(f), OTE_BATCH_SPARES);
    assert_int_equal(c->tasks_cap, 10);
    ote_batch_release(c); /* the spares are full: freed */
    assert_int_equal(ote_batch_create(f->e, 5, &c), OTE_OK);
    assert_int_equal(spares(f), OTE_BATCH_SPARES - 1);
    for (size_t i = 0; i < OTE_BATCH_SPARES; i++)
        was_spare |= c == b[i];
    assert_true(was_spare);
    assert_true(c->tasks_cap >= 5);
    assert_int_equal(c->capacity, 5);
    ote_batch_release(c);
    release_all(held, n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_taken_again_as_new),
        cmocka_unit_test(test_in_flight_kept_after_end),
        cmocka_unit_test(test_bounded),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
