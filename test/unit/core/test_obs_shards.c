/*
 * The engine's counters (core/obs/counters.c) stay exact when many
 * threads count at once: a thread counts in a shard of its own (seven at
 * a time, given back when the thread exits and taken by a later one), the
 * threads beyond them in one shared shard. In two waves, the second with
 * more threads than there are shards of their own and started after the
 * first wave's threads gave theirs back: threads that submit WRITEs that
 * land and WRITEs that fail (the counts of all requests, failures,
 * completed latencies and bytes must be exact), and threads that bump one
 * counter as fast as they can (several at once in the shared shard: a
 * count lost there fails the test).
 */
#include "core/obs/obs.h"
#include "core/engine_facts.h"
#include "self_fixture.h"

#include <ote/ote.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

typedef ote_test_self_t fx_t;

#define WAVE1   6
#define WAVE2   12
#define ROUNDS  20
#define HAMMER  1000000 /* counts a hammering thread adds */
#define GOOD    8    /* WRITEs that land, a round */
#define BAD     64   /* WRITEs into the read-only range, failing, a round */
#define BLOCK   4096
#define SLOT    (GOOD * BLOCK)
#define LEN     ((size_t)(WAVE1 + WAVE2) * SLOT)

typedef struct {
    fx_t  *f;
    int    id;
    int    failed; /* a status or byte that was not what it should be */
} worker_arg_t;

static void *submitter(void *p)
{
    worker_arg_t *a = p;
    fx_t *f         = a->f;
    size_t base     = (size_t)a->id * SLOT;
    ote_xfer_req_t *r = calloc(GOOD + BAD, sizeof(*r));

    if (r == NULL) {
        a->failed = 5;
        return NULL;
    }
    for (int k = 0; k < GOOD; k++)
        r[k] = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = f->local + base + k * BLOCK,
                                .segment = f->self,
                                .remote_addr = (uintptr_t)f->remote + base + k * BLOCK,
                                .length = BLOCK};
    for (int k = 0; k < BAD; k++)
        r[GOOD + k] = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = f->local + base,
                                       .segment = f->self,
                                       .remote_addr = (uintptr_t)f->ro + k * 64,
                                       .length = 64};
    for (int round = 0; round < ROUNDS && !a->failed; round++) {
        ote_batch_h b;
        size_t first;

        ote_test_fill(f->local + base, base, SLOT, (uint64_t)(a->id * 1000 + round));
        if (ote_batch_create(f->e, GOOD + BAD, &b) != OTE_OK) {
            a->failed = 1;
            break;
        }
        if (ote_batch_submit(b, r, GOOD + BAD, &first) != OTE_OK ||
            ote_batch_wait(b, 20000) != OTE_OK) {
            a->failed = 2;
        } else {
            for (int k = 0; k < GOOD + BAD; k++) {
                ote_task_status_t st;

                if (ote_batch_task_status(b, first + k, &st) != OTE_OK ||
                    st.state != (k < GOOD ? OTE_TASK_COMPLETED : OTE_TASK_FAILED))
                    a->failed = 3;
            }
            if (memcmp(f->remote + base, f->local + base, SLOT) != 0)
                a->failed = 4;
        }
        ote_batch_release(b);
    }
    free(r);
    return NULL;
}

static void wave(fx_t *f, int first_id, int n)
{
    pthread_t th[WAVE2];
    worker_arg_t a[WAVE2];

    for (int i = 0; i < n; i++) {
        a[i] = (worker_arg_t){.f = f, .id = first_id + i};
        assert_int_equal(pthread_create(&th[i], NULL, submitter, &a[i]), 0);
    }
    for (int i = 0; i < n; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        if (a[i].failed)
            fail_msg("thread %d: check %d failed", a[i].id, a[i].failed);
    }
}

typedef struct {
    double requests, failures, completed, write_bytes;
} sums_t;

static int add_sample(void *arg, const ote_stat_t *s)
{
    sums_t *m = arg;

    if (strcmp(s->name, "ote_transfer_requests_total") == 0)
        m->requests += s->value;
    else if (strcmp(s->name, "ote_transfer_failures_total") == 0)
        m->failures += s->value;
    else if (strcmp(s->name, "ote_transfer_latency_seconds_count") == 0)
        m->completed += s->value;
    else if (strcmp(s->name, "ote_transfer_bytes_total") == 0 && strstr(s->labels, "write"))
        m->write_bytes += s->value;
    return 0;
}

static void test_counts_exact_across_threads(void **state)
{
    fx_t *f = *state;
    sums_t m = {0};
    double tasks = (double)(WAVE1 + WAVE2) * ROUNDS;

    wave(f, 0, WAVE1);
    wave(f, WAVE1, WAVE2);
    assert_int_equal(ote_engine_stats(f->e, add_sample, &m), OTE_OK);
    assert_true(m.requests == tasks * (GOOD + BAD));
    assert_true(m.failures == tasks * BAD);
    assert_true(m.completed == tasks * GOOD);
    assert_true(m.write_bytes == tasks * GOOD * BLOCK);
}

typedef struct {
    ote_obs_t        *obs;
    pthread_barrier_t all_counted; /* every thread of the wave holds its shard */
} hammer_t;

static void *hammer(void *p)
{
    hammer_t *h = p;

    ote_obs_notify_received(h->obs); /* takes the thread's shard */
    pthread_barrier_wait(&h->all_counted);
    for (int i = 1; i < HAMMER; i++)
        ote_obs_notify_received(h->obs);
    return NULL;
}

static void hammer_wave(ote_obs_t *obs, int n)
{
    hammer_t h = {.obs = obs};
    pthread_t th[WAVE2];

    assert_int_equal(pthread_barrier_init(&h.all_counted, NULL, (unsigned)n), 0);
    for (int i = 0; i < n; i++)
        assert_int_equal(pthread_create(&th[i], NULL, hammer, &h), 0);
    for (int i = 0; i < n; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    pthread_barrier_destroy(&h.all_counted);
}

static int received_sample(void *arg, const ote_stat_t *s)
{
    if (strcmp(s->name, "ote_notifications_received_total") == 0)
        *(double *)arg += s->value;
    return 0;
}

static void test_shared_shard_loses_nothing(void **state)
{
    fx_t *f     = *state;
    double got  = 0;

    hammer_wave(ote_engine_facts(f->e)->obs, WAVE1);
    hammer_wave(ote_engine_facts(f->e)->obs, WAVE2);
    assert_int_equal(ote_engine_stats(f->e, received_sample, &got), OTE_OK);
    assert_true(got == (double)(WAVE1 + WAVE2) * HAMMER);
}

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_counts_exact_across_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shared_shard_loses_nothing, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
